"""VESPO's gamma weight of the sequence ratio, anchored on the rollout policy (``vespo``).

VESPO (TRL ``loss_type="vespo"``, ``GRPOTrainer.get_gamma_weights``) weighs every token of a
sequence by one detached number, a gamma-shaped function of the sequence's ratio W,

    ω = φ(W) = e^λ·W^k·e^{−λW},   φ(1) = 1,

with (k, λ) = (k_pos, λ_pos) where the advantage is ≥ 0 and (k_neg, λ_neg) where it is < 0, and
λ raised to 1e−4 at least. TRL forms W in log space: the per-token log-ratio of the policy over
the trainer's old log-probs, clamped to ±20, plus the log of vLLM's per-token IS weight (after
``token_truncate`` or ``token_mask``) clamped to [log 1e−8, 20], summed over the sequence and
clamped to [log 1e−8, 20] again. At a batch's first step the policy is the old one, so the first
sum is 0 and W is the product of the trainer-over-rollout token ratios w: the kernel pair's
sequence ratio, here computed from ``log_ratio`` = log w (truncation at C_max ≥ e^20 and no
lower bound change nothing: the clamp at 20 acts first). Padding adds log 1 = 0 (TRL masks the
log-difference before taking the ratio).

φ is computed as exp(λ + k·log W − λ·W), NaN and ±inf read as 0, as TRL does.

References:
    TRL ``trl/trainer/grpo_trainer.py`` @ f2cd5771, ``get_gamma_weights`` (unchanged since v1.6).
"""

from __future__ import annotations

import math
from typing import Any

from jaxtyping import Bool, Float

# an array of either namespace (jax.numpy or numpy; this module imports no JAX)
Array = Any

__all__ = ["LAMBDA_MIN", "LOG_MAX", "LOG_MIN", "vespo_weights"]

LOG_MIN = math.log(1e-8)  # TRL's lower clamp of a token's and the sequence's log weight
LOG_MAX = 20.0  # and the upper one
LAMBDA_MIN = 1e-4  # TRL's floor of λ


def vespo_weights(
    xp,
    log_ratio: Float[Array, "batch time"],
    valid: Bool[Array, "batch time"],
    advantages: Float[Array, "batch time"],
    gamma: tuple[float, float, float, float],
) -> Float[Array, "batch time"]:
    """φ(W) on every token of each row, W = exp(clamp(Σ clamp(log w))) over the row's ``valid``
    tokens, (k, λ) of ``gamma`` = (k_pos, λ_pos, k_neg, λ_neg) chosen by each token's advantage
    (≥ 0: pos); ``xp`` is the array namespace that computes (``jax.numpy`` or ``numpy``)."""
    k_pos, lam_pos, k_neg, lam_neg = gamma
    dtype = log_ratio.dtype
    token = xp.where(valid, xp.clip(log_ratio, LOG_MIN, LOG_MAX), 0.0).astype(dtype)
    log_w = xp.clip(xp.sum(token, axis=1, keepdims=True), LOG_MIN, LOG_MAX)
    nonneg = advantages >= 0
    k = xp.where(nonneg, k_pos, k_neg).astype(dtype)
    lam = xp.where(nonneg, max(lam_pos, LAMBDA_MIN), max(lam_neg, LAMBDA_MIN)).astype(dtype)
    phi = xp.exp(lam + k * log_w - lam * xp.exp(log_w))
    return xp.where(xp.isfinite(phi), phi, 0.0).astype(dtype)
