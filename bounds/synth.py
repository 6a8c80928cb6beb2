"""Synthesis: the loosest premise thresholds that still imply a derived guarantee."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath

from kernel_contracts.bounds._evaluate import evaluate_mp
from kernel_contracts.bounds.derivation import Derivation

__all__ = ["loosest", "round_down"]

# Largest value searched for a variable: TV, rates and means of TV live in [0, 1]; drift-like
# variables are searched up to this cap (a result equal to it means "any value works").
DRIFT_CAP = Fraction(10**6)
_UNIT_PREFIXES = ("eps_", "rho_", "mean_")


def round_down(x: Fraction, digits: int = 3) -> Fraction:
    """The largest rational with at most ``digits`` significant decimal digits that is ≤ x."""
    if x <= 0:
        return Fraction(0)
    exponent = math.floor(math.log10(x)) - (digits - 1)  # a float estimate; floor is exact below
    scale = Fraction(10) ** exponent
    return math.floor(x / scale) * scale


def _cap(name: str) -> Fraction:
    return Fraction(1) if name.startswith(_UNIT_PREFIXES) else DRIFT_CAP


def loosest(d: Derivation) -> dict[str, Fraction] | None:
    """For each variable, the largest ``hi`` (a short rational, rounded down) such that the
    bound stays ≤ the threshold over its whole range, the other variables at their given hi.

    The bound is nondecreasing in each variable, so "over the whole range" is "at hi". Values
    are computed at 50 digits; bisection keeps the invariant bound(lo) ≤ threshold, so the
    returned value is below the true supremum. ``None`` when even 0 fails (or there is no
    bound).
    """
    if d.expr is None:
        return None
    thr = mpmath.mpf(d.threshold.numerator) / d.threshold.denominator
    base: dict[str, Fraction] = {**d.constants, **{v.name: v.hi for v in d.variables}}
    out: dict[str, Fraction] = {}
    for v in d.variables:

        def f(x: Fraction, name: str = v.name) -> mpmath.mpf:
            return evaluate_mp(d.expr, {**base, name: x})

        if f(v.lo) > thr:
            return None
        hi = _cap(v.name)
        if f(hi) <= thr:
            out[v.name] = hi
            continue
        lo = v.lo
        for _ in range(200):
            mid = (lo + hi) / 2
            mid = Fraction(mid.numerator, mid.denominator)
            if f(mid) <= thr:
                lo = mid
            else:
                hi = mid
            if hi - lo <= lo * Fraction(1, 10**12) or hi - lo < Fraction(1, 10**30):
                break
        out[v.name] = max(round_down(lo), v.lo)
    return out
