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

from bounds import measure
from bounds._evaluate import evaluate
from bounds.lemma import SYMBOLS, Lemma, Witness
from bounds.pg.closed_forms import (
    band_drift,
    band_ratio,
    band_tv,
    kl_iterate,
    seq_tis_kl,
    seq_tis_ratio,
    step_above,
    tis_small_cap_drift,
    tis_small_cap_ratio,
    tis_small_cap_tv,
)
from bounds.pg.witnesses import (
    band_dropped_mass,
    band_pair,
    best_iid_seq_tis,
    geo_dropped_mass,
    iid_excess,
    low_pair,
    raised_pair,
    ratio_band_laws,
    seq_is_bias,
    tv_band_laws,
)
from bounds.sequence.lemmas import sequence_tv_bound
from bounds.token.lemmas import kl_tilt_sup, tilt_pair

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
}


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
    sv, params = osc / T, {"osc": osc, "T": T, "lo": lo, "hi": hi, "L": L}
    x = math.exp(sv)
    if L == 1 or (lo > 0 and x > hi / lo) or sv == 0:  # a sequence of one token: the band
        z, zp = band_pair(sv, T, lo, hi)
        achieved = geo_dropped_mass(z, zp, T, lo, hi, 0.0, 1)
        return _w("pg_bias_geo_mask", params, achieved, {"z": z, "z_prime": zp}, **params)
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
    instance = {"z": z, "z_prime": zp, "prefix_pair": (zs, zsp), "others": others, "n": L}
    return _w("pg_bias_geo_mask", params, achieved, instance, **params)


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
)  # fmt: skip
