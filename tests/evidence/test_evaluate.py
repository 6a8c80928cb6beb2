"""``verify.decide.evaluate``: verdicts on constructed logs and tables, and bad evidence."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest

from kernel_contracts import contracts
from kernel_contracts.evidence.logs import LoggedSequence, write_log
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.decide import EvidenceError, evaluate

HEAD = """contract: 1
name: evidence-test
policy: {temperature: 1.0, top_p: TOP_P, top_k: 0, logprobs: LOGPROBS, vocab_size: 256,
         max_new_tokens: 64}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
slices:
  tail: {token_prob: [0, 0.05]}
  flat: {entropy: [3, null]}
  late: {position: [100, null]}
"""


def _contract(tmp_path, body, *, log="log.jsonl", top_p=1.0, logprobs="full_vocab", fmt=None):
    text = HEAD.replace("TOP_P", str(top_p)).replace("LOGPROBS", logprobs) + body
    if log is not None:
        text += f"evidence:\n  logprobs: {{path: {log}, format: {fmt or 'generic'}}}\n"
    path = tmp_path / "contract.yaml"
    path.write_text(text)
    return contracts.load(path)


def _write(tmp_path, abs_log_ratios, *, name="log.jsonl", seq_len=50, kept=None, shift=None):
    """A log whose |log ratio| per token is exactly ``abs_log_ratios`` (signs alternate)."""
    x = np.asarray(abs_log_ratios, dtype=np.float64)
    rng = np.random.default_rng(len(x))
    train = -rng.uniform(0.5, 4.0, x.size)
    sign = np.where(np.arange(x.size) % 2 == 0, 1.0, -1.0)
    rollout = train - sign * x
    # keep both log-probs ≤ 0: shift the pair down where needed
    over = np.maximum(rollout, train).clip(min=0)
    train, rollout = train - over, rollout - over
    if shift is not None:
        rollout = rollout - shift  # processed: renormalised by S = e^shift
    seqs = []
    for i, start in enumerate(range(0, x.size, seq_len)):
        sl = slice(start, start + seq_len)
        n = len(train[sl])
        seqs.append(
            LoggedSequence(
                f"p{i}",
                0,
                list(range(n)),
                train[sl],
                rollout[sl],
                0,
                None if kept is None else kept[sl],
            )
        )
    path = tmp_path / name
    write_log(path, seqs)
    return path


def json_lines(path):
    """(train, rollout) log-probs of every record of a generic log, as written."""
    import json

    lines = path.read_text().splitlines()
    return [(rec["train_logprobs"], rec["rollout_logprobs"]) for rec in map(json.loads, lines)]


def _by_key(results):
    return {(r.id, r.slice): r for r in results}


def test_numerical_held_violated_and_skipped(tmp_path):
    x = np.linspace(0, 0.03, 400)
    _write(tmp_path, x)
    body = """numerical:
  - {id: N_ok, metric: log_ratio, max: 0.05, slice: all}
  - {id: N_bad, metric: log_ratio, max: 0.02, slice: all}
  - {id: N_tv, metric: tv, max: 0.01, slice: all}
  - {id: N_flat, metric: log_ratio, max: 0.05, slice: flat}
"""
    results, report = evaluate(_contract(tmp_path, body))
    r = _by_key(results)
    # within its limit on every sampled token, but a log cannot see the rest of the vocabulary
    assert r[("N_ok", "all")].status is Status.INCONCLUSIVE
    assert r[("N_ok", "all")].reason == (
        "max |log ratio| over 400 tokens is 0.03 (limit 0.05); only sampled tokens were seen, "
        "and the clause bounds every token of the vocabulary"
    )
    assert r[("N_ok", "all")].value == pytest.approx(0.03)
    assert r[("N_ok", "all")].samples == 400
    assert r[("N_bad", "all")].status is Status.VIOLATED
    assert r[("N_bad", "all")].reason == ("max |log ratio| over 400 tokens is 0.03 (limit 0.02)")
    # a sampled token bounds the TV from below, TV ≥ |π(y) − π'(y)|: here one exceeds 0.01
    read = json_lines(tmp_path / "log.jsonl")
    gap = max(abs(np.exp(a) - np.exp(b)) for t, r in read for a, b in zip(t, r, strict=True))
    assert r[("N_tv", "all")].status is Status.VIOLATED
    assert r[("N_tv", "all")].value == pytest.approx(gap, rel=1e-12)
    assert r[("N_tv", "all")].reason == (
        f"the sampled tokens' log-probs prove tv ≥ {gap:.6g} on one of 400 tokens, above the "
        "limit 0.01"
    )
    assert r[("N_flat", "flat")].status is Status.SKIPPED
    assert r[("N_flat", "flat")].reason == (
        "slice flat selects on entropy, which this evidence does not record"
    )
    sha = hashlib.sha256((tmp_path / "log.jsonl").read_bytes()).hexdigest()
    assert {res.fingerprint for res in results} == {f"sha256:{sha}"}
    src = report["sources"][0]
    assert src["fingerprint"] == f"sha256:{sha}" and src["tokens"] == 400
    json.dumps(report)  # JSON-serializable


STAT = """statistical:
  - {id: S1, metric: abs_log_ratio, statistic: quantile, q: 0.9, max: MAX, confidence: 0.95,
     min_samples: MIN, slices: [all]}
"""


def test_quantile_held_violated_inconclusive(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 0.01, 3000)  # true 0.9-quantile 0.009
    _write(tmp_path, x)

    def c(mx, mn="1"):
        return _contract(tmp_path, STAT.replace("MAX", mx).replace("MIN", mn))

    held = evaluate(c("0.0095"))[0][0]
    assert held.status is Status.HELD
    assert held.value <= held.bound <= 0.0095
    assert held.bound >= np.quantile(x, 0.9)
    assert held.confidence == 0.95 and held.samples == 3000
    violated = evaluate(c("0.0085"))[0][0]
    assert violated.status is Status.VIOLATED
    assert violated.reason.startswith("order-statistic bound of the 0.9-quantile: lower bound")
    near = evaluate(c("0.00902"))[0][0]  # within sampling error of the truth
    assert near.status is Status.INCONCLUSIVE
    assert "more tokens are needed to decide" in near.reason
    few = evaluate(c("0.0095", "5000"))[0][0]
    assert few.status is Status.INCONCLUSIVE
    assert few.reason == "3000 tokens < min_samples 5000"


def test_quantile_with_too_few_tokens_is_never_held(tmp_path):
    _write(tmp_path, np.zeros(20))  # every |log ratio| is 0, far below the limit
    body = STAT.replace("MAX", "1.0").replace("MIN", "1").replace("q: 0.9", "q: 0.999")
    r = evaluate(_contract(tmp_path, body))[0][0]
    assert r.status is Status.INCONCLUSIVE
    assert r.reason == (
        "too few tokens (20) for a finite order-statistic bound of the 0.999-quantile at "
        "confidence 0.95"
    )


EXCEED = """statistical:
  - {id: E1, metric: abs_log_ratio, statistic: exceed_rate, threshold: 0.02, max: 0.01,
     confidence: 0.95, slices: [all, late]}
"""


@pytest.mark.parametrize(
    ("exceeding", "status"),
    [(0, Status.HELD), (100, Status.VIOLATED), (10, Status.INCONCLUSIVE)],
)
def test_exceed_rate(tmp_path, exceeding, status):
    x = np.full(1000, 0.001)
    x[:exceeding] = 0.5
    _write(tmp_path, x)
    r = _by_key(evaluate(_contract(tmp_path, EXCEED))[0])
    got = r[("E1", "all")]
    assert got.status is status
    assert got.value == exceeding / 1000
    if status is Status.HELD:  # rule of three: 0 of 1000 gives ≈ 0.003 at 95%
        assert got.bound == pytest.approx(1 - 0.05 ** (1 / 1000), rel=1e-6)
    assert got.reason.startswith(
        f"Clopper–Pearson bound of P(abs_log_ratio > 0.02) ({exceeding} of 1000 tokens)"
    )
    # positions 0..49 per sequence: the late slice is empty
    assert r[("E1", "late")].status is Status.INCONCLUSIVE
    assert r[("E1", "late")].reason == "no tokens in this slice"


def test_mean_of_unbounded_metric_and_empirical_max(tmp_path):
    _write(tmp_path, np.full(500, 0.001))
    body = """statistical:
  - {id: M1, metric: abs_log_ratio, statistic: mean, max: 0.01, slices: [all]}
  - {id: X1, metric: abs_log_ratio, statistic: max, max: 0.01, slices: [all]}
"""
    r = _by_key(evaluate(_contract(tmp_path, body))[0])
    assert r[("M1", "all")].status is Status.INCONCLUSIVE
    assert "no distribution-free confidence bound" in r[("M1", "all")].reason
    assert r[("X1", "all")].status is Status.HELD
    assert r[("X1", "all")].reason.startswith("empirical: the maximum over 500 measured tokens")


def test_processed_logprobs_under_truncation(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 0.004, 2000)
    log_s = np.log(rng.uniform(0.8, 0.95, 2000))
    body = "numerical:\n  - {id: N1, metric: log_ratio, max: 0.01, slice: all}\n"
    # no log S in the log: the kernel gap cannot be separated
    _write(tmp_path, x, shift=log_s)
    c = _contract(tmp_path, body, top_p=0.9, logprobs="processed")
    results, report = evaluate(c)
    assert results[0].status is Status.INCONCLUSIVE
    assert "cannot be separated from the support shift log S" in results[0].reason
    shift = report["sources"][0]["truncated_support_shift"]
    assert shift["declared"] and shift["detected"] and not shift["corrected_with_log_kept_mass"]
    assert shift["median_shift"] == pytest.approx(float(np.median(-log_s)), abs=0.01)
    # with log S per token the shift is undone exactly: the sampled tokens' maximum is the
    # kernel gap again (the clause is then undecided only because a log sees sampled tokens)
    _write(tmp_path, x, shift=log_s, kept=log_s)
    results, report = evaluate(c)
    assert results[0].status is Status.INCONCLUSIVE
    assert results[0].reason.endswith("the clause bounds every token of the vocabulary")
    assert results[0].value == pytest.approx(x.max(), abs=1e-12)
    assert report["sources"][0]["truncated_support_shift"]["corrected_with_log_kept_mass"]
    # the same log under a full_vocab contract: the data contradicts the declaration
    results, _ = evaluate(_contract(tmp_path, body))
    assert results[0].status is Status.INCONCLUSIVE
    assert "but the contract declares full-vocabulary log-probs" in results[0].reason


def test_shards_merge_to_the_whole(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 0.01, 3000)
    whole = _write(tmp_path, x, name="whole.jsonl")
    a = _write(tmp_path, x[:1300], name="a.jsonl")
    b = _write(tmp_path, x[1300:], name="b.jsonl")
    c = _contract(tmp_path, STAT.replace("MAX", "0.0095").replace("MIN", "1"), log=None)
    one = evaluate(c, paths=(str(whole),))[0][0]
    two, report = evaluate(c, paths=(str(a), str(b)))
    assert two[0].samples == one.samples == 3000
    assert two[0].bound == one.bound and two[0].status is one.status
    assert [f["tokens"] for f in report["sources"][0]["files"]] == [1300, 1700]


def test_bad_lines_are_reported_not_dropped(tmp_path):
    path = _write(tmp_path, np.full(100, 0.001), seq_len=10)
    lines = path.read_text().splitlines()
    lines[3] = lines[3].replace("-", "", 1).replace("[", "[NaN,", 1)
    lines.insert(5, "{oops")
    path.write_text("\n".join(lines) + "\n")
    body = "numerical:\n  - {id: N1, metric: log_ratio, max: 0.01, slice: all}\n"
    results, report = evaluate(_contract(tmp_path, body))
    src = report["sources"][0]
    assert src["malformed_lines"] == 2
    first = src["files"][0]["malformed"]["first"]
    assert [m["line"] for m in first] == [4, 6]
    assert results[0].samples == 90


def test_token_ids_outside_the_contract_vocabulary_are_bad_lines(tmp_path):
    """The contract says the vocabulary has 256 tokens: a log's token 256 is not one of them."""
    path = _write(tmp_path, np.full(100, 0.001), seq_len=10)
    lines = path.read_text().splitlines()
    lines[2] = lines[2].replace('"response_ids":[0,', '"response_ids":[256,', 1)
    path.write_text("\n".join(lines) + "\n")
    body = "numerical:\n  - {id: N1, metric: log_ratio, max: 0.01, slice: all}\n"
    results, report = evaluate(_contract(tmp_path, body))
    src = report["sources"][0]
    assert src["malformed_lines"] == 1
    assert src["files"][0]["malformed"]["first"] == [
        {
            "line": 3,
            "reason": "'response_ids'[0] = 256 is not a token id of the vocabulary "
            "(vocab_size 256)",
        }
    ]
    assert results[0].samples == 90


def test_a_log_without_one_usable_record_is_unusable_evidence(tmp_path):
    path = _write(tmp_path, np.full(20, 0.001), seq_len=10)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:  # a log-prob written as a string, as some exporters do
        r["train_logprobs"][0] = str(r["train_logprobs"][0])
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    body = "numerical:\n  - {id: N1, metric: log_ratio, max: 0.01, slice: all}\n"
    c = _contract(tmp_path, body)
    with pytest.raises(EvidenceError) as err:
        evaluate(c)
    line = c.source.where("evidence.logprobs.path")
    assert str(err.value) == (
        f"{c.source.path}:{line[0]}:{line[1]}: evidence.logprobs.path: {path}: no usable "
        "record in 2 non-blank lines (2 malformed); line 1: 'train_logprobs'[0] is a string: "
        "log-probabilities must be numbers; line 2: 'train_logprobs'[0] is a string: "
        "log-probabilities must be numbers"
    )


@pytest.mark.parametrize(
    ("train", "rollout"),
    [([-0.5], [-0.5]), ([-0.5, -1e300], [-1e300, -0.5]), ([-900.0, -0.1], [-0.1, -0.2])],
)
def test_the_report_of_a_tiny_or_extreme_log_is_finite(tmp_path, train, rollout):
    """One token (no standard deviation) and log-prob gaps whose ratio overflows a double."""
    seq = LoggedSequence("p", 0, list(range(len(train))), np.array(train), np.array(rollout), 0)
    write_log(tmp_path / "log.jsonl", [seq])
    body = "numerical:\n  - {id: N1, metric: log_ratio, max: 0.01, slice: all}\n"
    _, report = evaluate(_contract(tmp_path, body))
    metrics = report["sources"][0]["framework_metrics"]
    assert metrics["rollout_corr/kl"] == pytest.approx(np.mean(np.subtract(rollout, train)))
    assert all(math.isfinite(v) for v in metrics.values())
    json.dumps(report, allow_nan=False)


def test_missing_evidence_files(tmp_path):
    body = "numerical:\n  - {id: N1, metric: log_ratio, max: 0.01, slice: all}\n"
    c = _contract(tmp_path, body, log="nowhere.jsonl")
    with pytest.raises(EvidenceError) as err:
        evaluate(c)
    line = c.source.where("evidence.logprobs.path")
    assert str(err.value) == (
        f"{c.source.path}:{line[0]}:{line[1]}: evidence.logprobs.path: "
        f"{tmp_path / 'nowhere.jsonl'}: evidence file not found"
    )
    with pytest.raises(EvidenceError) as err:
        evaluate(c, paths=("also-missing.jsonl",))
    assert str(err.value) == "--evidence also-missing.jsonl: evidence file not found"


def test_wrong_format_is_a_clear_error(tmp_path):
    _write(tmp_path, np.zeros(10))
    body = "numerical:\n  - {id: N1, metric: log_ratio, max: 0.01, slice: all}\n"
    with pytest.raises(EvidenceError) as err:
        evaluate(_contract(tmp_path, body, fmt="verl"))
    assert str(err.value).endswith(
        "no record has the verl fields; the records look like the generic format "
        "(declare format: generic)"
    )


def test_no_evidence_means_no_results(tmp_path):
    c = _contract(
        tmp_path, "numerical:\n  - {id: N1, metric: tv, max: 0.1, slice: all}\n", log=None
    )
    assert evaluate(c) == ((), {"sources": [], "assumptions": []})


def test_quantile_lower_bound_covers(tmp_path):
    """The lower confidence bound behind 'violated' holds at its confidence (uniform law)."""
    from kernel_contracts.evidence.summary import summarize
    from kernel_contracts.verify.decide.verdicts import quantile_lower_bound

    rng = np.random.default_rng(11)
    misses = 0
    trials = 300
    for _ in range(trials):
        s = summarize(rng.uniform(0, 1, 200))
        if quantile_lower_bound(s, 0.9, 0.95) > 0.9:
            misses += 1
    assert misses / trials <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials)
    assert quantile_lower_bound(summarize(np.ones(3)), 0.5, 0.95) == -math.inf


def test_quantile_lower_bound_index_against_the_binomial_tail():
    """The rank it returns is the largest k with P(Binom(n, q) ≥ k) ≥ confidence (strictly)."""
    from kernel_contracts.bounds.stats import binomial_cdf
    from kernel_contracts.evidence.summary import summarize
    from kernel_contracts.verify.decide.verdicts import quantile_lower_bound

    for n in (1, 2, 5, 20, 100, 333):
        ranks = summarize(np.arange(1, n + 1, dtype=float))
        for q in (0.01, 0.3, 0.5, 0.9, 0.99):
            for c in (0.5, 0.9, 0.95, 0.99):
                ok = [k for k in range(1, n + 1) if 1 - binomial_cdf(k - 1, n, q) > c + 1e-9]
                assert quantile_lower_bound(ranks, q, c) == (max(ok) if ok else -math.inf)


def test_verl_names_count_a_sequence_with_an_all_zero_response_mask(tmp_path):
    """verl's per-sequence means include a fully masked response (mean log-prob 0)."""
    records = [
        {"uid": "a", "responses": [1, 2], "old_log_probs": [-1.0, -3.0],
         "rollout_log_probs": [-1.5, -2.5], "response_mask": [1, 1]},
        {"uid": "b", "responses": [3, 4], "old_log_probs": [-2.0, -2.0],
         "rollout_log_probs": [-2.0, -2.0], "response_mask": [0, 0]},
    ]  # fmt: skip
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    body = "numerical:\n  - {id: N1, metric: log_ratio, max: 0.01, slice: all}\n"
    _, report = evaluate(_contract(tmp_path, body, fmt="verl"))
    m = report["sources"][0]["framework_metrics"]
    # sequence a: mean ℓ = −2, mean ℓ' = −2; sequence b counts with 0 on both sides
    assert m["rollout_corr/training_log_ppl"] == pytest.approx((2.0 + 0.0) / 2)
    assert m["rollout_corr/rollout_log_ppl"] == pytest.approx((2.0 + 0.0) / 2)
    assert m["rollout_corr/training_ppl"] == pytest.approx((math.exp(2.0) + 1.0) / 2)
    assert m["rollout_corr/log_ppl_diff_max"] == 0.0 and m["rollout_corr/log_ppl_diff_min"] == 0.0
    assert m["rollout_corr/kl"] == pytest.approx(0.0)  # a token mean: the masked row adds nothing
    assert m["train_rollout_logprob_abs_diff"] == pytest.approx(0.5)  # slime: sequence a only
