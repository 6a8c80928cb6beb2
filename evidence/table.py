"""The token table: the columns every evidence source gives per token, and the one a clause reads.

A source of evidence is turned into one table per shard, one row per generated token:

- from full-vocabulary logits (``kernels.emulate``): every column of
  ``kernels.measurement.columns``, plus ``abs_log_ratio`` = |log w| and ``kl`` = max(KL(π‖π'),
  KL(π'‖π)), so that a verdict on ``kl`` holds for either direction;
- from sampled-token log-probs (a rollout log, a routed batch): ``log_ratio`` = ℓ − ℓ',
  ``abs_log_ratio``, ``token_prob`` = π(y) = e^min(ℓ, 0), and the ``position`` and ``prompt`` that
  slices select on. The full-vocabulary metrics (``FULL_VOCAB``) cannot be formed there, but
  the two log-probs of the sampled token y bound four of them from below, token by token
  (``LOWER_BOUNDED``; ``evidence.lower.lower_bounds``, rounded outward, a log-prob above 0 read
  as 0): such a column can show a clause violated, never held.

Which columns a kind of source gives, exactly or as lower bounds, follows from the kind alone
(``reading``, ``unmeasurable``, ``slice_columns``): ``verify check`` re-derives it from a
report.

This module (``evidence.lower`` for the lower bounds) is the only place those derived columns
are computed.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from jaxtyping import Float, Int

from kernel_contracts.evidence.lower import lower_bounds, possible

__all__ = [
    "FULL_VOCAB",
    "LOWER_BOUNDED",
    "RANGE",
    "SAMPLED_ONLY",
    "clause_column",
    "from_logprobs",
    "from_measured",
    "lower_bounds",
    "reading",
    "slice_columns",
    "slice_needs",
    "unmeasurable",
    "worst",
]

# metric ranges known a priori: the bounded-mean bound needs them
RANGE = {"tv": (0.0, 1.0), "top1_flip": (0.0, 1.0)}
# metrics that need the full vocabulary: a sampled-token log cannot give them
FULL_VOCAB = ("logit_drift", "logit_oscillation", "tv", "kl", "top1_flip")
# the columns a sampled token alone determines (a truncated-support caveat concerns them)
SAMPLED_ONLY = ("log_ratio", "abs_log_ratio")
# full-vocabulary metrics a sampled token bounds from below (``lower_bounds``)
LOWER_BOUNDED = ("logit_drift", "logit_oscillation", "tv", "kl")
# the columns a sampled-token table has for slices to select on
_SAMPLED_SLICE_COLUMNS = frozenset(("token_prob", "position", "prompt"))

Column = Float[np.ndarray, " tokens"]


def clause_column(family: str, metric: str) -> str:
    """The table column a clause reads: a numerical log-ratio limit bounds its magnitude."""
    return "abs_log_ratio" if family == "numerical" and metric == "log_ratio" else metric


def from_measured(table: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The token table of a full-vocabulary measurement (``kernels.emulate``'s columns)."""
    columns = dict(table)
    columns["log_ratio"] = np.asarray(table["log_ratio"], dtype=np.float64)
    columns["abs_log_ratio"] = np.abs(columns["log_ratio"])
    columns["kl"] = np.maximum(table["kl_train_inf"], table["kl_inf_train"])
    return columns


def reading(kind: str | None, column: str) -> str:
    """How a source of ``kind`` (``emulate`` | ``logprobs``) gives ``column``: ``"exact"``,
    ``"lower"`` (a per-token lower bound of the metric) or ``"none"``. A source of no known kind
    (``None``: a report's re-check found none) reads as exact: its values are checked as given."""
    if kind != "logprobs" or column not in FULL_VOCAB:
        return "exact"
    return "lower" if column in LOWER_BOUNDED else "none"


def unmeasurable(kind: str | None, column: str) -> str | None:
    """Why a source of ``kind`` cannot give ``column`` at all, or ``None`` when it can."""
    if reading(kind, column) != "none":
        return None
    return (
        f"{column} needs full-vocabulary logits; sampled-token logs give only log-probs of the "
        "sampled token"
    )


SLICE_RANGES = ("token_prob", "position", "entropy", "margin")


def slice_needs(sl) -> tuple[str, ...]:
    """The columns slice ``sl`` (a ``contracts.Slice``) selects on."""
    needs = tuple(n for n in SLICE_RANGES if getattr(sl, n) is not None)
    return (*needs, "prompt") if sl.prompt is not None else needs


def slice_columns(kind: str) -> frozenset[str] | None:
    """The columns slices may select on in a source of ``kind``; ``None``: every column."""
    return _SAMPLED_SLICE_COLUMNS if kind == "logprobs" else None


def from_logprobs(
    log_w: Column,
    train_logprob: Column,
    position: Int[np.ndarray, " tokens"],
    prompt: Int[np.ndarray, " tokens"],
    *,
    rollout_logprob: Column | None = None,
    log_kept_mass: Column | None = None,
    temperature: float | None = None,
) -> dict[str, np.ndarray]:
    """The token table of sampled tokens: ``log_w`` = ℓ − ℓ' with ℓ = log π(y) by K_train and
    ℓ' = log π'(y) by K_inf (as the caller measured it), ``train_logprob`` = ℓ. With the
    policy's ``temperature``, also the ``lower_bounds`` of the full-vocabulary metrics, formed
    from the logged ℓ and ``rollout_logprob`` (corrected by ``log_kept_mass`` when given)
    themselves: ℓ − ``log_w`` is not ℓ' once ``log_w`` is rounded."""
    columns = {
        "log_ratio": log_w,
        "abs_log_ratio": np.abs(log_w),
        "token_prob": np.exp(possible(train_logprob)),
        "position": position,
        "prompt": prompt,
    }
    if temperature is not None:
        if rollout_logprob is None:
            raise TypeError("the lower bounds (a temperature given) need rollout_logprob")
        columns |= lower_bounds(
            train_logprob, rollout_logprob, temperature, log_kept_mass=log_kept_mass
        )
    return columns


def worst(col: str, values: Column) -> tuple[Column, int]:
    """Replace non-finite values by the metric's worst value; return them and their count."""
    bad = ~np.isfinite(values)
    n = int(bad.sum())
    if n:
        values = np.where(bad, RANGE.get(col, (0.0, np.finfo(np.float64).max))[1], values)
    return values, n
