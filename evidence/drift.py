"""The drift table: per kernel pair and slice, a mergeable record of how far K_inf drifts.

One ``DriftCell`` summarises the tokens of one slice (a preset served at one batch size, tokens
generated at sequence lengths in one range): the token count, the top-1 flip count, the count
of non-finite values (a token one kernel alone masks), and a ``evidence.summary.Summary`` of
each of the logit drift ‖Δ‖∞, the total variation and |log w|. A ``DriftTable`` maps each
slice's key to its cell.

``merge`` of two cells (or tables) is the cell of the union of their tokens. It is associative
and commutative, and a merge of shards equals the one-pass summary of all their tokens exactly
(``tests/evidence/test_drift.py``): counts and the exact sums are integers; minima, maxima and
the kept values are exact; past a summary's ``cap`` the values become counts per bin of one
fixed grid, which add. What a table reports from a cell (``DriftCell.row``: means from exact
sums, maxima, flip rate, quantiles of |log w|) is therefore the same however the tokens were
split across devices or hosts and in whatever order the shards were combined. The summaries'
sum of squares (a float, for a spread) is the one quantity that is not merged exactly; no
column of the table reads it.

A quantile is the ``ceil(q·n)``-th smallest value: exact while a summary keeps its values, and
past the cap the upper edge of its bin (at most one bin, a relative 1.1%, above the true value,
never below it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from jaxtyping import Float, Int

from kernel_contracts.evidence.summary import DEFAULT_CAP, Summary, summarize
from kernel_contracts.evidence.summary import merge as merge_summaries

__all__ = [
    "QUANTILES",
    "ROW_COLUMNS",
    "DriftCell",
    "DriftTable",
    "SliceKey",
    "drift_cell",
    "merge",
    "merge_tables",
    "table_rows",
]

QUANTILES = (0.5, 0.9, 0.99)

# one slice of the table: (preset, serving batch, shortest length, longest length)
SliceKey = tuple[str, int, int, int]

ROW_COLUMNS = (
    "preset",
    "batch",
    "length_lo",
    "length_hi",
    "tokens",
    "drift_mean",
    "drift_max",
    "tv_mean",
    "tv_max",
    *(f"abs_log_w_q{round(q * 100)}" for q in QUANTILES),
    "abs_log_w_max",
    "top1_flip_rate",
    "nonfinite",
)


@dataclass(frozen=True)
class DriftCell:
    """The mergeable summary of one slice's tokens (module docstring)."""

    tokens: int
    flips: int
    nonfinite: int
    drift: Summary
    tv: Summary
    abs_log_w: Summary

    def row(self) -> dict[str, float | int]:
        """The cell's table columns (every ``ROW_COLUMNS`` entry but the slice's key)."""
        n = self.tokens
        row: dict[str, float | int] = {
            "tokens": n,
            "drift_mean": self.drift.mean,
            "drift_max": self.drift.maximum if n else math.nan,
            "tv_mean": self.tv.mean,
            "tv_max": self.tv.maximum if n else math.nan,
        }
        for q in QUANTILES:
            row[f"abs_log_w_q{round(q * 100)}"] = quantile(self.abs_log_w, q)
        row["abs_log_w_max"] = self.abs_log_w.maximum if n else math.nan
        row["top1_flip_rate"] = self.flips / n if n else math.nan
        row["nonfinite"] = self.nonfinite
        return row


DriftTable = Mapping[SliceKey, DriftCell]


def quantile(s: Summary, q: float) -> float:
    """The ``ceil(q·n)``-th smallest value of ``s`` (an upper bound past its cap); NaN if empty."""
    if s.count == 0:
        return math.nan
    return s.order_statistic(max(1, math.ceil(q * s.count)))[1]


def _finite(values: np.ndarray, worst: float) -> np.ndarray:
    return np.where(np.isfinite(values), values, worst)


def drift_cell(
    drift: Float[np.ndarray, " tokens"],
    tv: Float[np.ndarray, " tokens"],
    log_ratio: Float[np.ndarray, " tokens"],
    top1_flip: Int[np.ndarray, " tokens"] | Float[np.ndarray, " tokens"],
    *,
    cap: int = DEFAULT_CAP,
) -> DriftCell:
    """The cell of these tokens' measured columns (``kernels.measure``'s names).

    A non-finite drift or |log w| (a token one kernel alone masks, or both mask the observed
    token) is counted in ``nonfinite`` and summarised as the largest float64 value, so maxima
    and upper quantiles show it; a non-finite TV as 1, its largest value."""
    big = float(np.finfo(np.float64).max)
    raw = [np.asarray(x, np.float64).ravel() for x in (drift, tv, log_ratio)]
    bad = ~(np.isfinite(raw[0]) & np.isfinite(raw[1]) & np.isfinite(raw[2]))
    d = _finite(raw[0], big)
    t = _finite(raw[1], 1.0)
    w = _finite(np.abs(raw[2]), big)
    flips = np.asarray(top1_flip)
    return DriftCell(
        tokens=int(d.size),
        flips=int(np.count_nonzero(flips)),
        nonfinite=int(bad.sum()),
        drift=summarize(d, cap=cap),
        tv=summarize(t, cap=cap),
        abs_log_w=summarize(w, cap=cap),
    )


def merge(a: DriftCell, b: DriftCell) -> DriftCell:
    """The cell of the union of the two cells' tokens (exact, associative, commutative)."""
    return DriftCell(
        tokens=a.tokens + b.tokens,
        flips=a.flips + b.flips,
        nonfinite=a.nonfinite + b.nonfinite,
        drift=merge_summaries(a.drift, b.drift),
        tv=merge_summaries(a.tv, b.tv),
        abs_log_w=merge_summaries(a.abs_log_w, b.abs_log_w),
    )


def merge_tables(tables: Iterable[DriftTable]) -> dict[SliceKey, DriftCell]:
    """The table of several shards' tables: cells of the same slice merged."""
    out: dict[SliceKey, DriftCell] = {}
    for table in tables:
        for key, cell in table.items():
            out[key] = merge(out[key], cell) if key in out else cell
    return out


def table_rows(table: DriftTable) -> list[dict[str, object]]:
    """The table's rows (``ROW_COLUMNS``), sorted by slice key."""
    rows = []
    for key in sorted(table):
        preset, batch, lo, hi = key
        rows.append({"preset": preset, "batch": batch, "length_lo": lo, "length_hi": hi}
                    | table[key].row())  # fmt: skip
    return rows
