"""Write sequences as JSONL records of one of the formats ``read_log`` understands."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from kernel_contracts.evidence.logs.schema import FORMATS

__all__ = ["LoggedSequence", "record", "write_log"]


@dataclass(frozen=True)
class LoggedSequence:
    """One generated sequence: token ids and both kernels' log-probs of them."""

    prompt_id: str
    sample_id: int
    ids: Sequence[int]
    train: Sequence[float]
    rollout: Sequence[float]
    position_offset: int = 0
    log_kept_mass: Sequence[float] | None = None


def _floats(x) -> list[float]:
    return [float(v) for v in np.asarray(x, dtype=np.float64)]


def record(seq: LoggedSequence, format: str = "generic") -> dict:
    """The JSON object of ``seq`` in ``format`` (joined form: both log-prob arrays).

    ``seq`` may be any record with ``LoggedSequence``'s fields (``kernels.rl.Rollout`` is one).
    """
    fmt = FORMATS[format]
    out: dict = {fmt.prompt[0]: seq.prompt_id}
    if fmt.sample:
        out[fmt.sample] = seq.sample_id
    out[fmt.ids] = [int(v) for v in seq.ids]
    out[fmt.train] = _floats(seq.train)
    out[fmt.rollout] = _floats(seq.rollout)
    if fmt.mask:
        out[fmt.mask] = [1] * len(seq.ids)
    if seq.position_offset and fmt.position_offset:
        out[fmt.position_offset] = int(seq.position_offset)
    if seq.log_kept_mass is not None and fmt.log_kept_mass:
        out[fmt.log_kept_mass] = _floats(seq.log_kept_mass)
    return out


def write_log(
    path: str | os.PathLike, sequences: Iterable[LoggedSequence], format: str = "generic"
) -> int:
    """Write ``sequences`` to ``path`` as JSONL in ``format``; returns the number of lines."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for seq in sequences:
            f.write(json.dumps(record(seq, format), separators=(",", ":")))
            f.write("\n")
            n += 1
    return n
