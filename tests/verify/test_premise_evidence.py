"""Every premise counts in a run: evidence that contradicts a premise, or leaves it unchecked.

A sampled-token log gives certified lower bounds on the full-vocabulary metrics (δ ≥ T·|log
w(y)|/2, osc ≥ T·|log w(y)|, TV ≥ |π(y) − π'(y)|, KL ≥ 2(π(y) − π'(y))²): a clause is violated
when one exceeds its max, and never held on them. Each guarantee's premises are then held,
violated or unchecked (``report["support"]``), and the exit code says so: 0 only when the
evidence held every premise, 1 when it violates one, 3 when one stayed unchecked.
"""

from __future__ import annotations

import copy
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts.evidence.logs import LoggedSequence, write_log
from kernel_contracts.evidence.table import lower_bounds
from kernel_contracts.verify.cli.commands import main
from kernel_contracts.verify.proving.check.recheck import check_data
from tests.support.cli_runner import run_cli
from tests.support.strategies import examples

EXAMPLES = Path(__file__).resolve().parents[2] / "contracts" / "examples"
HEAD = """\
contract: 1
name: premise-evidence
policy: {temperature: 1.0, vocab_size: 151936, max_new_tokens: 4096}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
"""
DRIFT = (
    HEAD
    + """\
numerical:
  - {id: N_drift, metric: logit_drift, max: 0.05}
guarantees:
  - {id: G_pg_tis, quantity: pg_bias, score_norm: 1.0, advantage: 1.0, estimator: tis, cap: 2,
     max: 0.001, from: [N_drift]}
evidence:
  logprobs: {path: log.jsonl, format: verl}
"""
)
# a statistical |log w| tail: the log itself decides it, and it buys a mean-TV guarantee
TAIL = (
    HEAD
    + """\
statistical:
  - {id: S_tail, metric: abs_log_ratio, statistic: quantile, q: 0.99, max: 0.1, confidence: 0.95,
     min_samples: 500}
guarantees:
  - {id: G_tv, quantity: token_tv, max: 0.2, from: [S_tail]}
evidence:
  logprobs: {path: log.jsonl, format: verl}
"""
)


def _log(path, log_w, *, seq_len=64, seed=0):
    """A verl-format log whose sampled tokens have log ratios ``log_w`` (train − rollout)."""
    log_w = np.asarray(log_w, dtype=np.float64)
    rng = np.random.default_rng(seed)
    train = -rng.uniform(0.05, 3.0, log_w.size)
    rollout = train - log_w
    shift = np.maximum(train, rollout).clip(min=0)  # both log-probs ≤ 0
    train, rollout = train - shift, rollout - shift
    seqs = [
        LoggedSequence(f"p{i}", 0, list(range(min(seq_len, log_w.size - s))),
                       train[s : s + seq_len], rollout[s : s + seq_len])
        for i, s in enumerate(range(0, log_w.size, seq_len))
    ]  # fmt: skip
    write_log(path, seqs, format="verl")


def _run(tmp_path, text, *extra):
    (tmp_path / "contract.yaml").write_text(text)
    code, out, err = run_cli(tmp_path / "contract.yaml", "--json", tmp_path / "r.json", *extra)
    report = json.loads((tmp_path / "r.json").read_text()) if code != 2 else None
    return code, report, out, err


def _export(tmp_path, *extra):
    return run_cli("export", tmp_path / "contract.yaml", "--to", "verl", *extra)


def _clause(report, cid):
    return next(c for c in report["clauses"] if c["id"] == cid)


def test_a_log_that_proves_the_drift_above_its_premise_fails_the_run(tmp_path):
    # one token of 8192 has |log w| = 1.70, so δ ≥ 0.85, seventeen times the premise
    log_w = np.random.default_rng(1).uniform(-0.02, 0.02, 8192)
    log_w[5000] = -1.70
    _log(tmp_path / "log.jsonl", log_w)
    code, report, out, _ = _run(tmp_path, DRIFT)
    assert code == 1
    n = _clause(report, "N_drift")
    assert n["status"] == "violated"
    assert n["value"] == pytest.approx(0.85, rel=1e-12)
    assert n["reason"] == (
        "the sampled tokens' log-probs prove logit_drift ≥ 0.85 on one of 8192 tokens, above the "
        "limit 0.05"
    )
    # the proof stands (it is conditional), but its premise is contradicted
    assert report["obligations"][0]["status"] == "proved"
    assert report["support"] == [
        {"guarantee": "G_pg_tis", "status": "violated", "premises": {"N_drift": "violated"},
         "unchecked": [], "reason": "the evidence violates premise(s) N_drift"}
    ]  # fmt: skip
    assert (report["status"], report["exit_code"]) == ("violated", 1)
    assert "G_pg_tis       premises         violated" in out
    assert check_data(report, report_dir=str(tmp_path)).differences == ()
    # and no correction setting is exported on it
    code, text, err = _export(tmp_path)
    assert (code, text) == (1, "")
    assert "G_pg_tis (pg_bias, estimator tis, cap 2.0) rests on premise(s) N_drift, which the " \
           "evidence violates, so no verl setting is written" in err  # fmt: skip


def test_a_log_that_cannot_decide_the_premise_leaves_it_unchecked_exit_3(tmp_path):
    log_w = np.random.default_rng(2).uniform(-0.02, 0.02, 4096)
    _log(tmp_path / "log.jsonl", log_w)
    code, report, out, _ = _run(tmp_path, DRIFT)
    n = _clause(report, "N_drift")
    assert n["status"] == "inconclusive"
    assert n["value"] == pytest.approx(np.abs(log_w).max() / 2, rel=1e-9)
    assert "bound logit_drift only from below" in n["reason"]
    assert report["obligations"][0]["status"] == "proved"
    assert report["support"] == [
        {"guarantee": "G_pg_tis", "status": "inconclusive", "premises": {"N_drift": "inconclusive"},
         "unchecked": ["N_drift"], "reason": "no evidence decided premise(s) N_drift"}
    ]  # fmt: skip
    assert (code, report["exit_code"]) == (3, 3)
    assert "1 guarantee(s) with unchecked premises" in out
    assert check_data(report, report_dir=str(tmp_path)).differences == ()
    # exported, and the unchecked premise named; exit 3
    code, text, err = _export(tmp_path)
    assert code == 3 and "algorithm:" in text
    assert err == (
        "note: G_pg_tis (pg_bias, estimator tis, cap 2.0) rests on premise(s) N_drift that the "
        "given evidence did not decide: the setting is proved only if they hold\n"
    )


def test_a_premise_the_log_holds_gives_exit_0(tmp_path):
    _log(tmp_path / "log.jsonl", np.random.default_rng(3).uniform(-0.05, 0.05, 4096))
    code, report, _, _ = _run(tmp_path, TAIL)
    assert _clause(report, "S_tail")["status"] == "held"
    assert report["obligations"][0]["status"] == "proved"
    assert report["support"][0]["status"] == "held"
    assert (code, report["status"]) == (0, "held")
    assert check_data(report, report_dir=str(tmp_path)).differences == ()


def test_a_proofs_only_run_states_no_support_and_exits_0(tmp_path):
    code, report, _, _ = _run(tmp_path, TAIL.split("evidence:")[0])
    assert (code, report["support"], report["status"]) == (0, [], "proved")


def test_unusable_evidence_exits_2_without_a_report(tmp_path):
    code, report, _, err = _run(tmp_path, DRIFT)
    assert (code, report) == (2, None)
    assert "log.jsonl" in err and not (tmp_path / "r.json").exists()


def test_a_statistical_drift_clause_is_violated_by_the_lower_confidence_bound(tmp_path):
    # 30 % of tokens have |log w| = 0.5: δ ≥ 0.25 on them, so the 0.9-quantile of δ is ≥ 0.25
    log_w = np.where(np.arange(4000) % 10 < 3, 0.5, 0.01)
    _log(tmp_path / "log.jsonl", log_w)
    text = HEAD + (
        "statistical:\n"
        "  - {id: S_drift, metric: logit_drift, statistic: quantile, q: 0.9, max: 0.1,"
        " confidence: 0.95, min_samples: 100}\n"
        "  - {id: S_rate, metric: logit_oscillation, statistic: exceed_rate, threshold: 0.4,"
        " max: 0.2, confidence: 0.95, min_samples: 100}\n"
        "  - {id: S_kl, metric: kl, statistic: mean, max: 0.5, confidence: 0.95,"
        " min_samples: 100}\n"
        "evidence:\n  logprobs: {path: log.jsonl, format: verl}\n"
    )
    code, report, _, _ = _run(tmp_path, text)
    assert _clause(report, "S_drift")["status"] == "violated"
    assert _clause(report, "S_drift")["value"] == pytest.approx(0.25, rel=1e-9)
    # P(osc > 0.4) ≥ P(T·|log w| > 0.4) = 0.3 > 0.2
    assert _clause(report, "S_rate")["status"] == "violated"
    assert _clause(report, "S_rate")["value"] == pytest.approx(0.3)
    # the KL's lower bounds are tiny: nothing shows it held
    assert _clause(report, "S_kl")["status"] == "inconclusive"
    assert code == 1
    assert check_data(report, report_dir=str(tmp_path)).differences == ()
    # the lower confidence bounds are recomputed (a quantile's order statistics are raw, but
    # ordered): forged counts, moments and ranks are named
    for cid, edit, path in (
        ("S_drift", {"lower": 0.05}, "status"),
        ("S_drift", {"lower": 0.3}, "lower"),
        ("S_drift", {"basis": {"value_rank": 3600, "lower_rank": 3700}}, "basis"),
        ("S_rate", {"basis": {"count": 100}, "value": 100 / 4000, "lower": 0.02}, "lower"),
        ("S_rate", {"basis": {"count": 100}}, "value"),
        ("S_kl", {"basis": {"cut_mean": 0.9, "cut_variance": 0.0}}, "lower"),
    ):
        forged = copy.deepcopy(report)
        _clause(forged, cid).update(edit)
        diffs = check_data(forged, report_dir=str(tmp_path)).differences
        assert any(d.startswith(f"clauses[{cid}/all].{path}: ") for d in diffs), (cid, diffs)


def test_forged_support_and_forged_skips_are_named_by_check(tmp_path):
    log_w = np.random.default_rng(2).uniform(-0.02, 0.02, 4096)
    _log(tmp_path / "log.jsonl", log_w)
    _, report, _, _ = _run(tmp_path, DRIFT)
    forged = copy.deepcopy(report)  # unchecked forged to held, exit 0
    forged["support"][0].update(status="held", premises={"N_drift": "held"}, unchecked=[],
                                reason="the evidence held every premise")  # fmt: skip
    forged["status"], forged["exit_code"] = "proved", 0
    diffs = check_data(forged, report_dir=str(tmp_path)).differences
    assert any(d.startswith("support: ") for d in diffs)
    assert any(d.startswith("status: 'proved' but its parts give 'inconclusive'") for d in diffs)
    # the clause forged to skipped, its measurements removed: the log measures logit_drift
    skipped = copy.deepcopy(report)
    n = _clause(skipped, "N_drift")
    n.update(status="skipped", samples=0, value=None, bound=None, reason="not measured")
    diffs = check_data(skipped, report_dir=str(tmp_path)).differences
    assert "clauses[N_drift/all].status: skipped, but a logprobs source measures logit_drift on " \
           "slice 'all'" in diffs  # fmt: skip


def test_the_shipped_rollout_log_report_rejects_verdicts_forged_to_skipped(tmp_path):
    for name in ("rollout-log.yaml", "rollout-sample.jsonl"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    code, report, _, _ = _run(tmp_path, (tmp_path / "rollout-log.yaml").read_text())
    assert code == 1
    assert check_data(report, report_dir=str(tmp_path)).differences == ()
    forged = copy.deepcopy(report)
    for c in forged["clauses"]:
        if c["status"] in ("violated", "inconclusive"):
            c.update(status="skipped", samples=0, value=None, bound=None, reason="skipped")
    forged["status"], forged["exit_code"] = "held", 0
    diffs = check_data(forged, report_dir=str(tmp_path)).differences
    named = {d.split(".status")[0] for d in diffs if ".status: skipped, but" in d}
    assert named == {
        f"clauses[{c['id']}/{c['slice']}]"
        for c in report["clauses"]
        if c["status"] in ("violated", "inconclusive")
    }


# ---- the lower bounds themselves: never above the true metric, and approached ----------------


def _metrics(z, zp, T):
    """Exact-in-float64 drift, oscillation, TV and the larger KL of two logit vectors."""
    d = zp - z
    p = np.exp((z - z.max()) / T)
    p /= p.sum()
    q = np.exp((zp - zp.max()) / T)
    q /= q.sum()
    kl = max(float(np.sum(p * (np.log(p) - np.log(q)))), float(np.sum(q * (np.log(q) - np.log(p)))))
    return np.abs(d).max(), d.max() - d.min(), 0.5 * np.abs(p - q).sum(), kl, p, q


@examples(300)
@given(
    st.integers(2, 40),
    st.floats(0.05, 20.0),
    st.floats(0.0, 6.0),
    st.integers(0, 2**32 - 1),
)
def test_lower_bounds_never_exceed_the_metric(n, T, scale, seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 3, n)
    zp = z + rng.uniform(-scale, scale, n) * (rng.random(n) < 0.5)
    drift, osc, tv, kl, p, q = _metrics(z, zp, T)
    lp, lq = np.log(p), np.log(q)
    lb = lower_bounds(lp, lq, T)  # every token as the sampled one
    slack = 1e-12
    assert np.all(lb["logit_drift"] <= drift * (1 + slack) + slack)
    assert np.all(lb["logit_oscillation"] <= osc * (1 + slack) + slack)
    assert np.all(lb["tv"] <= tv + slack)
    assert np.all(lb["kl"] <= kl + slack)


@pytest.mark.parametrize("delta", [0.01, 0.3, 2.0])
def test_drift_and_tv_lower_bounds_are_approached(delta):
    # two tokens, Δ = (−δ, +δ), the sampled token's train mass → 0: T·|log w|/2 → δ; and with
    # two tokens TV = |π(y) − π'(y)| exactly
    T = 1.0
    z = np.array([-30.0, 0.0])
    zp = z + np.array([-delta, delta])
    drift, _, _, _, p, q = _metrics(z, zp, T)
    lb = lower_bounds(np.log(p), np.log(q), T)
    assert lb["logit_drift"][0] / drift == pytest.approx(1.0, rel=1e-9)
    z = np.array([-1.0, 0.0])  # a moderate mass: TV = |π(y) − π'(y)| without cancellation
    _, _, tv, _, p, q = _metrics(z, z + np.array([-delta, delta]), T)
    lb = lower_bounds(np.log(p), np.log(q), T)
    assert lb["tv"][0] / tv == pytest.approx(1.0, rel=1e-12)


def test_the_exit_codes_are_defined_in_help_and_the_report_schema(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    assert main(["--help"], stdout=out, stderr=err) == 0
    helped = " ".join(out.getvalue().split())
    assert "with evidence (an evidence: section or --evidence), also every premise of every " \
           "guarantee held by that evidence" in helped  # fmt: skip
    assert "a guarantee resting on a premise the given evidence did not decide" in helped
    # the documented top-level keys are exactly the report's
    doc = (EXAMPLES.parent.parent / "docs" / "report-schema.md").read_text()
    rows = [line.split("|")[1] for line in doc.split("## Top-level keys")[1].split("##")[0]
            .splitlines() if line.startswith("| `")]  # fmt: skip
    documented = {k.strip(" `") for row in rows for k in row.split(",")}
    code, report, _, _ = _run(tmp_path, TAIL.split("evidence:")[0])
    assert code == 0 and documented == set(report)
    for exit_code in (0, 1, 2, 3):
        assert f"\n| {exit_code} | " in doc
