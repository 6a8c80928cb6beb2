"""The policy-gradient bias lemmas of the corrections beyond plain/TIS/MIS, with witnesses.

Token-level estimators (``tis`` with c ≤ 1, ``icepop``, ``ppo_clip``, ``geo_mask``, ``tv_mask``,
``kl_mask``) are analysed per position, the context fixed: bias ≤ G·A·D with D the supremum of
E_π'|ω − w| (see ``bounds.pg.closed_forms``), under per-token ‖∇log π(y)‖ ≤ G and |A(y)| ≤ A.
Sequence-level estimators (``seq_is``, ``seq_tis``) weight a whole sequence y of at most L
tokens: bias = ‖E_π'[ω(y)·g(y)] − E_π[g(y)]‖ with g(y) = Σ_t ∇log π(y_t | y_<t)·A(y), and the
per-sequence assumption ‖Σ_t ∇log π(y_t | y_<t)‖ ≤ L·G (each of at most L terms ≤ G) and
|A(y)| ≤ A, so bias ≤ L·G·A·E_π'|ω(y) − W(y)|, W = Π_t w_t.

References:
    Espeholt et al., "IMPALA" (2018) — truncated importance sampling with a cap c.
    Schulman et al., "Proximal Policy Optimization Algorithms" (2017) — the clipped surrogate.
"""

from __future__ import annotations

import math

import numpy as np
import sympy

from kernel_contracts.bounds import measure
from kernel_contracts.bounds._evaluate import evaluate
from kernel_contracts.bounds.lemma import SYMBOLS, Lemma, Witness
from kernel_contracts.bounds.pg.cispo import CISPO_LEMMAS
from kernel_contracts.bounds.pg.closed_forms import (
    band_drift,
    band_ratio,
    band_tv,
    kl_iterate,
    outlier_step,
    seq_mask_azuma,
    seq_mask_ratio,
    seq_mask_tv,
    seq_tis_kl,
    seq_tis_ratio,
    step_above,
    tis_small_cap_drift,
    tis_small_cap_ratio,
    tis_small_cap_tv,
)
from kernel_contracts.bounds.pg.cov import COV_LEMMAS
from kernel_contracts.bounds.pg.gspo import GSPO_LEMMAS
from kernel_contracts.bounds.pg.links import tis_drift, tis_ratio
from kernel_contracts.bounds.pg.sapo import SAPO_LEMMAS
from kernel_contracts.bounds.pg.tis_clip import TIS_CLIP_LEMMAS
from kernel_contracts.bounds.pg.tis_norm import TIS_NORM_LEMMAS
from kernel_contracts.bounds.pg.vespo import VESPO_LEMMAS
from kernel_contracts.bounds.pg.witnesses import (
    band_dropped_mass,
    band_pair,
    best_iid_seq_mask,
    best_iid_seq_tis,
    dppo_dropped_mass,
    geo_dropped_mass,
    iid_excess,
    low_pair,
    raised_pair,
    ratio_band_laws,
    seq_is_bias,
    tis_mask_discrepancy,
    tv_band_laws,
)
from kernel_contracts.bounds.sequence.lemmas import sequence_tv_bound
from kernel_contracts.bounds.token.lemmas import kl_tilt_sup, tilt_pair

__all__ = ["CORRECTION_LEMMAS"]

_S = SYMBOLS
osc, T, r, eps, kappa, rho = (_S[k] for k in ("osc", "T", "r", "eps", "kappa", "rho"))
L, G, A, c, ce = (_S[k] for k in ("L", "G", "A", "c", "clip_epsilon"))
lo, hi, tau = _S["lo"], _S["hi"], _S["tau"]
s = osc / T
GA = G * A


def _seq_forms(small: bool) -> sympy.Expr:
    """D_seq for seq_tis from a drift premise: the ratio form at R = L·s, the sequence-TV routes
    (coupling at ε = tanh(s/4), Pinsker and Bretagnolle–Huber at κ = the tilt KL), and for
    c > 1 the KL form k_c·L·κ."""
    k = kl_tilt_sup(s)
    tv_l = sequence_tv_bound(sympy.tanh(s / 4), k, L)
    if small:
        return sympy.Min(seq_tis_ratio(L * s, c, small), 1 - c + c * tv_l)
    return sympy.Min(seq_tis_ratio(L * s, c, small), tv_l, seq_tis_kl(L * k, kl_iterate(c)))


def _seq_mask_form(low=lo) -> sympy.Expr:
    """D_seq for seq_mask from a drift premise: the band's ratio form at |log W| ≤ L·s, and its
    TV form at the sequence-TV routes (coupling, Pinsker, Bretagnolle–Huber)."""
    tv_l = sequence_tv_bound(sympy.tanh(s / 4), kl_tilt_sup(s), L)
    return sympy.Min(
        seq_mask_azuma(s, L, low, hi), seq_mask_ratio(L * s, low, hi), seq_mask_tv(tv_l, low, hi)
    )


_DUAL_HI = sympy.Min(1 + ce, c)  # the dual clip's band: w ∉ [1 − ε, min(1 + ε, c)] can drop

EXPR: dict[str, sympy.Expr] = {
    "pg_bias_tis_small_cap": GA * tis_small_cap_drift(s, c),
    "pg_bias_tis_small_cap_ratio": GA * tis_small_cap_ratio(r, c),
    "pg_bias_tis_small_cap_tv": GA * tis_small_cap_tv(eps, c),
    "pg_bias_tis_zero_cap": GA,
    "pg_bias_icepop": GA * band_drift(s, lo, hi),
    "pg_bias_icepop_ratio": GA * band_ratio(r, lo, hi),
    "pg_bias_icepop_tv": GA * band_tv(eps, lo, hi),
    "pg_bias_ppo_clip": GA * band_drift(s, 1 - ce, 1 + ce),
    "pg_bias_ppo_clip_ratio": GA * band_ratio(r, 1 - ce, 1 + ce),
    "pg_bias_ppo_clip_tv": GA * sympy.Min(1, 2 * eps / ce),
    "pg_bias_geo_mask": GA * band_drift(s, lo, hi, L),
    "pg_bias_geo_mask_ratio": GA * band_ratio(r, lo, hi, L),
    "pg_bias_geo_mask_tv": GA,
    "pg_bias_tv_mask": GA * step_above(eps, tau),
    "pg_bias_kl_mask": GA * step_above(kappa, tau),
    "pg_bias_tv_mask_mean": GA * sympy.Min(1, eps / tau),
    "pg_bias_seq_is": sympy.Integer(0),
    "pg_bias_seq_tis": L * GA * _seq_forms(small=False),
    "pg_bias_seq_tis_small_cap": L * GA * _seq_forms(small=True),
    "pg_bias_seq_tis_tv": L * GA * (1 - (1 - eps) ** L),
    "pg_bias_dppo_tv": GA * step_above(eps, tau),
    "pg_bias_dppo_kl": GA * step_above(kappa, tau),
    "pg_bias_dual_clip": GA * band_drift(s, 1 - ce, _DUAL_HI),
    "pg_bias_dual_clip_ratio": GA * band_ratio(r, 1 - ce, _DUAL_HI),
    "pg_bias_dual_clip_tv": GA * band_tv(eps, 1 - ce, _DUAL_HI),
    "pg_bias_seq_outlier": GA * outlier_step(sympy.exp(s), lo, hi),
    "pg_bias_seq_outlier_ratio": GA * outlier_step(sympy.exp(r), lo, hi),
    "pg_bias_seq_outlier_tv": GA,
    "pg_bias_seq_mask": L * GA * _seq_mask_form(),
    "pg_bias_tis_mask": GA * band_drift(s, lo, hi),
    "pg_bias_tis_mask_ratio": GA * band_ratio(r, lo, hi),
    "pg_bias_tis_mask_tv": GA * band_tv(eps, lo, hi),
    "pg_bias_tis_mask_sum": GA * sympy.Min(1, tis_drift(s, c) + band_drift(s, lo, hi)),
    "pg_bias_tis_mask_sum_ratio": GA * sympy.Min(1, tis_ratio(r, c) + band_ratio(r, lo, hi)),
    "pg_bias_tis_mask_sum_tv": GA * sympy.Min(1, eps + band_tv(eps, lo, hi)),
    "pg_bias_opsm": GA * band_drift(s, sympy.exp(-tau), None, L),
    "pg_bias_opsm_ratio": GA * band_ratio(r, sympy.exp(-tau), None, L),
    "pg_bias_opsm_tv": GA * band_tv(eps, sympy.exp(-tau), None),
    "pg_bias_kl_reject": GA
    * band_drift(s, sympy.exp(-sympy.sqrt(2 * tau)), sympy.exp(sympy.sqrt(2 * tau))),
    "pg_bias_kl_reject_ratio": GA
    * band_ratio(r, sympy.exp(-sympy.sqrt(2 * tau)), sympy.exp(sympy.sqrt(2 * tau))),
    "pg_bias_kl_reject_tv": GA
    * band_tv(eps, sympy.exp(-sympy.sqrt(2 * tau)), sympy.exp(sympy.sqrt(2 * tau))),
    "pg_bias_sequence_mask_exceedance": GA
    * ((1 - sympy.Min(1, L * rho)) * eps + sympy.Min(1, L * rho)),
    "pg_bias_correction_exceedance": GA * ((1 - rho) * eps + rho),
    "pg_bias_geo_mask_exceedance": GA * ((1 - sympy.Min(1, L * rho)) * eps + sympy.Min(1, L * rho)),
}


# the band forms without a lower end (lo = 0: 1/lo would be undefined in the general form)
EXPR_NO_LOWER: dict[str, sympy.Expr] = {
    "pg_bias_icepop": GA * band_drift(s, 0, hi),
    "pg_bias_icepop_ratio": GA * band_ratio(r, 0, hi),
    "pg_bias_icepop_tv": GA * band_tv(eps, 0, hi),
    "pg_bias_geo_mask": GA * band_drift(s, 0, hi, L),
    "pg_bias_geo_mask_ratio": GA * band_ratio(r, 0, hi, L),
    "pg_bias_seq_outlier": GA * outlier_step(sympy.exp(s), 0, hi),
    "pg_bias_seq_outlier_ratio": GA * outlier_step(sympy.exp(r), 0, hi),
    "pg_bias_seq_mask": L * GA * _seq_mask_form(0),
    "pg_bias_tis_mask": GA * band_drift(s, 0, hi),
    "pg_bias_tis_mask_ratio": GA * band_ratio(r, 0, hi),
    "pg_bias_tis_mask_tv": GA * band_tv(eps, 0, hi),
    "pg_bias_tis_mask_sum": GA * sympy.Min(1, tis_drift(s, c) + band_drift(s, 0, hi)),
    "pg_bias_tis_mask_sum_ratio": GA * sympy.Min(1, tis_ratio(r, c) + band_ratio(r, 0, hi)),
    "pg_bias_tis_mask_sum_tv": GA * sympy.Min(1, eps + band_tv(eps, 0, hi)),
}


_NO_UPPER = 1e300  # a numeric stand-in for hi = ∞ in the witnesses of opsm (no float reaches it)


def _bound(name: str, **values: float) -> float:
    expr = EXPR_NO_LOWER[name] if values.get("lo") == 0 and name in EXPR_NO_LOWER else EXPR[name]
    names = {sym.name for sym in expr.free_symbols}
    return evaluate(expr, {k: v for k, v in {"G": 1.0, "A": 1.0, **values}.items() if k in names})


def _probs_pair(p: list[float], q: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Logits (T = 1) of the training law p and the inference law q."""
    return np.log(np.asarray(p, dtype=np.float64)), np.log(np.asarray(q, dtype=np.float64))


def _w(name: str, params: dict, achieved: float, instance: dict, **bound_values) -> Witness:
    return Witness(name, params, achieved, _bound(name, **bound_values), instance)


def _w_tis_small(osc: float, T: float, c: float) -> Witness:
    sv, e = osc / T, math.exp(osc / T)
    if c == 0:
        z, zp = tilt_pair(0.5, sv, T)
        w = measure.tis_excess(z, zp, T, 0.0)
        return Witness(
            "pg_bias_tis_zero_cap", {"osc": osc, "T": T}, w, 1.0, {"z": z, "z_prime": zp}
        )
    # the TIS witness at cap 1/c, swapped: E_π'(c − w)₊ = c·E_π(π'/π − 1/c)₊ is then maximal
    q = (math.sqrt(e * c) - 1) / math.expm1(sv) if e * c > 1 else 0.5
    z_old, zp_old = raised_pair(q, sv, T)
    z, zp = zp_old, z_old
    achieved = measure.tis_excess(z, zp, T, c)
    params = {"osc": osc, "T": T, "c": c}
    return _w("pg_bias_tis_small_cap", params, achieved, {"z": z, "z_prime": zp}, **params)


def _w_tis_small_ratio(r: float, c: float) -> Witness:
    e = math.exp(r)  # two atoms w = e^{±r}; π' = (e^r, 1)/(1 + e^r)
    z, zp = _probs_pair([1 / (1 + e), e / (1 + e)], [e / (1 + e), 1 / (1 + e)])
    achieved = measure.tis_excess(z, zp, 1.0, c)
    return _w("pg_bias_tis_small_cap_ratio", {"r": r, "c": c}, achieved, {"z": z}, r=r, c=c)


def _w_tis_small_tv(eps: float, c: float, eta: float = 1e-12) -> Witness:
    # π' puts ε on a token π keeps almost nothing of (w → 0), the rest has w ≥ 1
    z, zp = _probs_pair([eps * eta, 1 - eps * eta], [eps, 1 - eps])
    achieved = measure.tis_excess(z, zp, 1.0, c)
    return _w("pg_bias_tis_small_cap_tv", {"eps": eps, "c": c}, achieved, {"z": z}, eps=eps, c=c)


def _w_band(name: str, osc: float, T: float, lo_: float, hi_: float, params: dict) -> Witness:
    z, zp = band_pair(osc / T, T, lo_, hi_)
    achieved = band_dropped_mass(z, zp, T, lo_, hi_)
    return _w(name, {"osc": osc, "T": T, **params}, achieved, {"z": z, "z_prime": zp}, osc=osc,
              T=T, **params)  # fmt: skip


def _w_icepop(osc: float, T: float, lo: float, hi: float) -> Witness:
    return _w_band("pg_bias_icepop", osc, T, lo, hi, {"lo": lo, "hi": hi})


def _w_ppo_clip(osc: float, T: float, clip_epsilon: float) -> Witness:
    e = clip_epsilon
    return _w_band("pg_bias_ppo_clip", osc, T, 1 - e, 1 + e, {"clip_epsilon": e})


def _w_icepop_ratio(r: float, lo: float, hi: float) -> Witness:
    z, zp = _probs_pair(*ratio_band_laws(r, lo, hi))
    achieved = band_dropped_mass(z, zp, 1.0, lo, hi)
    params = {"r": r, "lo": lo, "hi": hi}
    return _w("pg_bias_icepop_ratio", params, achieved, {"z": z, "z_prime": zp}, **params)


def _w_icepop_tv(eps: float, lo: float, hi: float) -> Witness:
    z, zp = _probs_pair(*tv_band_laws(eps, lo, hi))
    achieved = band_dropped_mass(z, zp, 1.0, lo, hi)
    params = {"eps": eps, "lo": lo, "hi": hi}
    return _w("pg_bias_icepop_tv", params, achieved, {"z": z, "z_prime": zp}, **params)


def _w_geo(osc: float, T: float, lo: float, hi: float, L: int) -> Witness:
    params = {"osc": osc, "T": T, "lo": lo, "hi": hi, "L": L}
    achieved, instance = _geo_instance(osc, T, lo, hi, L)
    return _w("pg_bias_geo_mask", params, achieved, instance, **params)


def _geo_instance(osc: float, T: float, lo: float, hi: float, L: int) -> tuple[float, dict]:
    sv = osc / T
    x = math.exp(sv)
    if L == 1 or (lo > 0 and x > hi / lo) or sv == 0:  # a sequence of one token: the band
        z, zp = band_pair(sv, T, lo, hi)
        return geo_dropped_mass(z, zp, T, lo, hi, 0.0, 1), {"z": z, "z_prime": zp}
    # the other L − 1 tokens at log w → −s (lower side) or +s (upper side): prefix steps of
    # explicit pairs whose sampled token has that ratio
    zs, zsp, low = low_pair(sv, T)
    sides = []
    for sign in (-1.0, 1.0):
        others = (L - 1) * (low if sign < 0 else -low)
        # the band the current token meets, in log space (clamped: only its side of 1 matters
        # beyond e^{±1}, and hi^L overflows a float)
        band_lo = math.exp(min(L * math.log(lo) - others, 1.0)) if lo > 0 else 0.0
        band_hi = math.exp(max(min(L * math.log(hi) - others, 700.0), -1.0))
        if band_lo >= 1 or band_hi <= 1:  # the band misses w ≡ 1: an identical pair drops all
            z, zp = np.zeros(2), np.zeros(2)
        else:
            z, zp = band_pair(sv, T, band_lo, band_hi)
        sides.append((geo_dropped_mass(z, zp, T, lo, hi, others, L), z, zp, others))
    achieved, z, zp, others = max(sides, key=lambda t: t[0])
    return achieved, {"z": z, "z_prime": zp, "prefix_pair": (zs, zsp), "others": others, "n": L}


def _w_geo_ratio(r: float, lo: float, hi: float, L: int) -> Witness:
    # |log w| ≤ r: the other L − 1 tokens at ∓r, the current token's two atoms of the ratio
    # premise against the band it meets (or one token meeting [lo, hi] itself)
    params = {"r": r, "lo": lo, "hi": hi, "L": L}
    best = (-1.0, None)
    for n, each in ((1, 0.0), (L, -r), (L, r)):
        others = (n - 1) * each
        band_lo = math.exp(min(n * math.log(lo) - others, 1.0)) if lo > 0 else 0.0
        band_hi = math.exp(max(min(n * math.log(hi) - others, 700.0), -1.0))
        if band_lo >= 1 or band_hi <= 1:
            z = zp = np.zeros(2)
        else:
            z, zp = _probs_pair(*ratio_band_laws(r, band_lo, band_hi))
        got = geo_dropped_mass(z, zp, 1.0, lo, hi, others, n)
        best = max(best, (got, (z, zp, others, n)), key=lambda t: t[0])
    achieved, (z, zp, others, n) = best
    instance = {"z": z, "z_prime": zp, "others": others, "n": n}
    return _w("pg_bias_geo_mask_ratio", params, achieved, instance, **params)


def _w_tv_mask(osc: float, T: float, tau: float) -> Witness:
    sv = osc / T
    z, zp = tilt_pair(1.0 / (1.0 + math.exp(min(sv / 2, 700.0))), sv, T)
    tv = measure.tv(z, zp, T)
    achieved = 1.0 if tv > tau else 0.0  # dropped: the whole E_π g is missing
    params = {"osc": osc, "T": T, "tau": tau}
    return _w("pg_bias_tv_mask", params, achieved, {"z": z, "tv": tv}, eps=math.tanh(sv / 4),
              tau=tau)  # fmt: skip


def _w_kl_mask(osc: float, T: float, tau: float) -> Witness:
    sv = osc / T
    p = 0.5 - sv / 12.0 if sv < 1e-4 else 1.0 / sv - 1.0 / math.expm1(sv)
    zp, z = tilt_pair(p, sv, T)  # KL(π'‖π) of this pair is the two-point supremum
    kl = measure.kl(z, zp, T, reverse=True)
    achieved = 1.0 if kl > tau else 0.0
    bound_kappa = float(sympy.N(kl_tilt_sup(sympy.Float(sv, 40)), 30))
    params = {"osc": osc, "T": T, "tau": tau}
    return _w("pg_bias_kl_mask", params, achieved, {"z": z, "kl": kl}, kappa=bound_kappa, tau=tau)


def _w_seq_tis(osc: float, T: float, c: float, L: int) -> Witness:
    q, achieved = best_iid_seq_tis(osc / T, L, c)
    name = "pg_bias_seq_tis" if c > 1 else "pg_bias_seq_tis_small_cap"
    params = {"osc": osc, "T": T, "c": c, "L": L}
    return _w(name, params, L * achieved, {"q": q, "iid": True}, **params)


def _w_seq_tis_tv(eps: float, c: float, L: int, eta: float = 1e-12) -> Witness:
    # c ≥ 1: π leaks ε per step to a token π' almost never samples; (W − c)₊ ≈ π(some leak)
    achieved = iid_excess(eps, eps * eta, L, c)
    params = {"eps": eps, "c": c, "L": L}
    return _w("pg_bias_seq_tis_tv", params, L * achieved, {"leak": eps, "L": L}, **params)


def _w_seq_is(osc: float, T: float, L: int) -> Witness:
    bias = seq_is_bias(osc / T, L)  # exact rational sums: 0 exactly
    return Witness("pg_bias_seq_is", {"osc": osc, "T": T, "L": L}, bias, 0.0, {"L": L})


def _w_geo_tv(eps: float, lo: float, hi: float, L: int) -> Witness:
    # a prefix token with w → 0 costs TV ≈ its π'-mass (w → ∞ costs ≈ its π-mass, for a band
    # without a lower end); the position after it is dropped
    tiny, some = [eps * 1e-200, 1 - eps * 1e-200], [eps, 1 - eps]
    zs, zsp = _probs_pair(tiny, some) if lo > 0 else _probs_pair(some, tiny)
    others = float(measure.log_ratio(zs, zsp, 1.0)[0])
    z = np.zeros(2)
    achieved = geo_dropped_mass(z, z, 1.0, lo, hi, others, 2) if L >= 2 else 0.0
    params = {"eps": eps, "lo": lo, "hi": hi, "L": L}
    return Witness("pg_bias_geo_mask_tv", params, achieved, 1.0, {"prefix": (zs, zsp)})


def _w_dppo_tv(osc: float, T: float, tau: float) -> Witness:
    # two tokens at the TV supremum: each token's binary TV is the TV, one rises and one falls,
    # so the advantage's signs (+ on the risen, − on the fallen) drop both once TV > τ
    sv = osc / T
    z, zp = tilt_pair(1.0 / (1.0 + math.exp(min(sv / 2, 700.0))), sv, T)
    achieved = dppo_dropped_mass(z, zp, T, tau, "tv")
    params = {"osc": osc, "T": T, "tau": tau}
    return _w("pg_bias_dppo_tv", params, achieved, {"z": z, "z_prime": zp},
              eps=math.tanh(sv / 4), tau=tau)  # fmt: skip


def _w_dppo_kl(osc: float, T: float, tau: float) -> Witness:
    sv = osc / T
    p = 0.5 - sv / 12.0 if sv < 1e-4 else 1.0 / sv - 1.0 / math.expm1(sv)
    zp, z = tilt_pair(p, sv, T)  # the KL(π'‖π) two-point supremum, as kl_mask's witness
    achieved = dppo_dropped_mass(z, zp, T, tau, "kl")
    bound_kappa = float(sympy.N(kl_tilt_sup(sympy.Float(sv, 40)), 30))
    params = {"osc": osc, "T": T, "tau": tau}
    return _w("pg_bias_dppo_kl", params, achieved, {"z": z, "z_prime": zp}, kappa=bound_kappa,
              tau=tau)  # fmt: skip


def _w_dual_clip(osc: float, T: float, clip_epsilon: float, c: float) -> Witness:
    # the band [1 − ε, min(1 + ε, c)]; a token above min(1 + ε, c) is dropped with A > 0 (above
    # 1 + ε) or A < 0 (above c), one below 1 − ε with A < 0
    e, hi_ = clip_epsilon, min(1 + clip_epsilon, c)
    z, zp = band_pair(osc / T, T, 1 - e, hi_)
    lw = measure.log_ratio(z, zp, T)
    w, prob = np.exp(lw), np.exp(measure.log_softmax(z, T))
    dropped = (w > 1 + e) | (w < 1 - e) | (w > c)
    params = {"osc": osc, "T": T, "clip_epsilon": e, "c": c}
    return _w("pg_bias_dual_clip", params, float(np.sum(prob[dropped])), {"z": z, "z_prime": zp},
              **params)  # fmt: skip


def _outlier_prefix(x_log: float, lo: float, hi: float, T: float, ratio: bool):
    """A prefix step whose sampled token's log ratio is (near) +x_log or −x_log, whichever
    leaves [lo, hi]; None when neither can."""
    if x_log > math.log(hi):
        sign = 1.0
    elif lo > 0 and -x_log < math.log(lo):
        sign = -1.0
    else:
        return None
    if ratio:  # |log w| ≤ r: two atoms w = e^{±r} exactly
        e = math.exp(x_log)
        zs, zsp = _probs_pair([1 / (1 + e), e / (1 + e)], [e / (1 + e), 1 / (1 + e)])
        return zs, zsp, 1 if sign > 0 else 0
    if sign > 0:  # π' almost never samples the raised token: its w tends to e^s
        zs, zsp = raised_pair(1e-12, x_log, T)
        return zs, zsp, 0
    zs, zsp, _ = low_pair(x_log, T)  # token 1's w tends to e^{−s}
    return zs, zsp, 1


def _outlier_witness(name: str, x_log: float, temp: float, band: tuple[float, float], L: int,
                     ratio: bool, params: dict, bound_values: dict) -> Witness:  # fmt: skip
    lo, hi = band
    prefix = _outlier_prefix(x_log, lo, hi, temp, ratio) if L >= 2 else None
    if prefix is None:  # no token can leave the band: nothing is dropped
        return _w(name, params, 0.0, {"prefix": None}, **bound_values)
    zs, zsp, token = prefix
    lw = float(measure.log_ratio(zs, zsp, temp)[token])
    out = lw > math.log(hi) or (lo > 0 and lw < math.log(lo))
    # the current position, any pair: dropped entirely when its prefix token left the band
    achieved = 1.0 if out else 0.0
    return _w(name, params, achieved, {"prefix": (zs, zsp), "token": token, "log_w": lw},
              **bound_values)  # fmt: skip


def _w_seq_outlier(osc: float, T: float, lo: float, hi: float, L: int) -> Witness:
    params = {"osc": osc, "T": T, "lo": lo, "hi": hi, "L": L}
    bound = {"osc": osc, "T": T, "lo": lo, "hi": hi}
    return _outlier_witness("pg_bias_seq_outlier", osc / T, T, (lo, hi), L, False, params, bound)


def _w_seq_outlier_ratio(r: float, lo: float, hi: float, L: int) -> Witness:
    params = {"r": r, "lo": lo, "hi": hi, "L": L}
    bound = {"r": r, "lo": lo, "hi": hi}
    return _outlier_witness("pg_bias_seq_outlier_ratio", r, 1.0, (lo, hi), L, True, params, bound)


def _w_seq_mask(osc: float, T: float, lo: float, hi: float, L: int) -> Witness:
    q, achieved = best_iid_seq_mask(osc / T, L, lo, hi)
    params = {"osc": osc, "T": T, "lo": lo, "hi": hi, "L": L}
    return _w("pg_bias_seq_mask", params, L * achieved, {"q": q, "iid": True}, **params)


def _w_tis_mask(osc: float, T: float, c: float, lo: float, hi: float) -> Witness:
    sv, params = osc / T, {"osc": osc, "T": T, "c": c, "lo": lo, "hi": hi}
    if c >= hi:  # the cap never bites on a kept token: the band's witness
        z, zp = band_pair(sv, T, lo, hi)
        achieved = tis_mask_discrepancy(z, zp, T, c, lo, hi)
        return _w("pg_bias_tis_mask", params, achieved, {"z": z, "z_prime": zp}, osc=osc, T=T,
                  lo=lo, hi=hi)  # fmt: skip
    # c < hi: the better of the band's and the TIS witness (c > 1) measured on ω itself
    pairs = [band_pair(sv, T, lo, hi)]
    e = math.exp(sv)
    if e > c > 1:
        pairs.append(raised_pair((math.sqrt(e / c) - 1) / math.expm1(sv), sv, T))
    got = [(tis_mask_discrepancy(z, zp, T, c, lo, hi), z, zp) for z, zp in pairs]
    achieved, z, zp = max(got, key=lambda t: t[0])
    return _w("pg_bias_tis_mask_sum", params, achieved, {"z": z, "z_prime": zp}, **params)


def _w_opsm(osc: float, T: float, tau: float, L: int) -> Witness:
    # the geometric-mean band [e^{−δ}, ∞) with A < 0 on every token: geo_mask's witness
    achieved, instance = _geo_instance(osc, T, math.exp(-tau), _NO_UPPER, L)
    params = {"osc": osc, "T": T, "tau": tau, "L": L}
    return _w("pg_bias_opsm", params, achieved, instance, **params)


def _w_kl_reject(osc: float, T: float, tau: float) -> Witness:
    # one token_k2 criterion: the band e^{±√(2τ)} on w, icepop's witness
    x = math.exp(math.sqrt(2 * tau))
    z, zp = band_pair(osc / T, T, 1 / x, x)
    lw = measure.log_ratio(z, zp, T)
    dropped = 0.5 * lw**2 > tau  # the criterion itself, on the pair
    achieved = float(np.sum(np.exp(measure.log_softmax(z, T))[dropped]))
    params = {"osc": osc, "T": T, "tau": tau}
    return _w("pg_bias_kl_reject", params, achieved, {"z": z, "z_prime": zp}, **params)


_TOK = "per-token ‖∇ log π(y)‖ ≤ G and |A(y)| ≤ A (assumptions of the guarantee)"
_SEQ = (
    "per-sequence ‖Σ_t ∇log π(y_t | y_<t)‖ ≤ L·G (at most L tokens, each ≤ G) and |A(y)| ≤ A; "
    "both sequence laws autoregressive, the per-token premise at every step and prefix"
)
_SUPPORT = "support_overlap: π' > 0 wherever π > 0 (softmax logits are finite)"
_BAND = "0 ≤ lo < 1 < hi; a token is kept when lo ≤ w ≤ hi"
_ALIGN = "g = ∇log π·A of norm G·A, aligned on the dropped tokens"


def _lemma(name, premises, conclusion, assumptions, reference, tightness, witness=None) -> Lemma:
    return Lemma(name, premises, conclusion, assumptions, EXPR[name], reference, tightness, witness)


_OSC, _RATIO, _TV = ("osc(Δ) ≤ osc",), ("|log w| ≤ r",), ("TV(π, π') ≤ ε",)

CORRECTION_LEMMAS: tuple[Lemma, ...] = (
    _lemma("pg_bias_tis_small_cap", _OSC,
           "bias of E_π'[min(w, c)·g] ≤ G·A·(1 − c + (√c·e^{s/2} − 1)₊²/(e^s − 1)), 0 < c ≤ 1",
           (_TOK, _SUPPORT, "cap 0 < c ≤ 1"),
           "E(w − c)₊ = 1 − c + E(c − w)₊; E_π'(c − w)₊ = c·E_π(π'/π − 1/c)₊ is a TIS excess at "
           "cap 1/c ≥ 1 of the swapped pair (a tilt of the same range)",
           "attained (the TIS witness at cap 1/c, swapped); c = 1 gives tanh(s/4)", _w_tis_small),
    _lemma("pg_bias_tis_small_cap_ratio", _RATIO,
           "bias ≤ G·A·(1 − c + (c·e^r − 1)₊/(1 + e^r)), 0 ≤ c ≤ 1", (_TOK, _SUPPORT),
           "(c − w)₊ is convex in w with E_π' w = 1 and w ∈ [e^{−r}, e^r]",
           "attained (two tokens with w = e^{±r})", _w_tis_small_ratio),
    _lemma("pg_bias_tis_small_cap_tv", _TV, "bias ≤ G·A·(1 − c + c·ε), 0 ≤ c ≤ 1",
           (_TOK, _SUPPORT), "(c − w)₊ ≤ c·(1 − w)₊ and E_π'(1 − w)₊ = TV",
           "supremum, approached (π' puts ε on a token π almost never takes)", _w_tis_small_tv),
    _lemma("pg_bias_tis_zero_cap", ("any premise",),
           "c = 0: ω = 0, the estimate is 0 and its bias is ‖E_π g‖ ≤ G·A", (_TOK,),
           "E_π'[0·g] − E_π[g] = −E_π[g]", "attained (g aligned)", _w_tis_small),
    _lemma("pg_bias_icepop", _OSC,
           "bias of E_π'[w·1{lo ≤ w ≤ hi}·g] ≤ G·A·min(1, max((e^s − hi)₊, (lo·e^s − 1)₊)/(e^s − 1)"
           " or 1 once e^s > hi/lo)", (_TOK, _SUPPORT, _BAND),
           "bias = E_π[1{w ∉ band}·g]; each side as MIS (upper) or its mirror (lower); both sides "
           "together need w spread by more than hi/lo, and then every token can be dropped",
           "supremum (approached at the band's ends), except on the jump's η-sliver below "
           "e^s = hi/lo where the written form is already 1", _w_icepop),
    _lemma("pg_bias_icepop_ratio", _RATIO,
           "bias ≤ G·A·(hi(e^r − 1)/(hi·e^r − 1) once e^r > hi; lo(e^r − 1)/(e^r − lo) once "
           "e^{−r} < lo; 1 once both)", (_TOK, _SUPPORT, _BAND),
           "π(w > hi) < hi·π'(w > hi) and π(w ≤ hi) ≥ e^{−r}·π'(w ≤ hi); mirrored below",
           "supremum, except on the η-slivers of its jumps", _w_icepop_ratio),
    _lemma("pg_bias_icepop_tv", _TV,
           "bias ≤ G·A·min(1, ε·(hi/(hi − 1) + lo/(1 − lo)))", (_TOK, _SUPPORT, _BAND),
           "π(w > hi) < hi/(hi − 1)·(π − π')(w > hi) ≤ hi/(hi − 1)·ε; π(w < lo) < lo/(1 − lo)·ε",
           "supremum, approached (w just outside the band on both sides)", _w_icepop_tv),
    _lemma("pg_bias_ppo_clip", _OSC,
           "bias of the clipped-surrogate gradient (old policy π') ≤ G·A·(icepop form at "
           "lo = 1 − ε, hi = 1 + ε)", (_TOK, _SUPPORT, "clip range 0 < ε < 1"),
           "ω = w unless clipped (A > 0, w > 1 + ε or A < 0, w < 1 − ε); the sign of A is free "
           "per token, so the worst case drops both sides as icepop does",
           "as pg_bias_icepop", _w_ppo_clip),
    _lemma("pg_bias_ppo_clip_ratio", _RATIO, "bias ≤ G·A·(icepop ratio form at 1 ∓ ε)",
           (_TOK, _SUPPORT, "clip range 0 < ε < 1"), "as pg_bias_icepop_ratio",
           "as pg_bias_icepop_ratio"),
    _lemma("pg_bias_ppo_clip_tv", _TV, "bias ≤ G·A·min(1, 2·ε_TV/ε)",
           (_TOK, _SUPPORT, "clip range 0 < ε < 1"), "icepop TV form: (1 + ε)/ε + (1 − ε)/ε = 2/ε",
           "supremum, approached"),
    _lemma("pg_bias_geo_mask", _OSC,
           "per position: bias ≤ G·A·min(1, max(((lo·e^s)^L − 1)₊, e^s(1 − (hi·e^{−s})^L)₊)"
           "/(e^s − 1) or 1 once e^s > hi/lo)", (_TOK, _SUPPORT, _BAND,
                                       "sequences of at most L = policy.max_new_tokens tokens"),
           "a position is dropped when (Σ_others log w + log w(y))/n ∉ [log lo, log hi]; the other "
           "n − 1 ≤ L − 1 log ratios lie in [−s, s], which moves the band the token meets to "
           "[lo^n e^{−σ}, hi^n e^{−σ}]; extremal at n = L, σ = ∓(L − 1)s",
           "supremum (the last position of a full sequence after L − 1 extreme tokens), except on "
           "the η-sliver below e^s = hi/lo", _w_geo),
    _lemma("pg_bias_geo_mask_ratio", _RATIO,
           "per position: bias ≤ G·A·(icepop ratio form at the band [l, h] the token meets, "
           "l = min(1, max(lo, lo^L e^{(L−1)r})), h = max(1, min(hi, hi^L e^{−(L−1)r})))",
           (_TOK, _SUPPORT, _BAND, "sequences of at most L = policy.max_new_tokens tokens"),
           "the other n − 1 ≤ L − 1 log ratios lie in [−r, r]; the two-atom ratio suprema are "
           "monotone in the band's ends, so extremal at n = L (or n = 1)",
           "supremum (two atoms e^{±r} or a band end, the other tokens at ∓r), except on the "
           "η-slivers of its jumps", _w_geo_ratio),
    _lemma("pg_bias_geo_mask_tv", _TV, "per position: bias ≤ G·A (L ≥ 2)", (_TOK, _SUPPORT, _BAND),
           "a TV premise leaves a sampled token's w free (w → 0 costs TV ≈ its π'-mass), so an "
           "earlier token can push the geometric mean out of any band", "attained (ε > 0)",
           _w_geo_tv),
    _lemma("pg_bias_tv_mask", ("TV(π, π') ≤ ε at every position",),
           "bias ≤ G·A·1{ε > τ}", (_TOK, _SUPPORT, "a position with TV > τ is dropped (ω = 0)"),
           "kept positions are unbiased (ω = w); a dropped one misses E_π g, of norm ≤ G·A",
           "supremum where ε is the TV supremum (tanh(s/4), tanh(r/2), a TV clause), except on "
           "the η-sliver below τ", _w_tv_mask),
    _lemma("pg_bias_kl_mask", ("KL(π'‖π) ≤ κ at every position",),
           "bias ≤ G·A·1{κ > τ}", (_TOK, _SUPPORT, "a position with KL(π'‖π) > τ is dropped"),
           "as pg_bias_tv_mask", "supremum where κ is the KL supremum (s ≥ 1/8, or r·tanh(r/2)), "
           "except on the η-sliver below τ", _w_kl_mask),
    _lemma("pg_bias_tv_mask_mean", ("mean per-position TV ≤ ε̄",), "E[bias] ≤ G·A·min(1, ε̄/τ)",
           (_TOK, _SUPPORT), "Markov: the dropped share P(TV > τ) ≤ ε̄/τ",
           "supremum for a mean-TV premise (positions at TV just above τ and at 0)"),
    _lemma("pg_bias_seq_is", ("any premise",), "bias of E_π'[W·g(y)] is 0", (_SEQ, _SUPPORT),
           "E_π'[W·g] = Σ_y π(y)·g(y) = E_π[g] whenever π' > 0 on π's support",
           "exact: the bias is 0 (its variance is another matter)", _w_seq_is),
    _lemma("pg_bias_seq_tis", _OSC,
           "bias of E_π'[min(W, c)·g(y)] ≤ L·G·A·min((e^{Ls} − c)₊/(1 + e^{Ls}), TV_L, k_c·L·κ), "
           "c > 1", (_SEQ, _SUPPORT, "cap c > 1"),
           "bias ≤ L·G·A·E_π'(W − c)₊; W ∈ [e^{−Ls}, e^{Ls}] with E_π' W = 1 (TIS ratio form); "
           "(W − c)₊ ≤ (W − 1)₊ whose mean is TV_L (coupling, Pinsker, Bretagnolle–Huber); "
           "(W − c)₊ ≤ k_c·(W log W − W + 1) whose mean is KL_L ≤ L·κ",
           "a bound; the gap to the best i.i.d. witness is measured", _w_seq_tis),
    _lemma("pg_bias_seq_tis_small_cap", _OSC,
           "bias ≤ L·G·A·min(1 − c + (c − e^{−Ls})₊/(1 + e^{−Ls}), 1 − c + c·TV_L), 0 ≤ c ≤ 1",
           (_SEQ, _SUPPORT, "cap 0 ≤ c ≤ 1"), "as pg_bias_seq_tis with (c − W)₊ ≤ c·(1 − W)₊",
           "a bound; c = 0 gives L·G·A, attained", _w_seq_tis),
    _lemma("pg_bias_seq_tis_tv", ("TV of next-token laws ≤ ε at every step",),
           "bias ≤ L·G·A·(1 − (1 − ε)^L) for c ≥ 1 (1 − c + c·that for c ≤ 1)", (_SEQ, _SUPPORT),
           "E_π'(W − c)₊ ≤ TV_L ≤ 1 − (1 − ε)^L (coupling)",
           "supremum, approached (π leaks ε per step to a token π' almost never samples)",
           _w_seq_tis_tv),
    _lemma("pg_bias_dppo_tv", ("TV(π, π') ≤ ε at every position",),
           "bias of DPPO's binary-TV mask ≤ G·A·1{ε > τ}",
           (_TOK, _SUPPORT, "a token is dropped when A > 0 and π(y) − π'(y) > τ, or A < 0 and "
            "π'(y) − π(y) > τ"),
           "|π(y) − π'(y)| ≤ TV: with ε ≤ τ nothing is dropped; kept tokens are unbiased",
           "supremum where ε is the TV supremum (tanh(s/4), tanh(r/2), a TV clause): two tokens, "
           "one risen and one fallen by the TV, both dropped under A = ±; except on the η-sliver "
           "below τ", _w_dppo_tv),
    _lemma("pg_bias_dppo_kl", ("KL(π'‖π) ≤ κ at every position",),
           "bias of DPPO's binary-KL mask ≤ G·A·1{κ > τ}",
           (_TOK, _SUPPORT, "a token is dropped when its binary KL(π'(y)‖π(y)) > τ and A pushes "
            "π(y) further from π'(y)"),
           "the binary KL is the KL of the laws of 1{y_t = y}: at most KL(π'‖π) (data processing)",
           "as pg_bias_kl_mask: two tokens, whose binary KL is the KL", _w_dppo_kl),
    _lemma("pg_bias_dual_clip", _OSC,
           "bias of the dual-clip surrogate's gradient (old policy π') ≤ G·A·(icepop form at "
           "lo = 1 − ε, hi = min(1 + ε, c))",
           (_TOK, _SUPPORT, "clip range 0 < ε < 1, dual-clip ratio c > 1"),
           "ω = 0 where A > 0 and w > 1 + ε, or A < 0 and (w < 1 − ε or w > c); the sign of A is "
           "free per token, so the worst case drops w ∉ [1 − ε, min(1 + ε, c)]",
           "as pg_bias_icepop", _w_dual_clip),
    _lemma("pg_bias_dual_clip_ratio", _RATIO, "bias ≤ G·A·(icepop ratio form at that band)",
           (_TOK, _SUPPORT, "0 < ε < 1, c > 1"), "as pg_bias_icepop_ratio",
           "as pg_bias_icepop_ratio"),
    _lemma("pg_bias_dual_clip_tv", _TV, "bias ≤ G·A·(icepop TV form at that band)",
           (_TOK, _SUPPORT, "0 < ε < 1, c > 1"), "as pg_bias_icepop_tv", "as pg_bias_icepop_tv"),
    _lemma("pg_bias_seq_outlier", _OSC,
           "per position (L ≥ 2): bias ≤ G·A·1{e^s > hi or lo·e^s > 1}",
           (_TOK, _SUPPORT, _BAND, "a sequence with one token outside [lo, hi] is dropped",
            "sequences of at most L = policy.max_new_tokens tokens"),
           "no token leaves the band when e^s ≤ hi and lo·e^s ≤ 1 (w ∈ [e^{−s}, e^s]); when one "
           "can, an earlier token outside the band drops the whole position (E_π' w = 1); one "
           "token (L = 1) is the icepop band",
           "supremum (an earlier token with w → e^{±s}), except on the η-slivers below e^s = hi "
           "and e^s = 1/lo", _w_seq_outlier),
    _lemma("pg_bias_seq_outlier_ratio", _RATIO,
           "per position (L ≥ 2): bias ≤ G·A·1{e^r > hi or lo·e^r > 1}",
           (_TOK, _SUPPORT, _BAND, "sequences of at most L tokens"), "as pg_bias_seq_outlier",
           "supremum (an earlier token with w = e^{±r}), except on the η-slivers",
           _w_seq_outlier_ratio),
    _lemma("pg_bias_seq_outlier_tv", _TV, "per position (L ≥ 2): bias ≤ G·A",
           (_TOK, _SUPPORT, _BAND), "a TV premise leaves a sampled token's w free",
           "attained (ε > 0)"),
    _lemma("pg_bias_seq_mask", _OSC,
           "bias of E_π'[W·1{lo ≤ W ≤ hi}·g(y)] ≤ L·G·A·min(hi·e^{−2 log²hi/(L s²)} + "
           "e^{−2 log²lo/(L s²)}, icepop ratio form at |log W| ≤ L·s, min(1, K·TV_L)), "
           "K = hi/(hi − 1) + lo/(1 − lo)",
           (_SEQ, _SUPPORT, _BAND, "a sequence whose W lies outside [lo, hi] is dropped"),
           "bias = ‖E_π[1{W ∉ band}·g(y)]‖ ≤ L·G·A·π_L(W ∉ band); Chernoff with Hoeffding's "
           "lemma per step bounds π_L(W > hi), Azuma under π (whose log-ratio drift is the KL, "
           "≥ 0) bounds π_L(W < lo); W ∈ [e^{−Ls}, e^{Ls}] with "
           "E_π' W = 1 gives the ratio form; π_L(W > hi) < hi/(hi − 1)·(π_L − π'_L)(W > hi) ≤ "
           "hi/(hi − 1)·TV_L and mirrored below; TV_L from the sequence-TV routes. One token "
           "(L = 1) is the icepop band",
           "a bound; the gap to the best i.i.d. two-point witness is measured", _w_seq_mask),
    _lemma("pg_bias_tis_mask", _OSC,
           "bias of E_π'[min(w, c)·1{lo ≤ w ≤ hi}·g] ≤ G·A·(icepop form), c ≥ hi",
           (_TOK, _SUPPORT, _BAND, "cap c ≥ hi"),
           "with c ≥ hi the cap never bites on a kept token: the estimator is the band mask",
           "as pg_bias_icepop", _w_tis_mask),
    _lemma("pg_bias_tis_mask_ratio", _RATIO, "bias ≤ G·A·(icepop ratio form), c ≥ hi",
           (_TOK, _SUPPORT, _BAND, "cap c ≥ hi"), "as pg_bias_tis_mask",
           "as pg_bias_icepop_ratio"),
    _lemma("pg_bias_tis_mask_tv", _TV, "bias ≤ G·A·(icepop TV form), c ≥ hi",
           (_TOK, _SUPPORT, _BAND, "cap c ≥ hi"), "as pg_bias_tis_mask", "as pg_bias_icepop_tv"),
    _lemma("pg_bias_tis_mask_sum", _OSC,
           "bias ≤ G·A·min(1, D_tis(c) + D_band), c < hi (D_tis: pg_bias_tis, or "
           "pg_bias_tis_small_cap for c ≤ 1; D_band: pg_bias_icepop)",
           (_TOK, _SUPPORT, _BAND, "cap 0 ≤ c < hi"),
           "|ω − w| = w on dropped tokens, (w − c)₊ on kept ones: at most w·1{w ∉ band} + "
           "(w − c)₊, whose means are at most the two suprema; and |ω − w| ≤ w, whose mean is 1",
           "a bound (each supremum alone is attained, their sum in general not); the gap to the "
           "better of the two witnesses is measured", _w_tis_mask),
    _lemma("pg_bias_tis_mask_sum_ratio", _RATIO,
           "bias ≤ G·A·min(1, TIS ratio form + icepop ratio form), c < hi",
           (_TOK, _SUPPORT, _BAND, "cap 0 ≤ c < hi"), "as pg_bias_tis_mask_sum", "a bound"),
    _lemma("pg_bias_tis_mask_sum_tv", _TV,
           "bias ≤ G·A·min(1, TIS TV form + icepop TV form), c < hi",
           (_TOK, _SUPPORT, _BAND, "cap 0 ≤ c < hi"), "as pg_bias_tis_mask_sum", "a bound"),
    _lemma("pg_bias_opsm", _OSC,
           "per position: bias ≤ G·A·(geo_mask form for the band [e^{−δ}, ∞): the lower side "
           "only)", (_TOK, _SUPPORT, "δ > 0; a sequence with A < 0 and mean log(π'/π) > δ is "
                     "dropped", "sequences of at most L = policy.max_new_tokens tokens"),
           "mean log(π'/π) > δ is a geometric mean of w below e^{−δ}; with A < 0 on every "
           "sequence (the worst sign) it is geo_mask's lower side",
           "as pg_bias_geo_mask (its witness with A < 0)", _w_opsm),
    _lemma("pg_bias_opsm_ratio", _RATIO,
           "per position: bias ≤ G·A·(geo_mask ratio form, band [e^{−δ}, ∞))",
           (_TOK, _SUPPORT, "sequences of at most L tokens"), "as pg_bias_geo_mask_ratio",
           "as pg_bias_geo_mask_ratio"),
    _lemma("pg_bias_opsm_tv", _TV,
           "bias ≤ G·A·min(1, ε/(e^δ − 1)) for L = 1; G·A for L ≥ 2",
           (_TOK, _SUPPORT), "as pg_bias_icepop_tv (L = 1) and pg_bias_geo_mask_tv (L ≥ 2)",
           "supremum, approached (L = 1); attained (L ≥ 2, ε > 0)"),
    _lemma("pg_bias_kl_reject", _OSC,
           "bias of E_π'[w·1{every criterion keeps y}·g] ≤ G·A·min(1, Σ_c D_c); shown for one "
           "token_k2 criterion, the icepop form at [e^{−√(2τ)}, e^{√(2τ)}]",
           (_TOK, _SUPPORT, "verl's criteria (contracts.rejection): k1 = −log w in a band, k2 = "
            "(log w)²/2 or k3 = w − 1 − log w at most τ, per token or by a sequence's sum, mean "
            "or maximum", "sequences of at most L = policy.max_new_tokens tokens"),
           "the chain drops the union of its criteria's drops: π(∪) ≤ Σ π(each). Per token each "
           "criterion is a band on w (k1: [1/b, 1/a]; k2: |log w| ≤ √(2τ); k3: between the roots "
           "of w − 1 − log w = τ, certified inward); seq_mean_k1 is geo_mask's band; seq_max is "
           "seq_outlier's band; seq_mean and seq_sum of k2, k3 drop nothing unless k_max > τ "
           "(resp. L·k_max > τ), k_max = s²/2 or e^s − 1 − s, and at most everything then",
           "one criterion: as the estimator it equals (icepop, geo_mask, seq_outlier: supremum) "
           "or a step that is the supremum where the other L − 1 tokens alone pass the threshold; "
           "k3 bands and chains of several criteria: bounds, not marked attained", _w_kl_reject),
    _lemma("pg_bias_kl_reject_ratio", _RATIO, "bias ≤ G·A·min(1, Σ_c D_c) (ratio forms)",
           (_TOK, _SUPPORT, "sequences of at most L tokens"), "as pg_bias_kl_reject",
           "as pg_bias_kl_reject"),
    _lemma("pg_bias_kl_reject_tv", _TV,
           "bias ≤ G·A·min(1, Σ_c D_c): band TV forms per token, 1 for a sequence criterion "
           "(L ≥ 2)", (_TOK, _SUPPORT), "as pg_bias_icepop_tv and pg_bias_seq_outlier_tv",
           "as pg_bias_kl_reject"),
    _lemma("pg_bias_sequence_mask_exceedance",
           ("P(osc > osc_thr) ≤ ρ over positions (statistical clause)",),
           "E[bias] ≤ G·A·((1 − ρ')·D(osc_thr) + ρ'), ρ' = min(1, L·ρ)",
           (_TOK, _SUPPORT, "the statistical clause holds", "sequences of at most L tokens"),
           "as pg_bias_geo_mask_exceedance, for every mask one token can trip for its whole "
           "sequence (seq_outlier, opsm)", "a bound"),
    _lemma("pg_bias_correction_exceedance",
           ("P(osc > osc_thr) ≤ ρ over positions (statistical clause)",),
           "E[bias] ≤ G·A·((1 − ρ)·D(osc_thr) + ρ), D the estimator's per-position supremum",
           (_TOK, _SUPPORT, "the statistical clause holds"),
           "split the expectation on the exceedance event; every per-position discrepancy ≤ 1",
           "supremum when D(osc_thr) is (mixture of D's witness and a saturated position)"),
    _lemma("pg_bias_geo_mask_exceedance",
           ("P(osc > osc_thr) ≤ ρ over positions (statistical clause)",),
           "E[bias] ≤ G·A·((1 − ρ')·D_geo(osc_thr) + ρ'), ρ' = min(1, L·ρ)",
           (_TOK, _SUPPORT, "the statistical clause holds", "sequences of at most L tokens"),
           "an exceeding position can drop every position of its sequence (at most L of them); "
           "the others see only tokens within the level", "a bound"),
    *TIS_CLIP_LEMMAS,
    *TIS_NORM_LEMMAS,
    *GSPO_LEMMAS,
    *CISPO_LEMMAS,
    *SAPO_LEMMAS,
    *VESPO_LEMMAS,
    *COV_LEMMAS,
)  # fmt: skip
