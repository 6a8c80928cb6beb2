"""Where the monitor reads rollout log lines: a file being appended to, a directory of rotating
files, or standard input; every complete line with its position, and where to resume.

- A **file** is followed like ``tail -F``: at its end the monitor waits for more; a file
  replaced under the same name (rotation by renaming) is read to its end, then the new file
  from its start. A file that no longer holds the bytes read (rotation by copying and
  truncating, caught by content: ``verify.pipeline.monitor.rotation``), whether it shrank or
  grew again past the position read, is read on in its copy beside it (``NAME.1``, any file
  named ``NAME`` and ``.``, ``-`` or ``_`` that begins with every byte read) from that
  position to the copy's end, then from its own start; with no such copy it is an error that
  names the lines lost. A restart finds the file read in the same way: under its name, else
  as a rotated file beside it that holds the bytes read.
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
from collections import deque
from dataclasses import dataclass, field

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.verify.pipeline.monitor.rotation import (
    WINDOW,
    lost,
    rotated_copies,
    still_holds,
)

__all__ = [
    "ENDS",
    "HEAD",
    "MAX_LINE",
    "FileEntry",
    "Line",
    "LineSplitter",
    "Position",
    "Rewritten",
    "StreamError",
    "file_identity",
    "head_hash",
    "open_stream",
    "prefix_hash",
    "read_lines",
    "stream_kind",
]

MAX_LINE = 1 << 26  # bytes; a longer line is a counted bad line, never held in memory
HEAD = 1 << 12  # bytes of a file's start whose hash a checkpoint keeps
ENDS = 1 << 12  # line ends whose hash is kept: a rotated copy may end at one of them
_CHUNK = 1 << 20
_SHOWN = 200  # bytes of an overlong line kept to show


class StreamError(KernelContractsError):
    """A stream that cannot be read (or resumed); ``str`` is the one-line message (exit 2)."""


class Rewritten(Exception):
    """The file being read no longer holds the bytes read from it (truncated); raised before
    any byte of the read that found it is used."""


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
    hashing every byte handed out (``hash``: the sha256 of the file up to ``offset``) and
    keeping the first ``HEAD`` bytes fed (``prefix``) and the last ``WINDOW`` (``recent``)."""

    def __init__(self, file: str, offset: int, line: int, hashed=None, prefix: bytes = b"",
                 recent: bytes = b""):  # fmt: skip
        self.file, self.offset, self.line = file, offset, line
        self.hash = hashed if hashed is not None else hashlib.sha256()
        self.prefix = prefix  # the file's first HEAD bytes, as far as read
        self.recent = recent  # the WINDOW bytes just before ``read``
        self.buffer = bytearray()
        self.skipping: bytes | None = None  # the head of an overlong line being skipped
        self.skipped = 0
        self.ends: deque = deque(maxlen=ENDS)  # (offset, line, sha256 up to it), the last

    def feed(self, data: bytes) -> list[Line]:
        out = []
        start = 0
        if len(self.prefix) < HEAD:
            self.prefix += bytes(data[: HEAD - len(self.prefix)])
        self.recent = (self.recent + bytes(data[-WINDOW:]))[-WINDOW:]
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

    def _line(self, raw: bytes, cut: bool = False) -> Line:
        self.line += 1
        self._hash(raw)
        end = self.offset + len(raw)
        line = Line(raw, self.file, self.line, self.offset, end, cut, state=self.hash.copy())
        self.offset = end
        self.ends.append((end, self.line, line.state))
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
        self.ends.append((end, self.line, line.state))
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

    @property
    def read(self) -> int:
        """Bytes fed: ``offset`` and the partial last line."""
        return self.offset + self.waiting

    def read_before(self, fd: int, size: int) -> int | None:
        """The number of lines in the first ``size`` bytes of ``fd`` when they are the first
        bytes read, ending at one of the last ``ENDS`` line ends read; else ``None``."""
        for end, number, state in self.ends:
            if end == size:
                return number if prefix_hash(fd, size).hexdigest() == state.hexdigest() else None
        return None

    def read_digest(self) -> str:
        """The sha256 of every byte fed (the partial last line's included)."""
        h = self.hash.copy()
        h.update(self.buffer)  # an overlong line's skipped bytes are already in ``hash``
        return h.hexdigest()

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
            f"read: it was truncated, and lines written after line {position.line} may have "
            "been lost"
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
    back = min(position.offset, WINDOW)
    recent = os.pread(fd, back, position.offset - back)
    return LineSplitter(file, position.offset, position.line, h, prefix, recent)


def read_lines(fd: int, lines: LineSplitter) -> list[Line] | None:
    """The complete lines the next reads of ``fd`` give (as many reads as a long line
    needs); ``None`` at the end of the file with nothing new, ``[]`` when bytes came but no
    line is complete yet. ``Rewritten`` when the file no longer holds the bytes read (checked
    after each read, before its bytes are used, and at the end of the file)."""
    got = False
    while True:
        data = os.read(fd, _CHUNK)
        if not still_holds(fd, lines.prefix, lines.recent, lines.read):
            raise Rewritten()
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
        self.pending: list[str] = []
        self.left = None
        self._open(position)

    def _open(self, position: Position) -> None:
        """Open ``path`` where ``position`` says it was read to, else the rotated file beside
        it that holds the bytes read (``rotated``: read to its end, then ``path`` from 0)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as err:
            raise StreamError(f"{self.path}: cannot read: {err.strerror}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise StreamError(f"{self.path}: not a regular file")
        self.rotated = False
        try:
            if position.identity is not None and tuple(position.identity) != file_identity(st):
                os.close(fd)
                raise StreamError(
                    f"{self.path}: the file was replaced since the checkpoint was written; its "
                    "rest cannot be read (rotate into a directory, or start with a new "
                    "checkpoint)"
                )
            self.lines = verified(fd, self.path, position)
        except StreamError:
            fd = self._beside(position, file_identity(st)) if position.offset else None
            if fd is None:
                raise
            self.rotated = True
        self.fd, self.identity = fd, file_identity(os.fstat(fd))

    def _beside(self, position: Position, identity) -> int | None:
        """A rotated file beside ``path`` that holds the bytes ``position`` says were read,
        open there (``lines`` set), or ``None``."""
        for name in rotated_copies(self.path, identity):
            try:
                fd = os.open(name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                continue
            try:
                self.lines = verified(fd, name, position)  # closes fd if not
            except StreamError:
                continue
            return fd
        return None

    def _copied(self, follow: bool) -> list[Line]:
        """The file no longer holds the bytes read (copy-truncate): read on in the copy beside
        it that begins with every byte read, then the file from its start; or stop."""
        lines = self.lines
        if not self.rotated:
            for name in rotated_copies(self.path, self.identity):
                try:
                    fd = os.open(name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                except OSError:
                    continue
                if still_holds(fd, lines.prefix, lines.recent, lines.read) and (
                    prefix_hash(fd, lines.read).hexdigest() == lines.read_digest()
                ):
                    os.close(self.fd)
                    os.lseek(fd, lines.read, os.SEEK_SET)
                    self.fd, self.identity, self.rotated = fd, file_identity(os.fstat(fd)), True
                    self.pending.append(
                        f"{self.path}: the file was truncated (copy-truncate rotation): read on "
                        f"in {name} from byte {lines.offset} (line {lines.line + 1}), then "
                        f"{self.path} from its start; lines written between the copy and the "
                        "truncation are in neither file"
                    )
                    return self.read(follow)
                before = lines.read_before(fd, os.fstat(fd).st_size)
                os.close(fd)
                if before is not None:  # a copy made before the lines read last
                    self.pending.append(
                        f"{self.path}: the file was truncated (copy-truncate rotation): its copy "
                        f"{name} ends at line {before}, already read; reading {self.path} again "
                        f"from its start; lines written after line {lines.line} before the "
                        "truncation are in neither file"
                    )
                    self.rotated = True
                    return self._next(follow)
        raise StreamError(lost(self.path, lines.offset, lines.line))

    def read(self, follow: bool) -> list[Line]:
        try:
            got = read_lines(self.fd, self.lines)
        except Rewritten:
            return self._copied(follow)
        if got is not None:
            return got
        if self.rotated:  # a rotated file read to its end: the file under the name next
            return self._next(follow) if os.path.exists(self.path) else []
        if not follow:
            return []
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return []  # renamed away, the new file not there yet
        if file_identity(st) != self.identity:  # replaced: finish this one, then the new one
            self.rotated = True
            return self.read(follow)
        return []

    def _next(self, follow: bool) -> list[Line]:
        """The rotated file is finished: its cut last line, then the file under the name."""
        tail = self.lines.tail()
        os.close(self.fd)
        self._open(Position())
        if tail is None:
            return self.read(follow)
        self.left = tail  # the old file's last line: after it comes the new file's start
        return [tail]

    def ended(self) -> bool:
        return False

    def notes(self) -> list[str]:
        out, self.pending = self.pending, []
        return out

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
