"""The runtime envelope of evidence: the batch sizes and sequence lengths it was gathered at,
against each runtime clause's declared ranges, and the settings an emulation sweeps.

``observe`` turns one source's sequences (batch size, 0 where not recorded; length; whether
the length is exact or only a lower bound) into the JSON-ready ``runtime`` part of the
source's description in the report: per clause and condition, how many sequences lie
certainly outside the declared range and how many certainly inside. A log's sequence length
is its last token's position + 1; positions count the prompt only where the record gives
``position_offset``, so a length from a record without it is a lower bound: it can lie
certainly above a range, never certainly inside one. ``verify.static_clauses`` decides the
runtime verdicts from these counts, so ``verify check`` recomputes them from the report.

``settings`` is the grid ``evidence: emulate`` runs: for each of batch size and sequence length
that the runtime clauses declare (the intersection of their ranges), the two ends and the
midpoint, clipped to what the emulator can run (``evidence.emulate.sweep`` passes in its
limits: at most ``MAX_BATCH`` sequences at once, lengths ``length_range``); with both
declared, the four corners and the centre. A point clipped outside a declared range stays in
the grid, and its evidence is flagged by the runtime verdict.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CONDITIONS", "observe", "points", "settings"]

CONDITIONS = ("batch_size", "sequence_length")


def _extent(values: np.ndarray) -> dict:
    if values.size == 0:
        return {"min": None, "max": None}
    return {"min": int(values.min()), "max": int(values.max())}


def observe(contract, batch: np.ndarray, length: np.ndarray, exact: np.ndarray) -> dict:
    """The runtime observation of one source's sequences (see the module docstring)."""
    batch, length = np.asarray(batch, np.int64), np.asarray(length, np.int64)
    exact = np.asarray(exact, bool)
    recorded = batch > 0
    out = {
        "sequences": int(length.shape[0]),
        "batch_size": {"recorded": int(recorded.sum()), **_extent(batch[recorded])},
        "sequence_length": {
            "recorded": int(length.shape[0]),
            "exact": int(exact.sum()),
            **_extent(length),
        },
        "clauses": [],
    }
    for clause in contract.runtime:
        for condition in CONDITIONS:
            declared = getattr(clause, condition)
            if declared is None:
                continue
            lo, hi = declared
            if condition == "batch_size":
                outside = recorded & ((batch < lo) | (batch > hi))
                inside = recorded & ~outside
            else:
                outside = (length > hi) | (exact & (length < lo))
                inside = exact & ~outside
            out["clauses"].append(
                {
                    "clause": clause.id,
                    "condition": condition,
                    "outside": int(outside.sum()),
                    "inside": int(inside.sum()),
                }
            )
    return out


def _declared(contract, condition: str) -> tuple[int, int] | None:
    """The intersection of the runtime clauses' ranges of ``condition`` (the first clause's
    range when they do not meet; the others then flag the evidence)."""
    ranges = [getattr(c, condition) for c in contract.runtime if getattr(c, condition)]
    if not ranges:
        return None
    lo, hi = max(r[0] for r in ranges), min(r[1] for r in ranges)
    return (lo, hi) if lo <= hi else tuple(ranges[0])


def points(lo: int, hi: int, top_lo: int, top_hi: int) -> list[int]:
    """Ends and midpoint of [lo, hi] clipped into [top_lo, top_hi]."""
    clip = [min(max(v, top_lo), top_hi) for v in (lo, (lo + hi) // 2, hi)]
    return sorted(set(clip))


def settings(contract, max_batch: int, length_range) -> list[tuple[int | None, int | None]]:
    """The (batch size, sequence length) settings of the sweep; ``[(None, None)]`` (the
    emulator's own choice) when no runtime clause declares either. ``length_range()`` is
    called only when a length range is declared."""
    batch, length = _declared(contract, "batch_size"), _declared(contract, "sequence_length")
    if batch is None and length is None:
        return [(None, None)]
    bs = [None] if batch is None else points(*batch, 1, max_batch)
    ls = [None] if length is None else points(*length, *length_range())
    if len(bs) > 1 and len(ls) > 1:
        grid = [(b, v) for b in (bs[0], bs[-1]) for v in (ls[0], ls[-1])]
        grid.append((bs[len(bs) // 2], ls[len(ls) // 2]))
    else:
        grid = [(b, v) for b in bs for v in ls]
    return sorted(set(grid), key=lambda s: (s[0] or 0, s[1] or 0))
