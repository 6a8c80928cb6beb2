"""RL links: reward drift, policy-gradient bias (plain, TIS with c > 1, MIS), PPO clip budget,
and the statistical premise folded into expectations. The other estimators (TIS with c ≤ 1,
ppo_clip, icepop, geo_mask, tv_mask, kl_mask, seq_is, seq_tis) are in ``bounds.pg.closed_forms``
(forms and exact suprema) and ``bounds.pg.lemmas`` (lemmas and witnesses).

Setting: rollouts sample from π' (inference kernel); the learner wants E_π (training kernel);
w = π/π'. With a per-token tilt range s = osc/T, w ∈ [e^{−s}, e^{s}]. The policy-gradient
bounds assume ‖∇ log π(y)‖ ≤ G and |A(y)| ≤ A per token; each is attained when ∇log π(y)·A(y)
has norm G·A and points the same way on the tokens that carry the bias.

References:
    Espeholt et al., "IMPALA" (2018) — truncated importance sampling with a cap c.
    Schulman et al., "Proximal Policy Optimization Algorithms" (2017) — the clip range ε.
"""

from __future__ import annotations

import math

import numpy as np
import sympy

from kernel_contracts.bounds import measure
from kernel_contracts.bounds.lemma import SYMBOLS, Lemma, Witness
from kernel_contracts.bounds.token.lemmas import tilt_pair

__all__ = [
    "RL_LEMMAS",
    "clip_budget_drift",
    "mis_drift",
    "mis_ratio",
    "tis_drift",
    "tis_ratio",
]

osc, r, eps, T = SYMBOLS["osc"], SYMBOLS["r"], SYMBOLS["eps"], SYMBOLS["T"]
c, G, A, span = SYMBOLS["c"], SYMBOLS["G"], SYMBOLS["A"], SYMBOLS["span"]
rho, L, clip_eps = SYMBOLS["rho"], SYMBOLS["L"], SYMBOLS["clip_epsilon"]


def tis_drift(s: sympy.Expr, cap: sympy.Expr) -> sympy.Expr:
    """sup E_π'[(w − c)₊] over tilts of range s: (e^{s/2} − √c)₊² / (e^s − 1).

    The denominator is written max(e^s − 1, c − 1): equal wherever the numerator is nonzero
    (e^s > c), and bounded away from 0 so the form has no 0/0.
    """
    num = sympy.Max(sympy.exp(s / 2) - sympy.sqrt(cap), 0) ** 2
    return num / sympy.Max(sympy.exp(s) - 1, cap - 1)


def mis_drift(s: sympy.Expr, cap: sympy.Expr) -> sympy.Expr:
    """sup π(w > c) over tilts of range s: (e^s − c)₊ / (e^s − 1) (same denominator device)."""
    return sympy.Max(sympy.exp(s) - cap, 0) / sympy.Max(sympy.exp(s) - 1, cap - 1)


def tis_ratio(r_: sympy.Expr, cap: sympy.Expr) -> sympy.Expr:
    """sup E_π'[(w − c)₊] when |log w| ≤ r: (e^r − c)₊ / (1 + e^r)."""
    return sympy.Max(sympy.exp(r_) - cap, 0) / (1 + sympy.exp(r_))


def mis_ratio(r_: sympy.Expr, cap: sympy.Expr) -> sympy.Expr:
    """A bound on π(w > c) when |log w| ≤ r: the tilt bound at range 2r, and c(e^r − 1)/(ce^r − 1).

    The second is the supremum when e^r > c (approached with w ↓ c on the masked set); the
    supremum jumps to 0 at e^r ≤ c, which no continuous closed form can follow.
    """
    return sympy.Min(mis_drift(2 * r_, cap), cap * (sympy.exp(r_) - 1) / (cap * sympy.exp(r_) - 1))


def clip_budget_drift(s: sympy.Expr, clip_epsilon: sympy.Expr) -> sympy.Expr:
    """max(e^s − 1, 1 − e^{−s}) / ε = (e^s − 1)/ε: w ranges over e^{±s}."""
    return (sympy.exp(s) - 1) / clip_epsilon


def _pair_from_probs(p_prime: float, s: float, T: float) -> tuple[np.ndarray, np.ndarray]:
    """Two tokens; π'(0) = p_prime and π = π' tilted by e^{s} on token 0."""
    zp = T * np.array([math.log(p_prime), math.log1p(-p_prime)])
    return zp + np.array([T * s, 0.0]), zp


def _w_reward(osc: float, T: float, span: float) -> Witness:
    s = osc / T
    z, zp = tilt_pair(1.0 / (1.0 + math.exp(min(s / 2, 700.0))), s, T)
    lp, lq = measure.log_softmax(z, T), measure.log_softmax(zp, T)
    reward = np.where(lq > lp, span, 0.0)  # indicator of {π' > π}, scaled to [0, span]
    achieved = abs(float(np.sum(np.exp(lq) * reward) - np.sum(np.exp(lp) * reward)))
    return Witness(
        "reward_drift_tv",
        {"osc": osc, "T": T, "span": span},
        achieved,
        span * math.tanh(s / 4),
        {"z": z, "z_prime": zp, "T": T, "reward": reward},
    )


def _w_plain(osc: float, T: float, G: float, A: float) -> Witness:
    s = osc / T
    z, zp = tilt_pair(1.0 / (1.0 + math.exp(min(s / 2, 700.0))), s, T)
    w = np.exp(measure.log_ratio(z, zp, T))
    q = np.exp(measure.log_softmax(zp, T))
    g = G * A * np.sign(w - 1.0)  # ∇log π·A, one coordinate, aligned with the bias
    achieved = abs(float(np.sum(q * (w - 1.0) * g)))
    return Witness(
        "pg_bias_plain",
        {"osc": osc, "T": T, "G": G, "A": A},
        achieved,
        2 * G * A * math.tanh(s / 4),
        {"z": z, "z_prime": zp, "T": T, "g": g},
    )


def _w_tis(osc: float, T: float, c: float, G: float = 1.0, A: float = 1.0) -> Witness:
    s = osc / T
    e = math.exp(s)
    bound = G * A * max(math.sqrt(e) - math.sqrt(c), 0.0) ** 2 / max(e - 1, c - 1)
    q = (math.sqrt(e / c) - 1) / math.expm1(s) if e > c else 0.5
    z, zp = _pair_from_probs(q, s, T)
    achieved = G * A * measure.tis_excess(z, zp, T, c)
    return Witness(
        "pg_bias_tis",
        {"osc": osc, "T": T, "c": c, "G": G, "A": A},
        achieved,
        bound,
        {"z": z, "z_prime": zp, "T": T},
    )


def _w_mis(osc: float, T: float, c: float, G: float = 1.0, A: float = 1.0) -> Witness:
    s = osc / T
    e = math.exp(s)
    bound = G * A * max(e - c, 0.0) / max(e - 1, c - 1)
    b = (e / c - 1) / math.expm1(s) * (1 - 1e-9) if e > c else 0.5
    z, zp = _pair_from_probs(b, s, T)
    achieved = G * A * measure.mis_masked_mass(z, zp, T, c)
    return Witness(
        "pg_bias_mis",
        {"osc": osc, "T": T, "c": c, "G": G, "A": A},
        achieved,
        bound,
        {"z": z, "z_prime": zp, "T": T},
    )


def _w_clip(osc: float, T: float, clip_epsilon: float) -> Witness:
    log_eta = math.log(1e-12) - osc / T  # π(1) = η ≪ e^{−osc/T}, so w(1) is within 1e-12 of e^s
    z = T * np.array([math.log1p(-math.exp(log_eta)), log_eta])
    zp = z + np.array([0.0, osc])  # token 1 gains: its ratio π/π' tends to e^{−osc/T}
    z, zp = zp, z  # swap: now π(1)/π'(1) tends to e^{+osc/T}
    achieved = measure.clip_share(z, zp, T, clip_epsilon)
    return Witness(
        "clip_budget",
        {"osc": osc, "T": T, "clip_epsilon": clip_epsilon},
        achieved,
        math.expm1(osc / T) / clip_epsilon,
        {"z": z, "z_prime": zp, "T": T},
    )


def _w_exceed(osc: float, T: float, rho: float) -> Witness:
    s = osc / T
    z, zp = tilt_pair(1.0 / (1.0 + math.exp(min(s / 2, 700.0))), s, T)
    typical = measure.tv(z, zp, T)
    zb, zbp = tilt_pair(1.0 / (1.0 + math.exp(40.0)), 80.0, 1.0)  # an exceeding token
    achieved = (1 - rho) * typical + rho * measure.tv(zb, zbp, 1.0)
    return Witness(
        "expected_tv_exceedance",
        {"osc": osc, "T": T, "rho": rho},
        achieved,
        (1 - rho) * math.tanh(s / 4) + rho,
        {"typical": (z, zp), "exceeding": (zb, zbp), "rho": rho},
    )


def _w_capped_exceed(osc: float, T: float, c: float, rho: float, tis: bool) -> Witness:
    # a ρ-share of positions drifts without bound (π takes the token π' almost never samples:
    # (w − c)₊ and 1{w > c} carry all of π), the rest sits at the capped witness of range osc
    typical = (_w_tis if tis else _w_mis)(osc, T, c)
    zb, zbp = np.array([0.0, 40.0]), np.array([0.0, -40.0])
    tail = measure.tis_excess(zb, zbp, 1.0, c) if tis else measure.mis_masked_mass(zb, zbp, 1.0, c)
    name = "pg_bias_tis_exceedance" if tis else "pg_bias_mis_exceedance"
    return Witness(
        name,
        {"osc": osc, "T": T, "c": c, "rho": rho},
        (1 - rho) * typical.achieved + rho * tail,
        (1 - rho) * typical.bound + rho,
        {"typical": typical.instance, "exceeding": (zb, zbp), "rho": rho},
    )


def _w_tis_exceed(osc: float, T: float, c: float, rho: float) -> Witness:
    return _w_capped_exceed(osc, T, c, rho, tis=True)


def _w_mis_exceed(osc: float, T: float, c: float, rho: float) -> Witness:
    return _w_capped_exceed(osc, T, c, rho, tis=False)


_TOK = "per-token ‖∇ log π(y)‖ ≤ G and |A(y)| ≤ A (assumptions of the guarantee)"
_SUPPORT = "support_overlap: π' > 0 wherever π > 0 (softmax logits are finite)"

RL_LEMMAS: tuple[Lemma, ...] = (
    Lemma(
        name="reward_drift_tv",
        premises=("TV(π, π') ≤ ε (token or sequence laws)",),
        conclusion="|E_π r − E_π' r| ≤ (b − a)·ε for every reward r with values in [a, b]",
        assumptions=(),
        expr=span * eps,
        reference="E_π r − E_π' r = E_π (r − a) − E_π' (r − a) ≤ (b − a)·sup_S (π(S) − π'(S))",
        tightness="attained (r = b on {π' > π}, a elsewhere)",
        witness=_w_reward,
    ),
    Lemma(
        name="pg_bias_plain",
        premises=("TV(π, π') ≤ ε",),
        conclusion="‖E_π'[g] − E_π[g]‖ ≤ 2·G·A·ε for g = ∇log π·A (no correction)",
        assumptions=(_TOK, _SUPPORT),
        expr=2 * G * A * eps,
        reference="E_π'[g] − E_π[g] = E_π'[(1 − w) g] and E_π'|w − 1| = 2·TV",
        tightness="attained under the alignment assumption",
        witness=_w_plain,
    ),
    Lemma(
        name="pg_bias_tis",
        premises=("osc(Δ) ≤ osc",),
        conclusion="bias of E_π'[min(w, c) g] ≤ G·A·(e^{s/2} − √c)₊²/(e^s − 1), s = osc/T",
        assumptions=(_TOK, _SUPPORT, "cap c > 1"),
        expr=G * A * tis_drift(osc / T, c),
        reference="bias = E_π'[(w − c)₊ g]; (w − c)₊ is convex in e^f at fixed E e^f, so two-point "
        "tilts on {0, s} are extremal; optimising their weight gives the closed form",
        tightness="attained (two tokens, π'-weight (√(e^s/c) − 1)/(e^s − 1) on the raised one)",
        witness=_w_tis,
    ),
    Lemma(
        name="pg_bias_mis",
        premises=("osc(Δ) ≤ osc",),
        conclusion="bias of E_π'[w·1{w ≤ c} g] ≤ G·A·(e^s − c)₊/(e^s − 1), s = osc/T",
        assumptions=(_TOK, _SUPPORT, "cap c > 1; tokens with w > c are masked"),
        expr=G * A * mis_drift(osc / T, c),
        reference="bias = E_π[1{w > c} g]; with B = {w > c}: π(B) > c·π'(B) and odds π(B) ≤ "
        "e^s·odds π'(B), which meet at π(B) = (e^s − c)/(e^s − 1)",
        tightness="supremum, approached as w ↓ c on the masked token",
        witness=_w_mis,
    ),
    Lemma(
        name="pg_bias_tis_ratio",
        premises=("|log w| ≤ r",),
        conclusion="TIS bias ≤ G·A·(e^r − c)₊/(1 + e^r)",
        assumptions=(_TOK, _SUPPORT, "cap c > 1"),
        expr=G * A * tis_ratio(r, c),
        reference="E_π'[(w − c)₊] is convex in w with E_π' w = 1 and w ∈ [e^{−r}, e^r]",
        tightness="attained (two tokens with w = e^{±r})",
    ),
    Lemma(
        name="pg_bias_mis_ratio",
        premises=("|log w| ≤ r",),
        conclusion="MIS bias ≤ G·A·min(tilt bound at 2r, c(e^r − 1)/(ce^r − 1))",
        assumptions=(_TOK, _SUPPORT, "cap c > 1"),
        expr=G * A * mis_ratio(r, c),
        reference="π(B) > c·π'(B) and π(Bᶜ) ≥ e^{−r}π'(Bᶜ) give π(B) ≤ c(e^r − 1)/(ce^r − 1)",
        tightness="supremum when e^r > c",
    ),
    Lemma(
        name="pg_bias_tv_capped",
        premises=("TV(π, π') ≤ ε",),
        conclusion="TIS bias ≤ G·A·ε; MIS bias ≤ G·A·min(1, ε·c/(c − 1))",
        assumptions=(_TOK, _SUPPORT, "cap c > 1"),
        expr=G * A * eps,
        reference="(w − c)₊ ≤ (w − 1)₊ and E_π'(w − 1)₊ = TV; π(B) − π'(B) ≤ ε with π'(B) < π(B)/c",
        tightness="supremum (mass leaking to a token π' almost never samples) when the TV is "
        "the premise; not attained when the TV comes from a drift clause",
    ),
    Lemma(
        name="clip_budget",
        premises=("osc(Δ) ≤ osc",),
        conclusion="max_y max(w − 1, 1 − w)/ε_clip ≤ (e^{osc/T} − 1)/ε_clip",
        assumptions=("the PPO ratio at θ = θ_old is w = π_train/π_inf",),
        expr=clip_budget_drift(osc / T, clip_eps),
        reference="w ∈ [e^{−s}, e^{s}] and e^s − 1 ≥ 1 − e^{−s}",
        tightness="supremum, approached as π'(y) → 0 on the raised token",
        witness=_w_clip,
    ),
    Lemma(
        name="expected_tv_exceedance",
        premises=("P(osc > osc_thr) ≤ ρ over tokens (statistical clause)",),
        conclusion="E[TV(π, π')] ≤ (1 − ρ)·tanh(osc_thr/(4T)) + ρ",
        assumptions=("the statistical clause holds (at its stated confidence)",),
        expr=(1 - rho) * sympy.tanh(osc / (4 * T)) + rho,
        reference="split the expectation on the exceedance event; TV ≤ 1 always",
        tightness="attained by a mixture of the tanh witness and a saturated token",
        witness=_w_exceed,
    ),
    Lemma(
        name="pg_bias_tis_exceedance",
        premises=("P(osc > osc_thr) ≤ ρ over positions (statistical clause)",),
        conclusion="E[TIS bias] ≤ G·A·((1 − ρ)·(e^{s/2} − √c)₊²/(e^s − 1) + ρ), s = osc_thr/T",
        assumptions=(_TOK, _SUPPORT, "cap c > 1", "the statistical clause holds"),
        expr=G * A * ((1 - rho) * tis_drift(osc / T, c) + rho),
        reference="split the expectation on the exceedance event: below it pg_bias_tis, above "
        "it E_π'(w − c)₊ = Σ(π − cπ')₊ ≤ 1",
        tightness="supremum (mixture of the TIS witness and a token π' almost never samples)",
        witness=_w_tis_exceed,
    ),
    Lemma(
        name="pg_bias_mis_exceedance",
        premises=("P(osc > osc_thr) ≤ ρ over positions (statistical clause)",),
        conclusion="E[MIS bias] ≤ G·A·((1 − ρ)·(e^s − c)₊/(e^s − 1) + ρ), s = osc_thr/T",
        assumptions=(_TOK, _SUPPORT, "cap c > 1", "the statistical clause holds"),
        expr=G * A * ((1 - rho) * mis_drift(osc / T, c) + rho),
        reference="split the expectation on the exceedance event: below it pg_bias_mis, above "
        "it π(w > c) ≤ 1",
        tightness="supremum (mixture of the MIS witness and a token π' almost never samples)",
        witness=_w_mis_exceed,
    ),
    Lemma(
        name="expected_sequence_tv",
        premises=("mean per-token TV along rollouts ≤ ε̄",),
        conclusion="TV_L ≤ min(1, L·ε̄)",
        assumptions=("the per-token TVs are averaged over rollouts of length L",),
        expr=sympy.Min(1, L * eps),
        reference="hybrid argument: TV_L ≤ Σ_t E_{y<t}[TV_t(· | y<t)]",
        tightness="first-order tight (coupling leak: 1 − (1 − ε̄)^L)",
    ),
)
