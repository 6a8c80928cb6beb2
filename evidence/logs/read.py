"""``read_log``: a log file, however it is stored, read into a token table.

JSONL logs are read by ``evidence.logs.reader``; Parquet and Arrow logs by
``evidence.logs.arrow``, which is imported (and pyarrow with it) only when such a log is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from kernel_contracts.evidence.logs.reader import LogError, LogTable, read_jsonl_log
from kernel_contracts.evidence.logs.schema import FILE_FORMATS, file_format_of

__all__ = ["read_log"]


def read_log(
    path: str | os.PathLike,
    format: str | None = "generic",
    *,
    vocab_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    file_format: str | None = None,
) -> LogTable:
    """Read the log at ``path`` in ``format`` (``None``: detect from the first record).

    A token id must be below ``vocab_size`` (the contract's ``policy.vocab_size``), when given.
    ``progress(done, total)`` is called now and then while reading. ``file_format`` is one of
    ``FILE_FORMATS`` (``None``: chosen by the file name's ending); Parquet and Arrow logs are
    read by ``evidence.logs.arrow``. Raises ``LogError`` when the file holds no usable record.
    """
    path = os.fspath(path)
    stored = file_format_of(path) if file_format is None else file_format
    if stored not in FILE_FORMATS:
        raise LogError(
            f"{path}: unknown file format {stored!r} (expected one of: {', '.join(FILE_FORMATS)})"
        )
    if stored == "jsonl":
        return read_jsonl_log(path, format, vocab_size=vocab_size, progress=progress)
    from kernel_contracts.evidence.logs.arrow import (
        read_columnar_log,  # pyarrow loads for columnar logs only
    )

    return read_columnar_log(
        path, format, file_format=stored, vocab_size=vocab_size, progress=progress
    )
