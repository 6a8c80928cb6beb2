"""SAPO's soft gate anchored on the rollout (``sapo``): ω = w·sech²(τ(w − 1)/2).

Setting as in ``bounds.pg.closed_forms``: w = π/π', bias ≤ G·A·D with D = E_π'|ω − w|. The gate
(``kernels.rl.sapo``) takes τ = τ_pos where A > 0 and τ_neg where A ≤ 0; the bound holds for
every advantage, so the worst case gives each token the larger one, t = max(τ_pos, τ_neg)
(tanh² grows with its argument's size). A token's discrepancy is

    φ(w) = w − ω = w·h(w),   h(w) = tanh²(t(w − 1)/2) ∈ [0, 1),

so D = E_π'[w·h(w)] = E_π h(w), and h grows with |w − 1|. Each premise:

- log ratio |log w| ≤ r: with x = e^r, φ(w) ≤ w·t²(w − 1)²/4 ≤ x·t²(w − 1)²/4 (tanh u ≤ u,
  w ≤ x), and a law on [1/x, x] with mean 1 has E(w − 1)² ≤ (x − 1)(1 − 1/x) (Bhatia–Davis),
  so D ≤ min(1, t²·(x − 1)²/4), D ≤ E_π' w = 1 besides. Equal to the supremum to first order
  as r·t → 0 (two tokens with w = e^{±r} give t²r²/4 + o(r²)), a bound beyond: the supremum is
  the concave envelope of φ at 1 over two-point laws {a ≤ 1 ≤ b}, which has no closed form
  (for large t the best b lies inside the range, not at e^r); the witness searches a grid of
  them. Not attained, so its obligations never refute.
- logit drift of range s: log w ranges over an interval of width s, so |log w| ≤ s and the
  ratio form at r = s bounds D. The witness is the best two-point law on the tilt's ends with
  mean m ∈ [1, e^s] (a lower end of the supremum). Measured: 0.25 of the form as s → 0 (the
  drift's interval of log w is half as wide as the ratio premise's). Not attained.
- TV ≤ ε: φ(w) ≤ K₊·(w − 1)₊ + K₋·(1 − w)₊ with K₊ = sup_v (1 + v)/v·h(1 + v) ≤ 1 + t/2 and
  K₋ = sup_v (1 − v)/v·h(1 − v) ≤ t²/16 (tanh x ≤ min(1, x)), and both means are the TV:
  D ≤ min(1, (1 + t/4)²·ε), since also D ≤ E_π' w = 1. A bound: a leak to a token π' almost
  never samples reaches ε·K₊, and K₊ < 1 + t/2.
- P(drift > level) ≤ ρ (a statistical clause), in expectation over positions:
  (1 − ρ)·D(level) + ρ, a position past the level costing at most E_π' w = 1.

The gate is smooth: no threshold a token can sit on, so no tie rule changes these bounds.
verl and SkyRL give a token with |log w| > 20 the weight 0 (the clamp passes no gradient), a
discrepancy w, not w·h(w); their export would need |log w| ≤ 20 proved, as for DPPO.

References:
    Gao et al., "Soft Adaptive Policy Optimization" (2025), arXiv:2511.20347.
    Bhatia and Davis, "A better bound on the variance" (2000) — Var ≤ (M − μ)(μ − m).
"""

from __future__ import annotations

import math

import numpy as np
import sympy
from jaxtyping import Float

from kernel_contracts.bounds import measure
from kernel_contracts.bounds._evaluate import evaluate
from kernel_contracts.bounds.lemma import SYMBOLS, Lemma, Witness
from kernel_contracts.bounds.pg.witnesses import raised_pair
from kernel_contracts.bounds.search import golden_max

__all__ = [
    "SAPO_LEMMAS",
    "sapo_discrepancy",
    "sapo_drift_sup",
    "sapo_ratio",
    "sapo_ratio_best",
    "sapo_tv",
]

Vector = Float[np.ndarray, "vocab"]
osc, T, r, eps, rho = (SYMBOLS[k] for k in ("osc", "T", "r", "eps", "rho"))
t_sym, G, A = SYMBOLS["tau_gate"], SYMBOLS["G"], SYMBOLS["A"]


# ---- forms ---------------------------------------------------------------------------------
def sapo_ratio(r_: sympy.Expr, t: sympy.Expr) -> sympy.Expr:
    """A bound on E_π'|ω − w| when |log w| ≤ r: min(1, t²·(e^r − 1)²/4) (module docstring)."""
    return sympy.Min(1, t**2 * (sympy.exp(r_) - 1) ** 2 / 4)


def sapo_ratio_best(r_: float, t: float, n: int = 201) -> tuple[float, float, float]:
    """(E_π' w·h(w), a, b) of the best two-point law {a ≤ 1 ≤ b} ⊂ [e^{−r}, e^r] with mean 1
    on an n × n grid: a lower end of the supremum, in float64."""
    x = math.exp(r_)
    a = np.linspace(1 / x, 1.0, n)[:, None]
    b = np.linspace(1.0, x, n)[None, :]
    gap = np.where(b - a > 0, b - a, 1.0)
    q = np.where(b - a > 0, (1 - a) / gap, 0.0)  # π'-mass on b
    d = q * b * np.tanh(t * (b - 1) / 2) ** 2 + (1 - q) * a * np.tanh(t * (a - 1) / 2) ** 2
    i, j = np.unravel_index(int(np.argmax(d)), d.shape)
    return float(d[i, j]), float(a[i, 0]), float(b[0, j])


def sapo_tv(eps_: sympy.Expr, t: sympy.Expr) -> sympy.Expr:
    """A bound on E_π'|ω − w| when TV ≤ ε: min(1, (1 + t/4)²·ε)."""
    return sympy.Min(1, (1 + t / 4) ** 2 * eps_)


def _d_of_m(m: float, s: float, t: float) -> float:
    """E_π' φ(w) of the two-point law on the tilt's ends {1, e^s} with mean m (π'-mass
    (m − 1)/(e^s − 1) on e^s), w = e^x/m, in float64."""
    e = math.exp(s)
    q = (m - 1) / math.expm1(s)
    hi_w, lo_w = e / m, 1 / m
    return (
        q * hi_w * math.tanh(t * (hi_w - 1) / 2) ** 2
        + (1 - q) * lo_w * math.tanh(t * (lo_w - 1) / 2) ** 2
    )


def sapo_drift_sup(s: float, t: float) -> tuple[float, float]:
    """(the largest D(m) found, its m) over m ∈ [1, e^s]: a grid of 2001 points refined by a
    golden search; a lower end of the supremum, used by the witness."""
    if s == 0:
        return 0.0, 1.0
    grid = list(1 + math.expm1(s) * np.linspace(0.0, 1.0, 2001))
    m, best = golden_max(lambda m: _d_of_m(m, s, t), grid, 60)
    return best, m


# ---- the measured quantity and the witnesses ------------------------------------------------
def sapo_discrepancy(z: Vector, z_prime: Vector, T_: float, tau_gate: float) -> float:
    """E_π'|ω − w| = E_π tanh²(t(w − 1)/2), t = ``tau_gate``, in float64."""
    p = np.exp(measure.log_softmax(z, T_))
    w = np.exp(measure.log_ratio(z, z_prime, T_))
    return float(np.sum(p * np.tanh(tau_gate * (w - 1) / 2) ** 2))


def _bound(expr: sympy.Expr, **values: float) -> float:
    names = {sym.name for sym in expr.free_symbols}
    return evaluate(expr, {k: v for k, v in {"G": 1.0, "A": 1.0, **values}.items() if k in names})


def _w_drift(osc: float, T: float, tau_gate: float) -> Witness:
    """Two tokens on the tilt's ends, π'-mass q = (m − 1)/(e^s − 1) on the raised one, m the
    best found by ``sapo_drift_sup``."""
    sv = osc / T
    params = {"osc": osc, "T": T, "tau_gate": tau_gate}
    bound = _bound(EXPR["pg_bias_sapo"], **params)
    if sv == 0:
        z = np.zeros(2)
        return Witness("pg_bias_sapo", params, 0.0, bound, {"z": z, "z_prime": z})
    _, m = sapo_drift_sup(sv, tau_gate)
    q = min(max((m - 1) / math.expm1(sv), 1e-300), 1 - 1e-16)
    z, zp = raised_pair(q, sv, T)
    got = sapo_discrepancy(z, zp, T, tau_gate)
    return Witness("pg_bias_sapo", params, got, bound, {"z": z, "z_prime": zp})


def _w_ratio(r: float, tau_gate: float) -> Witness:
    """Two tokens with w = b and w = a, π'-mass (1 − a)/(b − a) on b: the best pair of
    ``sapo_ratio_best``."""
    _, lo_w, hi_w = sapo_ratio_best(r, tau_gate)
    q = (1 - lo_w) / (hi_w - lo_w) if hi_w > lo_w else 0.5
    p = np.array([q * hi_w, (1 - q) * lo_w])
    z = np.log(np.where(p > 0, p, 1e-300))
    zp = np.log(np.array([max(q, 1e-300), max(1 - q, 1e-300)]))
    params = {"r": r, "tau_gate": tau_gate}
    got = sapo_discrepancy(z, zp, 1.0, tau_gate)
    return Witness("pg_bias_sapo_ratio", params, got, _bound(EXPR["pg_bias_sapo_ratio"], **params),
                   {"z": z, "z_prime": zp})  # fmt: skip


def _w_tv(eps: float, tau_gate: float) -> Witness:
    """π' puts ε/v on a token with w = 1 + v (TV = ε), v the best of a grid, the rest on one
    token with w < 1; the discrepancy is ε·(1 + v)/v·h(1 + v) plus the low token's share."""
    params = {"eps": eps, "tau_gate": tau_gate}
    best = (-1.0, {})
    for v in np.geomspace(max(eps, 1e-6) * 1.01 / (1 - eps), 1e6, 400):
        q = eps / v
        p = np.array([q * (1 + v), 1 - q * (1 + v)])
        if not 0 < q < 1 or p[1] <= 0:
            continue
        z, zp = np.log(p), np.log(np.array([q, 1 - q]))
        got = sapo_discrepancy(z, zp, 1.0, tau_gate)
        best = max(best, (got, {"z": z, "z_prime": zp}), key=lambda b: b[0])
    got, instance = best
    return Witness("pg_bias_sapo_tv", params, got, _bound(EXPR["pg_bias_sapo_tv"], **params),
                   instance)  # fmt: skip


# ---- the lemmas ----------------------------------------------------------------------------
_GA = G * A
EXPR: dict[str, sympy.Expr] = {
    "pg_bias_sapo": _GA * sapo_ratio(osc / T, t_sym),
    "pg_bias_sapo_ratio": _GA * sapo_ratio(r, t_sym),
    "pg_bias_sapo_tv": _GA * sapo_tv(eps, t_sym),
    "pg_bias_sapo_exceedance": _GA * ((1 - rho) * sapo_ratio(osc / T, t_sym) + rho),
}

_TOK = "per-token ‖∇ log π(y)‖ ≤ G and |A(y)| ≤ A (assumptions of the guarantee)"
_SUPPORT = "support_overlap: π' > 0 wherever π > 0 (softmax logits are finite)"
_GATE = ("ω = w·sech²(τ(w − 1)/2), τ = τ_pos (A > 0) or τ_neg (A ≤ 0); the rollout is the old "
         "policy; tau_gate = max(τ_pos, τ_neg)")  # fmt: skip
_WHY = ("φ(w) = w·tanh²(t(w − 1)/2) ≤ e^r·t²(w − 1)²/4 and E_π'(w − 1)² ≤ (e^r − 1)(1 − e^{−r}) "
        "(Bhatia–Davis); φ ≤ w, E_π' w = 1")  # fmt: skip


def _lemma(name, premises, conclusion, reference, tightness, witness, extra=()) -> Lemma:
    return Lemma(name, premises, conclusion, (_TOK, _SUPPORT, _GATE, *extra), EXPR[name],
                 reference, tightness, witness)  # fmt: skip


SAPO_LEMMAS: tuple[Lemma, ...] = (
    _lemma("pg_bias_sapo", ("osc(Δ) ≤ osc",),
           "bias ≤ G·A·min(1, t²(e^s − 1)²/4), s = osc/T (the ratio form at r = s)",
           _WHY + "; a drift of range s gives |log w| ≤ s",
           "a bound, not attained: the gap to the best two-point law on the tilt's ends",
           _w_drift),
    _lemma("pg_bias_sapo_ratio", ("|log w| ≤ r",),
           "bias ≤ G·A·min(1, t²(e^r − 1)²/4), t = tau_gate", _WHY,
           "a bound, equal to the supremum to first order in r·t: the gap to the best "
           "two-point law of a grid", _w_ratio),
    _lemma("pg_bias_sapo_tv", ("TV(π, π') ≤ ε",), "bias ≤ G·A·min(1, (1 + tau_gate/4)²·ε)",
           "φ(w) ≤ (1 + t/2)·(w − 1)₊ + (t²/16)·(1 − w)₊ and φ(w) ≤ w; E_π'(w − 1)₊ = "
           "E_π'(1 − w)₊ = TV", "a bound, not attained: the gap to the best leak", _w_tv),
    _lemma("pg_bias_sapo_exceedance",
           ("P(osc > osc_thr) ≤ ρ over positions (statistical clause)",),
           "E[bias] ≤ G·A·((1 − ρ)·D(osc_thr) + ρ), D the drift form",
           "split on the exceedance event; past the level a position's discrepancy is at most "
           "E_π' w = 1", "a bound, not attained (as the drift form)", None,
           ("the statistical clause holds",)),
)  # fmt: skip
