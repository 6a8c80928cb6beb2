"""Distances between two kernels' outputs in units in the last place of a number format.

``ulp_distance(ref, other, fmt)`` is ``|other − ref| / ulp_fmt(ref)``, where ``ulp_fmt(v)`` is
the spacing of format ``fmt`` in the binade of ``v``: ``2**(e − p)`` with ``e = floor(log2|v|)``
(at least the format's smallest normal exponent, so zeros and tiny values get the spacing of
the bottom binade) and ``p`` the format's explicit fraction bits. It is measured at ``ref``, so
it needs no assumption that either value is representable in ``fmt``: an fp32 output against a
bfloat16 one is a fraction of a bfloat16 ulp when the bfloat16 output is the rounded fp32 one.
Equal bit patterns are 0 ulps apart; a pair where exactly one side is NaN, or an infinity
against anything else, is ``inf`` ulps apart.
"""

from __future__ import annotations

import numpy as np

from kernel_contracts.kernels.numerics.formats import format_info, min_normal_exponent

__all__ = ["coarser", "identical", "ulp_distance", "ulp_summary"]


def coarser(a: str, b: str) -> str:
    """The output format with fewer fraction bits (``a`` on a tie): the one both outputs can
    be compared in without pretending to a precision one of them never had."""
    return b if format_info(b).mantissa_bits < format_info(a).mantissa_bits else a


def identical(ref, other) -> np.ndarray:
    """Where the two float32 arrays hold the same bits (every NaN counts as the same)."""
    a = np.asarray(ref, np.float32)
    b = np.asarray(other, np.float32)
    same = a.view(np.uint32) == b.view(np.uint32)
    return same | (np.isnan(a) & np.isnan(b))


def ulp_distance(ref, other, fmt: str) -> np.ndarray:
    """``|other − ref|`` in ulps of ``fmt`` at ``ref`` (module docstring), as float64."""
    a = np.asarray(ref, np.float64)
    b = np.asarray(other, np.float64)
    p = format_info(fmt).mantissa_bits
    finite = np.isfinite(a) & np.isfinite(b)
    mag = np.where(finite & (a != 0), np.abs(a), 1.0)
    _, e = np.frexp(mag)  # mag = f·2**e with f in [0.5, 1): floor(log2 mag) = e − 1
    emin = min_normal_exponent(fmt)
    e = np.where(a == 0, emin, np.maximum(e - 1, emin))
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(b - a) / np.ldexp(1.0, e - p)
    d = np.where(finite, d, np.inf)
    return np.where(identical(ref, other), 0.0, d)


def ulp_summary(d: np.ndarray) -> dict[str, float]:
    """Max, median and 99th percentile of ulp distances (order statistics, so an ``inf``
    never meets another in an interpolation; 0 for an empty array)."""
    d = np.asarray(d, np.float64).ravel()
    if d.size == 0:
        return {"max": 0.0, "p50": 0.0, "p99": 0.0}
    return {
        "max": float(d.max()),
        "p50": float(np.quantile(d, 0.5, method="inverted_cdf")),
        "p99": float(np.quantile(d, 0.99, method="inverted_cdf")),
    }
