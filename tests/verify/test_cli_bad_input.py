"""Hostile contract strings and evidence lines through the command line: a clear error with exit
2 or a counted bad line, never an internal error, and no report half-written."""

from __future__ import annotations

import io
import json
import pathlib

import pytest

from kernel_contracts.verify.cli.commands import main

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "contracts" / "examples"
SAMPLE = EXAMPLES / "rollout-sample.jsonl"
GOOD = '"response_ids": [1, 2], "train_logprobs": [-0.5, -0.25], "rollout_logprobs": [-0.5, -0.3]'
DEEP = 100_000


def _run(args):
    stdout, stderr = io.StringIO(), io.StringIO()
    code = main([*args, "--quiet"], stdout=stdout, stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()


@pytest.mark.parametrize("output", [None, "--json", "--markdown", "--html"])
def test_a_surrogate_in_the_contract_name_is_a_contract_error(tmp_path, output):
    text = (EXAMPLES / "rollout-log.yaml").read_text(encoding="utf-8")
    text = text.replace("name: fp8-rollout-log", 'name: "fp8\\ud800log"')
    text = text.replace("path: rollout-sample.jsonl", f"path: {SAMPLE}")
    contract = tmp_path / "c.yaml"
    contract.write_text(text, encoding="utf-8")
    line = text[: text.index("name:")].count("\n") + 1
    report = tmp_path / "report.out"
    code, out, err = _run([str(contract)] + ([output, str(report)] if output else []))
    assert (code, out) == (2, "")
    assert err == (
        f"{contract}:{line}:7: name: the string holds U+D800, a surrogate code point, which is "
        "not Unicode text (write the character itself or a \\U escape)\n"
    )
    assert not report.exists()


def test_a_log_without_one_usable_record_exits_2(tmp_path):
    log = tmp_path / "bad.jsonl"
    lines = [
        f'{{{GOOD}, "position_offset": 1e30}}',
        "[" * DEEP + "]" * DEEP,
        f'{{{GOOD}, "response_ids": [1, 2]}}',
        GOOD.join("{}").replace("[1, 2]", "[1, 256]"),
    ]
    log.write_text("\n".join(lines) + "\n")
    report = tmp_path / "report.json"
    contract = EXAMPLES / "rollout-log.yaml"
    code, out, err = _run([str(contract), "--evidence", str(log), "--json", str(report)])
    assert (code, out) == (2, "")
    assert err == (
        f"--evidence {log}: no usable record in 4 non-blank lines (4 malformed); line 1: "
        "'position_offset' must be a non-negative integer; line 2: invalid JSON: nested too "
        "deeply to read (a record is one flat object); line 3: invalid JSON: duplicate key "
        "'response_ids' in one object (and 1 more)\n"
    )
    assert not report.exists()


def test_bad_lines_beside_good_ones_are_counted_and_the_verdicts_stand(tmp_path):
    bad = [
        f'{{{GOOD}, "position_offset": {"9" * 40}}}',
        '{"a": ' * DEEP + "1" + "}" * DEEP,
        GOOD.join("{}").replace("[-0.5, -0.25]", '[-0.5, "-0.25"]'),
        GOOD.join("{}").replace("[-0.5, -0.3]", "[-0.5, true]"),
        GOOD.join("{}").replace("[1, 2]", "[1, 256]"),
    ]
    log = tmp_path / "mixed.jsonl"
    log.write_text(SAMPLE.read_text() + "\n".join(bad) + "\n")
    contract = str(EXAMPLES / "rollout-log.yaml")
    alone, mixed = tmp_path / "alone.json", tmp_path / "mixed.json"
    code_alone, _, _ = _run([contract, "--evidence", str(SAMPLE), "--json", str(alone)])
    code, _, err = _run([contract, "--evidence", str(log), "--json", str(mixed)])
    assert (code, err) == (code_alone, "")
    assert code == 1  # the shipped example's IS cap is violated
    a, m = json.loads(alone.read_text()), json.loads(mixed.read_text())
    first = SAMPLE.read_text().count("\n") + 1
    src = m["evidence"]["sources"][0]
    assert src["malformed_lines"] == 5
    assert [p["line"] for p in src["files"][0]["malformed"]["first"]] == list(
        range(first, first + 5)
    )
    assert [(c["id"], c["slice"], c["status"]) for c in m["clauses"]] == [
        (c["id"], c["slice"], c["status"]) for c in a["clauses"]
    ]
