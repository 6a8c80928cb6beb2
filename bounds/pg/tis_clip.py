"""Truncated importance sampling with a floor (``tis_clip``): ω = clip(w, lo, hi).

Setting as in ``bounds.pg.closed_forms``: w = π/π', bias ≤ G·A·D with D = E_π'|ω − w|. For
0 ≤ lo < 1 < hi the discrepancy of one token is φ(w) = (w − hi)₊ + (lo − w)₊, convex in w, and
E_π' w = 1. Each premise's supremum of E_π' φ(w):

- log ratio |log w| ≤ r: a convex φ on [e^{−r}, e^r] with a fixed mean is largest on the two
  ends (weights 1/(1 + e^r) on e^r, e^r/(1 + e^r) on e^{−r}):
  D_r = ((e^r − hi)₊ + (lo·e^r − 1)₊)/(1 + e^r), attained by two tokens.
- tilt of range s (a logit drift): w = u/m with u = e^x ∈ [1, e^s] and m = E_π' u. For a fixed
  m, u ↦ φ(u/m) is convex, so the two-point law on {1, e^s} (π'-mass q = (m − 1)/(e^s − 1) on
  e^s) is extremal, and D(m) = q·(e^s/m − hi)₊ + (1 − q)·(lo − 1/m)₊. With
  g_T(m) = q·(e^s/m − hi) and g_F(m) = (1 − q)·(lo − 1/m), D = max(0, g_T, g_F, g_T + g_F),
  and each of the three is concave in m: its maximum over [1, e^s] is at its stationary point
  clamped to [1, e^s] (√(e^s/hi), √(e^s/lo), √(2e^s/(hi + lo))). The first gives TIS's form
  (e^{s/2} − √hi)₊²/(e^s − 1), the second (√lo·e^{s/2} − 1)₊²/(e^s − 1), the third
  ((1 + lo)e^s + hi + 1 − (hi + lo)m − 2e^s/m)/(e^s − 1) at the clamped m. The supremum is
  the largest of the three, attained by two tokens.
- P(drift > level) ≤ ρ (a statistical clause), in expectation over positions:
  (1 − ρ)·D(level) + ρ·(1 + lo), a position past the level costing at most (1 + lo)·TV.
- TV ≤ ε: (w − hi)₊ ≤ (w − 1)₊ and (lo − w)₊ ≤ lo·(1 − w)₊, whose means are both the TV:
  D_tv = (1 + lo)·ε, approached (π' puts ε on a token π almost never takes, π puts ε on a token
  π' almost never samples).

lo = 0 is TIS at cap hi. The clamp has no threshold a token can sit on (``kernels.rl.ties``:
the same number whichever end wins), so no tie rule changes these bounds.

References:
    Espeholt et al., "IMPALA" (2018) — truncated importance sampling.
    Madansky, "Bounds on the expectation of a convex function of a multivariate random
    variable" (1959) — a convex function's mean is largest on the extreme points.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import sympy
from jaxtyping import Float

from kernel_contracts.bounds import measure
from kernel_contracts.bounds._evaluate import evaluate
from kernel_contracts.bounds.lemma import SYMBOLS, Lemma, Witness
from kernel_contracts.bounds.pg.closed_forms import Num
from kernel_contracts.bounds.pg.witnesses import raised_pair

__all__ = [
    "TIS_CLIP_LEMMAS",
    "clip_discrepancy",
    "clip_drift",
    "clip_ratio",
    "clip_sup",
    "clip_tv",
]

Vector = Float[np.ndarray, "vocab"]
_S = SYMBOLS
osc, T, r, eps, rho = _S["osc"], _S["T"], _S["r"], _S["eps"], _S["rho"]
lo, hi, G, A = _S["lo"], _S["hi"], _S["G"], _S["A"]


# ---- forms ---------------------------------------------------------------------------------
def clip_drift(s: sympy.Expr, low: sympy.Expr | int, high: sympy.Expr) -> sympy.Expr:
    """sup E_π'|clip(w, lo, hi) − w| over tilts of range s (the module's second item).

    Each denominator is written max(e^s − 1, k) with k > 0 below which the numerator is 0:
    (√lo·e^{s/2} − 1)₊ > 0 needs e^s > 1/lo, and g_T + g_F > 0 needs g_T > 0 (e^s > hi) or
    g_F > 0 (e^s > 1/lo); so the forms have no 0/0 at s = 0."""
    half = sympy.exp(s / 2)  # e^s is written half², one function for the solver
    top = sympy.Max(half - sympy.sqrt(high), 0) ** 2 / sympy.Max(half**2 - 1, high - 1)
    if low == 0:
        return top
    floor = sympy.Max(sympy.sqrt(low) * half - 1, 0) ** 2 / sympy.Max(half**2 - 1, 1 / low - 1)
    # g_T + g_F at its stationary point m = κ·e^{s/2}, κ = √(2/(hi + lo)), written in
    # h = e^{s/2}: ((1 + lo)h² − 2√(2(hi + lo))·h + hi + 1)/(h² − 1). The point lies in [1, e^s]
    # iff h ≥ h₀ = max(κ, 1/κ); below, the clamped maximum is at m = 1 or e^s, where the piece
    # is lo − 1 or 1 − hi < 0, so h is raised to h₀, where the numerator is that negative value
    # times (h₀² − 1): the piece is 0 there, as the clamped one, and exact from h₀ on.
    kappa = sympy.sqrt(2 / (high + low))
    h = sympy.Max(half, kappa, 1 / kappa)
    num = (1 + low) * h**2 - 2 * sympy.sqrt(2 * (high + low)) * h + high + 1
    both = sympy.Max(num, 0) / sympy.Max(h**2 - 1, sympy.Min(high, 1 / low) - 1)
    return sympy.Max(top, floor, both)


def clip_ratio(r_: sympy.Expr, low: sympy.Expr | int, high: sympy.Expr) -> sympy.Expr:
    """sup E_π'|clip(w, lo, hi) − w| when |log w| ≤ r: ((e^r − hi)₊ + (lo·e^r − 1)₊)/(1 + e^r)."""
    x = sympy.exp(r_)
    upper = sympy.Max(x - high, 0)
    lower = 0 if low == 0 else sympy.Max(low * x - 1, 0)
    return (upper + lower) / (1 + x)


def clip_tv(eps_: sympy.Expr, low: sympy.Expr | int) -> sympy.Expr:
    """sup E_π'|clip(w, lo, hi) − w| when TV ≤ ε: (1 + lo)·ε (approached, for every hi > 1)."""
    return (1 + low) * eps_


def clip_sup(s: Num, low: Num, high: Num) -> mpmath.mpf:
    """The exact supremum over tilts of range ``s``, computed from D(m) itself at the three
    clamped stationary points (not from the closed form), at mpmath's precision."""
    s, low, high = mpmath.mpf(s), mpmath.mpf(low), mpmath.mpf(high)
    if s == 0:
        return mpmath.mpf(0)
    e = mpmath.exp(s)

    def d(m):
        q = (m - 1) / (e - 1)
        return q * max(e / m - high, 0) + (1 - q) * max(low - 1 / m, 0)

    stationary = [mpmath.sqrt(e / high), mpmath.sqrt(2 * e / (high + low))]
    if low > 0:
        stationary.append(mpmath.sqrt(e / low))
    return max(d(min(e, max(mpmath.mpf(1), m))) for m in stationary)


# ---- the measured quantity and the witnesses ------------------------------------------------
def clip_discrepancy(z: Vector, z_prime: Vector, T_: float, low: float, high: float) -> float:
    """E_π'|clip(w, lo, hi) − w| = Σ_y (π(y) − hi·π'(y))₊ + (lo·π'(y) − π(y))₊, in float64."""
    p = np.exp(measure.log_softmax(z, T_))
    q = np.exp(measure.log_softmax(z_prime, T_))
    return float(np.sum(np.maximum(p - high * q, 0.0) + np.maximum(low * q - p, 0.0)))


def _bound(expr: sympy.Expr, **values: float) -> float:
    names = {sym.name for sym in expr.free_symbols}
    return evaluate(expr, {k: v for k, v in {"G": 1.0, "A": 1.0, **values}.items() if k in names})


def _expr(name: str, low: float) -> sympy.Expr:
    return (EXPR_NO_LOWER if low == 0 else EXPR)[name]


def _w_drift(osc: float, T: float, lo: float, hi: float) -> Witness:
    """Two tokens, π'-mass q on the raised one, q at the best of the three stationary points."""
    sv = osc / T
    params = {"osc": osc, "T": T, "lo": lo, "hi": hi}
    bound = _bound(_expr("pg_bias_tis_clip", lo), **params)
    if sv == 0:
        z = np.zeros(2)
        return Witness("pg_bias_tis_clip", params, 0.0, bound, {"z": z, "z_prime": z})
    e = math.exp(sv)
    stationary = [math.sqrt(e / hi), math.sqrt(2 * e / (hi + lo))]
    stationary += [math.sqrt(e / lo)] if lo > 0 else []
    best = (-1.0, None)
    for m in stationary:
        q = min(max((min(e, max(1.0, m)) - 1) / math.expm1(sv), 1e-300), 1 - 1e-16)
        z, zp = raised_pair(q, sv, T)
        got = clip_discrepancy(z, zp, T, lo, hi)
        best = max(best, (got, (z, zp)), key=lambda t: t[0])
    achieved, (z, zp) = best
    return Witness("pg_bias_tis_clip", params, achieved, bound, {"z": z, "z_prime": zp})


def _w_ratio(r: float, lo: float, hi: float) -> Witness:
    """Two tokens with w = e^{±r}: π' = (1, e^r)/(1 + e^r), π = (e^r, 1)/(1 + e^r)."""
    x = math.exp(r)
    z = np.log(np.array([x / (1 + x), 1 / (1 + x)]))
    zp = np.log(np.array([1 / (1 + x), x / (1 + x)]))
    params = {"r": r, "lo": lo, "hi": hi}
    bound = _bound(_expr("pg_bias_tis_clip_ratio", lo), **params)
    got = clip_discrepancy(z, zp, 1.0, lo, hi)
    return Witness("pg_bias_tis_clip_ratio", params, got, bound, {"z": z, "z_prime": zp})


def _w_tv(eps: float, lo: float, hi: float, eta: float = 1e-12) -> Witness:
    """π' puts ε on a token π keeps η·ε of (w → 0); π puts ε on one π' samples with η·ε
    (w → ∞); the rest is shared: E_π'|ω − w| → (1 + lo)·ε as η → 0."""
    a = eta * eps
    p = np.array([a, eps, 1 - eps - a])
    q = np.array([eps, a, 1 - eps - a])
    z, zp = np.log(p), np.log(q)
    params = {"eps": eps, "lo": lo, "hi": hi}
    bound = _bound(_expr("pg_bias_tis_clip_tv", lo), **params)
    got = clip_discrepancy(z, zp, 1.0, lo, hi)
    return Witness("pg_bias_tis_clip_tv", params, got, bound, {"z": z, "z_prime": zp})


# ---- the lemmas ----------------------------------------------------------------------------
_GA = G * A
EXPR: dict[str, sympy.Expr] = {
    "pg_bias_tis_clip": _GA * clip_drift(osc / T, lo, hi),
    "pg_bias_tis_clip_ratio": _GA * clip_ratio(r, lo, hi),
    "pg_bias_tis_clip_tv": _GA * clip_tv(eps, lo),
    "pg_bias_tis_clip_exceedance": _GA * ((1 - rho) * clip_drift(osc / T, lo, hi) + rho * (1 + lo)),
}
# lo = 0 (1/lo would be undefined in the general form): TIS at cap hi
EXPR_NO_LOWER: dict[str, sympy.Expr] = {
    "pg_bias_tis_clip": _GA * clip_drift(osc / T, 0, hi),
    "pg_bias_tis_clip_ratio": _GA * clip_ratio(r, 0, hi),
    "pg_bias_tis_clip_tv": _GA * clip_tv(eps, 0),
    "pg_bias_tis_clip_exceedance": _GA * ((1 - rho) * clip_drift(osc / T, 0, hi) + rho),
}

_TOK = "per-token ‖∇ log π(y)‖ ≤ G and |A(y)| ≤ A (assumptions of the guarantee)"
_SUPPORT = "support_overlap: π' > 0 wherever π > 0 (softmax logits are finite)"
_CLAMP = "0 ≤ lo < 1 < hi; ω = clip(w, lo, hi)"


def _lemma(name, premises, conclusion, assumptions, reference, tightness, witness) -> Lemma:
    return Lemma(name, premises, conclusion, assumptions, EXPR[name], reference, tightness, witness)


TIS_CLIP_LEMMAS: tuple[Lemma, ...] = (
    _lemma("pg_bias_tis_clip", ("osc(Δ) ≤ osc",),
          "bias of E_π'[clip(w, lo, hi)·g] ≤ G·A·max(T_hi, F_lo, H), the three concave pieces' "
          "maxima over m = E_π' e^x (bounds.pg.tis_clip)",
          (_TOK, _SUPPORT, _CLAMP), "φ(w) = (w − hi)₊ + (lo − w)₊ is convex: two-point laws "
          "on the tilt's ends are extremal for each m, and D(m) = max(0, g_T, g_F, g_T + g_F)",
          "attained (two tokens, at the best clamped stationary point)",
          _w_drift),
    _lemma("pg_bias_tis_clip_ratio", ("|log w| ≤ r",),
          "bias ≤ G·A·((e^r − hi)₊ + (lo·e^r − 1)₊)/(1 + e^r)", (_TOK, _SUPPORT, _CLAMP),
          "φ convex with E_π' w = 1 on [e^{−r}, e^r]: the two ends are extremal",
          "attained (two tokens with w = e^{±r})", _w_ratio),
    _lemma("pg_bias_tis_clip_tv", ("TV(π, π') ≤ ε",), "bias ≤ G·A·(1 + lo)·ε",
          (_TOK, _SUPPORT, _CLAMP),
          "(w − hi)₊ ≤ (w − 1)₊ and (lo − w)₊ ≤ lo·(1 − w)₊; E_π'(w − 1)₊ = E_π'(1 − w)₊ = TV",
          "supremum, approached (a leak each way)", _w_tv),
    _lemma("pg_bias_tis_clip_exceedance",
           ("P(osc > osc_thr) ≤ ρ over positions (statistical clause)",),
           "E[bias] ≤ G·A·((1 − ρ)·D(osc_thr) + ρ·(1 + lo)), D the drift form",
           (_TOK, _SUPPORT, _CLAMP, "the statistical clause holds"),
           "split on the exceedance event; past the level a position's discrepancy is at most "
           "TV·(1 + lo) ≤ 1 + lo, not 1 as for the masks",
           "supremum, approached (D's witness, and a saturated position with a leak each way)",
           None),
)  # fmt: skip
