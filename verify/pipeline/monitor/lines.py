"""Lines out of a file's bytes: every complete line with its position, the sha256 of the bytes
handed out, and the bytes a followed file is checked against.

A line is complete when it ends in a newline; lines of any length up to ``MAX_LINE`` bytes
(64 MiB, the newline included) are read in full, however many reads they span. In follow mode
a cut-off last line waits for its newline; at the end of input, and at the end of a finished
rotated file, it is handed out with ``cut`` set (a counted bad line). A longer line is handed
out as its first 200 bytes with ``reason`` set and the rest skipped (one counted bad line at
its line number; reading goes on after it), so memory stays bounded.

A file that is finished (rotated away, or a directory's next file begun) says so: its cut last
line comes with ``last`` set, or, when it ended in a newline, the next line handed out (of the
next file) comes with ``follows_end`` set. A hook batch still held there is cut short
(``evidence.logs.batches``); a file being followed has no end yet.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field

from kernel_contracts.contracts.bounded import LIMITS

__all__ = ["ENDS", "HEAD", "MAX_LINE", "WINDOW", "Line", "LineSplitter"]

MAX_LINE = LIMITS["log_record"]  # 64 MiB; a longer line is a counted bad line, never held in memory
HEAD = 1 << 12  # bytes of a file's start whose hash a checkpoint keeps
WINDOW = 1 << 12  # bytes just before the read position that every poll compares
ENDS = 1 << 12  # line ends whose hash is kept: a rotated copy may end at one of them
_SHOWN = 200  # bytes of an overlong line kept to show


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
    last: bool = False  # its file is finished after it
    follows_end: bool = False  # a finished file, whose last line was handed out, comes before it


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
