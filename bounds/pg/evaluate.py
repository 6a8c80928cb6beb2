"""Numbers for plots: every estimator's policy-gradient bias bound, and its exact supremum.

``pg_bias_bound`` evaluates the same closed form a ``pg_bias`` guarantee's obligation uses when
its premise is a logit-drift (oscillation) clause: pass ``osc`` = 2δ for a drift δ. It is
computed at 50 digits from the sympy form, so a plotted number and a proved bound agree.
``pg_bias_supremum`` is the exact supremum of the bias over the kernel pairs that premise
allows (jumps included), where it is known; for ``seq_tis`` and ``seq_mask`` with L > 1 and
``tis_mask`` with a cap below the band's top, ``tis_norm``, ``gspo``, ``sapo`` and ``vespo`` it
is not, and the function returns ``None`` (``bounds.pg.witnesses`` gives lower ends).
"""

from __future__ import annotations

import math

import mpmath
import sympy

from kernel_contracts.bounds._evaluate import evaluate
from kernel_contracts.bounds.pg import closed_forms as C
from kernel_contracts.bounds.pg.gspo import gspo_drift
from kernel_contracts.bounds.pg.links import mis_drift, tis_drift
from kernel_contracts.bounds.pg.sapo import sapo_ratio
from kernel_contracts.bounds.pg.tis_clip import clip_drift, clip_sup
from kernel_contracts.bounds.pg.tis_norm import norm_form
from kernel_contracts.bounds.pg.vespo import CLAMP_FREE, LAMBDA_MIN, vespo_cap, vespo_ratio
from kernel_contracts.bounds.sequence.lemmas import sequence_tv_bound
from kernel_contracts.bounds.token.lemmas import kl_tilt_sup

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
    if estimator in ("tv_mask", "dppo_tv"):
        return C.step_above(sympy.tanh(_s / 4), _num(p["threshold"]))
    if estimator in ("kl_mask", "dppo_kl"):
        return C.step_above(kl_tilt_sup(_s), _num(p["threshold"]))
    if estimator == "dual_clip":
        e, c = _num(p["clip_epsilon"]), _num(p["cap"])
        return C.band_drift(_s, 1 - e, sympy.Min(1 + e, c))
    if estimator == "opsm":
        return C.band_drift(_s, sympy.exp(-_num(p["threshold"])), None, L)
    if estimator in ("seq_mask", "seq_outlier", "tis_mask"):
        lo, hi = (_num(x) for x in p["band"])
        lo = 0 if lo == 0 else lo
        band = C.band_drift(_s, lo, hi)
        if estimator == "tis_mask":
            c = _num(p["cap"])
            if c >= hi:
                return band
            return sympy.Min(1, _discrepancy("tis", 1, {"cap": c}) + band)
        if L == 1:
            return band
        if estimator == "seq_outlier":
            return C.outlier_step(sympy.exp(_s), lo, hi)
        tv_l = sequence_tv_bound(sympy.tanh(_s / 4), kl_tilt_sup(_s), L)
        forms = [C.seq_mask_azuma(_s, L, lo, hi), C.seq_mask_ratio(L * _s, lo, hi)]
        return sympy.Min(*forms, C.seq_mask_tv(tv_l, lo, hi))
    if estimator == "seq_is":
        return sympy.Integer(0)
    if estimator in ("tis_clip", "cispo"):
        lo, hi = (_num(x) for x in p["band"])
        return clip_drift(_s, 0 if lo == 0 else lo, hi)
    if estimator == "sapo":  # the ratio form at r = s, a bound (bounds.pg.sapo)
        return sapo_ratio(_s, max(_num(t) for t in p["temperatures"]))
    if estimator == "tis_norm":
        return norm_form(_s, tis_drift(_s, _num(p["cap"])))
    if estimator == "vespo":  # per sequence: the ratio form at |log W| ≤ L·s (bounds.pg.vespo)
        k_pos, lam_pos, k_neg, lam_neg = (_num(x) for x in p["gamma"])
        floor = _num(LAMBDA_MIN)
        pairs = ((k_pos, sympy.Max(lam_pos, floor)), (k_neg, sympy.Max(lam_neg, floor)))
        return sympy.Piecewise((vespo_ratio(L * _s, pairs), L * _s <= CLAMP_FREE),
                               (vespo_cap(pairs), True))  # fmt: skip
    if estimator == "gspo":
        return gspo_drift(_s, _num(p["clip_epsilon"]))
    if estimator == "clip_cov":  # any token PPO keeps can be drawn (bounds.pg.cov)
        return sympy.Integer(1)
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
    if estimator == "kl_reject":
        raise ValueError("kl_reject's bound depends on its criteria: derive it from a contract")
    if estimator == "kl_cov":  # G·κ, no factor A (bounds.pg.cov)
        return G * float(params["kl_coef"])
    scale = G * A * (L if estimator in ("seq_is", "seq_tis", "seq_mask", "vespo") else 1)
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
    arguments as ``pg_bias_bound``); ``None`` where it is not known (``seq_tis`` and
    ``seq_mask`` at L > 1, ``tis_mask`` with c < hi)."""
    if estimator == "kl_reject":
        raise ValueError("kl_reject's bound depends on its criteria: derive it from a contract")
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
    if estimator == "dual_clip":
        e = params["clip_epsilon"]
        return GA * float(C.band_sup(s, 1 - e, min(1 + e, params["cap"])))
    if estimator == "opsm":
        return GA * float(C.band_sup(s, mpmath.exp(-mpmath.mpf(params["threshold"])), None, L))
    if estimator in ("seq_mask", "seq_outlier", "tis_mask"):
        lo, hi = params["band"]
        if estimator == "tis_mask" and params["cap"] < hi:
            return None  # the sum form is a bound; its witness gives a lower end
        if L == 1 or estimator == "tis_mask":
            return GA * float(C.band_sup(s, lo, hi))
        if estimator == "seq_mask":
            return None  # a bound for L > 1; bounds.pg.witnesses.best_iid_seq_mask: a lower end
        return GA * float(C.outlier_sup(mpmath.exp(s), lo, hi, L))
    if estimator in ("tv_mask", "dppo_tv"):
        return GA * float(mpmath.tanh(s / 4) > params["threshold"])
    if estimator in ("kl_mask", "dppo_kl"):
        kl = 0 if s == 0 else mpmath.log(mpmath.expm1(s) / s) - 1 + s / mpmath.expm1(s)
        return GA * float(kl > params["threshold"])
    if estimator == "seq_is":
        return 0.0
    if estimator in ("tis_clip", "cispo"):
        return GA * float(clip_sup(s, *params["band"]))
    if estimator == "sapo":
        return None  # no closed form; bounds.pg.sapo.sapo_drift_sup gives a lower end
    if estimator == "vespo":
        return None  # a bound; bounds.pg.vespo's witnesses give lower ends
    if estimator == "tis_norm":
        return None  # a bound for every batch; bounds.pg.tis_norm's witnesses give lower ends
    if estimator == "gspo":
        return None  # a bound; bounds.pg.gspo's sequence witnesses give lower ends
    if estimator == "clip_cov":  # attained at every premise value (bounds.pg.cov)
        return GA
    if estimator == "kl_cov":  # the penalty acts only on tokens with w ≠ 1
        return G * float(params["kl_coef"]) if s > 0 else 0.0
    if estimator == "seq_tis":
        return L * GA if params["cap"] == 0 else None
    raise ValueError(f"unknown estimator {estimator!r}")
