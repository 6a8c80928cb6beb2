"""Parquet and Arrow logs: the same table, the same bad-row accounting, the same verdicts as
the JSONL twin of the same records."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import kernel_contracts.evidence.logs.arrow as arrow_reader
from kernel_contracts.evidence.logs import LogError, read_log

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "contracts" / "examples"
SAMPLE = EXAMPLES / "rollout-sample.jsonl"
RECORDS = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]

GOOD = {"prompt_id": "p", "response_ids": [1, 2], "train_logprobs": [-0.5, -0.25]}
GOOD |= {"rollout_logprobs": [-0.5, -0.5]}


def _parquet(path, rows, **kw):
    pq.write_table(pa.Table.from_pylist(rows), path, **kw)
    return path


def _arrow(path, rows, *, stream=False):
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(path), "wb") as sink:
        opener = pa.ipc.new_stream if stream else pa.ipc.new_file
        with opener(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=16)
    return path


def _same(a, b):
    assert a.format == b.format and a.sequences == b.sequences and a.lines == b.lines
    assert a.prompt_names == b.prompt_names and a.padding_tokens == b.padding_tokens
    for key, col in a.columns.items():
        np.testing.assert_array_equal(col, b.columns[key], err_msg=key)


@pytest.mark.parametrize("kind", ["parquet", "arrow-file", "arrow-stream"])
def test_a_columnar_twin_gives_the_jsonl_table(tmp_path, kind, monkeypatch):
    monkeypatch.setattr(arrow_reader, "BATCH_ROWS", 5)  # many record batches per row group
    if kind == "parquet":
        path = _parquet(tmp_path / "log.parquet", RECORDS, row_group_size=16)
    else:
        path = _arrow(tmp_path / "log.arrow", RECORDS, stream=kind == "arrow-stream")
    jsonl = read_log(SAMPLE, None, vocab_size=256)
    twin = read_log(path, None, vocab_size=256)
    _same(jsonl, twin)
    assert twin.malformed_count == 0 and twin.sha256 != jsonl.sha256


def test_bad_rows_are_counted_as_bad_lines_are(tmp_path):
    """A null in a required column, a token beyond the vocabulary: each row is counted with its
    number and reason, word for word the JSONL line's, and the rest read."""
    rows = [
        GOOD,
        GOOD | {"train_logprobs": None},
        GOOD | {"response_ids": [1, 300]},
        GOOD | {"prompt_id": None},  # an optional column's null: the row does not say
    ]
    table = read_log(_parquet(tmp_path / "log.parquet", rows), "generic", vocab_size=256)
    assert table.sequences == 2 and table.malformed_count == 2
    assert [(p.line, p.reason) for p in table.malformed] == [
        (2, "'train_logprobs' is null: a required column"),
        (3, "'response_ids'[1] = 300 is not a token id of the vocabulary (vocab_size 256)"),
    ]
    jsonl = tmp_path / "log.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    assert [p.reason for p in read_log(jsonl, "generic", vocab_size=256).malformed][1:] == [
        p.reason for p in table.malformed[1:]
    ]


def test_a_log_prob_beyond_the_tolerance_names_its_row(tmp_path):
    rows = [GOOD, GOOD | {"rollout_logprobs": [-0.5, 0.5]}]
    path = _parquet(tmp_path / "log.parquet", rows)
    with pytest.raises(LogError) as err:
        read_log(path, "generic", vocab_size=256)
    assert str(err.value) == (
        f"{path}: row 2: 'rollout_logprobs'[1] = 0.5 > 0: log-probabilities must be ≤ 0 (up to "
        "+0.001 of rounding); a larger value is not a rounding of a log-softmax: look for a "
        "value written before normalisation or with the wrong sign"
    )


def test_a_missing_column_names_the_key_and_the_rows(tmp_path):
    rows = [{k: v for k, v in GOOD.items() if k != "rollout_logprobs"}] * 3
    with pytest.raises(LogError) as err:
        read_log(_parquet(tmp_path / "log.parquet", rows), "generic")
    assert str(err.value) == (
        f"{tmp_path / 'log.parquet'}: no usable record in 3 rows (3 malformed); "
        "row 1: missing key 'rollout_logprobs' (generic format); "
        "row 2: missing key 'rollout_logprobs' (generic format); "
        "row 3: missing key 'rollout_logprobs' (generic format)"
    )


def test_a_wrong_column_type_is_a_bad_row_per_row(tmp_path):
    """A column has one type, so every row of a mistyped column is bad, each counted."""
    rows = [GOOD | {"train_logprobs": ["-0.5", "-0.25"]}] * 2
    with pytest.raises(LogError) as err:
        read_log(_parquet(tmp_path / "log.parquet", rows), "generic")
    assert str(err.value).endswith(
        "no usable record in 2 rows (2 malformed); row 1: 'train_logprobs'[0] is a string: "
        "log-probabilities must be numbers; row 2: 'train_logprobs'[0] is a string: "
        "log-probabilities must be numbers"
    )
    floats = [GOOD | {"response_ids": [1.0, 2.0]}]
    with pytest.raises(LogError, match=r"'response_ids'\[0\] is 1.0: token ids must be integers"):
        read_log(_parquet(tmp_path / "ids.parquet", floats), "generic")


def test_unknown_columns_name_the_known_sets(tmp_path):
    with pytest.raises(LogError, match=r"the columns are none of the known field sets .* its "):
        read_log(_parquet(tmp_path / "log.parquet", [{"a": 1}]), None)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_bytes(b""), "the log file is empty"),
        (lambda p: p.write_text(SAMPLE.read_text()), "not a readable Parquet file"),
        (
            lambda p: p.write_bytes(_parquet(p, RECORDS).read_bytes()[:3000]),
            "not a readable Parquet file (Parquet magic bytes not found",
        ),
    ],
    ids=["empty", "jsonl-text", "truncated"],
)
def test_a_file_that_is_no_parquet_is_one_clear_error(tmp_path, make, message):
    path = tmp_path / "log.parquet"
    make(path)
    with pytest.raises(LogError) as err:
        read_log(path, None)
    assert str(err.value).startswith(f"{path}: {message}")


def test_a_cut_arrow_stream_counts_the_lost_batch(tmp_path):
    path = _arrow(tmp_path / "log.arrow", RECORDS, stream=True)
    path.write_bytes(path.read_bytes()[:-200])
    table = read_log(path, None, vocab_size=256)
    assert table.sequences < len(RECORDS) and table.malformed_count == 1
    assert table.malformed[0].reason.startswith("record batch cut off at end of file")


def test_the_file_format_is_chosen_by_name_or_by_key(tmp_path):
    parquet = _parquet(tmp_path / "log.bin", RECORDS)
    with pytest.raises(LogError, match="not UTF-8 text"):
        read_log(parquet, None)  # an unknown ending is JSONL
    assert read_log(parquet, None, file_format="parquet").sequences == len(RECORDS)
    with pytest.raises(LogError, match="unknown file format 'csv'"):
        read_log(parquet, None, file_format="csv")


def _contract(tmp_path, log: pathlib.Path, extra: str = "") -> pathlib.Path:
    text = (EXAMPLES / "rollout-log.yaml").read_text()
    old = "logprobs: {path: rollout-sample.jsonl, format: generic}"
    assert old in text
    new = f"logprobs: {{path: {log.name}, format: generic{extra}}}"
    path = tmp_path / f"{log.stem}-{log.suffix[1:]}.yaml"
    path.write_text(text.replace(old, new))
    return path


def _verdicts(cli, contract, tmp_path):
    report = tmp_path / "report.json"
    code, _, err = cli(contract, "--quiet", "--no-cache", "--json", report)
    clauses = json.loads(report.read_text())["clauses"]
    return (
        code,
        err,
        [(c["id"], c["slice"], c["status"], c["samples"], c["value"]) for c in clauses],
    )


def test_a_contract_on_a_parquet_log_gets_the_verdicts_of_its_jsonl_twin(tmp_path, cli):
    (tmp_path / "twin.jsonl").write_text(SAMPLE.read_text())
    _parquet(tmp_path / "twin.parquet", RECORDS)
    _parquet(tmp_path / "twin.data", RECORDS)
    jsonl = _verdicts(cli, _contract(tmp_path, tmp_path / "twin.jsonl"), tmp_path)
    by_name = _verdicts(cli, _contract(tmp_path, tmp_path / "twin.parquet"), tmp_path)
    keyed = _contract(tmp_path, tmp_path / "twin.data", ", file_format: parquet")
    by_key = _verdicts(cli, keyed, tmp_path)
    assert jsonl[0] == 1 and {s for *_, s, _n, _v in jsonl[2]} >= {"held", "violated"}
    assert by_name == jsonl and by_key == jsonl


def test_a_bad_parquet_log_in_a_contract_exits_2_without_a_traceback(tmp_path, cli):
    log = tmp_path / "cut.parquet"
    log.write_bytes(_parquet(log, RECORDS).read_bytes()[:3000])
    code, out, err = cli(_contract(tmp_path, log), "--quiet", "--no-cache")
    assert code == 2 and "Traceback" not in out + err
    assert "evidence.logprobs.path: " in err and "not a readable Parquet file" in err
    bad = _contract(tmp_path, log, ", file_format: csv")
    code, _, err = cli(bad, "--quiet", "--no-cache")
    assert code == 2 and "evidence.logprobs.file_format" in err and "Traceback" not in err


def test_the_monitor_refuses_a_parquet_log_and_says_what_to_run(tmp_path, cli):
    log = _parquet(tmp_path / "log.parquet", RECORDS)
    contract = EXAMPLES / "rollout-log.yaml"
    code, out, err = cli("monitor", contract, "--stream", log, "--no-follow")
    assert (code, out) == (2, "")
    assert err.strip().endswith(
        f"{log}: a Parquet log is written whole, not line by line, so it cannot be monitored "
        f"as it grows; decide the contract on it with python -m verify {contract} --evidence {log}"
    )


def test_a_corrupt_row_group_counts_its_rows_and_the_rest_are_read(tmp_path):
    path = _parquet(tmp_path / "log.parquet", RECORDS, row_group_size=16, compression="none")
    page = pq.ParquetFile(path).metadata.row_group(1).column(2).data_page_offset
    data = bytearray(path.read_bytes())
    data[page : page + 12] = b"\xff" * 12  # the page header of row group 1's token ids
    path.write_bytes(bytes(data))
    table = read_log(path, None, vocab_size=256)
    assert (table.sequences, table.malformed_count) == (len(RECORDS) - 16, 16)
    assert [p.line for p in table.malformed] == list(range(17, 33))
    reason = table.malformed[0].reason
    assert reason.startswith("row group 1 cannot be read (") and reason.isprintable()


def test_a_decimal_column_is_named_as_such(tmp_path):
    import decimal

    rows = [GOOD | {"train_logprobs": [decimal.Decimal("-0.5"), decimal.Decimal("-0.25")]}]
    with pytest.raises(LogError, match=r"'train_logprobs'\[0\] is a Decimal: log-probabilities"):
        read_log(_parquet(tmp_path / "log.parquet", rows), "generic")


def test_a_column_one_slip_from_a_field_gets_a_hint(tmp_path):
    rows = [{"responses": [1, 2], "old_logprobs": [-0.5, -0.25], "rollout_log_probs": [-0.5, -0.5]}]
    path = _parquet(tmp_path / "log.parquet", rows)
    with pytest.raises(LogError) as err:
        read_log(path, None)
    assert str(err.value).endswith(
        "its columns: responses, old_logprobs, rollout_log_probs; did you mean 'old_log_probs' "
        "for 'old_logprobs'?"
    )
    with pytest.raises(LogError) as err:  # the format declared: each row names the key it has
        read_log(path, "verl")
    assert "row 1: missing key 'old_log_probs' (verl format); the record has 'old_logprobs'" in (
        str(err.value)
    )
