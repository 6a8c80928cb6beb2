"""Sampled-token metrics against plain per-token Python, and the truncated-support shift."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts.evidence.logs import framework_metrics, support_shift, token_metrics
from tests.support.strategies import examples


def _log(seed, n_seq=6, max_len=40, noise=0.05):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len, n_seq)
    train = -rng.exponential(1.5, lengths.sum())
    rollout = np.minimum(train + rng.normal(0, noise, train.size), 0.0)
    seq = np.repeat(np.arange(n_seq), lengths)
    return train, rollout, seq


def test_token_metrics_against_a_loop():
    train, rollout, _ = _log(0)
    got = token_metrics(train, rollout)
    for i in range(train.size):
        a, b = float(train[i]), float(rollout[i])
        w = math.exp(a - b)
        assert got["log_ratio"][i] == pytest.approx(a - b, abs=1e-15)
        assert got["abs_log_ratio"][i] == pytest.approx(abs(a - b), abs=1e-15)
        assert got["ratio"][i] == pytest.approx(w, rel=1e-14)
        assert got["k3"][i] == pytest.approx(w - 1 - math.log(w), rel=1e-6, abs=1e-15)
        assert got["chi2"][i] == pytest.approx(w * w - 1, rel=1e-9, abs=1e-15)
        assert got["prob_diff"][i] == pytest.approx(abs(math.exp(a) - math.exp(b)), abs=1e-15)
    assert (got["k3"] >= 0).all()


def _reference(train, rollout, seq):
    """Each framework formula spelled out per token and per sequence."""
    n = len(train)
    seqs = sorted(set(seq.tolist()))
    by_seq = {s: [i for i in range(n) if seq[i] == s] for s in seqs}
    d = [abs(math.exp(rollout[i]) - math.exp(train[i])) for i in range(n)]
    mean_d = sum(d) / n
    lw = [train[i] - rollout[i] for i in range(n)]
    ref = {
        "training/rollout_probs_diff_max": max(d),
        "training/rollout_probs_diff_mean": mean_d,
        "training/rollout_probs_diff_std": math.sqrt(sum((x - mean_d) ** 2 for x in d) / (n - 1)),
        "rollout_corr/kl": sum(-x for x in lw) / n,
        "rollout_corr/k3_kl": sum(math.exp(x) - x - 1 for x in lw) / n,
        "rollout_corr/chi2_token": sum(math.exp(2 * max(min(x, 20), -20)) for x in lw) / n - 1,
        "token_mult_prob_error": sum(math.exp(abs(x)) for x in lw) / n,
        "sampling/sampling_logp_difference/mean": sum(abs(x) for x in lw) / n,
        "sampling/sampling_logp_difference/max": max(abs(x) for x in lw),
        "is_ratio/min": min(math.exp(x) for x in lw),
        "is_ratio/max": max(math.exp(x) for x in lw),
        "is_ratio/mean": sum(math.exp(x) for x in lw) / n,
    }
    per_seq_abs = [sum(abs(lw[i]) for i in ix) / len(ix) for ix in by_seq.values()]
    ref["train_rollout_logprob_abs_diff"] = sum(per_seq_abs) / len(per_seq_abs)
    mt = [sum(train[i] for i in ix) / len(ix) for ix in by_seq.values()]
    mr = [sum(rollout[i] for i in ix) / len(ix) for ix in by_seq.values()]
    k = len(seqs)
    ref["rollout_corr/training_ppl"] = sum(math.exp(-x) for x in mt) / k
    ref["rollout_corr/training_log_ppl"] = sum(-x for x in mt) / k
    ref["rollout_corr/rollout_log_ppl"] = sum(-x for x in mr) / k
    ref["rollout_corr/log_ppl_diff_max"] = max(r - t for r, t in zip(mr, mt, strict=True))
    ref["rollout_corr/log_ppl_diff_min"] = min(r - t for r, t in zip(mr, mt, strict=True))
    ref["rollout_corr/rollout_ppl"] = sum(math.exp(-x) for x in mr) / k
    ref["rollout_corr/log_ppl_diff"] = sum(r - t for r, t in zip(mr, mt, strict=True)) / k
    ref["rollout_corr/log_ppl_abs_diff"] = sum(abs(r - t) for r, t in zip(mr, mt, strict=True)) / k
    ref["rollout_corr/ppl_ratio"] = sum(math.exp(r - t) for r, t in zip(mr, mt, strict=True)) / k
    seq_sums = [max(min(sum(lw[i] for i in ix), 20), -20) for ix in by_seq.values()]
    ref["rollout_corr/chi2_seq"] = sum(math.exp(2 * x) for x in seq_sums) / k - 1
    return ref


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_framework_metrics_against_reference(seed):
    train, rollout, seq = _log(seed)
    got = framework_metrics(train, rollout, seq)
    ref = _reference(train.tolist(), rollout.tolist(), seq)
    for name, value in ref.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name
    assert -1.0 <= got["training/rollout_actor_probs_pearson_corr"] <= 1.0
    w = np.exp(train - rollout)
    assert got["is_ratio/q0.5"] == pytest.approx(float(np.median(w)))


def test_no_name_of_a_corrected_ratio_holds_the_raw_ratio():
    """TRL's sampling/importance_sampling_ratio/* are of its corrected (truncated or masked)
    ratio; a log's raw w goes under is_ratio/*, and TRL's names live in the weight
    diagnostics of an estimator (evidence.framework_weights)."""
    lw = np.log(np.array([0.5, 1.0, 4.0]))
    got = framework_metrics(lw, np.zeros(3), np.array([0, 0, 1]))
    assert not any(k.startswith("sampling/importance_sampling_ratio/") for k in got)
    assert (got["is_ratio/min"], got["is_ratio/max"]) == pytest.approx((0.5, 4.0))
    assert got["is_ratio/mean"] == pytest.approx(5.5 / 3)


def test_framework_metrics_empty_and_sequence_labels():
    assert framework_metrics(np.zeros(0), np.zeros(0), np.zeros(0, int)) == {}
    train, rollout, seq = _log(3)
    relabelled = framework_metrics(train, rollout, seq * 7 + 100)
    assert relabelled == framework_metrics(train, rollout, seq)


def test_verl_counts_sequences_whose_response_mask_is_all_zero():
    # verl's masked mean of an empty row is 0/(0 + 1e-8) = 0: such a sequence enters its
    # per-sequence means with log PPL 0 on both sides; slime's per-sample mean leaves it out
    train, rollout, seq = _log(4)
    total = int(seq.max()) + 1
    shifted = np.where(seq >= 2, seq + 1, seq)  # sequence 2 of total + 1 has no token
    with_empty = framework_metrics(train, rollout, shifted, sequences=total + 1)
    without = framework_metrics(train, rollout, seq)
    k = total + 1
    for name in ("training_log_ppl", "rollout_log_ppl", "log_ppl_diff", "log_ppl_abs_diff"):
        key = f"rollout_corr/{name}"
        assert with_empty[key] == pytest.approx(without[key] * total / k, rel=1e-12), key
    for name in ("training_ppl", "rollout_ppl", "ppl_ratio"):  # the empty one adds e^0 = 1
        key = f"rollout_corr/{name}"
        assert with_empty[key] == pytest.approx((without[key] * total + 1) / k, rel=1e-12), key
    chi2 = without["rollout_corr/chi2_seq"]
    assert with_empty["rollout_corr/chi2_seq"] == pytest.approx(((chi2 + 1) * total + 1) / k - 1)
    assert with_empty["rollout_corr/log_ppl_diff_max"] == max(
        without["rollout_corr/log_ppl_diff_max"], 0.0
    )
    assert with_empty["rollout_corr/log_ppl_diff_min"] == min(
        without["rollout_corr/log_ppl_diff_min"], 0.0
    )
    key = "train_rollout_logprob_abs_diff"  # slime: the sequences with tokens only
    assert with_empty[key] == without[key]
    with pytest.raises(ValueError, match="must lie in"):
        framework_metrics(train, rollout, shifted, sequences=total)


@examples(60)
@given(
    st.lists(
        st.tuples(st.floats(-30, 0, allow_nan=False), st.floats(-30, 0, allow_nan=False)),
        min_size=2,
        max_size=50,
    )
)
def test_k3_and_chi2_are_well_defined(pairs):
    train = np.array([p[0] for p in pairs])
    rollout = np.array([p[1] for p in pairs])
    m = token_metrics(train, rollout)
    assert (m["k3"] >= 0).all()
    assert (m["chi2"] >= -1).all()
    f = framework_metrics(train, rollout, np.zeros(train.size, int))
    assert f["rollout_corr/k3_kl"] >= 0
    assert f["token_mult_prob_error"] >= 1


def test_shift_detected_under_top_p_truncation():
    rng = np.random.default_rng(0)
    n = 4000
    train = -rng.exponential(1.0, n)
    log_s = np.log(rng.uniform(0.85, 0.99, n))  # kept mass S per token
    kernel = rng.normal(0, 0.002, n)
    rollout = np.minimum(train + kernel - log_s, 0.0)  # processed: renormalised by S
    shift = support_shift(train, rollout)
    assert shift.detected
    assert shift.positive_share > 0.95
    assert shift.median_shift == pytest.approx(float(np.median(-log_s)), abs=0.01)
    d = shift.as_dict()
    assert d["estimated_log_kept_mass"] == pytest.approx(-shift.median_shift)


def test_no_shift_for_pure_kernel_noise():
    rng = np.random.default_rng(1)
    train = -rng.exponential(1.0, 4000)
    rollout = np.minimum(train + rng.normal(0, 0.01, 4000), 0)
    shift = support_shift(train, rollout)
    assert not shift.detected
    assert abs(shift.sign_test_z) < 5


def test_shift_reports_logged_kept_mass():
    train = np.array([-1.0, -2.0, -0.5])
    rollout = np.array([-0.9, -1.9, 0.0])
    kept = np.array([-0.1, np.nan, -0.5])
    shift = support_shift(train, rollout, kept)
    assert shift.kept_mass_logged == 2
    assert shift.mean_log_kept_mass == pytest.approx(-0.3)
    assert shift.zero_rollout_logprob == 1
    assert support_shift(np.zeros(0), np.zeros(0)).tokens == 0
