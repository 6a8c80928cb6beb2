"""An append-safe JSONL file that takes a batch of records at a time.

Each record of a batch is written with its frame (``hook_batch``: the batch's id, the record's
place and the batch's size; ``evidence.logs.batches``), so a reader tells a batch cut short
from a whole one and leaves all of the former out.

Each batch is encoded whole in memory and handed to the operating system in one ``write`` on a
file opened for appending, so concurrent appenders never interleave inside a line. A write
that fails part way (a full disk, a quota) takes back what it wrote of its batch before the
error reaches the caller, so the file holds whole batches only (unless another appender has
written after it: then nothing is cut, and a line of the batch torn there is glued to the
other appender's next line, which the reader counts as one malformed line). A process
killed in the middle of that write can leave the batch cut short, its last line torn: the reader
counts the torn line as a "truncated record at end of file" and the whole lines before it, the
rest of the cut batch, as part of a batch cut short, none of them as data; the next
``JsonlSink`` opened on the file cuts the torn line off before it appends, so no half-written
line is ever followed by more data.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from kernel_contracts.evidence.logs.batches import frame

__all__ = ["JsonlSink"]

_TAIL = 1 << 16


def _torn_tail(fd: int) -> int:
    """The length up to the end of the last complete line (the size when no line is torn)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    while end > 0:
        start = max(0, end - _TAIL)
        cut = os.pread(fd, end - start, start).rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        end = start
    return 0


class JsonlSink:
    """Appends batches of JSON records to ``path``, one line each, a batch per ``write`` call.

    ``fsync=True`` makes each batch durable before ``write`` returns. ``repaired_bytes`` is the
    length of a torn last line cut off when the file was opened (0 for a sound file). Usable as
    a context manager; ``close`` is idempotent.
    """

    def __init__(self, path: str | os.PathLike, *, fsync: bool = False) -> None:
        self.path = os.fspath(path)
        self.fsync = fsync
        self.lines = 0
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        keep = _torn_tail(self._fd)
        self.repaired_bytes = size - keep
        if self.repaired_bytes:
            os.ftruncate(self._fd, keep)

    def write(self, records: Iterable[dict]) -> int:
        """Append ``records`` as one framed batch; returns the number of lines written."""
        if self._fd is None:
            raise ValueError(f"{self.path}: the log sink is closed")
        lines = [json.dumps(r, separators=(",", ":"), ensure_ascii=False) for r in frame(records)]
        if not lines:
            return 0
        data = memoryview(("\n".join(lines) + "\n").encode("utf-8"))
        start = written = 0
        try:
            while written < len(data):
                n = os.write(self._fd, data[written:])
                if not written:  # an appending write ends at the file's offset
                    start = os.lseek(self._fd, 0, os.SEEK_CUR) - n
                written += n
            if self.fsync:
                os.fsync(self._fd)
        except OSError:
            self._take_back(start, written)
            raise
        self.lines += len(lines)
        return len(lines)

    def _take_back(self, start: int, written: int) -> None:
        """Cut the file back to ``start`` where its last ``written`` bytes are this batch's."""
        if written and os.fstat(self._fd).st_size == start + written:
            os.ftruncate(self._fd, start)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
