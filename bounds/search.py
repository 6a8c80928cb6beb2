"""A one-dimensional maximiser for witnesses: a grid, then golden-section search.

The witnesses of the sequence and correction lemmas maximise a smooth, unimodal-near-its-peak
function of one logit; a coarse grid finds the peak's bracket and a golden-section search
refines it.

References:
    Kiefer, "Sequential minimax search for a maximum" (1953) — golden-section search.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["golden_max"]

_G = (math.sqrt(5) - 1) / 2  # the inverse golden ratio


def golden_max(
    value: Callable[[float], float], grid: Sequence[float], iterations: int
) -> tuple[float, float]:
    """(t, value(t)) for the best point found: the best grid point, refined by ``iterations``
    golden-section steps between its two neighbours on the grid (the grid point is kept when
    the refinement finds nothing higher; ties keep the earlier candidate)."""
    vals = [value(t) for t in grid]
    i = int(np.argmax(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    a, b = hi - _G * (hi - lo), lo + _G * (hi - lo)
    fa, fb = value(a), value(b)
    for _ in range(iterations):
        if fa > fb:
            hi, b, fb = b, a, fa
            a = hi - _G * (hi - lo)
            fa = value(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + _G * (hi - lo)
            fb = value(b)
    return max([(grid[i], vals[i]), (a, fa), (b, fb)], key=lambda point: point[1])
