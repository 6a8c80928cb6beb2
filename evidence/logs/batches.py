"""Batches written whole or not at all: the frame a hook puts on each record, and its check.

A hook appends the records of one framework batch together (``evidence.hooks.JsonlSink``).
A process killed part way through that append leaves the batch's first records whole and its
last one torn; without more, a reader would take the whole ones as data from a batch that was
never written out. So each record a hook writes carries ``hook_batch``: ``{"id": <the batch's
id, random>, "index": <0-based place in the batch>, "size": <records in the batch>}``.

``Frames`` is the reader's half: it holds the records of the batch being read until the last
one (``index`` ``size - 1``) arrives in order, then releases them all; a batch that another
batch, a record without a frame, or the end of the file interrupts is released as dropped, each
record of it with the reason. A record without ``hook_batch`` (every log written before the key
existed, and every log not written by a hook) passes straight through, so old files read as
before. The reader reports nothing for the key otherwise: it is not a field of any format.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["BATCH_KEY", "Frames", "frame"]

BATCH_KEY = "hook_batch"


def frame(records: Iterable[dict]) -> list[dict]:
    """``records`` with ``hook_batch`` added to each: one fresh id, their places and count."""
    records = list(records)
    batch_id = os.urandom(8).hex()
    size = len(records)
    return [
        r | {BATCH_KEY: {"id": batch_id, "index": i, "size": size}} for i, r in enumerate(records)
    ]


def _frame_of(record: dict) -> tuple[str, int, int] | str:
    """``(id, index, size)`` of a framed record, or why its frame is unusable."""
    value = record[BATCH_KEY]
    if not isinstance(value, dict):
        return f"'{BATCH_KEY}' must be an object with id, index and size"
    batch_id, index, size = value.get("id"), value.get("index"), value.get("size")
    if not isinstance(batch_id, str) or type(index) is not int or type(size) is not int:
        return f"'{BATCH_KEY}' must hold a string id and integer index and size"
    if not 0 <= index < size:
        return f"'{BATCH_KEY}': index {index} is not in [0, size {size})"
    return batch_id, index, size


class Frames:
    """Holds the records of the hook batch being read until it is complete.

    ``take(record, line)`` returns ``(kept, dropped)``: the ``(record, line)`` pairs now
    released as data, and the ``(record, line, reason)`` of each record dropped as part of a
    batch that was cut short (or of an unusable frame). ``end()`` drops the batch still held
    at the end of the file. ``partial`` counts the batches dropped.
    """

    def __init__(self) -> None:
        self.held: list[tuple[dict, int]] = []
        self.key: tuple[str, int] | None = None  # (id, size) of the batch held
        self.gap = False  # a record of the held batch is missing (its indices skip)
        self.partial = 0

    def _drop(self, why: str) -> list[tuple[dict, int, str]]:
        if not self.held:
            return []
        got, size = len(self.held), self.key[1]
        missing = "a record of it is missing, " if self.gap else ""
        reason = (
            f"part of a hook batch cut short ({got} of its {size} records read; {missing}{why}): "
            "the whole batch is left out"
        )
        self.partial += 1
        out = [(record, line, reason) for record, line in self.held]
        self.held, self.key, self.gap = [], None, False
        return out

    def take(self, record: object, line: int):
        if not isinstance(record, dict) or BATCH_KEY not in record:
            return [(record, line)], self._drop("a record without a batch frame follows")
        parsed = _frame_of(record)
        if isinstance(parsed, str):
            dropped = self._drop("a record with an unusable frame follows")
            return [], [*dropped, (record, line, parsed)]
        batch_id, index, size = parsed
        dropped = []
        if self.key is not None and self.key != (batch_id, size):
            dropped = self._drop("another batch follows")
        elif self.key is not None and index == 0:
            dropped = self._drop("the batch starts again")
        if index != len(self.held):
            self.gap = True
        self.key = (batch_id, size)
        self.held.append((record, line))
        if self.gap or len(self.held) < size:
            return [], dropped
        kept, self.held, self.key = self.held, [], None
        return kept, dropped

    def end(self) -> list[tuple[dict, int, str]]:
        return self._drop("the file ends first")
