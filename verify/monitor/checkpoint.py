"""The monitor's checkpoint: where the stream was read to at the end of the last decided window,
what outlives a window, and how long the output was then; written atomically.

A checkpoint is one JSON object, written to a temporary file beside its path, flushed to disk
(``fsync``), moved into place (``os.replace``) and its directory synced: a reader sees the old
checkpoint or the new one, never a mix. It is written after the window's lines reach the
output (and the disk), so after a kill at any point the output holds at least what the
checkpoint says; on restart the output is cut back to the recorded length and reading resumes
at the recorded position, which gives the bytes of an uninterrupted run.

A checkpoint belongs to one contract (its sha256), one stream, one output and one setting of
the window; a restart with anything else is refused (exit 2), never silently mixed.
"""

from __future__ import annotations

import contextlib
import json
import os

from contracts import KernelContractsError
from evidence.logs.reader import parse_line
from verify.monitor.stream import Position
from verify.status import Status

__all__ = ["FORMAT", "CheckpointError", "load", "save"]

FORMAT = "kernel-contracts/monitor-checkpoint/1"
_KEYS = ("format", "binding", "position", "window", "worst", "out_length", "reader")


class CheckpointError(KernelContractsError):
    """A checkpoint that cannot be used; ``str`` is the one-line message (exit 2)."""


def save(path: str, data: dict) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring). The temporary file
    has a fixed name beside it (``.NAME.part``), so a kill leaves at most that one behind,
    and the next save replaces it."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.part")
    text = json.dumps({"format": FORMAT} | data, ensure_ascii=False, allow_nan=False)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _bad(path: str, why: str) -> CheckpointError:
    return CheckpointError(f"{path}: not a usable monitor checkpoint: {why}")


def _int(value, path: str, key: str) -> int:
    if type(value) is not int or value < 0:
        raise _bad(path, f"'{key}' must be a non-negative integer")
    return value


def load(path: str, binding: dict) -> dict | None:
    """The checkpoint at ``path`` (``None`` when there is none yet), checked to belong to
    ``binding`` (contract, stream, output, window settings); ``CheckpointError`` otherwise."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read: {err.strerror}") from None
    try:
        data = parse_line(raw.decode("utf-8"))
    except Exception:  # undecodable, not JSON, a duplicate key: all one answer
        raise _bad(path, "it is not one JSON object") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _bad(path, f"its format is not {FORMAT}")
    missing = [k for k in _KEYS if k not in data]
    if missing:
        raise _bad(path, f"missing key '{missing[0]}'")
    if data["binding"] != binding:
        got = data["binding"] if isinstance(data["binding"], dict) else {}
        diff = next((k for k in binding if got.get(k) != binding[k]), "binding")
        raise CheckpointError(
            f"{path}: the checkpoint was written for another {diff.replace('_', ' ')} "
            f"({got.get(diff)!r}, now {binding.get(diff)!r}); give a new checkpoint path to "
            "start over"
        )
    pos = data["position"]
    if not isinstance(pos, dict) or not isinstance(pos.get("file"), str):
        raise _bad(path, "'position' must be an object with a 'file' name")
    identity = pos.get("identity")
    pair = isinstance(identity, list) and len(identity) == 2
    if identity is not None and not (pair and all(type(i) is int for i in identity)):
        raise _bad(path, "'position.identity' must be [device, inode]")
    head = pos.get("head")
    if head is not None and not isinstance(head, str):
        raise _bad(path, "'position.head' must be a sha256")
    if type(pos.get("finished")) is not bool:
        raise _bad(path, "'position.finished' must be true or false")
    position = Position(
        pos["file"],
        _int(pos.get("offset"), path, "position.offset"),
        _int(pos.get("line"), path, "position.line"),
        tuple(identity) if identity else None,
        head,
        pos["finished"],
    )
    try:
        status = Status.parse(data["worst"])
    except (KeyError, AttributeError):
        raise _bad(path, "'worst' must be a verdict") from None
    reader = data["reader"]
    if not isinstance(reader, dict) or not isinstance(reader.get("pending"), list):
        raise _bad(path, "'reader' must hold the pending records")
    return {
        "position": position,
        "window": _int(data["window"], path, "window"),
        "worst": status,
        "out_length": _int(data["out_length"], path, "out_length"),
        "reader": reader,
    }
