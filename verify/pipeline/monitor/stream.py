"""Where the monitor reads rollout log lines: a file being appended to, a directory of rotating
files, or standard input; every complete line with its position, and where to resume.

- A **file** is followed like ``tail -F``: at its end the monitor waits for more; a file
  replaced under the same name (rotation by renaming) is read to its end, then the new file
  from its start. A file that shrinks below the position read (rotation by copying and
  truncating) is an error: lines may have been lost.
- A **directory** holds rotating files, followed as log shippers do
  (``verify.pipeline.monitor.directory``).
- **Standard input** (``-``) is read to its end. A restart skips the bytes a checkpoint says
  were read: the same stream must be given again from its start.

A line is complete when it ends in a newline; lines of any length up to ``MAX_LINE`` bytes
(64 MiB, the newline included) are read in full, however many reads they span. In follow mode
a cut-off last line waits for its newline; at the end of input, and at the end of a finished
rotated file, it is handed out with ``cut`` set (a counted bad line). A longer line is handed
out as its first 200 bytes with ``reason`` set and the rest skipped (one counted bad line at
its line number; reading goes on after it), so memory stays bounded.

What was read is fingerprinted: a position keeps the sha256 of the file's first
``min(offset, HEAD)`` bytes (``head``) and of all ``offset`` bytes read (``digest``). A
restart re-reads those bytes and refuses a file whose bytes differ (replaced, or rewritten in
place even when its first bytes were kept) instead of resuming at an offset that no longer
means anything.
"""

from __future__ import annotations

import hashlib
import os
import select
import stat
from dataclasses import dataclass, field

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.contracts.bounded import LIMITS

__all__ = [
    "HEAD",
    "MAX_LINE",
    "FileEntry",
    "Line",
    "LineSplitter",
    "Position",
    "StreamError",
    "file_identity",
    "head_hash",
    "open_stream",
    "prefix_hash",
    "read_lines",
    "stream_kind",
]

MAX_LINE = LIMITS["log_record"]  # 64 MiB; a longer line is a counted bad line, never held
HEAD = 1 << 12  # bytes of a file's start whose hash a checkpoint keeps
_CHUNK = 1 << 20
_SHOWN = 200  # bytes of an overlong line kept to show


class StreamError(KernelContractsError):
    """A stream that cannot be read (or resumed); ``str`` is the one-line message (exit 2)."""


@dataclass(frozen=True)
class Line:
    """One line of the stream: its bytes and where it lies."""

    raw: bytes
    file: str  # the file's name within a directory; "" for a single file or stdin
    number: int  # 1-based, within its file
    offset: int  # of its first byte, within its file
    end: int  # offset just past it
    cut: bool = False  # no newline: cut off at the end of input or of a rotated file
    reason: str | None = None  # why it cannot be read at all (too long)
    state: object = field(default=None, compare=False, repr=False)  # sha256 of [0, end)


class FileEntry(tuple):
    """A directory's file read up to ``offset``: ``(name, identity, offset, line, head,
    digest)``; ``identity`` is (device, inode), ``head`` and ``digest`` as in ``Position``."""

    __slots__ = ()

    def __new__(cls, name, identity, offset, line, head, digest):
        return super().__new__(cls, (name, tuple(identity), offset, line, head, digest))

    name = property(lambda self: self[0])
    identity = property(lambda self: self[1])
    offset = property(lambda self: self[2])
    line = property(lambda self: self[3])
    head = property(lambda self: self[4])
    digest = property(lambda self: self[5])

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "identity": list(self.identity),
            "offset": self.offset,
            "line": self.line,
            "head": self.head,
            "digest": self.digest,
        }


@dataclass(frozen=True)
class Position:
    """Where reading resumes: the file (in a directory), its byte offset and lines before it;
    ``identity`` (device, inode) of the file, ``head``, the sha256 of the file's first
    ``min(offset, HEAD)`` bytes, and ``digest``, the sha256 of all ``offset`` bytes read: a
    file that was replaced (even by one that got the old inode number) or rewritten is told
    apart from the one read. In a directory, ``files`` are the other files read so far."""

    file: str = ""
    offset: int = 0
    line: int = 0
    identity: tuple[int, int] | None = None
    head: str | None = None
    digest: str | None = None
    files: tuple[FileEntry, ...] = ()

    def as_json(self) -> dict:
        return {
            "file": self.file,
            "offset": self.offset,
            "line": self.line,
            "identity": list(self.identity) if self.identity else None,
            "head": self.head,
            "digest": self.digest,
            "files": [f.as_json() for f in self.files],
        }


class LineSplitter:
    """Splits bytes into lines, keeping a partial last line, skipping overlong ones, and
    hashing every byte handed out (``hash``: the sha256 of the file up to ``offset``)."""

    def __init__(self, file: str, offset: int, line: int, hashed=None, prefix: bytes = b""):
        self.file, self.offset, self.line = file, offset, line
        self.hash = hashed if hashed is not None else hashlib.sha256()
        self.prefix = prefix  # the file's first HEAD bytes, as far as read
        self.buffer = bytearray()
        self.skipping: bytes | None = None  # the head of an overlong line being skipped
        self.skipped = 0

    def feed(self, data: bytes) -> list[Line]:
        out = []
        start = 0
        if self.skipping is not None:
            cut = data.find(b"\n")
            if cut < 0:
                self._skip(data)
                return out
            self._skip(data[: cut + 1])
            out.append(self._overlong())
            start = cut + 1
        while True:
            cut = data.find(b"\n", start)
            if cut < 0:
                break
            if len(self.buffer) + cut + 1 - start > MAX_LINE:
                self._skip(data[start : cut + 1])
                out.append(self._overlong())
            elif self.buffer:
                self.buffer += data[start : cut + 1]
                raw, self.buffer = bytes(self.buffer), bytearray()
                out.append(self._line(raw))
            else:
                out.append(self._line(data[start : cut + 1]))
            start = cut + 1
        if len(self.buffer) + len(data) - start > MAX_LINE:
            self._skip(data[start:])
        else:
            self.buffer += data[start:]
        return out

    def _skip(self, data: bytes) -> None:
        """Drop ``data`` (and the buffer) as part of an overlong line, hashing it."""
        if self.skipping is None:
            self.skipping = (bytes(self.buffer) + data[:_SHOWN])[:_SHOWN]
            self.skipped = len(self.buffer)
            self._hash(self.buffer)
            self.buffer = bytearray()
        self.skipped += len(data)
        self._hash(data)

    def _hash(self, data) -> None:
        self.hash.update(data)
        if len(self.prefix) < HEAD:
            self.prefix += bytes(data[: HEAD - len(self.prefix)])

    def _line(self, raw: bytes, cut: bool = False) -> Line:
        self.line += 1
        self._hash(raw)
        end = self.offset + len(raw)
        line = Line(raw, self.file, self.line, self.offset, end, cut, state=self.hash.copy())
        self.offset = end
        return line

    def _overlong(self) -> Line:
        self.line += 1
        end = self.offset + self.skipped
        why = f"line longer than {MAX_LINE} bytes ({self.skipped} bytes), not read"
        line = Line(
            self.skipping, self.file, self.line, self.offset, end, reason=why,
            state=self.hash.copy(),
        )  # fmt: skip
        self.offset, self.skipping, self.skipped = end, None, 0
        return line

    def tail(self) -> Line | None:
        """The partial last line, consumed (a cut line), or ``None``."""
        if self.skipping is not None:
            return self._overlong()
        if not self.buffer:
            return None
        raw, self.buffer = bytes(self.buffer), bytearray()
        return self._line(raw, cut=True)

    @property
    def waiting(self) -> int:
        """Bytes of a partial last line waiting for their newline."""
        return len(self.buffer) + self.skipped

    def head(self, offset: int) -> str:
        """The sha256 of the file's first ``min(offset, HEAD)`` bytes (``offset`` read)."""
        return hashlib.sha256(self.prefix[: min(offset, HEAD)]).hexdigest()

    def digest(self, line: Line | None) -> str:
        """The sha256 of the file up to just past ``line`` (``None``: up to ``offset``)."""
        return (line.state if line is not None else self.hash).hexdigest()


def file_identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def head_hash(fd: int, offset: int) -> str:
    """sha256 of the first ``min(offset, HEAD)`` bytes of the open file ``fd``."""
    return hashlib.sha256(os.pread(fd, min(offset, HEAD), 0)).hexdigest()


def prefix_hash(fd: int, offset: int):
    """The sha256 object of the first ``offset`` bytes of ``fd`` (fewer if it is shorter)."""
    h, done = hashlib.sha256(), 0
    while done < offset:
        data = os.pread(fd, min(_CHUNK, offset - done), done)
        if not data:
            break
        h.update(data)
        done += len(data)
    return h


def verified(fd: int, path: str, position, file: str = "") -> LineSplitter:
    """Check that the open file ``fd`` still holds the bytes ``position`` says were read (its
    size, ``head`` and ``digest``), closing ``fd`` and raising ``StreamError`` if not; returns
    a ``LineSplitter`` that goes on from there (``file`` its name in a directory)."""
    size = os.fstat(fd).st_size
    if size < position.offset:
        os.close(fd)
        raise StreamError(
            f"{path}: the file has {size} bytes, fewer than the {position.offset} already "
            "read: it was truncated, and lines may have been lost"
        )
    if position.head is not None and head_hash(fd, position.offset) != position.head:
        os.close(fd)
        raise StreamError(
            f"{path}: the file was replaced since the checkpoint was written (its first bytes "
            "differ); its rest cannot be read (rotate into a directory, or start with a new "
            "checkpoint)"
        )
    h = prefix_hash(fd, position.offset)
    if position.digest is not None and h.hexdigest() != position.digest:
        os.close(fd)
        raise StreamError(
            f"{path}: the file was rewritten since the checkpoint was written (the "
            f"{position.offset} bytes already read differ); its rest cannot be read (start "
            "with a new checkpoint)"
        )
    os.lseek(fd, position.offset, os.SEEK_SET)
    prefix = os.pread(fd, min(position.offset, HEAD), 0)
    return LineSplitter(file, position.offset, position.line, h, prefix)


def read_lines(fd: int, lines: LineSplitter) -> list[Line] | None:
    """The complete lines the next reads of ``fd`` give (as many reads as a long line
    needs); ``None`` at the end of the file with nothing new, ``[]`` when bytes came but no
    line is complete yet."""
    got = False
    while True:
        data = os.read(fd, _CHUNK)
        if not data:
            return [] if got else None
        got = True
        out = lines.feed(data)
        if out:
            return out


class FileStream:
    """A single file, followed by name (see the module docstring)."""

    kind = "file"

    def __init__(self, path: str, position: Position):
        self.path, self.label = path, path
        self._open(position)

    def _open(self, position: Position) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as err:
            raise StreamError(f"{self.path}: cannot read: {err.strerror}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise StreamError(f"{self.path}: not a regular file")
        if position.identity is not None and tuple(position.identity) != file_identity(st):
            os.close(fd)
            raise StreamError(
                f"{self.path}: the file was replaced since the checkpoint was written; its "
                "rest cannot be read (rotate into a directory, or start with a new checkpoint)"
            )
        self.lines = verified(fd, self.path, position)
        self.fd, self.identity, self.left = fd, file_identity(st), None

    def read(self, follow: bool) -> list[Line]:
        got = read_lines(self.fd, self.lines)
        if got is not None or not follow:
            return got or []
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return []  # renamed away, the new file not there yet
        if file_identity(st) != self.identity:  # replaced: finish this one, then the new one
            got = read_lines(self.fd, self.lines)
            if got is not None:
                return got
            tail = self.lines.tail()
            os.close(self.fd)
            self._open(Position())
            if tail is None:
                return self.read(follow)
            self.left = tail  # the old file's last line: after it comes the new file's start
            return [tail]
        if st.st_size < self.lines.offset + self.lines.waiting:
            raise StreamError(
                f"{self.path}: the file shrank to {st.st_size} bytes below the "
                f"{self.lines.offset} already read: it was truncated, and lines may have "
                "been lost"
            )
        return []

    def ended(self) -> bool:
        return False

    def notes(self) -> list[str]:
        return []

    def tail(self) -> Line | None:
        return self.lines.tail()

    def position(self, line: Line | None) -> Position:
        if line is None:
            offset, number = self.lines.offset, self.lines.line
        elif line is self.left:
            return Position("", 0, 0, self.identity, _EMPTY, _EMPTY)
        else:
            offset, number = line.end, line.number
        head, digest = self.lines.head(offset), self.lines.digest(line)
        return Position("", offset, number, self.identity, head, digest)

    def close(self) -> None:
        os.close(self.fd)


_EMPTY = hashlib.sha256().hexdigest()


class StdinStream:
    """Standard input, read to its end (see the module docstring)."""

    kind = "stdin"

    def __init__(self, fd: int, position: Position, poll: float):
        self.fd, self.label, self.poll = fd, "<stdin>", poll
        self.eof = False
        skip, hashed = position.offset, hashlib.sha256()
        try:
            os.lseek(fd, skip, os.SEEK_SET)
            hashed, skip = prefix_hash(fd, skip), 0
        except OSError:  # a pipe: read and drop what the checkpoint says was read
            pass
        while skip:
            data = os.read(fd, min(skip, _CHUNK))
            if not data:
                raise StreamError(
                    f"<stdin>: the stream ended after {position.offset - skip} bytes, before "
                    f"the {position.offset} the checkpoint says were read"
                )
            hashed.update(data)
            skip -= len(data)
        if position.digest is not None and hashed.hexdigest() != position.digest:
            raise StreamError(
                f"<stdin>: its first {position.offset} bytes differ from those the checkpoint "
                "says were read; give the same stream again from its start, or start with a "
                "new checkpoint"
            )
        self.lines = LineSplitter("", position.offset, position.line, hashed)

    def read(self, follow: bool) -> list[Line]:
        if self.eof:
            return []
        ready, _, _ = select.select([self.fd], [], [], self.poll)
        if not ready:
            return []
        data = os.read(self.fd, _CHUNK)
        if not data:
            self.eof = True
            return []
        return self.lines.feed(data)

    def ended(self) -> bool:
        return self.eof

    def notes(self) -> list[str]:
        return []

    def tail(self) -> Line | None:
        return self.lines.tail()

    def position(self, line: Line | None) -> Position:
        if line is None:
            return Position("", self.lines.offset, self.lines.line, digest=self.lines.digest(None))
        return Position("", line.end, line.number, digest=self.lines.digest(line))

    def close(self) -> None:
        pass


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def stream_kind(path: str) -> str:
    """``stdin``, ``file`` or ``directory``; ``StreamError`` for anything else."""
    if path == "-":
        return "stdin"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise StreamError(f"{path}: no such file or directory") from None
    except OSError as err:
        raise StreamError(f"{path}: cannot read: {err.strerror}") from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    from kernel_contracts.contracts import file_kind

    raise StreamError(
        f"{path}: is {file_kind(mode)}, not a log file or a directory of log files "
        "(give a pipe as --stream -)"
    )


def open_stream(path: str, position: Position, *, stdin_fd: int = 0, poll: float = 0.1):
    """The stream ``path`` names (``-``: standard input), positioned at ``position``."""
    kind = stream_kind(path)
    if kind == "stdin":
        return StdinStream(stdin_fd, position, poll)
    if kind == "file":
        return FileStream(path, position)
    # circle kept: directory reads with this module's splitter and limits; open_stream stays here
    from kernel_contracts.verify.pipeline.monitor.directory import DirectoryStream

    return DirectoryStream(path, position)
