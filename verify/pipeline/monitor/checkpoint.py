"""The monitor's checkpoint: where the stream was read to at the end of the last decided window,
what outlives a window (split records waiting for their other half, the lines of a hook batch
still held: ``Reader.state``), and how long the output was then; written atomically.

A checkpoint is one JSON object, written to a temporary file beside its path, flushed to disk
(``fsync``), moved into place (``os.replace``) and its directory synced: a reader sees the old
checkpoint or the new one, never a mix. It is written after the window's lines reach the
output (and the disk), so after a kill at any point the output holds at least what the
checkpoint says; on restart the output is cut back to the recorded length and reading resumes
at the recorded position, which gives the bytes of an uninterrupted run.

A checkpoint belongs to one contract (its sha256), one stream, one output and one setting of
the window; a restart with anything else is refused (exit 2), never silently mixed.

One monitor at a time uses a checkpoint: ``lock`` takes an exclusive advisory lock
(``flock``) on ``CHECKPOINT.lock`` for the monitor's life and refuses a second monitor with
the first one's process id. The temporary file of a save is unique to the process
(``.NAME.PID.part``); ``lock`` removes those a killed monitor left behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import os

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.evidence.logs.reader import parse_line
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.pipeline.monitor.stream import FileEntry, Position

__all__ = ["FORMAT", "CheckpointError", "Lock", "load", "lock", "save"]

FORMAT = "kernel-contracts/monitor-checkpoint/2"
_KEYS = ("format", "binding", "position", "window", "worst", "out_length", "reader")


class CheckpointError(KernelContractsError):
    """A checkpoint that cannot be used; ``str`` is the one-line message (exit 2)."""


def save(path: str, data: dict) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring), through the
    temporary file ``.NAME.PID.part`` beside it."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.part")
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


class Lock:
    """The held lock of one checkpoint; ``release`` removes the lock file and frees it."""

    def __init__(self, path: str, fd: int):
        self.path, self.fd = path, fd

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # while held: a waiting monitor sees a new file
            os.close(self.fd)
            self.fd = None


def lock(path: str) -> Lock:
    """Lock the checkpoint ``path`` for this process (``PATH.lock``, non-blocking); a
    ``CheckpointError`` names the process that holds it. Leftover temporary files of killed
    monitors are removed once the lock is held."""
    where = path + ".lock"
    while True:
        try:
            fd = os.open(where, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as err:
            raise CheckpointError(f"cannot lock --checkpoint {path}: {err.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise CheckpointError(f"cannot lock --checkpoint {path}: {err.strerror}") from None
            raise CheckpointError(
                f"cannot use --checkpoint {path}: another monitor (pid {holder}) is using it"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(where).st_ino
        except FileNotFoundError:
            same = False
        if same:  # not a lock file removed by a monitor that just ended
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    pattern = os.path.join(
        glob.escape(os.path.dirname(os.path.abspath(path))),
        f".{glob.escape(os.path.basename(path))}.*.part",
    )
    for stale in glob.glob(pattern):
        with contextlib.suppress(OSError):
            os.unlink(stale)
    return Lock(where, fd)


def _bad(path: str, why: str) -> CheckpointError:
    return CheckpointError(f"{path}: not a usable monitor checkpoint: {why}")


def _int(value, path: str, key: str) -> int:
    if type(value) is not int or value < 0:
        raise _bad(path, f"'{key}' must be a non-negative integer")
    return value


def _identity(value, path: str, key: str, *, optional: bool = False):
    if value is None and optional:
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(type(i) is int for i in value)):
        raise _bad(path, f"'{key}' must be [device, inode]")
    return tuple(value)


def _entry(item, path: str) -> FileEntry:
    key = "position.files[]"
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise _bad(path, f"'{key}' must be objects with a 'name'")
    if not all(isinstance(item.get(k), str) for k in ("head", "digest")):
        raise _bad(path, f"'{key}.head' and '.digest' must be sha256s")
    return FileEntry(
        item["name"],
        _identity(item.get("identity"), path, f"{key}.identity"),
        _int(item.get("offset"), path, f"{key}.offset"),
        _int(item.get("line"), path, f"{key}.line"),
        item["head"],
        item["digest"],
    )


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
    identity = _identity(pos.get("identity"), path, "position.identity", optional=True)
    for key in ("head", "digest"):
        if pos.get(key) is not None and not isinstance(pos.get(key), str):
            raise _bad(path, f"'position.{key}' must be a sha256")
    files = pos.get("files")
    if not isinstance(files, list):
        raise _bad(path, "'position.files' must be a list")
    position = Position(
        pos["file"],
        _int(pos.get("offset"), path, "position.offset"),
        _int(pos.get("line"), path, "position.line"),
        identity,
        pos.get("head"),
        pos.get("digest"),
        tuple(_entry(f, path) for f in files),
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
