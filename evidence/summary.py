"""Mergeable per-slice summaries of a token table, sound for the verdicts drawn from them.

A ``Summary`` of one metric over a set of tokens keeps: the count; the sum, exactly (as an
integer multiple of 2^-1126, so shards merge bit for bit in any order); the sum of squares
(float, for reporting a spread only); min and max; the number of values above each of a fixed
list of thresholds; and a quantile sketch that keeps a verdict sound.

The quantile sketch keeps every value exactly while there are at most ``cap`` of them. Past the
cap it becomes a histogram over one fixed grid of bin edges ``EDGES`` (shared by every host, so
histograms add): 64 bins per octave for magnitudes 2^-40 … 2^20 on both signs, a bin at zero,
and one overflow bin on each side. A value x falls in the bin with the smallest upper edge
≥ x, found by ``searchsorted`` on the stored edges (no logarithms, so no rounding can put a
value above its bin's edge). The k-th smallest value is then at most the upper edge of the bin
where the cumulative count reaches k (and at most the exact max), and at least that bin's
lower edge (and at least the exact min). ``upper_values`` turns the sketch into a sorted array
that dominates the true sorted values entry by entry, so an order-statistic confidence bound
computed on it is an upper bound of the one computed on the true values: conservative by at
most one bin (a relative 2^(1/64) − 1 ≈ 1.1%), never optimistic.

Merging is associative and commutative exactly (counts, sums, extremes, exceedances and
sketch are integers or exact), so any map-reduce engine can combine shards.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from jaxtyping import Bool, Float

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.contracts.model import Slice
from kernel_contracts.evidence.table import SLICE_RANGES

__all__ = [
    "DEFAULT_CAP",
    "EDGES",
    "MissingColumn",
    "Summary",
    "merge",
    "merge_all",
    "select",
    "summarize",
]

DEFAULT_CAP = 1 << 18
_PER_OCTAVE = 64
_MAGS = np.exp2(np.arange(-40 * _PER_OCTAVE, 20 * _PER_OCTAVE + 1) / _PER_OCTAVE)
# sorted upper edges; bin i holds (EDGES[i-1], EDGES[i]], bin 0 holds (-inf, EDGES[0]]
EDGES = np.concatenate([-_MAGS[::-1], [0.0], _MAGS, [np.inf]])
EDGES.setflags(write=False)
_LOWER = np.concatenate([[-np.inf], EDGES[:-1]])
_SCALE = 1126  # every finite float64 is an integer multiple of 2^-1126 after frexp scaling


def _exact_sum(x: np.ndarray) -> int:
    """Σx exactly, as an integer in units of 2^-1126."""
    if x.size == 0:
        return 0
    mant, exp = np.frexp(x)
    m = (mant * 2.0**53).astype(np.int64)  # exact: |mant| < 1 has 53 bits
    shift = exp.astype(np.int64) - 53 + _SCALE
    order = np.argsort(shift, kind="stable")
    shift, m = shift[order], m[order]
    starts = np.flatnonzero(np.r_[True, shift[1:] != shift[:-1]])
    hi, lo = m >> 26, m & ((1 << 26) - 1)  # both fit: sums of 2^20 terms stay < 2^63
    total = 0
    for a in range(0, m.size, 1 << 30):
        s = starts[(starts >= a) & (starts < a + (1 << 30))]
        if s.size == 0 or s[0] != a:
            s = np.r_[a, s]
        end = min(a + (1 << 30), m.size)
        hs = np.add.reduceat(hi[a:end], s - a)
        ls = np.add.reduceat(lo[a:end], s - a)
        for h, l_, sh in zip(hs.tolist(), ls.tolist(), shift[s].tolist(), strict=True):
            total += ((h << 26) + l_) << sh
    return total


@dataclass(frozen=True, eq=False)
class Summary:
    """A mergeable summary of one metric's values over one slice (see the module docstring)."""

    count: int
    exact_sum: int  # Σx in units of 2^-1126
    sum_sq: float
    minimum: float
    maximum: float
    thresholds: tuple[float, ...]
    exceed: tuple[int, ...]  # exceed[i] = #{x > thresholds[i]}
    values: np.ndarray | None  # sorted values while count ≤ cap
    hist: np.ndarray | None  # counts per bin of EDGES once count > cap
    cap: int = DEFAULT_CAP

    @property
    def is_exact(self) -> bool:
        return self.values is not None

    @property
    def total(self) -> float:
        return float(Fraction(self.exact_sum, 1 << _SCALE))

    @property
    def mean(self) -> float:
        if self.count == 0:
            return math.nan
        return float(Fraction(self.exact_sum, (1 << _SCALE) * self.count))

    @property
    def std(self) -> float:
        """Population standard deviation (float arithmetic; for reports only)."""
        if self.count == 0:
            return math.nan
        return math.sqrt(max(self.sum_sq / self.count - self.mean**2, 0.0))

    def exceed_count(self, threshold: float) -> int:
        """#{x > threshold}; the threshold must be one the summary was built with."""
        for t, k in zip(self.thresholds, self.exceed, strict=True):
            if t == threshold:
                return k
        if self.values is not None:
            return int(self.values.size - np.searchsorted(self.values, threshold, "right"))
        raise KeyError(f"threshold {threshold!r} was not tracked by this summary")

    def upper_values(self) -> Float[np.ndarray, " n"]:
        """Sorted values that dominate the true sorted values entry by entry."""
        if self.values is not None:
            return self.values
        return np.repeat(np.minimum(EDGES, self.maximum), self.hist)

    def lower_values(self) -> Float[np.ndarray, " n"]:
        """Sorted values that the true sorted values dominate entry by entry."""
        if self.values is not None:
            return self.values
        return np.repeat(np.maximum(_LOWER, self.minimum), self.hist)

    def order_statistic(self, k: int) -> tuple[float, float]:
        """An interval [lo, hi] holding the k-th smallest value (1-based)."""
        if not 1 <= k <= self.count:
            raise ValueError(f"order statistic {k} of {self.count} values")
        if self.values is not None:
            v = float(self.values[k - 1])
            return v, v
        i = int(np.searchsorted(np.cumsum(self.hist), k, "left"))
        return max(float(_LOWER[i]), self.minimum), min(float(EDGES[i]), self.maximum)

    def as_dict(self) -> dict:
        return {
            "count": self.count,
            "mean": self.mean,
            "std": self.std,
            "min": self.minimum if self.count else None,
            "max": self.maximum if self.count else None,
            "exceed": {repr(t): k for t, k in zip(self.thresholds, self.exceed, strict=True)},
            "sketch": "exact" if self.is_exact else "histogram",
        }


def _hist(values: np.ndarray) -> np.ndarray:
    return np.bincount(np.searchsorted(EDGES, values, "left"), minlength=EDGES.size).astype(
        np.int64
    )


def _sum_sq(x: np.ndarray) -> float:
    with np.errstate(over="ignore"):
        return float(np.dot(x, x))


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def summarize(
    values: Float[np.ndarray, " n"],
    *,
    thresholds: Iterable[float] = (),
    cap: int = DEFAULT_CAP,
) -> Summary:
    """The summary of ``values`` (finite floats); ``thresholds`` are tracked for exceedances."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if not np.isfinite(x).all():
        raise ValueError("a summary takes finite values only")
    ts = tuple(sorted({float(t) for t in thresholds}))
    x = np.sort(x)
    n = int(x.size)
    exceed = tuple(int(n - np.searchsorted(x, t, "right")) for t in ts)
    return Summary(
        count=n,
        exact_sum=_exact_sum(x),
        sum_sq=_sum_sq(x),
        minimum=float(x[0]) if n else math.inf,
        maximum=float(x[-1]) if n else -math.inf,
        thresholds=ts,
        exceed=exceed,
        values=_frozen(x) if n <= cap else None,
        hist=None if n <= cap else _frozen(_hist(x)),
        cap=cap,
    )


def merge(a: Summary, b: Summary) -> Summary:
    """The summary of the union of the two value sets (exact, order-independent)."""
    if a.thresholds != b.thresholds or a.cap != b.cap:
        raise ValueError("summaries with different thresholds or caps do not merge")
    n = a.count + b.count
    if a.values is not None and b.values is not None and n <= a.cap:
        values, hist = _frozen(np.sort(np.concatenate([a.values, b.values]))), None
    else:
        ha = a.hist if a.hist is not None else _hist(a.values)
        hb = b.hist if b.hist is not None else _hist(b.values)
        values, hist = None, _frozen(ha + hb)
    return Summary(
        count=n,
        exact_sum=a.exact_sum + b.exact_sum,
        sum_sq=a.sum_sq + b.sum_sq,
        minimum=min(a.minimum, b.minimum),
        maximum=max(a.maximum, b.maximum),
        thresholds=a.thresholds,
        exceed=tuple(x + y for x, y in zip(a.exceed, b.exceed, strict=True)),
        values=values,
        hist=hist,
        cap=a.cap,
    )


def merge_all(parts: Iterable[Mapping]) -> dict:
    """Merge mappings key → Summary (e.g. (slice, metric) → Summary) from several shards."""
    out: dict = {}
    for part in parts:
        for key, s in part.items():
            out[key] = merge(out[key], s) if key in out else s
    return out


class MissingColumn(KernelContractsError):
    """A slice selects on a column the token table does not have."""


def _in_range(col: np.ndarray, rng) -> np.ndarray:
    lo, hi = rng
    keep = np.ones(col.shape, dtype=bool)
    if lo is not None:
        keep &= col >= lo
    if hi is not None:
        keep &= col <= hi
    return keep


def select(
    columns: Mapping[str, np.ndarray],
    sl: Slice,
    *,
    prompt_names: tuple[str, ...] | None = None,
) -> Bool[np.ndarray, " tokens"]:
    """The tokens of ``columns`` in slice ``sl`` (ranges are closed; ``None`` is unbounded).

    ``prompt`` is a regular expression searched in each token's prompt name: the ``prompt``
    column itself when it holds strings, else ``prompt_names[code]`` (or ``str(code)``).
    Raises ``MissingColumn`` naming the column a slice needs and the table lacks.
    """
    n = next(iter(columns.values())).shape[0] if columns else 0
    keep = np.ones(n, dtype=bool)
    for name in SLICE_RANGES:
        rng = getattr(sl, name)
        if rng is None:
            continue
        if name not in columns:
            raise MissingColumn(name)
        keep &= _in_range(np.asarray(columns[name]), rng)
    if sl.prompt is not None:
        if "prompt" not in columns:
            raise MissingColumn("prompt")
        pattern = re.compile(sl.prompt)
        col = np.asarray(columns["prompt"])
        codes, inverse = np.unique(col, return_inverse=True)
        names = [
            str(c) if col.dtype.kind in "OUS" or prompt_names is None else prompt_names[int(c)]
            for c in codes
        ]
        hit = np.array([pattern.search(s) is not None for s in names], dtype=bool)
        keep &= hit[inverse.ravel()] if hit.size else np.zeros(n, dtype=bool)
    return keep
