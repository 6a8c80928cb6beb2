"""The command line on logs whose lower bounds the old arithmetic lifted above the exact value:
a probability gap lost to cancellation, a log-prob a hair above 0 (a rounding artefact of the
engine), and one far above 0 (not rounding: unusable input)."""

from __future__ import annotations

import json

CONTRACT = """\
contract: 1
name: lower-bounds
policy: {temperature: 1.0, vocab_size: 256}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
numerical:
  - {id: N1, metric: METRIC, max: MAX, slice: all}
"""


def _run(cli, tmp_path, metric, limit, lines):
    """Exit code and stdout of a run on a generic log of ``lines`` (train, rollout) log-prob
    arrays, one sequence each, under one numerical clause ``metric ≤ limit``."""
    contract = tmp_path / "c.yaml"
    contract.write_text(CONTRACT.replace("METRIC", metric).replace("MAX", limit), "utf-8")
    log = tmp_path / "log.jsonl"
    rows = [
        {"prompt_id": f"p{i}", "response_ids": list(range(len(train))),
         "train_logprobs": train, "rollout_logprobs": rollout}
        for i, (train, rollout) in enumerate(lines)
    ]  # fmt: skip
    log.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    code, out, err = cli(contract, "--evidence", log)
    return code, out, err, log


def _row(out: str, clause: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(clause))


def test_a_probability_gap_lost_to_cancellation_does_not_violate(cli, tmp_path):
    # e^ℓ − e^ℓ' = 6.0986e-20 exactly; the two exps round to doubles one ulp (1.1e-16) apart,
    # which read as TV ≥ 1.1e-16 and a false "violated" of TV ≤ 1e-17
    train, rollout = -3.155056775283876e-05, -3.155056775283882e-05
    code, out, err, _ = _run(cli, tmp_path, "tv", "1e-17", [([train], [rollout])])
    assert (code, err) == (3, ""), out  # a lower bound below the limit shows nothing
    assert "inconclusive" in _row(out, "N1[all]")


def test_the_gap_is_still_seen_where_it_exceeds_the_limit(cli, tmp_path):
    train, rollout = -3.155056775283876e-05, -3.155056775283882e-05
    code, out, err, _ = _run(cli, tmp_path, "tv", "5e-20", [([train], [rollout])])
    assert (code, err) == (1, ""), out
    assert "violated" in _row(out, "N1[all]")


def test_a_log_prob_a_hair_above_zero_is_clamped_and_counted(cli, tmp_path):
    # π(y) = e^{1e-6} > 1 is a rounding artefact: the nearest possible value is ℓ = 0, so the
    # true drift can be 0 (the old reading: drift ≥ 5e-7, violated)
    lines = [([1e-6, -0.25], [0.0, -0.25]), ([-0.5], [-0.5])]
    code, out, err, _ = _run(cli, tmp_path, "logit_drift", "1e-7", lines)
    assert (code, err) == (3, ""), out
    assert "inconclusive" in _row(out, "N1[all]")
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: 1 log-probability above 0 (+1e-06, within the tolerance of +0.001 taken as "
        "rounding) read as 0 for the lower bounds of the full-vocabulary metrics"
    ]


def test_the_clamped_count_is_in_the_report(cli, tmp_path):
    contract = tmp_path / "c.yaml"
    contract.write_text(CONTRACT.replace("METRIC", "tv").replace("MAX", "0.5"), "utf-8")
    log = tmp_path / "log.jsonl"
    rows = [{"prompt_id": "p", "response_ids": [1, 2, 3], "train_logprobs": [2e-4, -0.1, 0.0],
             "rollout_logprobs": [1e-5, 3e-4, -0.1]}]  # fmt: skip
    log.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    report = tmp_path / "r.json"
    code, out, err = cli(contract, "--evidence", log, "--json", report)
    assert code == 3, out + err
    (source,) = json.loads(report.read_text())["evidence"]["sources"]
    assert source["clamped_logprobs"] == 3
    assert source["notes"] == [
        "3 log-probabilities of 2 tokens above 0 (the largest +0.0003, within the tolerance of "
        "+0.001 taken as rounding) read as 0 for the lower bounds of the full-vocabulary metrics"
    ]


def test_a_log_prob_beyond_the_tolerance_is_unusable_input(cli, tmp_path):
    lines = [([-0.5, -0.25], [-0.5, -0.25]), ([-0.1, 0.0], [-0.2, 0.02])]
    code, out, err, log = _run(cli, tmp_path, "logit_drift", "1e-7", lines)
    assert code == 2, out + err
    assert out == ""
    assert err == (
        f"--evidence {log}:2: 'rollout_logprobs'[1] = 0.02 > 0: log-probabilities must be ≤ 0 "
        "(up to +0.001 of rounding); a larger value is not a rounding of a log-softmax: look for "
        "a value written before normalisation or with the wrong sign\n"
    )
