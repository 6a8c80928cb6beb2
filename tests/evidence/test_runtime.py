"""Runtime clauses on evidence: the batch sizes and sequence lengths evidence was gathered at,
flagged per clause when outside the declared envelope, and the emulation's sweep of the
declared envelope (one source per setting; the real emulator's sweep is
`test_examples.py::test_fp8_emulated_example_as_shipped`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernel_contracts import contracts
from kernel_contracts.evidence.envelope import observe, points, settings
from kernel_contracts.kernels.measurement.columns import TABLE_COLUMNS
from kernel_contracts.verify.common.static_clauses import static_clauses
from kernel_contracts.verify.common.status import Status
from tests.support.cli_runner import run_cli

BASE = """\
contract: 1
name: runtime
policy: {temperature: 1.0, vocab_size: 256, max_new_tokens: 64}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
statistical:
  - {id: S1, metric: abs_log_ratio, statistic: quantile, q: 0.5, max: 0.5, confidence: 0.9}
"""


def _contract(runtime: str, extra: str = ""):
    return contracts.loads(BASE + "runtime:\n" + runtime + extra)


def _no_lengths():
    raise AssertionError("length_range is asked only when a length range is declared")


# -- the sweep's grid ----------------------------------------------------------------------


def test_points_are_ends_and_midpoint_clipped():
    assert points(1, 16, 1, 32) == [1, 8, 16]
    assert points(1, 256, 1, 32) == [1, 32]
    assert points(64, 256, 1, 32) == [32]  # nothing inside can be run: flagged, not hidden
    assert points(5, 5, 1, 32) == [5]
    assert points(1, 128, 33, 128) == [33, 64, 128]


def test_settings_of_the_sweep():
    assert settings(_contract("  - {id: R1, kv_cache: bfloat16}\n"), 32, _no_lengths) == [
        (None, None)
    ]
    assert settings(_contract("  - {id: R1, batch_size: [1, 16]}\n"), 32, _no_lengths) == [
        (1, None),
        (8, None),
        (16, None),
    ]
    both = _contract("  - {id: R1, batch_size: [1, 16], sequence_length: [1, 128]}\n")
    assert settings(both, 32, lambda: (33, 128)) == [
        (1, 33),
        (1, 128),
        (8, 64),
        (16, 33),
        (16, 128),
    ]
    two = _contract(
        "  - {id: R1, batch_size: [1, 64]}\n  - {id: R2, batch_size: [8, 16], "
        "sequence_length: [40, 40]}\n"
    )
    assert settings(two, 32, lambda: (33, 128)) == [(8, 40), (12, 40), (16, 40)]
    apart = _contract("  - {id: R1, batch_size: [1, 2]}\n  - {id: R2, batch_size: [4, 8]}\n")
    assert settings(apart, 32, _no_lengths) == [(1, None), (2, None)]


# -- observations and verdicts -------------------------------------------------------------


def _evidence(contract, batch, length, exact):
    return {"sources": [{"label": "x", "runtime": observe(contract, batch, length, exact)}]}


def _verdict(runtime, batch, length, exact, extra=""):
    contract = _contract(runtime, extra)
    (r,) = static_clauses(contract, _evidence(contract, batch, length, exact))
    return r.status, r.samples, r.reason


RANGES = "  - {id: R1, batch_size: [1, 8], sequence_length: [10, 100]}\n"


def test_observation_counts_outside_and_inside():
    contract = _contract(RANGES)
    got = observe(contract, [4, 16, 0, 8], [50, 60, 200, 5], [True, True, False, False])
    assert got == {
        "sequences": 4,
        "batch_size": {"recorded": 3, "min": 4, "max": 16},
        "sequence_length": {"recorded": 4, "exact": 2, "min": 5, "max": 200},
        "clauses": [
            {"clause": "R1", "condition": "batch_size", "outside": 1, "inside": 2},
            # 200 > 100 counts even as a lower bound; 5 < 10 does not (the prompt may add more)
            {"clause": "R1", "condition": "sequence_length", "outside": 1, "inside": 2},
        ],
    }


def test_every_sequence_inside_holds():
    assert _verdict(RANGES, [1, 8], [10, 100], [True, True]) == (
        Status.HELD,
        2,
        "batch_size: all 2 sequences inside [1, 8]; sequence_length: all 2 sequences inside "
        "[10, 100]",
    )


def test_evidence_outside_the_envelope_is_flagged():
    assert _verdict(RANGES, [4, 16, 32], [10, 100, 101], [True, True, False]) == (
        Status.VIOLATED,
        3,
        "batch_size: 2 of 3 sequences outside [1, 8] (recorded 4 to 32); sequence_length: 1 of "
        "3 sequences outside [10, 100] (recorded 10 to 101)",
    )


def test_what_evidence_does_not_record_is_unchecked():
    assert _verdict(RANGES, [0, 0], [20, 30], [False, False]) == (
        Status.SKIPPED,
        2,
        "batch_size: not recorded by the evidence; sequence_length: 2 of 2 sequences not known "
        "to lie inside [10, 100] (a length without position_offset counts the response only)",
    )
    assert _verdict(RANGES, [2, 0], [20, 30], [True, True]) == (
        Status.SKIPPED,
        2,
        "sequence_length: all 2 sequences inside [10, 100]; batch_size: 1 of 2 sequences not "
        "known to lie inside [1, 8] (no batch_size recorded)",
    )


def test_static_conditions_and_hardware_beside_the_envelope():
    runtime = "  - {id: R1, batch_size: [1, 8], kv_cache: float8_e4m3fn, hardware: h100}\n"
    assert _verdict(runtime, [2], [20], [True]) == (
        Status.SKIPPED,
        1,
        "kv_cache agree with the kernel spec; batch_size: all 1 sequences inside [1, 8]; "
        "hardware: not recorded by the evidence",
    )
    runtime = "  - {id: R1, batch_size: [1, 8], kv_cache: bfloat16}\n"
    assert _verdict(runtime, [2], [20], [True])[:2] == (Status.VIOLATED, 1)


def test_without_an_envelope_the_verdict_is_the_static_one():
    contract = _contract(RANGES)
    for evidence in (None, {"sources": [{"label": "x"}]}, {"sources": [{"runtime": {}}]}):
        (r,) = static_clauses(contract, evidence)
        assert (r.status, r.samples, r.reason) == (
            Status.SKIPPED,
            0,
            "batch_size, sequence_length: checked online by the monitor",
        )


# -- logs ----------------------------------------------------------------------------------


def _log(path, records):
    lines = []
    for i, (batch, offset) in enumerate(records):
        rec = {
            "prompt_id": f"p{i}",
            "response_ids": [1, 2, 3],
            "train_logprobs": [-0.5, -0.25, -1.0],
            "rollout_logprobs": [-0.5, -0.3, -1.1],
        }
        if batch is not None:
            rec["batch_size"] = batch
        if offset is not None:
            rec["position_offset"] = offset
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")


def _run(*args):
    return run_cli(*args)


def test_a_log_outside_the_envelope_through_the_command_line(tmp_path):
    contract = tmp_path / "c.yaml"
    contract.write_text(BASE + "runtime:\n" + RANGES)
    log = tmp_path / "log.jsonl"
    _log(log, [(4, 20), (16, 7), (8, 120)])
    report = tmp_path / "report.json"
    code, out, err = _run(contract, "--evidence", log, "--json", report, "--quiet")
    assert (code, err) == (1, "")
    r = json.loads(report.read_text())
    (runtime,) = [c for c in r["clauses"] if c["family"] == "runtime"]
    assert (runtime["status"], runtime["samples"], runtime["reason"]) == (
        "violated",
        3,
        "batch_size: 1 of 3 sequences outside [1, 8] (recorded 4 to 16); sequence_length: 1 "
        "of 3 sequences outside [10, 100] (recorded 10 to 123)",
    )
    assert r["evidence"]["sources"][0]["runtime"]["sequence_length"] == {
        "recorded": 3,
        "exact": 3,
        "min": 10,
        "max": 123,
    }
    assert _run("check", report)[0] == 0
    runtime.update(status="held")
    r["status"], r["exit_code"] = "held", 0
    report.write_text(json.dumps(r))
    code, out, _ = _run("check", report)
    assert code == 1
    assert "DIFFERENCE clauses[R1/all].status: 'held' but the contract gives 'violated'\n" in out


def test_a_log_without_batch_sizes_or_offsets_is_unchecked(tmp_path):
    contract = tmp_path / "c.yaml"
    contract.write_text(BASE + "runtime:\n" + RANGES)
    log = tmp_path / "log.jsonl"
    _log(log, [(None, None), (None, None)])
    report = tmp_path / "report.json"
    assert _run(contract, "--evidence", log, "--json", report, "--quiet")[0] == 0
    (runtime,) = [c for c in json.loads(report.read_text())["clauses"] if c["id"] == "R1"]
    assert (runtime["status"], runtime["reason"]) == (
        "skipped",
        "batch_size: not recorded by the evidence; sequence_length: 2 of 2 sequences not known "
        "to lie inside [10, 100] (a length without position_offset counts the response only)",
    )


@pytest.mark.parametrize("value", ['"8"', "0", "-1", "true", "2.0", "1e400"])
def test_a_bad_batch_size_is_a_counted_bad_line(tmp_path, value):
    from kernel_contracts.evidence.logs import read_log

    log = tmp_path / "log.jsonl"
    good = '"response_ids": [1], "train_logprobs": [-0.5], "rollout_logprobs": [-0.5]'
    log.write_text(f'{{{good}}}\n{{{good}, "batch_size": {value}}}\n')
    table = read_log(log)
    assert table.sequences == 1 and table.malformed_count == 1
    assert table.malformed[0].line == 2
    assert table.malformed[0].reason == "'batch_size' must be a positive integer"


# -- the emulation sweep --------------------------------------------------------------------


@pytest.fixture
def fake_emulate(monkeypatch):
    """The emulator replaced by a table whose positions follow the requested length."""
    import kernel_contracts.evidence.emulate as emulate_module

    calls = []

    def emulate(
        contract, *, progress=None, batch_size=None, sequence_length=None, trust_code=False
    ):
        calls.append((batch_size, sequence_length))
        ev = contract.evidence.emulate
        new = ev.max_new_tokens
        end = sequence_length or 32 + new
        n = ev.prompts * new
        rng = np.random.default_rng(len(calls))
        table = {c: rng.uniform(0, 0.001, n) for c in TABLE_COLUMNS}
        table["top1_flip"] = np.zeros(n, np.int64)
        table["position"] = np.tile(np.arange(end - new, end), ev.prompts)
        table["prompt"] = np.repeat(np.arange(ev.prompts), new)
        table["token"] = np.ones(n, np.int64)
        return table

    monkeypatch.setattr(emulate_module, "emulate_contract", emulate)
    monkeypatch.setattr(emulate_module, "length_range", lambda c: (9, 128))
    return calls


EMULATE = "evidence:\n  emulate: {model: tiny-lm, prompts: 2, max_new_tokens: 8, seed: 0}\n"


def test_emulation_sweeps_the_declared_envelope(tmp_path, fake_emulate):
    contract = tmp_path / "c.yaml"
    contract.write_text(
        BASE + "runtime:\n  - {id: R1, batch_size: [1, 4], sequence_length: [1, 64]}\n" + EMULATE
    )
    report = tmp_path / "report.json"
    code, _, err = _run(contract, "--json", report, "--quiet")
    assert (code, err) == (0, "")
    assert fake_emulate == [(1, 9), (1, 64), (2, 32), (4, 9), (4, 64)]
    r = json.loads(report.read_text())
    labels = [f"emulate:tiny-lm/h100-fp8@batch{b},length{n}" for b, n in fake_emulate]
    assert r["evidence"]["sweep"] == [
        {"source": label, "batch_size": b, "sequence_length": n, "tokens": 16}
        for label, (b, n) in zip(labels, fake_emulate, strict=True)
    ]
    # each source names the sweep's number of settings (not the number of prompts)
    assert [s["sweep"] for s in r["evidence"]["sources"]] == [{"settings": 5, "swept": True}] * 5
    s1 = [c for c in r["clauses"] if c["id"] == "S1"]
    assert [c["source"] for c in s1] == labels  # one verdict per setting
    assert {c["status"] for c in s1} == {"held"}
    (runtime,) = [c for c in r["clauses"] if c["id"] == "R1"]
    assert (runtime["status"], runtime["reason"]) == (
        "held",
        "batch_size: all 10 sequences inside [1, 4]; sequence_length: all 10 sequences inside "
        "[1, 64]",
    )
    assert _run("check", report)[0] == 0


def test_an_envelope_the_emulator_cannot_reach_is_flagged(tmp_path, fake_emulate):
    contract = tmp_path / "c.yaml"
    contract.write_text(BASE + "runtime:\n  - {id: R1, batch_size: [64, 128]}\n" + EMULATE)
    report = tmp_path / "report.json"
    code, _, _ = _run(contract, "--json", report, "--quiet")
    assert code == 1
    assert fake_emulate == [(32, None)]
    (runtime,) = [c for c in json.loads(report.read_text())["clauses"] if c["id"] == "R1"]
    assert (runtime["status"], runtime["reason"]) == (
        "violated",
        "batch_size: 2 of 2 sequences outside [64, 128] (recorded 32 to 32)",
    )


def test_without_declared_ranges_one_setting_as_before(tmp_path, fake_emulate):
    contract = tmp_path / "c.yaml"
    contract.write_text(BASE + "runtime:\n  - {id: R1, kv_cache: float8_e4m3fn}\n" + EMULATE)
    report = tmp_path / "report.json"
    assert _run(contract, "--json", report, "--quiet")[0] == 0
    assert fake_emulate == [(None, None)]
    r = json.loads(report.read_text())
    assert "sweep" not in r["evidence"]
    assert r["evidence"]["sources"][0]["label"] == "emulate:tiny-lm/h100-fp8"
