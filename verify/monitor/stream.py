"""Where the monitor reads rollout log lines: a file being appended to, a directory of rotating
files, or standard input; every complete line with its position, and where to resume.

- A **file** is followed like ``tail -F``: at its end the monitor waits for more; a file
  replaced under the same name (rotation by renaming) is read to its end, then the new file
  from its start. A file that shrinks below the position read (rotation by copying and
  truncating) is an error: lines may have been lost.
- A **directory** holds rotating files read in the order of their names (byte order; hidden
  names, starting with ``.``, are left out). A file is finished, and the next one started,
  once a later name exists and the file has been read to its end.
- **Standard input** (``-``) is read to its end. A restart skips the bytes a checkpoint says
  were read: the same stream must be given again from its start.

A line is complete when it ends in a newline. In follow mode a cut-off last line waits for its
newline; at the end of input, and at the end of a finished rotated file, it is handed out
with ``cut`` set (a counted bad line). A line longer than ``MAX_LINE`` bytes is handed out as
its first bytes with ``reason`` set, the rest skipped, so memory stays bounded.
"""

from __future__ import annotations

import hashlib
import os
import select
import stat
from dataclasses import dataclass

from contracts import KernelContractsError

__all__ = ["MAX_LINE", "Line", "Position", "StreamError", "open_stream", "stream_kind"]

MAX_LINE = 1 << 26  # bytes; a longer line is a counted bad line, never held in memory
HEAD = 1 << 12  # bytes of a file's start whose hash a checkpoint keeps
_CHUNK = 1 << 20


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


@dataclass(frozen=True)
class Position:
    """Where reading resumes: the file (in a directory), its byte offset and lines before it;
    ``identity`` (device, inode) of a single file, and ``head``, the sha256 of the file's first
    ``min(offset, HEAD)`` bytes: a file that was replaced (even by one that got the old inode
    number) is told apart from the one read."""

    file: str = ""
    offset: int = 0
    line: int = 0
    identity: tuple[int, int] | None = None
    head: str | None = None
    finished: bool = False  # a directory's file read to its end: resume at the next name

    def as_json(self) -> dict:
        return {
            "file": self.file,
            "offset": self.offset,
            "line": self.line,
            "identity": list(self.identity) if self.identity else None,
            "head": self.head,
            "finished": self.finished,
        }


class _Lines:
    """Splits bytes into lines, keeping a partial last line and skipping overlong ones."""

    def __init__(self, file: str, offset: int, line: int):
        self.file, self.offset, self.line = file, offset, line
        self.buffer = b""
        self.skipping: bytes | None = None  # the head of an overlong line being skipped
        self.skipped = 0

    def feed(self, data: bytes) -> list[Line]:
        out = []
        if self.skipping is not None:
            cut = data.find(b"\n")
            if cut < 0:
                self.skipped += len(data)
                return out
            self.skipped += cut + 1
            out.append(self._overlong())
            data = data[cut + 1 :]
        data = self.buffer + data if self.buffer else data
        start = 0
        while True:
            cut = data.find(b"\n", start)
            if cut < 0:
                break
            out.append(self._line(data[start : cut + 1]))
            start = cut + 1
        rest = data[start:]
        if len(rest) > MAX_LINE:
            self.skipping, self.skipped, rest = rest[:200], len(rest), b""
        self.buffer = rest
        return out

    def _line(self, raw: bytes, cut: bool = False) -> Line:
        self.line += 1
        end = self.offset + len(raw)
        line = Line(raw, self.file, self.line, self.offset, end, cut)
        self.offset = end
        return line

    def _overlong(self) -> Line:
        self.line += 1
        end = self.offset + self.skipped
        why = f"line longer than {MAX_LINE} bytes ({self.skipped} bytes), not read"
        line = Line(self.skipping, self.file, self.line, self.offset, end, reason=why)
        self.offset, self.skipping, self.skipped = end, None, 0
        return line

    def tail(self) -> Line | None:
        """The partial last line, consumed (a cut line), or ``None``."""
        if self.skipping is not None:
            return self._overlong()
        if not self.buffer:
            return None
        raw, self.buffer = self.buffer, b""
        return self._line(raw, cut=True)

    @property
    def waiting(self) -> int:
        """Bytes of a partial last line waiting for their newline."""
        return len(self.buffer) + self.skipped


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _head(fd: int, offset: int) -> str:
    """sha256 of the first ``min(offset, HEAD)`` bytes of the open file ``fd``."""
    return hashlib.sha256(os.pread(fd, min(offset, HEAD), 0)).hexdigest()


def _check_head(fd: int, path: str, position: Position) -> None:
    if position.head is not None and _head(fd, position.offset) != position.head:
        os.close(fd)
        raise StreamError(
            f"{path}: the file was replaced since the checkpoint was written (its first bytes "
            "differ); its rest cannot be read (rotate into a directory, or start with a new "
            "checkpoint)"
        )


class FileStream:
    """A single file, followed by name (see the module docstring)."""

    kind = "file"

    def __init__(self, path: str, position: Position):
        self.path, self.label = path, path
        self.handle = None
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
        if position.identity is not None and tuple(position.identity) != _identity(st):
            os.close(fd)
            raise StreamError(
                f"{self.path}: the file was replaced since the checkpoint was written; its "
                "rest cannot be read (rotate into a directory, or start with a new checkpoint)"
            )
        if st.st_size < position.offset:
            os.close(fd)
            raise StreamError(
                f"{self.path}: the file has {st.st_size} bytes, fewer than the {position.offset} "
                "already read: it was truncated, and lines may have been lost"
            )
        _check_head(fd, self.path, position)
        os.lseek(fd, position.offset, os.SEEK_SET)
        self.fd, self.identity, self.left = fd, _identity(st), None
        self.lines = _Lines("", position.offset, position.line)

    def read(self, follow: bool) -> list[Line]:
        data = os.read(self.fd, _CHUNK)
        if data:
            return self.lines.feed(data)
        if not follow:
            return []
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return []  # renamed away, the new file not there yet
        if _identity(st) != self.identity:  # replaced: finish this one, then the new one
            data = os.read(self.fd, _CHUNK)
            if data:
                return self.lines.feed(data)
            tail = self.lines.tail()
            os.close(self.fd)
            self._open(Position())
            if tail is None:
                return self.read(follow)
            self.left = tail  # the old file's last line: after it comes the new file's start
            return [tail]
        if st.st_size < self.lines.offset + len(self.lines.buffer):
            raise StreamError(
                f"{self.path}: the file shrank to {st.st_size} bytes below the "
                f"{self.lines.offset} already read: it was truncated, and lines may have "
                "been lost"
            )
        return []

    def ended(self) -> bool:
        return False

    def tail(self) -> Line | None:
        return self.lines.tail()

    def position(self, line: Line | None) -> Position:
        if line is None:
            offset, number = self.lines.offset, self.lines.line
        elif line is self.left:
            offset, number = 0, 0
        else:
            offset, number = line.end, line.number
        return Position("", offset, number, self.identity, _head(self.fd, offset))

    def close(self) -> None:
        os.close(self.fd)


class DirectoryStream:
    """Rotating files in a directory, in name order (see the module docstring)."""

    kind = "directory"

    def __init__(self, path: str, position: Position):
        self.path, self.label = path, path
        self.fd = None
        self.lines = _Lines(position.file, position.offset, position.line)
        self.current = position.file
        if self.current and not position.finished:
            self._open(position.file, position)

    def _names(self) -> list[str]:
        try:
            names = os.listdir(self.path)
        except OSError as err:
            raise StreamError(f"{self.path}: cannot list the directory: {err.strerror}") from None
        return sorted(
            (n for n in names if not n.startswith(".") and _regular(os.path.join(self.path, n))),
            key=lambda n: n.encode("utf-8", "surrogateescape"),
        )

    def _open(self, name: str, position: Position) -> None:
        path = os.path.join(self.path, name)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise StreamError(
                f"{path}: the file being read is gone (rotated files must stay until the "
                "monitor has read them)"
            ) from None
        except OSError as err:
            raise StreamError(f"{path}: cannot read: {err.strerror}") from None
        size = os.fstat(fd).st_size
        if size < position.offset:
            os.close(fd)
            raise StreamError(
                f"{path}: the file has {size} bytes, fewer than the {position.offset} already "
                "read: it was truncated, and lines may have been lost"
            )
        _check_head(fd, path, position)
        os.lseek(fd, position.offset, os.SEEK_SET)
        self.fd, self.current = fd, name
        self.lines = _Lines(name, position.offset, position.line)

    def _next(self) -> str | None:
        key = self.current.encode("utf-8", "surrogateescape")
        later = [n for n in self._names() if n.encode("utf-8", "surrogateescape") > key]
        return later[0] if later else None

    def read(self, follow: bool) -> list[Line]:
        if self.fd is None:
            following = self._next() if self.current else (self._names() or [None])[0]
            if following is None:
                return []
            self._open(following, Position())
        data = os.read(self.fd, _CHUNK)
        if data:
            return self.lines.feed(data)
        following = self._next()
        if following is None:
            return []
        data = os.read(self.fd, _CHUNK)  # written before the next file appeared
        if data:
            return self.lines.feed(data)
        tail = self.lines.tail()
        os.close(self.fd)
        self._open(following, Position())
        return ([tail] if tail else []) + self.read(follow)

    def ended(self) -> bool:
        return False

    def tail(self) -> Line | None:
        return self.lines.tail()

    def position(self, line: Line | None) -> Position:
        if self.fd is None:  # no file yet, or the checkpoint's file finished
            return Position(self.current, self.lines.offset, self.lines.line, finished=True)
        if line is None:
            offset, number = self.lines.offset, self.lines.line
        elif line.file != self.current:  # a finished file: resume at the name after it
            return Position(line.file, line.end, line.number, finished=True)
        else:
            offset, number = line.end, line.number
        return Position(self.current, offset, number, head=_head(self.fd, offset))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


class StdinStream:
    """Standard input, read to its end (see the module docstring)."""

    kind = "stdin"

    def __init__(self, fd: int, position: Position, poll: float):
        self.fd, self.label, self.poll = fd, "<stdin>", poll
        self.eof = False
        self.lines = _Lines("", 0, 0)
        skip = position.offset
        try:
            os.lseek(fd, skip, os.SEEK_SET)
            skip = 0
        except OSError:  # a pipe: read and drop what the checkpoint says was read
            pass
        while skip:
            data = os.read(fd, min(skip, _CHUNK))
            if not data:
                raise StreamError(
                    f"<stdin>: the stream ended after {position.offset - skip} bytes, before "
                    f"the {position.offset} the checkpoint says were read"
                )
            skip -= len(data)
        self.lines = _Lines("", position.offset, position.line)

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

    def tail(self) -> Line | None:
        return self.lines.tail()

    def position(self, line: Line | None) -> Position:
        if line is None:
            return Position("", self.lines.offset, self.lines.line)
        return Position("", line.end, line.number)

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
    from contracts import file_kind

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
    return DirectoryStream(path, position)
