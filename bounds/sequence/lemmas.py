"""Token → sequence links: total variation of L-token sequence laws, four routes.

The sequence laws are autoregressive: at every step and for every prefix, the two next-token
distributions satisfy the per-token bound (TV ≤ ε, KL ≤ κ, |log w| ≤ r). Then

- coupling: TV_L ≤ 1 − (1 − ε)^L (maximal coupling step by step);
- sequence ratio: |log W| ≤ L·r, hence TV_L ≤ tanh(L·r/2) (the ratio → TV lemma);
- KL chain + Pinsker: KL_L ≤ L·κ (chain rule), TV_L ≤ √(L·κ/2);
- Bretagnolle–Huber: TV_L ≤ √(1 − e^{−L·κ}).

The sequence-ratio route never wins against coupling at the same per-token premise: a ratio
bound r gives ε ≤ tanh(r/2), and with t = e^r the power-mean inequality
((1 + t)/2)^L ≤ (1 + t^L)/2 gives 1 − (1 − tanh(r/2))^L ≤ tanh(L·r/2) for every r ≥ 0.
It is kept as a named alternative.

References:
    Lindvall, "Lectures on the Coupling Method" (1992) — coupling inequality.
    Tsybakov, "Introduction to Nonparametric Estimation" (2009), Lemma 2.5 (Pinsker) and
    Lemma 2.6 (Bretagnolle–Huber); Cover & Thomas, Thm 2.5.3 (KL chain rule).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import sympy

from kernel_contracts.bounds import measure
from kernel_contracts.bounds.lemma import SYMBOLS, Lemma, Witness
from kernel_contracts.bounds.search import golden_max
from kernel_contracts.bounds.token.lemmas import kl_tilt_sup

__all__ = ["SEQUENCE_LEMMAS", "best_iid_witness", "sequence_routes", "sequence_tv_bound"]

eps, kappa, r, L = SYMBOLS["eps"], SYMBOLS["kappa"], SYMBOLS["r"], SYMBOLS["L"]


def sequence_routes(
    eps_: sympy.Expr | None, kappa_: sympy.Expr | None, r_: sympy.Expr | None, L_: sympy.Expr
) -> dict[str, sympy.Expr]:
    """The route name → bound of every route whose per-token premise is available."""
    routes: dict[str, sympy.Expr] = {}
    if eps_ is not None:
        routes["sequence_tv_coupling"] = 1 - (1 - eps_) ** L_
    if r_ is not None:
        routes["sequence_tv_ratio"] = sympy.tanh(L_ * r_ / 2)
    if kappa_ is not None:
        routes["sequence_tv_pinsker"] = sympy.sqrt(L_ * kappa_ / 2)
        routes["sequence_tv_bretagnolle_huber"] = sympy.sqrt(1 - sympy.exp(-L_ * kappa_))
    return routes


def sequence_tv_bound(eps_: sympy.Expr, kappa_: sympy.Expr, L_: sympy.Expr) -> sympy.Expr:
    """The tightest sequence-TV route from a per-token TV ``eps_`` and KL ``kappa_``: the
    minimum of the coupling, Pinsker and Bretagnolle–Huber routes."""
    return sympy.Min(*sequence_routes(eps_, kappa_, None, L_).values())


def _tilted(p: float, s: float) -> float:
    """π'(+) when π(+) = p and the tilt raises + by e^s relative to −."""
    return 1.0 / (1.0 + (1.0 - p) / p * math.exp(-s))


@functools.lru_cache(maxsize=256)
def best_iid_witness(s: float, length: int) -> tuple[float, float]:
    """(p, TV): the i.i.d. two-point instance with tilt range s that maximises sequence TV.

    Searches π(+) = p on a logit grid, then refines by golden-section search; the TV is the
    exact binomial TV (log-space). Returns the best p found and its TV.
    """
    if s == 0.0:
        return 0.5, 0.0

    def value(t: float) -> float:
        p = 1.0 / (1.0 + math.exp(t))
        return measure.binomial_sequence_tv(p, _tilted(p, s), length)

    best_t, best = golden_max(value, np.linspace(-8.0, 8.0, 33) - s / 2, 40)
    return 1.0 / (1.0 + math.exp(best_t)), best


def _drift_instance(osc: float, T: float, length: int) -> tuple[float, float, float]:
    s = osc / T
    p, achieved = best_iid_witness(s, length)
    return s, p, achieved


def _witness_for(name: str):
    def witness(osc: float, T: float, L: int) -> Witness:
        s, p, achieved = _drift_instance(osc, T, L)
        s_ = sympy.Float(s, 30)
        routes = sequence_routes(sympy.tanh(s_ / 4), kl_tilt_sup(s_), s_, sympy.Integer(L))
        bound = float(routes[name].evalf(30))
        return Witness(
            name,
            {"osc": osc, "T": T, "L": L},
            achieved,
            bound,
            {"p": p, "p_prime": _tilted(p, s), "L": L, "iid": True},
        )

    return witness


def _witness_coupling(eps: float, L: int) -> Witness:
    # π: always token a; π': token a with probability 1 − ε, else b. TV_L = 1 − (1 − ε)^L.
    achieved = -math.expm1(L * math.log1p(-eps)) if eps < 1 else 1.0
    bound = 1 - (1 - eps) ** L
    return Witness(
        "sequence_tv_coupling",
        {"eps": eps, "L": L},
        achieved,
        bound,
        {"step": ((1.0, 0.0), (1 - eps, eps)), "L": L, "iid": True},
    )


_AUTOREG = (
    "both sequence laws are autoregressive and the per-token premise holds at every "
    "step for every prefix"
)

SEQUENCE_LEMMAS: tuple[Lemma, ...] = (
    Lemma(
        name="sequence_tv_coupling",
        premises=("TV of next-token laws ≤ ε at every step",),
        conclusion="TV_L ≤ 1 − (1 − ε)^L",
        assumptions=(_AUTOREG,),
        expr=sequence_routes(eps, None, None, L)["sequence_tv_coupling"],
        reference="coupling inequality, maximal coupling at each step (Lindvall 1992)",
        tightness="attained for per-token TV premises (leak construction); against a drift "
        "premise see the measured ratio",
        witness=_witness_coupling,
    ),
    Lemma(
        name="sequence_tv_ratio",
        premises=("|log w| ≤ r at every step",),
        conclusion="TV_L ≤ tanh(L·r/2)",
        assumptions=(_AUTOREG,),
        expr=sequence_routes(None, None, r, L)["sequence_tv_ratio"],
        reference="|log W| ≤ L·r for the sequence ratio, then the ratio → TV lemma",
        tightness="never tighter than coupling (power-mean inequality)",
        witness=_witness_for("sequence_tv_ratio"),
    ),
    Lemma(
        name="sequence_tv_pinsker",
        premises=("KL of next-token laws ≤ κ at every step",),
        conclusion="TV_L ≤ √(L·κ/2)",
        assumptions=(_AUTOREG,),
        expr=sequence_routes(None, kappa, None, L)["sequence_tv_pinsker"],
        reference="KL chain rule (Cover & Thomas Thm 2.5.3) and Pinsker's inequality",
        tightness="grows like √L: wins for moderate L·κ",
        witness=_witness_for("sequence_tv_pinsker"),
    ),
    Lemma(
        name="sequence_tv_bretagnolle_huber",
        premises=("KL of next-token laws ≤ κ at every step",),
        conclusion="TV_L ≤ √(1 − e^{−L·κ})",
        assumptions=(_AUTOREG,),
        expr=sequence_routes(None, kappa, None, L)["sequence_tv_bretagnolle_huber"],
        reference="KL chain rule and the Bretagnolle–Huber inequality (Tsybakov 2009, L. 2.6)",
        tightness="below 1 for every L: wins when L·κ is large",
        witness=_witness_for("sequence_tv_bretagnolle_huber"),
    ),
)
