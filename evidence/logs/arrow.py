"""Read a log stored as Parquet or Arrow (IPC) into a token table, streaming by record batch.

Columnar logs are what verl's datasets and Hugging Face ``datasets`` write: one row per
sequence, list columns for the per-token arrays, under the key names of one of the log formats
(``evidence.logs.schema``). Each row goes through the same record validation as a JSONL line
(``evidence.logs.reader.Reading``), so a bad row is counted with its 1-based row number and the
reason, exactly as a bad line is: a null in a required column, a list of strings where
log-probs belong, a token id out of the vocabulary. A null in an optional column (a mask, a
prompt id) means the row does not say. A file that cannot be read at all (no Parquet footer,
not an Arrow file, no known column set) raises ``LogError``; a row group or record batch that
is cut off or corrupt counts its rows as bad, and reading goes on with the next one. A row
above ``LIMITS["log_record"]`` bytes (a JSONL line's limit) is counted as bad without being
made into Python values, and a Parquet row group whose rows are above it on average is not
decoded at all; a footer above ``LIMITS["parquet_footer"]`` raises ``LogError``.

This module is the project's only importer of pyarrow.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from kernel_contracts.contracts.bounded import LIMITS, open_regular, size_text
from kernel_contracts.evidence.logs.reader import LogError, LogTable, Reading, open_log
from kernel_contracts.evidence.logs.schema import FORMATS, detect_format, field_hints

__all__ = ["BATCH_ROWS", "read_columnar_log"]

# Rows decoded at a time: memory stays bounded however large the file.
BATCH_ROWS = 1024
_CHUNK = 1 << 20
_FAILURES = (pa.ArrowException, OSError, ValueError)


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open_regular(path, LIMITS["log"]) as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _why(err: BaseException) -> str:
    """The first line of pyarrow's message, its unprintable characters escaped."""
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in line)


def _check_footer(path: str) -> None:
    """``LogError`` when the Parquet footer's declared length is above its limit (pyarrow
    would allocate it before reading); other damage is left to pyarrow to name."""
    with open_regular(path, LIMITS["log"]) as f:
        size = os.fstat(f.fileno()).st_size
        if size < 12:
            return
        f.seek(size - 8)
        tail = f.read(8)
    length, limit = int.from_bytes(tail[:4], "little"), LIMITS["parquet_footer"]
    if tail[4:] == b"PAR1" and length > limit:
        raise LogError(
            f"{path}: the Parquet footer declares {length} bytes, above the limit of "
            f"{size_text(limit)}"
        )


# bytes per value of each Parquet physical type once decoded (byte arrays: their stored size)
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}


def _decoded_bytes(group) -> int:
    """About how many bytes the row group ``group`` (its metadata) decodes to: each column's
    value count times its value width, or its stored size where that is larger. Encodings
    (run lengths, dictionaries) make the stored size no guide: a million zeros store in bytes."""
    total = 0
    for i in range(group.num_columns):
        column = group.column(i)
        width = _WIDTH.get(column.physical_type, 0)
        total += max(column.num_values * width, column.total_uncompressed_size)
    return total


def _too_large(group, number: int) -> str | None:
    """Why a row group is not decoded: its rows hold more than the record limit on average."""
    rows, size, limit = group.num_rows, _decoded_bytes(group), LIMITS["log_record"]
    if size <= max(rows, 1) * limit:
        return None
    return (
        f"row group {number} decodes to about {size} bytes in {rows} rows, above the limit "
        f"of {size_text(limit)} for one record; not read"
    )


def _parquet_batches(path: str):
    """``(schema, rows, batches, close)`` of a Parquet file; a row group that cannot be read,
    or whose rows are above the record limit on average, yields ``(reason, rows it had
    left)`` in place of its batches."""
    _check_footer(path)
    try:
        file = pq.ParquetFile(path)
    except _FAILURES as err:
        raise LogError(
            f"{path}: not a readable Parquet file ({_why(err)}); a file cut off while being "
            "written has no footer"
        ) from None

    def batches():
        for group in range(file.num_row_groups):
            rows, done = file.metadata.row_group(group).num_rows, 0
            why = _too_large(file.metadata.row_group(group), group)
            if why is not None:
                yield (why, rows)
                continue
            try:
                for batch in file.iter_batches(batch_size=BATCH_ROWS, row_groups=[group]):
                    done += batch.num_rows
                    yield batch
            except _FAILURES as err:
                yield (f"row group {group} cannot be read ({_why(err)})", rows - done)

    return file.schema_arrow, file.metadata.num_rows, batches(), file.close


def _arrow_batches(path: str):
    """``(schema, None, batches, close)`` of an Arrow IPC file or stream; a record batch that
    cannot be read yields ``(reason, 1)``."""
    source = pa.memory_map(path)
    try:
        reader = ipc.open_file(source)
    except _FAILURES:
        try:
            stream = ipc.open_stream(source)
        except _FAILURES as err:
            source.close()
            raise LogError(f"{path}: not a readable Arrow file or stream ({_why(err)})") from None

        def batches():
            try:
                yield from stream
            except _FAILURES as err:  # a stream cut off while being written
                yield (f"record batch cut off at end of file ({_why(err)})", 1)

        return stream.schema, None, batches(), source.close

    def file_batches():
        for i in range(reader.num_record_batches):
            try:
                yield reader.get_batch(i)
            except _FAILURES as err:
                yield (f"record batch {i} cannot be read ({_why(err)})", 1)

    return reader.schema, None, file_batches(), source.close


def read_columnar_log(
    path: str | os.PathLike,
    format: str | None = "generic",
    *,
    file_format: str = "parquet",
    vocab_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> LogTable:
    """Read the Parquet (``file_format="parquet"``) or Arrow IPC (``"arrow"``) log at ``path``.

    ``format`` names the key spelling of the columns (``None``: detect from the column names);
    ``vocab_size`` and ``progress(rows_read, rows_total)`` are as for ``read_log``. Raises
    ``LogError`` when the file holds no usable row.
    """
    path = os.fspath(path)
    reading = Reading(path, format, vocab_size, unit="row")
    open_log(path)[0].close()  # missing, a directory, empty: the JSONL reader's messages
    if file_format not in _OPENERS:
        raise LogError(f"{path}: unknown file format {file_format!r} (parquet or arrow)")
    schema, total, batches, close = _OPENERS[file_format](path)
    try:
        rows = _read_rows(reading, schema, total, batches, progress)
    finally:
        close()
    return reading.table(_sha256(path), rows, kind=file_format.capitalize())


def _read_rows(reading: Reading, schema, total, batches, progress) -> int:
    """Hand every row to ``reading``; the number of rows."""
    path = reading.path
    if reading.fmt is None:
        name = detect_format(dict.fromkeys(schema.names))
        if name is None:
            known = "; ".join(f"{n}: {', '.join(f.required)}" for n, f in FORMATS.items())
            raise LogError(
                f"{path}: the columns are none of the known field sets ({known}); its "
                f"columns: {', '.join(schema.names[:8]) or 'none'}{field_hints(schema.names)}"
            )
        reading.fmt = FORMATS[name]
    required = frozenset(reading.fmt.required)
    rows = 0
    for batch in batches:
        if isinstance(batch, tuple):  # (reason, rows) of a part that cannot be read
            reason, lost = batch
            for _ in range(lost):
                rows += 1
                reading.bad(rows, reason)
            continue
        for row in _rows(batch):
            rows += 1
            if isinstance(row, int):  # a row above the record limit, by its size in bytes
                reading.bad(
                    rows,
                    f"the row holds {row} bytes, above the limit of "
                    f"{size_text(LIMITS['log_record'])} for one record; not read",
                )
                continue
            nulls = [k for k, v in row.items() if v is None and k in required]
            if nulls:
                reading.bad(rows, f"'{nulls[0]}' is null: a required column")
                continue
            reading.take({k: v for k, v in row.items() if v is not None}, rows)
        if progress is not None and total:
            progress(rows, total)
    return rows


def _rows(batch):
    """Each row of ``batch`` as a dict, or, for a row above the record limit, its size in
    bytes (measured on the Arrow buffers, before any Python value is made)."""
    limit = LIMITS["log_record"]
    if batch.nbytes <= limit:
        yield from batch.to_pylist()
        return
    for i in range(batch.num_rows):
        row = batch.slice(i, 1)
        size = row.nbytes
        yield size if size > limit else row.to_pylist()[0]


_OPENERS = {"parquet": _parquet_batches, "arrow": _arrow_batches}
