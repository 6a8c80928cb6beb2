"""A directory of rotating log files, followed as log shippers do: files are known by their
identity (device, inode) and the bytes read from them, not by their names.

- The files are the directory's regular files whose names do not start with ``.``. Each is
  read from where it was read to; one at a time, to its end, in name order (bytes) among the
  files with unread bytes, where a name comes after every longer name it begins: the active
  ``current.jsonl`` after its rotated ``current.jsonl.00001``.
- The file being read is finished, and the next one started, once it has been read to its
  end and another file has unread bytes; a cut-off last line is then a counted bad line. A
  finished file that grows later is read on from where it was left.
- A file **renamed** (rotation by renaming, even to a name that sorts after the new active
  file) is the same file: it keeps its offset and is never read twice. A new file under the
  active name is a new file, read from its start.
- **Copy-truncate**: a new file whose first bytes are exactly all the bytes read from a known
  file is that file's copy, read on from the same offset (the lines written after the last
  read and before the copy); a copy of the file being read is taken when that file is found
  truncated, not before (its lines after the offset are read once, from the copy). The file
  being read is truncated when it no longer holds the bytes read, by content and not only by
  size (``verify.pipeline.monitor.rotation``): shorter, or grown again past the offset with
  other bytes. Its copy is then read on from the offset and the file again from its start,
  and a note says that lines written between the copy and the truncation are in neither file
  (as for every reader of a copy-truncate rotation); with no copy in the directory it is an
  error that names the lines lost. A known file other than the one being read that shrinks
  below what was read is read again from its start, with a note. A new file that begins with
  a known file's first bytes but not with all the bytes read from it is an error (which of
  its lines were read cannot be told).
- A file that reappears under a known inode number with other first bytes is a new file.

A position (checkpoint) keeps the file being read (name, identity, offset, line, head and
digest of the bytes read) and every other file known (the same six), for the files still in
the directory; a restart finds the file being read by its identity under any name, or under
its name when it holds the same bytes, and refuses a file that is gone or rewritten.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import replace

from kernel_contracts.verify.pipeline.monitor.lines import HEAD, Line, LineSplitter
from kernel_contracts.verify.pipeline.monitor.rotation import lost
from kernel_contracts.verify.pipeline.monitor.stream import (
    FileEntry,
    Position,
    Rewritten,
    StreamError,
    file_identity,
    flag_end,
    head_hash,
    prefix_hash,
    read_lines,
    verified,
)

__all__ = ["DirectoryStream"]

_EMPTY_HEAD = hashlib.sha256().hexdigest()
_PART = 1 << 20  # bytes compared or hashed per read
_WAIT = FileEntry("", (0, 0), 0, 0, "", "")  # a copy of the file being read: not read yet


def _key(name: str) -> bytes:
    """Name order, a name after every longer name it begins (``b"\\xff"`` ends no UTF-8)."""
    return name.encode("utf-8", "surrogateescape") + b"\xff"


class DirectoryStream:
    """Rotating files in a directory (see the module docstring)."""

    kind = "directory"

    def __init__(self, path: str, position: Position):
        self.path, self.label = path, path
        self.fd, self.name, self.identity = None, "", None
        self.lines = LineSplitter("", 0, 0)
        self.files = {f.identity: f for f in position.files}
        self.checked: dict = {}  # identity -> (size, mtime) whose first bytes were checked
        self.copies: dict = {}  # identity -> (size, mtime) of a copy of the file being read
        self.pending: list[str] = []
        self.finished = False  # a file was finished and no line handed out since
        if position.file:
            self._resume(position)

    # -- the directory ---------------------------------------------------------------------
    def _scan(self) -> list[tuple[str, os.stat_result]]:
        try:
            names = os.listdir(self.path)
        except OSError as err:
            raise StreamError(f"{self.path}: cannot list the directory: {err.strerror}") from None
        found = []
        for name in names:
            if name.startswith("."):
                continue
            try:
                st = os.stat(os.path.join(self.path, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((name, st))
        found.sort(key=lambda item: _key(item[0]))
        present = {file_identity(st) for _, st in found}
        self.files = {k: f for k, f in self.files.items() if k in present}
        self.copies = {k: c for k, c in self.copies.items() if k in present}
        return found

    def _open_fd(self, name: str):
        path = os.path.join(self.path, name)
        try:
            return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        except OSError as err:
            raise StreamError(f"{path}: cannot read: {err.strerror}") from None

    def _head_of(self, name: str, length: int) -> str | None:
        fd = self._open_fd(name)
        if fd is None:
            return None
        try:
            return head_hash(fd, length)
        finally:
            os.close(fd)

    def _known(self, name: str, st) -> FileEntry | None:
        """The entry of a known file (``None`` for a new one): its identity and first bytes."""
        ident = file_identity(st)
        entry = self.files.get(ident)
        if entry is None:
            return None
        seen = (st.st_size, st.st_mtime_ns)
        if self.checked.get(ident) == seen:
            return entry
        if st.st_size < entry.offset or self._head_of(name, entry.offset) != entry.head:
            del self.files[ident]  # truncated behind our back, or the inode reused
            if st.st_size < entry.offset:
                self._note(name, "the file shrank below what was read: reading it again")
            return None
        self.checked[ident] = seen
        return entry

    def _copy_of(self, name: str, st) -> FileEntry | None:
        """The entry of a known file this new file is a copy of (all its bytes read), moved
        to this file; ``None`` when it is no copy; ``StreamError`` when it cannot be told. A
        copy of the file being read (complete or still written) waits for that file to be
        found truncated (``_truncated``)."""
        seen = (st.st_size, st.st_mtime_ns)
        if self.copies.get(file_identity(st)) == seen:
            return _WAIT
        if self.fd is not None and self._copying(name, st.st_size):
            self.copies[file_identity(st)] = seen
            return _WAIT
        known = list(self.files.values()) + ([self._current()] if self.fd is not None else [])
        for entry in known:
            if entry.offset == 0 or self._head_of(name, entry.offset) != entry.head:
                continue
            if self._holds(name, entry):
                return FileEntry(name, file_identity(st), *entry[2:])
            path = os.path.join(self.path, name)
            raise StreamError(
                f"{path}: it begins like {entry.name}, already read, but not with all "
                f"{entry.offset} bytes read from it; which of its lines were read cannot be "
                "told (a copy-truncate rotation raced with the monitor?)"
            )
        return None

    def _holds(self, name: str, entry: FileEntry) -> bool:
        """Whether the file ``name`` begins with every byte read from ``entry``'s file."""
        if self._head_of(name, entry.offset) != entry.head:
            return False
        return self._begins(name, entry.offset, entry.digest)

    def _holds_read(self, name: str, current: FileEntry) -> bool:
        """Whether the file ``name`` begins with every byte read from the file being read
        (``current``), a partial last line included."""
        if not self._holds(name, current):
            return False
        return not self.lines.waiting or self._begins(
            name, self.lines.read, self.lines.read_digest()
        )

    def _begins(self, name: str, length: int, digest: str) -> bool:
        """Whether the file ``name`` has ``length`` bytes or more, whose sha256 is ``digest``."""
        fd = self._open_fd(name)
        if fd is None:
            return False
        try:
            size = os.fstat(fd).st_size
            return size >= length and prefix_hash(fd, length).hexdigest() == digest
        finally:
            os.close(fd)

    def _copying(self, name: str, size: int) -> bool:
        """Whether the new file ``name`` begins with the bytes read from the file being read:
        all of them (a copy), or as many as it has, the same bytes as that file (a copy still
        being written, or one made before the bytes read last)."""
        if self.lines.offset == 0:
            return False
        if size >= self.lines.offset:
            return self._holds(name, self._current())
        fd = self._open_fd(name)
        if fd is None:
            return False
        try:
            start = os.pread(fd, min(size, HEAD), 0)
            if not start or not self.lines.prefix.startswith(start):
                return False
            done = 0
            while done < size:
                part = os.pread(fd, min(_PART, size - done), done)
                if not part or os.pread(self.fd, len(part), done) != part:
                    return False
                done += len(part)
            return True
        finally:
            os.close(fd)

    def _whole(self, name: str, st) -> FileEntry:
        """The entry of the file ``name`` read to its end (a copy all of whose bytes were read
        from the file it copies)."""
        fd = self._open_fd(name)
        if fd is None:
            raise StreamError(f"{os.path.join(self.path, name)}: the file is gone")
        h, lines, done, last = hashlib.sha256(), 0, 0, b"\n"
        try:
            while part := os.pread(fd, _PART, done):
                h.update(part)
                lines += part.count(b"\n")
                done, last = done + len(part), part[-1:]
            head = head_hash(fd, done)
        finally:
            os.close(fd)
        lines += last != b"\n"
        return FileEntry(name, file_identity(st), done, lines, head, h.hexdigest())

    def _unread(self, scan) -> FileEntry | None:
        """The first file in name order with unread bytes (other than the one being read)."""
        for name, st in scan:
            ident = file_identity(st)
            if ident == self.identity:
                self.name = name  # renamed while being read
                continue
            entry = self._known(name, st) or self._copy_of(name, st)
            if entry is _WAIT:
                continue
            if entry is None:
                entry = FileEntry(name, ident, 0, 0, _EMPTY_HEAD, _EMPTY_HEAD)
                self.checked[ident] = (st.st_size, st.st_mtime_ns)
            entry = FileEntry(name, *entry[1:])
            self.files[ident] = entry
            if st.st_size > entry.offset:
                return entry
        return None

    # -- the file being read ---------------------------------------------------------------
    def _current(self) -> FileEntry:
        offset = self.lines.offset
        head = self.lines.head(offset)
        return FileEntry(self.name, self.identity, offset, self.lines.line, head,
                         self.lines.digest(None))  # fmt: skip

    def _start(self, entry: FileEntry) -> bool:
        """Open ``entry``'s file where it was read to; ``False`` if it moved meanwhile."""
        fd = self._open_fd(entry.name)
        if fd is None:
            return False
        if file_identity(os.fstat(fd)) != entry.identity:
            os.close(fd)
            return False
        path = os.path.join(self.path, entry.name)
        at = Position(entry.name, entry.offset, entry.line, None, entry.head, entry.digest)
        self.lines = verified(fd, path, at, entry.name)
        self.files.pop(entry.identity, None)
        self.fd, self.name, self.identity = fd, entry.name, entry.identity
        return True

    def _resume(self, p: Position) -> None:
        """Reopen the file being read: by its identity under any name, else by its name; an
        inode number reused by another file (other bytes) is passed over."""
        names = [n for n, st in self._scan() if file_identity(st) == p.identity] + [p.file]
        refused = None
        for name in names:
            fd = self._open_fd(name)
            if fd is None:
                continue
            ident = file_identity(os.fstat(fd))
            if name != p.file and ident != p.identity:
                os.close(fd)
                continue
            try:
                self.lines = verified(fd, os.path.join(self.path, name), p, name)
            except StreamError as err:
                refused = refused or err
                continue
            self.files.pop(ident, None)
            self.fd, self.name, self.identity = fd, name, ident
            return
        if refused is not None:
            raise refused
        raise StreamError(
            f"{os.path.join(self.path, p.file)}: the file being read is gone (rotated files "
            "must stay until the monitor has read them)"
        )

    def _truncated(self) -> Line | None:
        """The file being read no longer holds the bytes read: the copy that holds them all
        takes its offset, and the file is read again from its start; with no such copy,
        ``StreamError`` names the lines lost. Returns the cut-off last line read from the
        file when no copy holds it (a copy made before it), or ``None``."""
        current, path = self._current(), os.path.join(self.path, self.name)
        scan = [(n, st) for n, st in self._scan() if file_identity(st) != self.identity]
        copy = next(
            (
                (n, st, FileEntry(n, file_identity(st), *current[2:]))
                for n, st in scan
                if file_identity(st) not in self.files and self._holds_read(n, current)
            ),
            None,
        )
        found, tail = ([copy], None) if copy is not None else ([], self.lines.tail())
        if not found:  # copies made before the bytes read last: all their lines were read
            found = [
                (n, st, self._whole(n, st))
                for n, st in scan
                if self.copies.get(file_identity(st)) == (st.st_size, st.st_mtime_ns)
            ]
        if not found:
            raise StreamError(lost(path, current.offset, current.line))
        for _, st, entry in found:
            self.files[entry.identity] = entry
            self.checked[entry.identity] = (st.st_size, st.st_mtime_ns)
        self.copies = {}
        self._note(
            path,
            "the file was truncated (copy-truncate rotation?): reading it again from its "
            "start; lines written between the copy and the truncation are in neither file",
            full=True,
        )
        os.close(self.fd)
        self.fd, self.identity = None, None
        return tail

    def _note(self, path: str, text: str, *, full: bool = False) -> None:
        shown = path if full else os.path.join(self.path, path)
        self.pending.append(f"{shown}: {text}")

    def _lines(self) -> list[Line] | None:
        """``read_lines`` of the file being read; a truncated file is let go (its copy found)."""
        try:
            return read_lines(self.fd, self.lines)
        except Rewritten:
            tail = self._truncated()
            return None if tail is None else [tail]

    def read(self, follow: bool) -> list[Line]:
        return flag_end(self, self._read(follow))

    def _read(self, follow: bool) -> list[Line]:
        if self.fd is not None:
            got = self._lines()
            if got is not None:
                return got
        scan = self._scan()
        following = self._unread(scan)
        if following is None:
            return []
        if self.fd is not None:
            got = self._lines()  # written before the next file appeared
            if got is not None:
                return got
            if self.fd is None:  # found truncated: its copy and itself come next
                return self.read(follow)
            tail = self.lines.tail()  # a cut line, counted: the file is finished
            self.files[self.identity] = self._current()
            self.copies = {}  # copies of it are told by its entry from now on
            os.close(self.fd)
            self.fd, self.identity = None, None
            if tail is not None:  # its position: no file open, this one read to its end
                return [replace(tail, last=True)]
            self.finished = True  # the next line handed out says so
        if not self._start(following):
            return []
        return self.read(follow)

    def ended(self) -> bool:
        return False

    def notes(self) -> list[str]:
        out, self.pending = self.pending, []
        return out

    def tail(self) -> Line | None:
        tail = self.lines.tail() if self.fd is not None else None
        return flag_end(self, [tail])[0] if tail is not None else None

    def position(self, line: Line | None) -> Position:
        files = tuple(sorted(self.files.values(), key=lambda f: _key(f.name)))
        if self.fd is None:
            return Position(files=files)
        if line is None:
            offset, number = self.lines.offset, self.lines.line
        else:
            offset, number = line.end, line.number
        head, digest = self.lines.head(offset), self.lines.digest(line)
        return Position(self.name, offset, number, self.identity, head, digest, files)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
