"""Sampled-token metrics of a log, per token and under the names RL frameworks log them.

A log carries, per generated token y, the training kernel's log-probability ℓ = log π(y) and
the inference kernel's ℓ' = log π'(y) (the token was sampled from π'). Per token:

- ``log_ratio`` = ℓ − ℓ' = log w, w = π(y)/π'(y) the importance ratio of DESIGN §1;
- ``abs_log_ratio`` = |ℓ − ℓ'|;
- ``ratio`` = w;
- ``k3`` = w − 1 − log w ≥ 0, whose mean over y ~ π' estimates KL(π' ‖ π) without bias;
- ``chi2`` = w² − 1, whose mean over y ~ π' estimates χ²(π ‖ π');
- ``prob_diff`` = |π(y) − π'(y)|.

``framework_metrics`` aggregates them exactly as the frameworks do (docs/evidence-schema.md
gives each formula and the version it was matched against), so the numbers line up with a
user's dashboard.

References:
    Schulman, "Approximating KL divergence" (2020 note): the k3 estimator.
"""

from __future__ import annotations

import math

import numpy as np
from jaxtyping import Float, Int

__all__ = ["IS_RATIO_QUANTILES", "SAFETY_BOUND", "framework_metrics", "token_metrics"]

# verl clamps log w to ±20 before exponentiating in its χ² metrics.
SAFETY_BOUND = 20.0
IS_RATIO_QUANTILES = (0.001, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999)


def token_metrics(
    train_logprob: Float[np.ndarray, " tokens"], rollout_logprob: Float[np.ndarray, " tokens"]
) -> dict[str, Float[np.ndarray, " tokens"]]:
    """The per-token sampled-token metrics (see the module docstring), float64."""
    lt = np.asarray(train_logprob, dtype=np.float64)
    lr = np.asarray(rollout_logprob, dtype=np.float64)
    log_w = lt - lr
    w = np.exp(log_w)
    return {
        "log_ratio": log_w,
        "abs_log_ratio": np.abs(log_w),
        "ratio": w,
        "k3": np.expm1(log_w) - log_w,
        "chi2": np.expm1(2.0 * log_w),
        "prob_diff": np.abs(np.exp(lt) - np.exp(lr)),
    }


def _segment_sums(values: np.ndarray, sequence: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(sequence, weights=values, minlength=n)


def framework_metrics(
    train_logprob: Float[np.ndarray, " tokens"],
    rollout_logprob: Float[np.ndarray, " tokens"],
    sequence: Int[np.ndarray, " tokens"],
    *,
    sequences: int | None = None,
) -> dict[str, float]:
    """Aggregates under the names verl, NeMo-RL, slime and TRL log; ``{}`` for no tokens.

    ``sequence`` numbers each token's sequence; padding is already removed. With
    ``sequences`` (the number of sequences the log holds, those whose response mask is all
    zero included; ``sequence`` then lies in 0 … sequences − 1), verl's per-sequence means
    (``rollout_corr/*``) count the empty sequences as verl does: its masked mean of an empty
    row is 0/(0 + 1e-8) = 0, so such a sequence has mean log-prob 0 on both sides (log PPL 0,
    PPL 1, log-PPL difference 0, χ² term 0). The other frameworks' per-sequence means keep
    the sequences that have tokens. An aggregate that is undefined (the standard deviation of
    one token) or overflows a double (the ratio of a log-prob gap in the hundreds) is left
    out: every value is finite.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        out = _aggregates(train_logprob, rollout_logprob, sequence, sequences)
    return {k: v for k, v in out.items() if math.isfinite(v)}


def _verl_sequence_means(lt, lr, log_w, seq, total: int) -> dict[str, np.ndarray]:
    """Per-sequence masked means and sums as verl forms them, empty sequences included."""
    count = np.bincount(seq, minlength=total).astype(np.float64)
    empty = count == 0  # verl's 1e-8 in the denominator is left out where there are tokens
    mean_t = np.divide(_segment_sums(lt, seq, total), count, out=np.zeros(total), where=~empty)
    mean_r = np.divide(_segment_sums(lr, seq, total), count, out=np.zeros(total), where=~empty)
    return {"mean_t": mean_t, "mean_r": mean_r, "sum_lw": _segment_sums(log_w, seq, total)}


def _aggregates(train_logprob, rollout_logprob, sequence, sequences) -> dict[str, float]:
    lt = np.asarray(train_logprob, dtype=np.float64)
    lr = np.asarray(rollout_logprob, dtype=np.float64)
    n = lt.shape[0]
    if n == 0:
        return {}
    raw = np.asarray(sequence, dtype=np.int64)
    _, seq = np.unique(raw, return_inverse=True)
    s = int(seq.max()) + 1
    lengths = np.bincount(seq, minlength=s).astype(np.float64)
    log_w = lt - lr
    abs_lw = np.abs(log_w)
    pt, pr = np.exp(lt), np.exp(lr)
    diff = np.abs(pr - pt)
    clamped = np.clip(log_w, -SAFETY_BOUND, SAFETY_BOUND)
    w = np.exp(log_w)
    out: dict[str, float] = {}
    # verl: training/rollout_probs_diff_* (torch.std is the unbiased n−1 estimator)
    out["training/rollout_probs_diff_max"] = float(diff.max())
    out["training/rollout_probs_diff_mean"] = float(diff.mean())
    if n > 1:
        out["training/rollout_probs_diff_std"] = float(diff.std(ddof=1))
    if n > 1 and pt.std() > 0 and pr.std() > 0:
        out["training/rollout_actor_probs_pearson_corr"] = float(np.corrcoef(pr, pt)[0, 1])
    # verl: rollout_corr/* off-policy diagnostics, per sequence as verl counts them
    if sequences is None:
        v = _verl_sequence_means(lt, lr, log_w, seq, s)
    else:
        if raw.min() < 0 or raw.max() >= sequences:
            raise ValueError(f"sequence ids must lie in [0, {sequences}) when sequences is given")
        v = _verl_sequence_means(lt, lr, log_w, raw, int(sequences))
    log_ppl_diff = v["mean_r"] - v["mean_t"]
    out["rollout_corr/kl"] = float(np.mean(lr - lt))
    out["rollout_corr/k3_kl"] = float(np.mean(np.expm1(log_w) - log_w))
    out["rollout_corr/chi2_token"] = float(np.mean(np.exp(2.0 * clamped)) - 1.0)
    seq_sum = np.clip(v["sum_lw"], -SAFETY_BOUND, SAFETY_BOUND)
    out["rollout_corr/chi2_seq"] = float(np.mean(np.exp(2.0 * seq_sum)) - 1.0)
    out["rollout_corr/training_ppl"] = float(np.mean(np.exp(-v["mean_t"])))
    out["rollout_corr/training_log_ppl"] = float(np.mean(-v["mean_t"]))
    out["rollout_corr/rollout_ppl"] = float(np.mean(np.exp(-v["mean_r"])))
    out["rollout_corr/rollout_log_ppl"] = float(np.mean(-v["mean_r"]))
    out["rollout_corr/log_ppl_diff"] = float(np.mean(log_ppl_diff))
    out["rollout_corr/log_ppl_abs_diff"] = float(np.mean(np.abs(log_ppl_diff)))
    out["rollout_corr/log_ppl_diff_max"] = float(np.max(log_ppl_diff))
    out["rollout_corr/log_ppl_diff_min"] = float(np.min(log_ppl_diff))
    out["rollout_corr/ppl_ratio"] = float(np.mean(np.exp(log_ppl_diff)))
    # NeMo-RL: token_mult_prob_error = token mean of exp(|ℓ' − ℓ|)
    out["token_mult_prob_error"] = float(np.mean(np.exp(abs_lw)))
    # slime: mean over samples of each sample's token mean of |ℓ − ℓ'|
    out["train_rollout_logprob_abs_diff"] = float(np.mean(_segment_sums(abs_lw, seq, s) / lengths))
    # TRL: sampling/sampling_logp_difference/* (its sampling/importance_sampling_ratio/* are
    # of its corrected ratio: evidence.framework_weights, per estimator)
    out["sampling/sampling_logp_difference/mean"] = float(abs_lw.mean())
    out["sampling/sampling_logp_difference/max"] = float(abs_lw.max())
    # the raw ratio w: extremes, mean and quantiles (numpy's default linear interpolation)
    out["is_ratio/min"] = float(w.min())
    out["is_ratio/mean"] = float(w.mean())
    out["is_ratio/max"] = float(w.max())
    for q, v in zip(IS_RATIO_QUANTILES, np.quantile(w, IS_RATIO_QUANTILES), strict=True):
        out[f"is_ratio/q{q:g}"] = float(v)
    return out
