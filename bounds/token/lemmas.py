"""Token-level links: logit drift → oscillation → log ratio, total variation and KL.

Setting: Δ = z' − z, f = Δ/T. Then π' = π·e^f / E_π[e^f] is an exponential tilt of π whose
tilt f ranges over an interval of width s = osc(Δ)/T ≤ 2δ/T. Every bound below is a supremum
over all such tilts (of any vocabulary size), and each witness is a two-token instance that
attains or approaches it.
"""

from __future__ import annotations

import math

import numpy as np
import sympy

from kernel_contracts.bounds import measure
from kernel_contracts.bounds.lemma import SYMBOLS, Lemma, Witness

__all__ = [
    "KL_SWITCH",
    "TOKEN_LEMMAS",
    "kl_tilt_sup",
    "signed_ratio_pair",
    "symmetric_kl_pair",
    "tilt_pair",
]

delta, osc, r, T = SYMBOLS["delta"], SYMBOLS["osc"], SYMBOLS["r"], SYMBOLS["T"]
kappa, theta = SYMBOLS["kappa"], SYMBOLS["theta"]

# Below this tilt range the Hoeffding form s²/8 is used (within a factor 1 − s²/24 of exact);
# above it the exact two-point supremum, whose closed form is 0/0 at s = 0.
KL_SWITCH = sympy.Rational(1, 8)


def _kl_two_point(x: sympy.Expr) -> sympy.Expr:
    """sup over tilts of range x of log E e^f − E f: log((e^x − 1)/x) − 1 + x/(e^x − 1)."""
    return sympy.log((sympy.exp(x) - 1) / x) - 1 + x / (sympy.exp(x) - 1)


def kl_tilt_sup(s: sympy.Expr) -> sympy.Expr:
    """A bound on KL (both directions) for tilts of range ``s``, exact for s ≥ 1/8.

    K is increasing, so K(max(s, 1/8)) ≥ K(s); the minimum with s²/8 keeps it first-order
    tight near 0 and free of the 0/0 of K's closed form at s = 0.
    """
    return sympy.Min(s**2 / 8, _kl_two_point(sympy.Max(s, KL_SWITCH)))


def tilt_pair(p_high: float, s: float, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """Two-token logits (z, z'): π puts ``p_high`` on token 0, and Δ/T = (+s/2, −s/2)."""
    z = temperature * np.array([math.log(p_high), math.log1p(-p_high)])
    shift = temperature * s / 2.0
    return z, z + np.array([shift, -shift])


def _witness_drift(delta: float) -> Witness:
    z = np.zeros(2)
    zp = np.array([delta, -delta])
    achieved = float(np.max(zp - z) - np.min(zp - z))
    return Witness(
        "drift_to_oscillation", {"delta": delta}, achieved, 2 * delta, {"z": z, "z_prime": zp}
    )


def _witness_log_ratio(osc: float, T: float, eta: float = 1e-12) -> Witness:
    # π = (1 − η, η), Δ = (osc, 0): the ratio of token 1 tends to e^{osc/T} as η → 0.
    z = T * np.array([math.log1p(-eta), math.log(eta)])
    zp = z + np.array([osc, 0.0])
    achieved = measure.max_abs_log_ratio(z, zp, T)
    return Witness(
        "token_log_ratio", {"osc": osc, "T": T}, achieved, osc / T, {"z": z, "z_prime": zp, "T": T}
    )


def _witness_ratio_tv(r: float) -> Witness:
    # π = softmax(0, r), π' = softmax(r, 0): w = e^{∓r} and TV = tanh(r/2).
    z, zp = np.array([0.0, r]), np.array([r, 0.0])
    achieved = measure.tv(z, zp, 1.0)
    return Witness(
        "ratio_to_tv", {"r": r}, achieved, math.tanh(r / 2), {"z": z, "z_prime": zp, "T": 1.0}
    )


def _witness_sampled_ratio_tv(r: float) -> Witness:
    # π' = (1 − η, η), w = e^{−r} on the likely token: a sampled token has |log w| ≤ r with
    # π'-probability 1 − η, and TV = (1 − η)(1 − e^{−r}) → 1 − e^{−r} > tanh(r/2).
    eta = 1e-9
    zp = np.array([math.log1p(-eta), math.log(eta)])
    z = np.array([math.log1p(-eta) - r, math.log1p(-(1 - eta) * math.exp(-r))])
    achieved = measure.tv(z, zp, 1.0)
    return Witness(
        "sampled_ratio_to_tv",
        {"r": r},
        achieved,
        -math.expm1(-r),
        {"z": z, "z_prime": zp, "T": 1.0, "eta": eta},
    )


def _witness_tv(osc: float, T: float) -> Witness:
    s = osc / T
    p = 1.0 / (1.0 + math.exp(min(s / 2, 700.0)))  # π-mass on the side the tilt raises
    z, zp = tilt_pair(p, s, T)
    achieved = measure.tv(z, zp, T)
    return Witness(
        "token_tv_tanh",
        {"osc": osc, "T": T},
        achieved,
        math.tanh(s / 4),
        {"z": z, "z_prime": zp, "T": T},
    )


def _witness_kl(osc: float, T: float, reverse: bool = False) -> Witness:
    s = osc / T
    # KL(π‖π') = log E_π e^f − E_π f over f ∈ {0, s} is largest at π(f = s) = 1/s − 1/(e^s − 1).
    p = 0.5 - s / 12.0 if s < 1e-4 else 1.0 / s - 1.0 / math.expm1(s)
    z, zp = tilt_pair(p, s, T)
    if reverse:  # KL(π'‖π) of the swapped pair is KL(π‖π') of this one
        z, zp = zp, z
    achieved = measure.kl(z, zp, T, reverse=reverse)
    return Witness(
        "token_kl_hoeffding",
        {"osc": osc, "T": T},
        achieved,
        s * s / 8,
        {"z": z, "z_prime": zp, "T": T},
    )


def _witness_kl_exact(osc: float, T: float) -> Witness:
    w = _witness_kl(osc, T)
    bound = float(sympy.N(kl_tilt_sup(sympy.Float(osc, 40) / sympy.Float(T, 40)), 30))
    return Witness("token_kl_exact", w.params, w.achieved, bound, w.instance)


def _witness_ratio_kl(r: float) -> Witness:
    z, zp = np.array([0.0, r]), np.array([r, 0.0])
    achieved = measure.kl(z, zp, 1.0)
    return Witness(
        "ratio_to_kl", {"r": r}, achieved, r * math.tanh(r / 2), {"z": z, "z_prime": zp, "T": 1.0}
    )


def symmetric_kl_pair(kappa: float) -> tuple[np.ndarray, np.ndarray]:
    """Two-token logits (z, z') with π = (½ + t, ½ − t), π' = (½ − t, ½ + t) and
    KL(π‖π') = KL(π'‖π) = 4t·atanh(2t) = ``kappa`` (t by bisection; t → ½ as κ → ∞)."""
    lo, hi = 0.0, 0.5
    for _ in range(200):
        t = (lo + hi) / 2
        if 4 * t * math.atanh(min(2 * t, 1 - 1e-16)) < kappa:
            lo = t
        else:
            hi = t
    t = lo
    z = np.array([math.log(0.5 + t), math.log(0.5 - t) if t < 0.5 else -800.0])
    return z, z[::-1].copy()


def _witness_mean_kl_tv(kappa: float) -> Witness:
    # every position carries the same symmetric pair: E[kl] = κ, and E[TV] = 2t → √(κ/2)
    z, zp = symmetric_kl_pair(kappa)
    achieved = measure.tv(z, zp, 1.0)
    bound = min(1.0, math.sqrt(kappa / 2))
    return Witness("mean_kl_to_tv", {"kappa": kappa}, achieved, bound,
                   {"z": z, "z_prime": zp, "T": 1.0, "every_position": True})  # fmt: skip


def signed_ratio_pair(theta: float, eta: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """Two-token logits (z, z') with π' = (e^{−θ}, 1 − e^{−θ}) and π = (1 − η', η'),
    η' = η·(1 − e^{−θ}): w = π/π' ≤ e^θ on both tokens, and TV → 1 − e^{−θ} as η → 0."""
    if theta == 0.0:
        return np.zeros(2), np.zeros(2)
    rest = -math.expm1(-theta)
    small = eta * rest
    zp = np.array([-theta, math.log(rest)])
    return np.array([math.log1p(-small), math.log(small)]), zp


def _witness_signed_ratio_tv(theta: float) -> Witness:
    z, zp = signed_ratio_pair(theta)
    achieved = measure.tv(z, zp, 1.0)
    return Witness("signed_ratio_to_tv", {"theta": theta}, achieved, -math.expm1(-theta),
                   {"z": z, "z_prime": zp, "T": 1.0})  # fmt: skip


_TILT = "π' = π·e^{Δ/T}/E_π[e^{Δ/T}] (softmax at a common temperature T)"

TOKEN_LEMMAS: tuple[Lemma, ...] = (
    Lemma(
        name="drift_to_oscillation",
        premises=("‖z' − z‖∞ ≤ δ",),
        conclusion="osc(Δ) = max Δ − min Δ ≤ 2δ",
        assumptions=(),
        expr=2 * delta,
        reference="definition of the sup norm",
        tightness="attained (Δ = ±δ)",
        witness=_witness_drift,
    ),
    Lemma(
        name="token_log_ratio",
        premises=("osc(Δ) ≤ osc",),
        conclusion="|log w(y)| ≤ osc/T for every token y",
        assumptions=(_TILT,),
        expr=osc / T,
        reference="log w(y) = −Δ_y/T + log E_π[e^{Δ/T}], and the log-mean lies in [min Δ, max Δ]/T",
        tightness="supremum, approached as π(y) → 0",
        witness=_witness_log_ratio,
    ),
    Lemma(
        name="token_tv_tanh",
        premises=("osc(Δ) ≤ osc",),
        conclusion="TV(π, π') ≤ tanh(osc/(4T))",
        assumptions=(_TILT,),
        expr=sympy.tanh(osc / (4 * T)),
        reference="extremal tilt: for fixed A, π'(A) − π(A) is largest when Δ is max on A and "
        "min off A; maximising p·e^s/(1 + p(e^s − 1)) − p over p gives tanh(s/4)",
        tightness="attained (two tokens, Δ = ±osc/2, π-mass 1/(1 + e^{osc/(2T)}) on the + side)",
        witness=_witness_tv,
    ),
    Lemma(
        name="token_tv_linear",
        premises=("osc(Δ) ≤ osc",),
        conclusion="TV(π, π') ≤ osc/(4T) (= δ/(2T) at osc = 2δ)",
        assumptions=(_TILT,),
        expr=osc / (4 * T),
        reference="tanh x ≤ x",
        tightness="looser than token_tv_tanh; first-order tight",
    ),
    Lemma(
        name="token_tv_exp",
        premises=("osc(Δ) ≤ osc",),
        conclusion="TV(π, π') ≤ (e^{osc/T} − 1)/2 (= ½(e^{2δ/T} − 1) at osc = 2δ)",
        assumptions=(_TILT,),
        expr=(sympy.exp(osc / T) - 1) / 2,
        reference="the commonly cited form: TV ≤ ½ E_π|w^{-1} − 1| with |log w| ≤ osc/T",
        tightness="looser; vacuous (≥ 1) once osc/T ≥ log 3",
    ),
    Lemma(
        name="sampled_ratio_to_tv",
        premises=("|log w(y)| ≤ r for the sampled token y ∼ π' (a rollout log's log ratio)",),
        conclusion="E_{y∼π'}[(1 − w(y))₊ · 1{|log w(y)| ≤ r}] ≤ 1 − e^{−r}, TV = E_{y∼π'}(1 − w)₊",
        assumptions=(),
        expr=1 - sympy.exp(-r),
        reference="(1 − w)₊ ≤ 1 − e^{−r} wherever log w ≥ −r; the tokens never sampled are "
        "not constrained, so tanh(r/2) does not follow",
        tightness="supremum (π'-mass → 0 on one token that takes the excess)",
        witness=_witness_sampled_ratio_tv,
    ),
    Lemma(
        name="mean_kl_to_tv",
        premises=("E[kl] ≤ κ over tokens, kl = max(KL(π‖π'), KL(π'‖π)) at each position",),
        conclusion="E[TV(π, π')] ≤ min(1, √(κ/2))",
        assumptions=(),
        expr=sympy.Min(sympy.sqrt(kappa / 2), 1),
        reference="Pinsker's inequality TV ≤ √(KL/2) holds for KL in either direction, so "
        "TV ≤ √(kl/2) at every position; √ is concave, so E√(kl/2) ≤ √(E[kl]/2) (Jensen); "
        "TV ≤ 1. Tsybakov, Introduction to Nonparametric Estimation (2009), Lemma 2.5",
        tightness="first order as κ → 0 (every position the same symmetric two-token pair)",
        witness=_witness_mean_kl_tv,
    ),
    Lemma(
        name="signed_ratio_to_tv",
        premises=("P_{y∼π'}(log w(y) > θ) = 0 (a zero exceedance rate of the signed log ratio)",),
        conclusion="TV(π, π') ≤ 1 − e^{−θ} at every position (TV = 0 at θ = 0)",
        assumptions=("π' has full support (an untruncated softmax)",),
        expr=1 - sympy.exp(-theta),
        reference="π' > 0 everywhere, so π ≤ e^θ·π' on every token. With A = {π > π'}, "
        "TV = π(A) − π'(A) ≤ min(1, e^θ·π'(A)) − π'(A) ≤ max_p (min(1, e^θ p) − p) = 1 − e^{−θ}, "
        "at p = e^{−θ}; at θ = 0, π ≤ π' on every token and both sum to 1, so π = π'",
        tightness="supremum, approached (π' = (e^{−θ}, 1 − e^{−θ}), π → (1, 0))",
        witness=_witness_signed_ratio_tv,
    ),
    Lemma(
        name="ratio_to_tv",
        premises=("|log w(y)| ≤ r for every token y",),
        conclusion="TV(π, π') ≤ tanh(r/2)",
        assumptions=("the log-ratio clause holds on the whole support",),
        expr=sympy.tanh(r / 2),
        reference="with A = {π' > π}: π(A) ≥ e^{−r}π'(A) and π(Aᶜ) ≤ e^{r}π'(Aᶜ); the two "
        "constraints meet at π'(A) = e^r/(1 + e^r)",
        tightness="attained (two tokens with w = e^{±r})",
        witness=_witness_ratio_tv,
    ),
    Lemma(
        name="token_kl_hoeffding",
        premises=("osc(Δ) ≤ osc",),
        conclusion="KL(π‖π') ≤ osc²/(8T²) and KL(π'‖π) ≤ osc²/(8T²)",
        assumptions=(_TILT,),
        expr=osc**2 / (8 * T**2),
        reference="KL(π‖π') = log E_π e^{f} − E_π f with f = Δ/T of range osc/T; Hoeffding's "
        "lemma (Hoeffding 1963). KL(π'‖π) likewise with −f under π'.",
        tightness="tight to first order as osc/T → 0 (two-point witness)",
        witness=_witness_kl,
    ),
    Lemma(
        name="token_kl_exact",
        premises=("osc(Δ) ≤ osc",),
        conclusion="KL(π‖π'), KL(π'‖π) ≤ min(s²/8, K(max(s, 1/8))), s = osc/T, "
        "K(x) = log((e^x − 1)/x) − 1 + x/(e^x − 1)",
        assumptions=(_TILT,),
        expr=kl_tilt_sup(osc / T),
        reference="for a fixed mean of f on [0, s], E e^f is largest for the two-point law on "
        "{0, s}; maximising log(1 − p + p e^s) − p s over p gives K(s) at p = 1/s − 1/(e^s − 1)",
        tightness="attained for osc/T ≥ 1/8; within 1 − (osc/T)²/24 below",
        witness=_witness_kl_exact,
    ),
    Lemma(
        name="ratio_to_kl",
        premises=("|log w(y)| ≤ r for every token y",),
        conclusion="KL(π‖π') ≤ r·tanh(r/2) and KL(π'‖π) ≤ r·tanh(r/2)",
        assumptions=("the log-ratio clause holds on the whole support",),
        expr=r * sympy.tanh(r / 2),
        reference="KL(π‖π') = E_π'[w log w] and KL(π'‖π) = E_π'[−log w] are convex in w with "
        "E_π' w = 1 and w ∈ [e^{−r}, e^r], so two-point laws on e^{±r} are extremal",
        tightness="attained (two tokens with w = e^{±r})",
        witness=_witness_ratio_kl,
    ),
)
