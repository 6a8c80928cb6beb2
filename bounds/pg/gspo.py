"""GSPO's sequence ratio against the kernel pair (``gspo``): ω_t = s·1[not clipped].

GSPO anchored on the rollout takes w_t = π(y_t)/π'(y_t) (π the trainer's, π' the engine's
policy) and gives every token of a sequence of n real tokens the weight s = exp((1/n)·Σ_j log
w_j), 0 where clipped (A > 0 and s > 1 + ε, A < 0 and s < 1 − ε; ``kernels.rl.gspo``). Setting
as in ``bounds.pg.closed_forms``: at each position the bias against the token-level importance
weight w_t is at most G·A·D, D the supremum of E_π'|ω_t − w_t| (the weight reads the whole
sequence, later tokens included; |E[(ω_t − w_t)·A·g]| ≤ G·A·E|ω_t − w_t| whatever ω_t reads).

A bound, from a premise that puts every token's log w in [−x, x] (x = s from a drift, whose
tilt keeps log w within its range; x = r from a log ratio): then log s ∈ [−x, x]. A kept token
costs |s − w_t| ≤ |s − 1| + |1 − w_t| with |s − 1| ≤ e^x − 1 and E_π'|1 − w_t| = 2·TV ≤
D_plain(x) (2·tanh(s/4) from a drift, 2·tanh(r/2) from a log ratio); a dropped one costs w_t,
whose mean is at most E_π' w_t = 1, and a drop needs s > 1 + ε or s < 1 − ε, so e^x > 1 + ε
(as 1/(1 − ε) > 1 + ε). Whatever is dropped, ω_t ∈ {0, s} gives |ω_t − w_t| ≤
max(w_t, |s − w_t|) = w_t + (s − 2w_t)₊ ≤ w_t + (e^x − 2e^{−x})₊. So

    D ≤ min(1 + (e^x − 2e^{−x})₊, e^x − 1 + D_plain(x) + 1[e^x ≥ 1 + ε]).

E_π' s ≤ 1 (the geometric mean is at most the arithmetic one) holds for sequences of a fixed
length only: where a token decides whether the sequence ends, E_π' s can exceed 1, so the
forms use s ≤ e^x. Not the supremum (|s − 1| = e^x − 1 needs every other token of the sequence
at one end of the range, which E_π' w = 1 makes rare), so it never refutes: the witnesses
(sequences of L positions, one law at the measured position and another at the others, every
draw enumerated, the advantage's sign the worse per draw) measure the gap. A TV premise leaves
the ratio, and so s, unbounded: no form.

References:
    Zheng et al., "Group Sequence Policy Optimization" (2025) — the sequence ratio.
    Schulman et al., "Proximal Policy Optimization Algorithms" (2017) — the clipped surrogate.
"""

from __future__ import annotations

import math

import numpy as np
import sympy
from jaxtyping import Float

from kernel_contracts.bounds._evaluate import evaluate
from kernel_contracts.bounds.lemma import SYMBOLS, Lemma, Witness
from kernel_contracts.bounds.pg.closed_forms import step_above
from kernel_contracts.bounds.pg.witnesses import raised_pair

__all__ = [
    "GSPO_LEMMAS",
    "drift_law",
    "gspo_drift",
    "gspo_form",
    "gspo_ratio",
    "sequence_discrepancy",
]

Vector = Float[np.ndarray, "vocab"]
osc, T, r, eps, G, A = (SYMBOLS[k] for k in ("osc", "T", "r", "clip_epsilon", "G", "A"))


# ---- forms ---------------------------------------------------------------------------------
def gspo_form(x: sympy.Expr, d_plain: sympy.Expr, clip_eps: sympy.Expr) -> sympy.Expr:
    """min(1 + (e^x − 2e^{−x})₊, e^x − 1 + D_plain + 1[e^x ≥ 1 + ε]) (module docstring)."""
    k = sympy.exp(x)
    return sympy.Min(1 + sympy.Max(k - 2 / k, 0), k - 1 + d_plain + step_above(k, 1 + clip_eps))


def gspo_drift(s: sympy.Expr, clip_eps: sympy.Expr) -> sympy.Expr:
    """The form from a drift of range s: D_plain = 2·tanh(s/4)."""
    return gspo_form(s, 2 * sympy.tanh(s / 4), clip_eps)


def gspo_ratio(r_: sympy.Expr, clip_eps: sympy.Expr) -> sympy.Expr:
    """The form from |log w| ≤ r: D_plain = 2·tanh(r/2)."""
    return gspo_form(r_, 2 * sympy.tanh(r_ / 2), clip_eps)


# ---- the measured quantity and the witnesses ------------------------------------------------
def _cost(s: np.ndarray, w: np.ndarray, clip_eps: float) -> np.ndarray:
    """|ω − w| at the advantage sign that costs more: a token whose s a sign clips may be
    dropped (cost w), else it keeps s (cost |s − w|)."""
    kept = np.abs(s - w)
    droppable = (s > 1 + clip_eps) | (s < 1 - clip_eps)
    return np.where(droppable, np.maximum(kept, w), kept)


def sequence_discrepancy(
    law: tuple[np.ndarray, np.ndarray],
    other: tuple[np.ndarray, np.ndarray],
    L: int,
    clip_eps: float,
) -> float:
    """E_π'|ω − w| at one position of a sequence of ``L`` positions: ``law`` (π' and w of its
    tokens) at the measured one, ``other`` (two tokens) at each of the L − 1 others, drawn
    independently; every draw enumerated (the others by the count k of their first token)."""
    q0, w0 = (np.asarray(a, float) for a in law)
    q1, w1 = (np.asarray(a, float) for a in other)
    n = L - 1
    k = np.arange(n + 1)
    log_binom = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                          for i in k])  # fmt: skip
    with np.errstate(divide="ignore"):
        log_pk = log_binom + k * np.log(q1[0]) + (n - k) * np.log(q1[1])
    pk = np.exp(log_pk)
    rest = k * math.log(w1[0]) + (n - k) * math.log(w1[1])
    s = np.exp((np.log(w0)[:, None] + rest[None, :]) / L)
    return float(np.sum(q0[:, None] * pk[None, :] * _cost(s, w0[:, None], clip_eps)))


def drift_law(q: float, sv: float) -> tuple[np.ndarray, np.ndarray]:
    """The two-token tilt of range ``sv`` with π'-mass q on the raised token: (π', w)."""
    m = q * math.exp(sv) + 1 - q
    return np.array([q, 1 - q]), np.array([math.exp(sv) / m, 1 / m])


def _ratio_law(q: float, rv: float) -> tuple[np.ndarray, np.ndarray] | None:
    """π' = (q, 1 − q) with w = (min(e^r, ·), ·), E_π' w = 1 and both |log w| ≤ r, or None."""
    hi_w = min(math.exp(rv), (1 - 1e-12) / q)
    lo_w = (1 - q * hi_w) / (1 - q)
    return (np.array([q, 1 - q]), np.array([hi_w, lo_w])) if lo_w >= math.exp(-rv) else None


_QS = np.concatenate([np.linspace(0.02, 0.98, 25), [1e-3, 0.999]])
_LS = (1, 2, 3, 4, 8, 16, 64)


def _best(laws, clip_eps: float) -> tuple[float, dict]:
    best = (-1.0, {})
    for law in laws:
        for other in laws:
            for L in _LS:
                got = sequence_discrepancy(law, other, L, clip_eps)
                if got > best[0]:
                    best = (got, {"law": law, "other": other, "L": L})
    return best


def _bound(expr: sympy.Expr, **values: float) -> float:
    names = {sym.name for sym in expr.free_symbols}
    return evaluate(expr, {k: v for k, v in {"G": 1.0, "A": 1.0, **values}.items() if k in names})


def _w_drift(osc: float, T: float, clip_epsilon: float) -> Witness:
    """Two-token tilts of range s (π'-mass q on the raised token) at every position."""
    sv = osc / T
    laws = [drift_law(q, sv) for q in _QS]
    achieved, instance = _best(laws, clip_epsilon)
    z, zp = raised_pair(float(instance["law"][0][0]), sv, T)
    params = {"osc": osc, "T": T, "clip_epsilon": clip_epsilon}
    return Witness("pg_bias_gspo", params, achieved, _bound(EXPR["pg_bias_gspo"], **params),
                   {**instance, "z": z, "z_prime": zp})  # fmt: skip


def _w_ratio(r: float, clip_epsilon: float) -> Witness:
    """Two-token laws with w at e^{±r} where E_π' w = 1 allows it."""
    laws = [law for q in _QS if (law := _ratio_law(q, r)) is not None]
    achieved, instance = _best(laws, clip_epsilon)
    params = {"r": r, "clip_epsilon": clip_epsilon}
    return Witness("pg_bias_gspo_ratio", params, achieved,
                   _bound(EXPR["pg_bias_gspo_ratio"], **params), instance)  # fmt: skip


# ---- the lemmas ----------------------------------------------------------------------------
EXPR: dict[str, sympy.Expr] = {
    "pg_bias_gspo": G * A * gspo_drift(osc / T, eps),
    "pg_bias_gspo_ratio": G * A * gspo_ratio(r, eps),
}

_TOK = "per-token ‖∇ log π(y)‖ ≤ G and |A(y)| ≤ A (assumptions of the guarantee)"
_SUPPORT = "support_overlap: π' > 0 wherever π > 0 (softmax logits are finite)"
_SEQ = (
    "ω_t = s·1[not clipped], s = exp(mean of log w over the sequence's real tokens), "
    "0 < ε < 1; the premise holds at every position of the sequence"
)
_WHY = (
    "log s ∈ [−x, x]: a kept token costs |s − w| ≤ (e^x − 1) + |1 − w|, E_π'|1 − w| = 2·TV; "
    "a dropped one w, of mean ≤ 1, and a drop needs e^x > 1 + ε; and ω ∈ {0, s} gives "
    "|ω − w| ≤ w + (s − 2w)₊ ≤ w + (e^x − 2e^{−x})₊"
)
_GAP = "a bound, not attained; the gap to the best enumerated sequence witness"

GSPO_LEMMAS: tuple[Lemma, ...] = (
    Lemma("pg_bias_gspo", ("osc(Δ) ≤ osc",),
          "bias ≤ G·A·min(1 + (e^s − 2e^{−s})₊, e^s − 1 + 2·tanh(s/4) + 1[e^s ≥ 1 + ε])",
          (_TOK, _SUPPORT, _SEQ), EXPR["pg_bias_gspo"], _WHY, _GAP, _w_drift),
    Lemma("pg_bias_gspo_ratio", ("|log w| ≤ r",),
          "bias ≤ G·A·min(1 + (e^r − 2e^{−r})₊, e^r − 1 + 2·tanh(r/2) + 1[e^r ≥ 1 + ε])",
          (_TOK, _SUPPORT, _SEQ), EXPR["pg_bias_gspo_ratio"], _WHY, _GAP, _w_ratio),
)  # fmt: skip
