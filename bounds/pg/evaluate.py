"""Numbers for plots: every estimator's policy-gradient bias bound, and its exact supremum.

``pg_bias_bound`` evaluates the same closed form a ``pg_bias`` guarantee's obligation uses when
its premise is a logit-drift (oscillation) clause: pass ``osc`` = 2δ for a drift δ. It is
computed at 50 digits from the sympy form, so a plotted number and a proved bound agree.
``pg_bias_supremum`` is the exact supremum of the bias over the kernel pairs that premise
allows (jumps included), where it is known; for ``seq_tis`` with L > 1 it is not, and the
function returns ``None`` (``bounds.pg.witnesses.best_iid_seq_tis`` gives a lower end).
"""

from __future__ import annotations

import math

import mpmath
import sympy

from bounds._evaluate import evaluate
from bounds.pg import closed_forms as C
from bounds.pg.links import mis_drift, tis_drift
from bounds.sequence.lemmas import sequence_tv_bound
from bounds.token.lemmas import kl_tilt_sup

__all__ = ["pg_bias_bound", "pg_bias_supremum"]

_s = sympy.Symbol("s", nonnegative=True)


def _num(x) -> sympy.Expr:
    return sympy.nsimplify(x, rational=True) if not isinstance(x, sympy.Basic) else x


def _discrepancy(estimator: str, L: int, p: dict) -> sympy.Expr:
    """The per-position (or per-sequence, for seq_*) discrepancy form as a function of s."""
    if estimator == "plain":
        return 2 * sympy.tanh(_s / 4)
    if estimator in ("tis", "seq_tis") and (estimator == "tis" or L == 1):
        c = _num(p["cap"])
        if c > 1:
            return tis_drift(_s, c)
        if c == 0:
            return sympy.Integer(1)
        return sympy.tanh(_s / 4) if c == 1 else C.tis_small_cap_drift(_s, c)
    if estimator == "mis":
        return mis_drift(_s, _num(p["cap"]))
    if estimator in ("ppo_clip", "icepop", "geo_mask"):
        if estimator == "ppo_clip":
            e = _num(p["clip_epsilon"])
            lo, hi = 1 - e, 1 + e
        else:
            lo, hi = (_num(x) for x in p["band"])
        lo = 0 if lo == 0 else lo
        return C.band_drift(_s, lo, hi, L if estimator == "geo_mask" and L > 1 else 1)
    if estimator == "tv_mask":
        return C.step_above(sympy.tanh(_s / 4), _num(p["threshold"]))
    if estimator == "kl_mask":
        return C.step_above(kl_tilt_sup(_s), _num(p["threshold"]))
    if estimator == "seq_is":
        return sympy.Integer(0)
    if estimator == "seq_tis":
        c = _num(p["cap"])
        if c == 0:
            return sympy.Integer(1)
        small = c <= 1
        k = kl_tilt_sup(_s)
        tv_l = sequence_tv_bound(sympy.tanh(_s / 4), k, L)
        forms = [C.seq_tis_ratio(L * _s, c, small), C.seq_tis_tv(tv_l, c, small)]
        if not small:
            forms.append(C.seq_tis_kl(L * k, sympy.Rational(C.kl_anchor(c))))
        return sympy.Min(*forms)
    raise ValueError(f"unknown estimator {estimator!r}")


def pg_bias_bound(
    estimator: str,
    *,
    osc: float,
    T: float = 1.0,
    G: float = 1.0,
    A: float = 1.0,
    L: int = 1,
    **params,
) -> float:
    """The bias bound of ``estimator`` from a logit oscillation ``osc`` (= 2·drift) at
    temperature ``T``, for score norm G and advantage bound A; sequence-level estimators use
    the per-sequence score norm L·G, ``geo_mask`` sequences of at most L tokens. ``params``:
    ``cap``, ``clip_epsilon``, ``band`` (lo, hi) or ``threshold``, as in the DSL."""
    scale = G * A * (L if estimator in ("seq_is", "seq_tis") else 1)
    return scale * evaluate(_discrepancy(estimator, L, params), {"s": osc / T})


def pg_bias_supremum(
    estimator: str,
    *,
    osc: float,
    T: float = 1.0,
    G: float = 1.0,
    A: float = 1.0,
    L: int = 1,
    **params,
) -> float | None:
    """The exact supremum of the bias over kernel pairs with oscillation ≤ ``osc`` (same
    arguments as ``pg_bias_bound``); ``None`` where it is not known (``seq_tis``, L > 1)."""
    s = mpmath.mpf(osc) / T
    GA = G * A
    if estimator == "plain":
        return 2 * GA * math.tanh(float(s) / 4)
    if estimator == "tis" or (estimator == "seq_tis" and L == 1):
        return GA * float(C.tis_excess_sup(s, params["cap"]))
    if estimator == "mis":
        return GA * evaluate(mis_drift(_s, _num(params["cap"])), {"s": s})
    if estimator == "ppo_clip":
        e = params["clip_epsilon"]
        return GA * float(C.band_sup(s, 1 - e, 1 + e))
    if estimator in ("icepop", "geo_mask"):
        lo, hi = params["band"]
        return GA * float(C.band_sup(s, lo, hi, L if estimator == "geo_mask" else 1))
    if estimator == "tv_mask":
        return GA * float(mpmath.tanh(s / 4) > params["threshold"])
    if estimator == "kl_mask":
        kl = 0 if s == 0 else mpmath.log(mpmath.expm1(s) / s) - 1 + s / mpmath.expm1(s)
        return GA * float(kl > params["threshold"])
    if estimator == "seq_is":
        return 0.0
    if estimator == "seq_tis":
        return L * GA if params["cap"] == 0 else None
    raise ValueError(f"unknown estimator {estimator!r}")
