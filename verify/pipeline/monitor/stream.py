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

Each file's bytes are cut into lines by ``verify.pipeline.monitor.lines`` (lines of any length
up to 64 MiB, a cut-off last line, an overlong line).

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
from dataclasses import dataclass, replace

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.verify.pipeline.monitor.lines import HEAD, WINDOW, Line, LineSplitter
from kernel_contracts.verify.pipeline.monitor.rotation import lost, rotated_copies, still_holds

__all__ = [
    "FileEntry",
    "Position",
    "Rewritten",
    "StreamError",
    "file_identity",
    "flag_end",
    "head_hash",
    "open_stream",
    "prefix_hash",
    "read_lines",
    "stream_kind",
    "verified",
]

_CHUNK = 1 << 20


class StreamError(KernelContractsError):
    """A stream that cannot be read (or resumed); ``str`` is the one-line message (exit 2)."""


class Rewritten(KernelContractsError):
    """The file being read no longer holds the bytes read from it (truncated); raised before
    any byte of the read that found it is used."""


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


def flag_end(stream, lines: list[Line]) -> list[Line]:
    """``lines``, the first with ``follows_end`` set when ``stream`` finished a file (its last
    line handed out before) since it last handed out a line."""
    if lines and stream.finished:
        lines[0] = replace(lines[0], follows_end=True)
        stream.finished = False
    return lines


class FileStream:
    """A single file, followed by name (see the module docstring)."""

    kind = "file"

    def __init__(self, path: str, position: Position):
        self.path, self.label = path, path
        self.pending: list[str] = []
        self.left = None
        self.finished = False  # a file was finished and no line handed out since
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
            known = position.offset and position.digest is not None  # bytes to look for
            fd = self._beside(position, file_identity(st)) if known else None
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
                before = self._earlier(fd)
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

    def _earlier(self, fd: int) -> int | None:
        """The lines in the file ``fd`` when it holds the first bytes read up to one of the
        last ``ENDS`` line ends read (a copy made before the lines read last); else ``None``."""
        size = os.fstat(fd).st_size
        for end, number, state in self.lines.ends:
            if end == size:
                return number if prefix_hash(fd, size).hexdigest() == state.hexdigest() else None
        return None

    def read(self, follow: bool) -> list[Line]:
        return flag_end(self, self._read(follow))

    def _read(self, follow: bool) -> list[Line]:
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
            self.finished = True  # the next line handed out says so
            return self.read(follow)
        self.left = replace(tail, last=True)  # the old file's last: then the new file's start
        return [self.left]

    def ended(self) -> bool:
        return False

    def notes(self) -> list[str]:
        out, self.pending = self.pending, []
        return out

    def tail(self) -> Line | None:
        tail = self.lines.tail()
        return flag_end(self, [tail])[0] if tail is not None else None

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
