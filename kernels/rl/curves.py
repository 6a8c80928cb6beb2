"""Learning curves of RL runs: seed means, degradation against a baseline, summary rows.

Pure functions over the ``StepRecord``\\ s of finished runs (numpy only). A run *degrades* at a
step when the trailing mean of its seed-averaged reward falls more than ``margin`` below that
of a baseline run (the same correction with rollouts on the fp32 inference kernel, whose
ratios are 1 up to rounding), so the gap cannot be the task's own difficulty.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kernel_contracts.kernels.rl.loop import StepRecord

__all__ = [
    "degraded_steps",
    "mean_curve",
    "step_ranges",
    "steps_per_second",
    "summary_row",
    "trailing_mean",
]


def mean_curve(runs: Sequence[Sequence[StepRecord]], field: str) -> np.ndarray:
    """The per-step mean of ``field`` over runs (seeds) of equal length."""
    if not runs:
        raise ValueError("no runs to average")
    lengths = {len(r) for r in runs}
    if len(lengths) != 1:
        raise ValueError(f"runs of different lengths cannot be averaged: {sorted(lengths)}")
    return np.mean([[getattr(rec, field) for rec in run] for run in runs], axis=0)


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each step (fewer at the start)."""
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    values = np.asarray(values, np.float64)
    csum = np.concatenate([[0.0], np.cumsum(values)])
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (csum[idx] - csum[lo]) / (idx - lo)


def degraded_steps(
    curve: np.ndarray, baseline: np.ndarray, margin: float, window: int = 3
) -> list[int]:
    """Steps where ``curve``'s trailing mean is more than ``margin`` below ``baseline``'s."""
    if np.shape(curve) != np.shape(baseline):
        raise ValueError(f"curve and baseline differ in length: {len(curve)}, {len(baseline)}")
    gap = trailing_mean(baseline, window) - trailing_mean(curve, window)
    return [int(s) for s in np.flatnonzero(gap > margin)]


def steps_per_second(records: Sequence[StepRecord]) -> float:
    """Steps per wall second, the first step (compilation) left out when there are others."""
    timed = records[1:] if len(records) > 1 else records
    seconds = sum(r.rollout_s + r.update_s for r in timed)
    return len(timed) / seconds if seconds > 0 else float("inf")


def step_ranges(steps: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"0-2, 5"``; ``"-"`` for none."""
    steps = sorted(set(steps))
    if not steps:
        return "-"
    parts, first, last = [], steps[0], steps[0]
    for s in steps[1:]:
        if s == last + 1:
            last = s
            continue
        parts.append(f"{first}-{last}" if last > first else f"{first}")
        first = last = s
    parts.append(f"{first}-{last}" if last > first else f"{first}")
    return ", ".join(parts)


def summary_row(runs: Sequence[Sequence[StepRecord]], end_window: int = 3) -> dict[str, float]:
    """Seed-averaged numbers of one (preset, correction) cell: reward at the first step and over
    the last ``end_window`` steps, the mismatch at the start and the end, its worst values,
    what the correction did and the speed."""
    reward = mean_curve(runs, "reward_mean")
    abs_mean = mean_curve(runs, "abs_log_ratio_mean")
    tail = min(end_window, len(reward))
    return {
        "reward_start": float(reward[0]),
        "reward_end": float(reward[-tail:].mean()),
        "abs_log_ratio_mean_start": float(abs_mean[0]),
        "abs_log_ratio_mean_end": float(abs_mean[-tail:].mean()),
        "abs_log_ratio_max": float(max(r.abs_log_ratio_max for run in runs for r in run)),
        "tv_mean": float(mean_curve(runs, "tv_mean").mean()),
        "tv_max": float(max(r.tv_max for run in runs for r in run)),
        "logit_drift_max": float(max(r.logit_drift_max for run in runs for r in run)),
        "masked_share": float(mean_curve(runs, "masked_share").mean()),
        "clipped_share": float(mean_curve(runs, "clipped_share").mean()),
        "grad_norm_mean": float(mean_curve(runs, "grad_norm").mean()),
        "entropy_end": float(mean_curve(runs, "entropy_mean")[-tail:].mean()),
        "steps_per_s": float(np.mean([steps_per_second(run) for run in runs])),
    }
