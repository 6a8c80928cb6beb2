"""Explicit instances for the correction lemmas: the true discrepancy on logits or sequence laws.

Each function builds the pair of logits (or the sequence law pair) that attains or approaches
one supremum of ``bounds.pg.closed_forms`` and measures the true quantity on it in float64 (log
space where it matters). Notation as in ``bounds.measure``: ``z`` training logits, ``z_prime``
inference logits, π = softmax(z/T), π' = softmax(z'/T), w = π/π'.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from jaxtyping import Float

from kernel_contracts.bounds import measure
from kernel_contracts.bounds.search import golden_max
from kernel_contracts.bounds.token.lemmas import tilt_pair

__all__ = [
    "band_dropped_mass",
    "band_pair",
    "best_iid_seq_mask",
    "best_iid_seq_tis",
    "dppo_dropped_mass",
    "geo_dropped_mass",
    "iid_excess",
    "iid_seq_mask_dropped",
    "iid_seq_tis_excess",
    "low_pair",
    "raised_pair",
    "ratio_band_laws",
    "seq_is_bias",
    "tis_mask_discrepancy",
    "tv_band_laws",
]

Vector = Float[np.ndarray, "vocab"]


def band_dropped_mass(z: Vector, z_prime: Vector, T: float, lo: float, hi: float) -> float:
    """π(w < lo or w > hi): the training mass a ratio-band mask drops (lo = 0: no lower end)."""
    lw = measure.log_ratio(z, z_prime, T)
    dropped = lw > math.log(hi)
    if lo > 0:
        dropped |= lw < math.log(lo)
    return float(np.sum(np.exp(measure.log_softmax(z, T))[dropped]))


def geo_dropped_mass(
    z: Vector, z_prime: Vector, T: float, lo: float, hi: float, others: float, n: int
) -> float:
    """π(dropped) at one position of a sequence of n tokens whose other n − 1 log ratios sum to
    ``others``: the sequence is dropped when (others + log w(y))/n lies outside [log lo, log hi]."""
    g = (others + measure.log_ratio(z, z_prime, T)) / n
    dropped = g > math.log(hi)
    if lo > 0:
        dropped |= g < math.log(lo)
    return float(np.sum(np.exp(measure.log_softmax(z, T))[dropped]))


def dppo_dropped_mass(z: Vector, z_prime: Vector, T: float, tau: float, kind: str) -> float:
    """π(dropped) under DPPO's sign-aware binary mask (``kind`` "tv" or "kl") when the
    advantage takes, per token, the sign that drops it where any sign can: a token is dropped
    when π(y) > π'(y) with A > 0, or π(y) < π'(y) with A < 0, and its binary divergence
    (|π(y) − π'(y)|, or the KL of Bernoulli(π'(y)) to Bernoulli(π(y))) exceeds τ."""
    lp, lq = measure.log_softmax(z, T), measure.log_softmax(z_prime, T)
    p, q = np.exp(lp), np.exp(lq)
    with np.errstate(invalid="ignore", divide="ignore"):  # p = q = 1: NaN, never above τ
        binary_kl = q * (lq - lp) + (1 - q) * (np.log1p(-q) - np.log1p(-p))
    div = np.abs(p - q) if kind == "tv" else binary_kl
    return float(np.sum(p[(p != q) & (div > tau)]))


def tis_mask_discrepancy(
    z: Vector, z_prime: Vector, T: float, cap: float, lo: float, hi: float
) -> float:
    """E_π'|ω − w| for ω = min(w, c)·1[lo ≤ w ≤ hi]: Σ π'·(w on dropped tokens, (w − c)₊ on
    kept ones), in float64."""
    lw = measure.log_ratio(z, z_prime, T)
    q = np.exp(measure.log_softmax(z_prime, T))
    w = np.exp(lw)
    kept = (lw <= math.log(hi)) & ((lw >= math.log(lo)) if lo > 0 else True)
    return float(np.sum(q * np.where(kept, np.maximum(w - cap, 0.0), w)))


def iid_seq_mask_dropped(p_plus: float, q_plus: float, L: int, lo: float, hi: float) -> float:
    """π_L(W ∉ [lo, hi]) for L i.i.d. two-token steps with π(+) = p, π'(+) = q (W depends only
    on the count k of +, k ∼ Binomial(L, p) under π)."""
    k = np.arange(L + 1, dtype=np.float64)
    log_w = k * (math.log(p_plus) - math.log(q_plus))
    log_w += (L - k) * (math.log1p(-p_plus) - math.log1p(-q_plus))
    dropped = log_w > math.log(hi)
    if lo > 0:
        dropped |= log_w < math.log(lo)
    return float(np.sum(np.exp(_log_binomial(L, p_plus))[dropped]))


def best_iid_seq_mask(s: float, L: int, lo: float, hi: float) -> tuple[float, float]:
    """(q, π_L(W ∉ [lo, hi])): the best i.i.d. tilt step (π'(+) = q, π tilted by e^s on +)
    found on a grid of logit(q)."""
    if s == 0.0:
        return 0.5, 0.0
    best = (0.5, 0.0)
    for t in np.linspace(-30.0, 30.0, 241):
        q = 1.0 / (1.0 + math.exp(t))
        p = q * math.exp(s - math.log1p(q * math.expm1(s)))
        if 0.0 < p < 1.0 and 0.0 < q < 1.0:
            got = iid_seq_mask_dropped(p, q, L, lo, hi)
            best = max(best, (q, got), key=lambda x: x[1])
    return best


def raised_pair(q: float, s: float, T: float) -> tuple[Vector, Vector]:
    """Two tokens, π'(0) = q, and π = π' tilted by e^s on token 0 (w(0) = e^s/m, w(1) = 1/m)."""
    zp = T * np.array([math.log(q), math.log1p(-q)])
    return zp + np.array([T * s, 0.0]), zp


def low_pair(s: float, T: float, eta: float = 1e-12) -> tuple[Vector, Vector, float]:
    """A pair whose token 1 has log w within η·s of −s (π' keeps almost everything on token 0,
    which the tilt raises); returns (z, z', log w(1))."""
    z, zp = raised_pair(1.0 - eta, s, T)
    return z, zp, float(measure.log_ratio(z, zp, T)[1])


def band_pair(s: float, T: float, lo: float, hi: float) -> tuple[Vector, Vector]:
    """The two-token pair of tilt range s that drops the most π-mass under the band [lo, hi]."""
    x = math.exp(s)
    if lo > 0 and x > hi / lo:  # both sides: choose m strictly inside (1/lo, x/hi)
        m = math.sqrt(x / (hi * lo))
        return raised_pair((m - 1) / math.expm1(s), s, T)
    upper = max(x - hi, 0.0)
    lower = max(lo * x - 1, 0.0)
    if upper == 0.0 and lower == 0.0:
        return raised_pair(0.5, s, T)
    if upper >= lower:  # w ↓ hi on the raised token
        return raised_pair((x / hi - 1) / math.expm1(s) * (1 - 1e-9), s, T)
    # w ↑ lo on the other token: π'(raised) just above (1/lo − 1)/(e^s − 1)
    return raised_pair((1 / lo - 1) / math.expm1(s) * (1 + 1e-9), s, T)


def _log_binomial(L: int, q: float) -> np.ndarray:
    k = np.arange(L + 1, dtype=np.float64)
    choose = np.array([math.lgamma(L + 1) - math.lgamma(i + 1) - math.lgamma(L - i + 1) for i in k])
    return choose + k * math.log(q) + (L - k) * math.log1p(-q)


def iid_excess(p_plus: float, q_plus: float, L: int, cap: float) -> float:
    """E_π'(W − c)₊ for L i.i.d. two-token steps with π(+) = p, π'(+) = q: W depends only on the
    count k of + (k ∼ Binomial(L, q) under π'), summed exactly in log space."""
    k = np.arange(L + 1, dtype=np.float64)
    log_w = k * (math.log(p_plus) - math.log(q_plus))
    log_w += (L - k) * (math.log1p(-p_plus) - math.log1p(-q_plus))
    mass = np.exp(_log_binomial(L, q_plus) + log_w)  # π'(k)·W_k = π(k)
    if cap == 0:
        return float(np.sum(mass))
    gap = np.minimum(math.log(cap) - log_w, 700.0)  # (1 − c/W)₊ = 0 once c/W > e^700
    return float(np.sum(mass * np.maximum(-np.expm1(gap), 0.0)))


def iid_seq_tis_excess(q: float, s: float, L: int, cap: float) -> float:
    """``iid_excess`` for the tilt step: π'(+) = q and π = π' tilted by e^s on +."""
    p = q * math.exp(s - math.log1p(q * math.expm1(s)))
    return iid_excess(p, q, L, cap)


def best_iid_seq_tis(s: float, L: int, cap: float) -> tuple[float, float]:
    """(q, E_π'(W − c)₊): the best i.i.d. two-point instance found by a grid on logit(q) and a
    golden-section refinement around the best grid point."""
    if s == 0.0:
        return 0.5, max(1.0 - cap, 0.0)

    def value(t: float) -> float:
        return iid_seq_tis_excess(1.0 / (1.0 + math.exp(t)), s, L, cap)

    t, best = golden_max(value, np.linspace(-30.0, 30.0, 121), 50)
    return 1.0 / (1.0 + math.exp(t)), best


SEQ_IS_DEPTH = 8  # sequences enumerated by ``seq_is_bias``: 2**depth of them


def seq_is_bias(s: float, L: int, seed: int = 0) -> float:
    """‖E_π'[W·g] − E_π[g]‖ for random autoregressive laws (vocabulary 2, a tilt of range s at
    every prefix) and random per-sequence vectors g, by enumerating all sequences.

    The laws have length min(L, ``SEQ_IS_DEPTH``) (a law of shorter sequences is one of length
    at most L, which is what the lemma quantifies over) and are exact rationals: every
    conditional probability is the float64 value of the tilted softmax read exactly, and the
    sums are taken in rational arithmetic, so a nonzero result would be a true bias, not
    rounding.
    """
    rng = np.random.default_rng(seed)
    # (π(y), π'(y), W(y)) with W the estimator's product of per-token ratios π(y_t)/π'(y_t)
    seqs = [(Fraction(1), Fraction(1), Fraction(1))]
    for _ in range(min(L, SEQ_IS_DEPTH)):
        grown = []
        for p, q, w in seqs:
            z, zp = tilt_pair(float(rng.uniform(0.05, 0.95)), s * rng.uniform(0, 1), 1.0)
            a = Fraction(float(np.exp(measure.log_softmax(z, 1.0)[0])))
            b = Fraction(float(np.exp(measure.log_softmax(zp, 1.0)[0])))
            grown += [(p * a, q * b, w * a / b), (p * (1 - a), q * (1 - b), w * (1 - a) / (1 - b))]
        seqs = grown
    g = [[Fraction(float(v)) for v in row] for row in rng.normal(size=(len(seqs), 3))]
    pairs = list(zip(seqs, g, strict=True))
    diff = [  # E_π'[W·g] − E_π[g], coordinate k
        sum((q * w * row[k] - p * row[k] for (p, q, w), row in pairs), Fraction(0))
        for k in range(3)
    ]
    return math.sqrt(float(sum(d * d for d in diff)))


def ratio_band_laws(r: float, lo: float, hi: float) -> tuple[list[float], list[float]]:
    """(π, π') on two tokens with |log w| ≤ r dropping the most π-mass under [lo, hi]."""
    x, y = math.exp(r), math.exp(-r)
    if x > hi and lo > 0 and y < lo:  # w = e^{±r}: both atoms outside the band
        q = (1 - y) / (x - y)
        return [x * q, y * (1 - q)], [q, 1 - q]
    if x > hi:  # w just above hi on B, e^{−r} elsewhere
        wb = hi * (1 + 1e-9)
        q = (1 - y) / (wb - y)
        return [wb * q, y * (1 - q)], [q, 1 - q]
    if lo > 0 and y < lo:  # w just below lo on B, e^{r} elsewhere
        wb = lo * (1 - 1e-9)
        q = (x - 1) / (x - wb)
        return [wb * q, x * (1 - q)], [q, 1 - q]
    return [0.5, 0.5], [0.5, 0.5]


def tv_band_laws(eps: float, lo: float, hi: float, eta: float = 1e-9):
    """Laws with TV ≤ ε dropping the most: w just outside the band on both sides, w ≈ 1 else."""
    lo_w = lo * (1 - eta) if lo > 0 else 1e-12
    k = 1 / (hi - 1) + 1 / (1 - lo)
    t = eps / (1 + hi * eta / (hi - 1))
    if t * k <= 1:
        qu, qd = t / (hi - 1), t / (1 - lo)
        pu, pd = hi * (1 + eta) * qu, lo_w * qd
        return [pu, pd, 1 - pu - pd], [qu, qd, 1 - qu - qd]
    wu = hi * (1 + eta)  # everything outside: two atoms with mean ratio 1
    qu = (1 - lo_w) / (wu - lo_w)
    return [wu * qu, lo_w * (1 - qu)], [qu, 1 - qu]
