"""Bounded reads: every file a contract or a checkpoint names is checked before it is read.

A file is read only when it is

- a regular file: a directory, a FIFO, a device or a socket is refused without being read (it
  is looked at before it is opened, and opened non-blocking, so a FIFO put in its place
  meanwhile cannot block either, and ``/dev/zero`` cannot fill memory);
- no larger than the limit of its kind (``LIMITS``, in bytes), checked before a byte is read;
- for a name found inside a folder (a checkpoint's ``config.json``, a shard that a
  ``weight_map`` lists), inside that folder: a relative name with no ``..`` part, whose
  symbolic links, followed, end inside the folder. A snapshot folder of the Hugging Face hub
  cache (``.../snapshots/REVISION``) links its files into the ``blobs`` folder of the same
  repository: those links are the cache's layout and are followed.

A line-oriented file is read through ``bounded_lines``, which never holds more than one line of
at most ``limit`` bytes: a longer line is skipped in fixed-size pieces and reported by length.

Refusals raise ``UnsafeFile`` (an ``OSError``, so callers that already report unreadable files
report these too): ``NotRegularFile``, ``TooLarge`` or ``OutsideFolder``, each with the path as
given and a reason in words (``strerror``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from types import MappingProxyType
from typing import BinaryIO

from kernel_contracts.contracts.errors import KernelContractsError

__all__ = [
    "LIMITS",
    "LongLine",
    "NotRegularFile",
    "OutsideFolder",
    "TooLarge",
    "UnsafeFile",
    "bounded_lines",
    "check_file",
    "file_kind",
    "inside",
    "open_regular",
    "read_file",
    "read_regular",
    "size_text",
]

_KIB, _MIB, _GIB, _TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

# The largest file of each kind that is read, in bytes.
LIMITS = MappingProxyType(
    {
        "contract": 1 * _MIB,  # contract.yaml
        "config": 16 * _MIB,  # a checkpoint's config.json
        "index": 64 * _MIB,  # model.safetensors.index.json
        "tokenizer": 256 * _MIB,  # tokenizer.json
        "weights": 256 * _GIB,  # one safetensors file
        "safetensors_header": 64 * _MIB,  # the JSON header of a safetensors file
        "gguf_metadata": 256 * _MIB,  # the header of a GGUF file: metadata and tensor infos
        "params": 64 * _GIB,  # a user model's .npz params file, its arrays unpacked
        "prompts": 64 * _MIB,  # a prompt file, one prompt a line
        "log": 4 * _TIB,  # a log (JSONL, Parquet, Arrow), read a record at a time
        "log_record": 64 * _MIB,  # one JSONL line, or one Parquet/Arrow row, of a log
        "parquet_footer": 64 * _MIB,  # the metadata footer of a Parquet log
    }
)


def size_text(n: int) -> str:
    """``n`` bytes in the largest binary unit that divides it (``1 MiB``, ``1536 KiB``)."""
    for unit, name in ((_TIB, "TiB"), (_GIB, "GiB"), (_MIB, "MiB"), (_KIB, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} bytes"


class UnsafeFile(KernelContractsError, OSError):
    """A file refused before it is read; ``filename`` is the path as given, ``strerror`` why."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.filename, self.strerror = path, reason

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


class NotRegularFile(UnsafeFile):
    """The path names something other than a regular file; ``kind`` says what, in words."""

    def __init__(self, path: str, kind: str):
        super().__init__(path, f"is {kind}, not a regular file")
        self.kind = kind


class TooLarge(UnsafeFile):
    """The file is larger than the limit of its kind."""

    def __init__(self, path: str, size: int, limit: int):
        super().__init__(
            path, f"the file holds {size} bytes, above the limit of {size_text(limit)}"
        )
        self.size, self.limit = size, limit


class OutsideFolder(UnsafeFile):
    """A name found in a folder that leads out of it (``..``, an absolute path, a link)."""


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words (``a directory``, ``a FIFO ...``)."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _hub_blobs(root: str) -> str | None:
    """The ``blobs`` folder of the hub-cache repository whose snapshot is ``root``, if it is one."""
    snapshots = os.path.dirname(root)
    if os.path.basename(snapshots) != "snapshots":
        return None
    return os.path.join(os.path.dirname(snapshots), "blobs")


def inside(folder: str, name: str) -> str:
    """The path of ``name`` in ``folder``; ``OutsideFolder`` when it leads out of the folder.

    ``name`` must be relative, without a ``..`` part or a NUL character, and the path, every
    symbolic link followed, must end inside ``folder`` (or in the hub cache's ``blobs`` folder
    of a snapshot folder). A name that does not exist passes: opening it says so.
    """
    path = os.path.join(folder, name)
    parts = name.replace("\\", "/").split("/")
    if not name or "\0" in name:
        raise OutsideFolder(path, "is not a file name")
    if os.path.isabs(name) or name.startswith(("/", "\\")):
        raise OutsideFolder(path, f"is an absolute path; a file of {folder} must be named in it")
    if ".." in parts:
        raise OutsideFolder(path, f"leads out of {folder} through '..'")
    root = os.path.realpath(folder)
    real = os.path.realpath(path)
    if _within(real, root):
        return path
    blobs = _hub_blobs(root)
    if blobs is not None:
        blobs = os.path.realpath(blobs)
        if real != blobs and _within(real, blobs):
            return path
    raise OutsideFolder(path, f"is a symbolic link to {real}, outside the folder {folder}")


def check_file(path: str, limit: int, *, folder: str | None = None) -> os.stat_result:
    """The ``os.stat`` of ``path`` once it passed the checks: a regular file (links followed)
    of at most ``limit`` bytes, and, with ``folder``, inside it (``path`` relative to it).

    Raises ``UnsafeFile`` for a refusal, ``OSError`` (``FileNotFoundError``, ...) otherwise.
    """
    if folder is not None:
        path = inside(folder, path)
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularFile(path, file_kind(info.st_mode))
    if info.st_size > limit:
        raise TooLarge(path, info.st_size, limit)
    return info


def open_regular(path: str, limit: int, *, folder: str | None = None) -> BinaryIO:
    """A binary file object of ``path`` after ``check_file``'s checks (the caller closes it).

    The file is opened non-blocking and looked at again once open, so a FIFO or device put in
    its place between the checks and the opening is refused too, never read from.
    """
    shown = path if folder is None else inside(folder, path)
    check_file(shown, limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(shown, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(shown, file_kind(info.st_mode))
        if info.st_size > limit:
            raise TooLarge(shown, info.st_size, limit)
        os.set_blocking(fd, True)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str, limit: int, *, folder: str | None = None) -> bytes:
    """The bytes of ``path`` after ``check_file``'s checks; ``TooLarge`` if it grew past
    ``limit`` while being read."""
    shown = path if folder is None else inside(folder, path)
    with open_regular(shown, limit) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(shown, len(data), limit)
    return data


def read_regular(path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file at ``path`` (symbolic links followed).

    For readers that report an oversized file themselves from its first ``limit`` bytes (the
    contract loader reads one byte past its limit). Anything but a regular file (a directory,
    a FIFO, a device, a socket) raises ``NotRegularFile`` without being read; other failures
    raise ``OSError``.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFile(path, file_kind(mode))
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    with open(os.open(path, flags), "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, file_kind(mode))
        return f.read(limit)


class LongLine(int):
    """The length in bytes of a line that ``bounded_lines`` skipped as longer than its limit."""


_PIECE = 1 << 20


def bounded_lines(handle: BinaryIO, limit: int, seen=None) -> Iterator[bytes | LongLine]:
    """The lines of ``handle`` (each with its ``\\n``, the last perhaps without), each a
    ``bytes`` of at most ``limit`` bytes (its ``\\n`` counted), or, for a longer one, a
    ``LongLine`` of its length, read past without being held. The file is read in pieces of
    1 MiB; ``seen(piece)``, when given, is called with every piece, in order (for a digest).
    """
    pending = bytearray()  # the current line so far, while it is within the limit
    skipped = 0  # the length so far of a line above the limit (0: none)
    while piece := handle.read(_PIECE):
        if seen is not None:
            seen(piece)
        start = 0
        while True:
            end = piece.find(b"\n", start)
            stop = len(piece) if end < 0 else end + 1
            if skipped:
                skipped += stop - start
            elif len(pending) + stop - start > limit:
                skipped = len(pending) + stop - start
                pending.clear()
            else:
                pending += piece[start:stop]
            if end < 0:
                break
            if skipped:
                yield LongLine(skipped)
            else:
                yield bytes(pending)
            pending.clear()
            skipped, start = 0, stop
    if skipped:
        yield LongLine(skipped)
    elif pending:
        yield bytes(pending)
