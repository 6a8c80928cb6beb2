"""Truncated IS normalised by its batch mean (``tis_norm``): ω = min(w, c)/m.

verl's token-level ``rollout_is`` with ``rollout_is_batch_normalize`` divides every token's
truncated weight min(w, c) by m, the mean of min(w, c) over the real tokens of the batch. Setting
as in ``bounds.pg.closed_forms``: bias ≤ G·A·D, D the supremum of E_π'|ω − w| at one position.

A bound for every batch, of any size and make-up: under a per-token premise that puts every
token's w in [e^{−x}, e^x] (x = s from a drift, r from a log ratio) and c > 1, every min(w, c)
lies in [e^{−x}, min(e^x, c)], and so does their mean m: |1/m − 1| ≤ K = e^x − 1. Then
|ω − w| ≤ min(w, c)·|1/m − 1| + (w − c)₊ ≤ K·min(w, c) + (w − c)₊, whose mean is
K·(1 − t) + t with t = E_π'(w − c)₊ ≤ D_tis(x): D ≤ K + (1 − K)₊·D_tis(x).

Not the supremum: |1/m − 1| = K needs every token of the batch at w = e^{−x}, where ω = 1 and
|ω − w| = 1 − e^{−x}, below K. The witnesses measure the gap on the two limits a batch has: one
token (m = min(w, c), so ω = 1: plain's 2·TV) and a batch so large that m is the mean
μ = E_π' min(w, c) of the position's law (E_π'|min(w, c)/μ − w|). A TV premise leaves w, and so
m, unbounded: no form.

References:
    Espeholt et al., "IMPALA" (2018) — truncated importance sampling.
"""

from __future__ import annotations

import math

import numpy as np
import sympy
from jaxtyping import Float

from kernel_contracts.bounds import measure
from kernel_contracts.bounds._evaluate import evaluate
from kernel_contracts.bounds.lemma import SYMBOLS, Lemma, Witness
from kernel_contracts.bounds.pg.links import tis_drift, tis_ratio
from kernel_contracts.bounds.pg.witnesses import raised_pair

__all__ = ["TIS_NORM_LEMMAS", "norm_form", "population_discrepancy"]

Vector = Float[np.ndarray, "vocab"]
osc, T, r, c, G, A = (SYMBOLS[k] for k in ("osc", "T", "r", "c", "G", "A"))


def norm_form(x: sympy.Expr, d_tis: sympy.Expr) -> sympy.Expr:
    """K + (1 − K)₊·D_tis with K = e^x − 1: the bound on E_π'|ω − w| (module docstring)."""
    k = sympy.exp(x) - 1
    return k + sympy.Max(1 - k, 0) * d_tis


def population_discrepancy(z: Vector, z_prime: Vector, T_: float, cap: float) -> float:
    """E_π'|min(w, c)/μ − w|, μ = E_π' min(w, c): the weight of a batch so large that its mean
    is the position's own, in float64."""
    p = np.exp(measure.log_softmax(z, T_))
    q = np.exp(measure.log_softmax(z_prime, T_))
    w = np.exp(measure.log_ratio(z, z_prime, T_))
    capped = np.minimum(w, cap)
    mu = float(np.sum(q * capped))
    return float(np.sum(np.abs(q * capped / mu - p)))


def _best(pairs, T_: float, cap: float) -> tuple[float, dict]:
    """The larger of the two batch limits over ``pairs``: one token (plain's E_π'|1 − w|) and
    the population's normalisation."""
    best = (-1.0, {})
    for z, zp in pairs:
        one = 2 * float(measure.tv(z, zp, T_))
        many = population_discrepancy(z, zp, T_, cap)
        best = max(best, (max(one, many), {"z": z, "z_prime": zp}), key=lambda t: t[0])
    return best


def _bound(expr: sympy.Expr, **values: float) -> float:
    names = {sym.name for sym in expr.free_symbols}
    return evaluate(expr, {k: v for k, v in {"G": 1.0, "A": 1.0, **values}.items() if k in names})


def _w_drift(osc: float, T: float, c: float) -> Witness:
    sv = osc / T
    pairs = [raised_pair(q, sv, T) for q in np.linspace(0.01, 0.99, 99)]
    achieved, instance = _best(pairs, T, c)
    params = {"osc": osc, "T": T, "c": c}
    return Witness("pg_bias_tis_norm", params, achieved, _bound(EXPR["pg_bias_tis_norm"], **params),
                   instance)  # fmt: skip


def _w_ratio(r: float, c: float) -> Witness:
    x = math.exp(r)
    pairs = []
    for q in np.linspace(0.01, 0.99, 99):  # π' = (q, 1 − q), w = (x, ·) with E_π' w = 1
        hi_w = min(x, 1 / q - 1e-12)
        lo_w = (1 - q * hi_w) / (1 - q)
        if lo_w >= 1 / x:
            pairs.append((np.log([q * hi_w, (1 - q) * lo_w]), np.log([q, 1 - q])))
    achieved, instance = _best(pairs, 1.0, c)
    params = {"r": r, "c": c}
    return Witness("pg_bias_tis_norm_ratio", params, achieved,
                   _bound(EXPR["pg_bias_tis_norm_ratio"], **params), instance)  # fmt: skip


EXPR: dict[str, sympy.Expr] = {
    "pg_bias_tis_norm": G * A * norm_form(osc / T, tis_drift(osc / T, c)),
    "pg_bias_tis_norm_ratio": G * A * norm_form(r, tis_ratio(r, c)),
}

_TOK = "per-token ‖∇ log π(y)‖ ≤ G and |A(y)| ≤ A (assumptions of the guarantee)"
_SUPPORT = "support_overlap: π' > 0 wherever π > 0 (softmax logits are finite)"
_BATCH = "ω = min(w, c)/m, m the batch's mean of min(w, c), c > 1; every batch size"
_WHY = (
    "every min(w, c) and their mean lie in [e^{−x}, min(e^x, c)], so |1/m − 1| ≤ e^x − 1; "
    "|ω − w| ≤ min(w, c)·|1/m − 1| + (w − c)₊, whose mean is K(1 − t) + t, t ≤ D_tis"
)
_GAP = "a bound, not attained; the gap to the better of the one-token and population witnesses"

TIS_NORM_LEMMAS: tuple[Lemma, ...] = (
    Lemma("pg_bias_tis_norm", ("osc(Δ) ≤ osc",),
          "bias ≤ G·A·(K + (1 − K)₊·D_tis(s)), K = e^s − 1 (D_tis: pg_bias_tis)",
          (_TOK, _SUPPORT, _BATCH), EXPR["pg_bias_tis_norm"], _WHY, _GAP, _w_drift),
    Lemma("pg_bias_tis_norm_ratio", ("|log w| ≤ r",),
          "bias ≤ G·A·(K + (1 − K)₊·D_tis(r)), K = e^r − 1 (D_tis: pg_bias_tis_ratio)",
          (_TOK, _SUPPORT, _BATCH), EXPR["pg_bias_tis_norm_ratio"], _WHY, _GAP, _w_ratio),
)  # fmt: skip
