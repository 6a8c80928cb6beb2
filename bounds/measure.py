"""The true quantities the lemmas bound, computed stably in float64 from explicit instances.

These are the ground truth of the soundness tests and the "achieved" side of every witness:
softmax distributions from logits (log-sum-exp stable), total variation, KL divergence in both
directions, the importance ratio w = π/π' and its functionals, and the exact total variation
between two i.i.d. Bernoulli sequence laws (log-space binomial sums).

Notation: ``z`` are the training logits, ``z_prime`` the inference logits, π = softmax(z/T),
π' = softmax(z'/T), w = π/π'. Inference samples from π'.
"""

from __future__ import annotations

import math

import numpy as np
from jaxtyping import Float

__all__ = [
    "binomial_sequence_tv",
    "clip_share",
    "kl",
    "log_ratio",
    "log_softmax",
    "max_abs_log_ratio",
    "mis_masked_mass",
    "tis_excess",
    "tv",
]

Vector = Float[np.ndarray, "vocab"]
Counts = Float[np.ndarray, "n_plus_1"]


def log_softmax(z: Vector, temperature: float) -> Vector:
    """log softmax(z / T), stable for any finite logits."""
    x = np.asarray(z, dtype=np.float64) / temperature
    m = np.max(x)
    return x - (m + np.log(np.sum(np.exp(x - m))))


def log_ratio(z: Vector, z_prime: Vector, temperature: float) -> Vector:
    """log w(y) = log π(y) − log π'(y) for every token y."""
    return log_softmax(z, temperature) - log_softmax(z_prime, temperature)


def max_abs_log_ratio(z: Vector, z_prime: Vector, temperature: float) -> float:
    """sup_y |log w(y)| over the whole vocabulary."""
    return float(np.max(np.abs(log_ratio(z, z_prime, temperature))))


def tv(z: Vector, z_prime: Vector, temperature: float) -> float:
    """TV(π, π') = Σ_y (π'(y) − π(y))₊, summed on the side that avoids cancellation."""
    lp = log_softmax(z, temperature)
    lq = log_softmax(z_prime, temperature)
    p, q = np.exp(lp), np.exp(lq)
    # (q − p)₊ = q·(1 − e^{lp − lq})₊ computed with expm1 so tiny gaps keep their digits.
    d = lq - lp
    a = np.abs(d)
    up = np.where(d > 0, -q * np.expm1(-a), 0.0)
    down = np.where(d < 0, -p * np.expm1(-a), 0.0)
    return float(max(np.sum(up), np.sum(down)))


def kl(z: Vector, z_prime: Vector, temperature: float, reverse: bool = False) -> float:
    """KL(π ‖ π') (or KL(π' ‖ π) when ``reverse``), as Σ p·(d + e^{−d} − 1) ≥ 0 termwise."""
    lp = log_softmax(z, temperature)
    lq = log_softmax(z_prime, temperature)
    if reverse:
        lp, lq = lq, lp
    p, q = np.exp(lp), np.exp(lq)
    d = lp - lq
    # KL = Σ p·d = Σ [p·d + (q − p)] since Σ q = Σ p = 1; each bracket is ≥ 0. Near d = 0 the
    # bracket p·(d + e^{−d} − 1) is summed as its series so small gaps keep their digits.
    small = np.abs(d) < 1e-3
    ds = np.where(small, d, 0.0)
    series = p * ds * ds * (0.5 - ds / 6.0 + ds * ds / 24.0 - ds**3 / 120.0)
    a = np.abs(d)
    q_minus_p = np.where(d > 0, p * np.expm1(-a), -q * np.expm1(-a))
    general = p * d + q_minus_p
    return float(np.sum(np.where(small, series, general)))


def tis_excess(z: Vector, z_prime: Vector, temperature: float, cap: float) -> float:
    """E_{π'}[(w − c)₊] = Σ_y (π(y) − c·π'(y))₊: the per-token bias factor of truncated IS."""
    p = np.exp(log_softmax(z, temperature))
    q = np.exp(log_softmax(z_prime, temperature))
    return float(np.sum(np.maximum(p - cap * q, 0.0)))


def mis_masked_mass(z: Vector, z_prime: Vector, temperature: float, cap: float) -> float:
    """π({w > c}): the training-policy mass that masked importance sampling drops."""
    lp = log_softmax(z, temperature)
    masked = log_ratio(z, z_prime, temperature) > math.log(cap)
    return float(np.sum(np.exp(lp)[masked]))


def clip_share(z: Vector, z_prime: Vector, temperature: float, clip_epsilon: float) -> float:
    """max_y max(w − 1, 1 − w) / ε: the share of PPO's clip range the kernel pair uses."""
    w = np.exp(log_ratio(z, z_prime, temperature))
    return float(np.max(np.maximum(w - 1.0, 1.0 - w)) / clip_epsilon)


def _log_binomial_pmf(n: int, p: float) -> Counts:
    k = np.arange(n + 1, dtype=np.float64)
    log_choose = np.array(
        [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(n + 1)]
    )
    return log_choose + k * math.log(p) + (n - k) * math.log1p(-p)


def binomial_sequence_tv(p: float, p_prime: float, length: int) -> float:
    """Exact TV between L i.i.d. Bernoulli(p) steps and L i.i.d. Bernoulli(p') steps.

    The likelihood ratio of two i.i.d. sequence laws depends only on the count k of ones, so
    TV of the sequences equals TV of Binomial(L, p) and Binomial(L, p'), summed in log space.
    """
    if not (0.0 < p < 1.0 and 0.0 < p_prime < 1.0):
        raise ValueError("p and p_prime must lie strictly inside (0, 1)")
    lp = _log_binomial_pmf(length, p)
    lq = _log_binomial_pmf(length, p_prime)
    d = lq - lp
    q = np.exp(lq)
    pp = np.exp(lp)
    up = np.sum(np.where(d > 0, -q * np.expm1(-np.abs(d)), 0.0))
    down = np.sum(np.where(d < 0, -pp * np.expm1(-np.abs(d)), 0.0))
    return float(max(up, down))
