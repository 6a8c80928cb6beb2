"""Hostile logs: a FIFO, a device, a line or row far above the record limit, a lying Parquet
footer. Each is refused or counted as a bad record, naming the file (and the line or row),
quickly, without blocking and without holding what the file claims."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernel_contracts.evidence.logs import LogError, read_log
from kernel_contracts.verify.cli.commands import main
from tests.support.guard import finishes

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "contracts" / "examples"
GOOD = {"response_ids": [1, 2], "train_logprobs": [-0.5, -0.25], "rollout_logprobs": [-0.5, -0.3]}
LIMIT = 64 << 20  # LIMITS["log_record"]
HUGE = 200 << 20  # a line far above it, written as a hole (a sparse file: cheap)


def _huge_line_log(path: pathlib.Path, before: int = 1, after: int = 1, size: int = HUGE) -> int:
    """A JSONL log: ``before`` good lines, one line of ``size`` zero bytes, ``after`` good
    lines; the huge line's number."""
    good = (json.dumps(GOOD) + "\n").encode()
    with open(path, "wb") as f:
        f.write(good * before)
        f.seek(size - 1, os.SEEK_CUR)
        f.write(b"\n" + good * after)
    return before + 1


def test_a_jsonl_line_above_the_record_limit_is_counted_unheld(tmp_path):
    log = tmp_path / "log.jsonl"
    line = _huge_line_log(log)
    tracemalloc.start()
    try:
        table = read_log(log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * LIMIT < HUGE  # a bounded part of the line at most, never the whole
    assert table.sequences == 2 and table.malformed_count == 1
    (problem,) = table.malformed
    assert (problem.line, problem.reason) == (
        line,
        f"the line holds {HUGE} bytes, above the limit of 64 MiB for one record; not read",
    )
    digest = hashlib.sha256()
    with open(log, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    assert table.sha256 == digest.hexdigest()  # the fingerprint still covers every byte


def test_a_log_of_one_huge_line_exits_2_naming_the_line(tmp_path):
    log = tmp_path / "huge.jsonl"
    _huge_line_log(log, before=0, after=0, size=LIMIT + 1)
    stdout, stderr = io.StringIO(), io.StringIO()
    args = [str(EXAMPLES / "rollout-log.yaml"), "--evidence", str(log), "--quiet"]
    code = main(args, stdout=stdout, stderr=stderr)
    assert (code, stdout.getvalue()) == (2, "")
    assert stderr.getvalue() == (
        f"--evidence {log}: no usable record in 1 non-blank line (1 malformed); line 1: the "
        f"line holds {LIMIT + 1} bytes, above the limit of 64 MiB for one record; not read\n"
    )


@pytest.mark.parametrize("name", ["log.jsonl", "log.parquet", "log.arrow"])
def test_a_fifo_or_a_device_log_is_refused_unread(tmp_path, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    err = finishes(lambda: read_log(fifo), fifo)
    assert isinstance(err, LogError)
    assert str(err) == f"{fifo}: is a FIFO (named pipe), not a log file"
    fifo.unlink()
    fifo.symlink_to("/dev/zero")
    err = finishes(lambda: read_log(fifo))
    assert str(err) == f"{fifo}: is a character device, not a log file"


def _row(n: int) -> dict:
    """A generic-format row whose train log-probs are ``n`` zeros (``8 n`` bytes as float64)."""
    zeros = pa.array(np.zeros(n))
    ids = pa.array(np.ones(n, dtype=np.int64))
    return {"response_ids": ids, "train_logprobs": zeros, "rollout_logprobs": zeros}


def _columnar(rows: list[dict]) -> pa.Table:
    columns = {
        key: pa.ListArray.from_arrays(
            pa.array(np.cumsum([0] + [len(r[key]) for r in rows]), pa.int32()),
            pa.concat_arrays([r[key] for r in rows]),
        )
        for key in rows[0]
    }
    return pa.table(columns)


BIG = 3 << 20  # elements: 3 columns of 8-byte values, 72 MiB a row, above the 64 MiB limit


def test_a_parquet_row_group_of_huge_rows_is_not_decoded(tmp_path):
    path = tmp_path / "log.parquet"
    with pq.ParquetWriter(path, _columnar([_row(2)]).schema) as writer:
        writer.write_table(_columnar([_row(BIG)]))  # row group 0: one huge row
        writer.write_table(_columnar([_row(2), _row(2)]))  # row group 1: good rows
    assert pq.ParquetFile(path).metadata.row_group(0).total_byte_size < 1 << 20  # zeros
    tracemalloc.start()
    try:
        table = read_log(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20  # its 72 MiB were never decoded
    assert table.sequences == 2 and table.malformed_count == 1
    (problem,) = table.malformed
    assert problem.line == 1
    words = problem.reason.split()
    assert words[:5] == ["row", "group", "0", "decodes", "to"] and int(words[6]) >= 3 * 8 * BIG
    assert problem.reason.endswith(
        " bytes in 1 rows, above the limit of 64 MiB for one record; not read"
    )


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_a_huge_row_among_small_ones_is_counted_without_making_its_values(tmp_path, kind):
    rows = _columnar([_row(2), _row(BIG), _row(2), _row(2)])
    path = tmp_path / f"log.{kind}"
    if kind == "parquet":
        pq.write_table(rows, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
            writer.write_table(rows)
    table = read_log(path)
    assert table.sequences == 3 and table.malformed_count == 1
    (problem,) = table.malformed
    assert problem.line == 2
    assert problem.reason.startswith("the row holds ")
    held = int(problem.reason.split()[3])
    assert held >= 3 * 8 * BIG
    assert problem.reason.endswith(" bytes, above the limit of 64 MiB for one record; not read")


def test_a_parquet_footer_above_its_limit_is_refused(tmp_path):
    path = tmp_path / "log.parquet"
    path.write_bytes(b"PAR1" + b"\0" * 64 + (0xFFFFFFF0).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(LogError) as info:
        read_log(path)
    assert str(info.value) == (
        f"{path}: the Parquet footer declares {0xFFFFFFF0} bytes, above the limit of 64 MiB"
    )
