"""VESPO's gamma weight of the sequence ratio, anchored on the rollout (``vespo``).

Setting as for ``seq_tis``: W = Π_t w_t over a sequence of at most L tokens, E_π' W = 1, and the
estimator weighs every token's ∇log π·A by ω = φ(W) = e^λ·W^k·e^{−λW} (``kernels.rl.vespo``),
(k, λ) = (k_pos, λ_pos) where A ≥ 0 and (k_neg, λ_neg) where A < 0. The unbiased weight is W,
so with the per-sequence score norm ‖Σ_t ∇log π‖ ≤ L·G the bias is at most L·G·A·D with

    D = E_π'|φ(W) − W|,

and since the advantage's sign may differ between sequences, the worst case takes at each W
the larger of the two pairs' discrepancies. Write W = e^u, |u| ≤ R, and g(u) = log φ(e^u) − u
= λ + (k − 1)u − λe^u, so that φ(W) − W = e^u(e^{g(u)} − 1) and |φ(W) − W| ≤ e^R(e^{|g(u)|} − 1).
g is concave with g(0) = 0: above, g(u) ≤ g'(0)·u = (k − 1 − λ)u ≤ |k − 1 − λ|·R; below, a
concave function's least value on [−R, R] is at an end. Hence, for each pair,

    Γ(R) = max(|k − 1 − λ|·R, −g(R), −g(−R)),    |φ(W) − W| ≤ e^R·(e^{Γ(R)} − 1),

and D ≤ min(1 + M, max over the pairs), M = max_pairs e^{λ − k}(k/λ)^k the largest value of
φ (at W = k/λ): |φ(W) − W| ≤ φ(W) + W and E_π' W = 1. Each premise:

- |log w| ≤ r per token (a log-ratio clause, or r = s = osc/T from a logit drift): |log W| ≤
  R = L·r. Tight to first order as R → 0 where k − 1 − λ ≠ 0 (W two-point on e^{±R} with mean 1
  gives |k − 1 − λ|·R + O(R²)); a bound, never marked attained. TRL clamps each token's log
  weight and the sum to [log 1e−8, 20]: the clamps change nothing while R ≤ log 1e8, and past it
  only the cap 1 + M is used (it holds whatever W the clamps make).
- a TV premise leaves W unbounded: the cap 1 + M alone, not attained.

λ is taken at least 1e−4, as TRL does (``kernels.rl.vespo.LAMBDA_MIN``).

References:
    TRL ``GRPOTrainer.get_gamma_weights`` (``loss_type="vespo"``), huggingface/trl @ f2cd5771.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import sympy
from jaxtyping import Float

from kernel_contracts.bounds import measure
from kernel_contracts.bounds._evaluate import evaluate
from kernel_contracts.bounds.lemma import SYMBOLS, Lemma, Witness

__all__ = [
    "CLAMP_FREE",
    "VESPO_LEMMAS",
    "peak_above",
    "vespo_cap",
    "vespo_discrepancy",
    "vespo_ratio",
    "vespo_seq_law",
]

Vector = Float[np.ndarray, "vocab"]
r, L, eps = SYMBOLS["r"], SYMBOLS["L"], SYMBOLS["eps"]
G, A = SYMBOLS["G"], SYMBOLS["A"]
K_POS, LAM_POS, K_NEG, LAM_NEG = (SYMBOLS[k] for k in ("k_pos", "lam_pos", "k_neg", "lam_neg"))
CLAMP_FREE = math.log(1e8)  # |log W| up to this: TRL's clamps at [log 1e−8, 20] do nothing
LAMBDA_MIN = 1e-4  # TRL's floor of λ (kernels.rl.vespo.LAMBDA_MIN)

Pair = tuple[sympy.Expr, sympy.Expr]


# ---- forms ---------------------------------------------------------------------------------
def _gap(R: sympy.Expr, k: sympy.Expr, lam: sympy.Expr) -> sympy.Expr:
    """Γ(R) = max(|k − 1 − λ|·R, −g(R), −g(−R)), g(u) = λ + (k − 1)u − λe^u."""
    slope = k - 1 - lam
    return sympy.Max(slope * R, -slope * R, lam * sympy.exp(R) - lam - (k - 1) * R,
                     lam * sympy.exp(-R) - lam + (k - 1) * R)  # fmt: skip


def _peak(k: sympy.Expr, lam: sympy.Expr) -> sympy.Expr:
    """max_W φ(W) = e^{λ − k}(k/λ)^k, written exp(λ − k + k·log(k/λ))."""
    return sympy.exp(lam - k + k * sympy.log(k / lam))


def peak_above(k: Fraction, lam: Fraction) -> Fraction:
    """A rational at least max_W φ(W) = e^{λ − k}(k/λ)^k (50 digits, rounded up by 1e−30
    relative and to the next 1e−12 above), for the obligations: z3 decides a rational constant
    where the exp-log form of it costs its whole budget."""
    with mpmath.workdps(50):
        k_, lam_ = (
            mpmath.mpf(k.numerator) / k.denominator,
            mpmath.mpf(lam.numerator) / lam.denominator,
        )
        value = mpmath.exp(lam_ - k_ + k_ * mpmath.log(k_ / lam_)) * (1 + mpmath.mpf(10) ** -30)
        return Fraction(int(mpmath.ceil(value * 10**12)), 10**12)


def vespo_cap(pairs: tuple[Pair, Pair], peak: sympy.Expr | None = None) -> sympy.Expr:
    """D ≤ 1 + max φ over both pairs, for any law of W; ``peak``: a number at least that
    maximum (``peak_above``), else its exp-log form."""
    return 1 + (sympy.Max(*(_peak(k, lam) for k, lam in pairs)) if peak is None else peak)


def vespo_ratio(
    R: sympy.Expr, pairs: tuple[Pair, Pair], peak: sympy.Expr | None = None
) -> sympy.Expr:
    """A bound on D = E_π'|φ(W) − W| when |log W| ≤ R ≤ log 1e8: min(1 + M, max over the pairs
    of e^R·(e^{Γ(R)} − 1)) (module docstring); ``peak`` as for ``vespo_cap``."""
    each = [sympy.exp(R) * (sympy.exp(_gap(R, k, lam)) - 1) for k, lam in pairs]
    return sympy.Min(vespo_cap(pairs, peak), sympy.Max(*each))


def _phi(W, k: float, lam: float):
    """φ(W) = e^λ·W^k·e^{−λW} in float64 (numpy arrays or floats)."""
    return np.exp(lam + k * np.log(W) - lam * W)


def _worst(W, gamma: tuple[float, float, float, float]):
    """max over the two pairs of |φ(W) − W|."""
    k_pos, lam_pos, k_neg, lam_neg = gamma
    lam_pos, lam_neg = max(lam_pos, LAMBDA_MIN), max(lam_neg, LAMBDA_MIN)
    return np.maximum(np.abs(_phi(W, k_pos, lam_pos) - W), np.abs(_phi(W, k_neg, lam_neg) - W))


# ---- the measured quantities and the witnesses ---------------------------------------------
def vespo_discrepancy(
    z: Vector, z_prime: Vector, T_: float, gamma: tuple[float, float, float, float]
) -> float:
    """One-token sequences (W = w): E_π' max_pairs |φ(w) − w|, in float64."""
    q = np.exp(measure.log_softmax(z_prime, T_))
    w = np.exp(measure.log_ratio(z, z_prime, T_))
    return float(np.sum(q * _worst(w, gamma)))


def vespo_seq_law(r_: float, n: int, gamma: tuple[float, float, float, float]) -> float:
    """E_π' max_pairs |φ(W) − W| for n i.i.d. steps, each a two-point law w ∈ {e^{−r}, e^r}
    with mean 1 (π'-mass 1/(1 + e^r) on e^r): W = e^{(2j − n)r}, j binomial, in float64."""
    if r_ == 0:
        return 0.0
    q = 1 / (1 + math.exp(r_))
    j = np.arange(n + 1)
    logc = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in j])
    prob = np.exp(logc + j * math.log(q) + (n - j) * math.log1p(-q))
    return float(np.sum(prob * _worst(np.exp((2 * j - n) * r_), gamma)))


def _params(gamma) -> dict[str, float]:
    """The lemma's parameters, λ raised to 1e−4 as the rule does."""
    k_pos, lam_pos, k_neg, lam_neg = gamma
    lam_pos, lam_neg = max(lam_pos, LAMBDA_MIN), max(lam_neg, LAMBDA_MIN)
    return {"k_pos": k_pos, "lam_pos": lam_pos, "k_neg": k_neg, "lam_neg": lam_neg}


def _bound(expr: sympy.Expr, **values: float) -> float:
    names = {sym.name for sym in expr.free_symbols}
    return evaluate(expr, {k: v for k, v in {"G": 1.0, "A": 1.0, **values}.items() if k in names})


def _w_ratio(r: float, L: int, k_pos: float, lam_pos: float, k_neg: float, lam_neg: float):
    """L i.i.d. steps with w ∈ {e^{−r}, e^r}; the bias witness is L·D (score norm L·G)."""
    gamma = (k_pos, lam_pos, k_neg, lam_neg)
    params = {"r": r, "L": L, **_params(gamma)}
    got = L * vespo_seq_law(r, L, gamma)
    return Witness("pg_bias_vespo", params, got, _bound(EXPR["pg_bias_vespo"], **params),
                   {"steps": L, "w": (math.exp(-r), math.exp(r))})  # fmt: skip


def _w_cap(L: int, k_pos: float, lam_pos: float, k_neg: float, lam_neg: float) -> Witness:
    """Sequences with W = k/λ of the pair with the larger peak, and a rare one with W = b large
    (mean 1): D → 1 + M − 2k/λ as b → ∞ when k/λ < 1; at b = 1e6."""
    gamma = (k_pos, lam_pos, k_neg, lam_neg)
    params = {"L": L, **_params(gamma)}
    lam = [max(lam_pos, LAMBDA_MIN), max(lam_neg, LAMBDA_MIN)]
    peaks = [(_phi(k / m, k, m), k / m) for k, m in ((k_pos, lam[0]), (k_neg, lam[1]))]
    _, m = max(peaks)
    b = 1e6 if m < 1 else m  # m ≥ 1: a law with mean 1 and W = m needs W < 1 besides
    a = m if m < 1 else 0.5
    q = (b - 1) / (b - a) if b > a else 1.0  # π'-mass on a
    got = L * float(q * _worst(np.array(a), gamma) + (1 - q) * _worst(np.array(b), gamma))
    return Witness("pg_bias_vespo_cap", params, got, _bound(EXPR["pg_bias_vespo_cap"], **params),
                   {"W": (a, b), "mass": (q, 1 - q)})  # fmt: skip


# ---- the lemmas ----------------------------------------------------------------------------
_LGA = L * G * A
_PAIRS = ((K_POS, LAM_POS), (K_NEG, LAM_NEG))
EXPR: dict[str, sympy.Expr] = {
    "pg_bias_vespo": _LGA * vespo_ratio(L * r, _PAIRS),
    "pg_bias_vespo_cap": _LGA * vespo_cap(_PAIRS),
}

_SEQ = "per-sequence score norm ‖Σ_t ∇log π(y_t|y_<t)‖ ≤ L·G and |A| ≤ A, sequences of ≤ L tokens"
_SUPPORT = "support_overlap: π' > 0 wherever π > 0 (softmax logits are finite)"
_RULE = ("ω = φ(W) = e^λ·W^k·e^{−λW} on every token, (k, λ) by A ≥ 0 or A < 0, λ ≥ 1e−4; the "
         "rollout is the old policy (TRL's VESPO at a batch's first step)")  # fmt: skip


def _lemma(name, premises, conclusion, reference, tightness, witness) -> Lemma:
    return Lemma(name, premises, conclusion, (_SEQ, _SUPPORT, _RULE), EXPR[name], reference,
                 tightness, witness)  # fmt: skip


VESPO_LEMMAS: tuple[Lemma, ...] = (
    _lemma("pg_bias_vespo", ("|log w| ≤ r per token, L·r ≤ log 1e8",),
           "bias ≤ L·G·A·min(1 + M, max_pairs e^R(e^{Γ(R)} − 1)), R = L·r",
           "φ(W) − W = W(e^{g} − 1), g(u) = λ + (k − 1)u − λe^u concave, g(0) = 0: |g| ≤ Γ(R) "
           "on |u| ≤ R; |φ − W| ≤ φ + W ≤ M + W",
           "a bound, equal to the supremum to first order in R where k − 1 − λ ≠ 0: the gap "
           "to i.i.d. two-point steps", _w_ratio),
    _lemma("pg_bias_vespo_cap", ("any premise",), "bias ≤ L·G·A·(1 + M), M = max φ",
           "|φ(W) − W| ≤ φ(W) + W ≤ M + W and E_π' W = 1",
           "a bound, not attained: the gap to a law on k/λ and a rare large W", _w_cap),
)  # fmt: skip
