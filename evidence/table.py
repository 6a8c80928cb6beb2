"""The token table: the columns every evidence source gives per token, and the one a clause reads.

A source of evidence is turned into one table per shard, one row per generated token:

- from full-vocabulary logits (``kernels.emulate``): every column of ``kernels.columns``, plus
  ``abs_log_ratio`` = |log w| and ``kl`` = max(KL(π‖π'), KL(π'‖π)), so that a verdict on ``kl``
  holds for either direction;
- from sampled-token log-probs (a rollout log, a routed batch): ``log_ratio`` = ℓ − ℓ',
  ``abs_log_ratio``, ``token_prob`` = π(y) = e^ℓ, and the ``position`` and ``prompt`` that
  slices select on. The full-vocabulary metrics (``FULL_VOCAB``) cannot be formed there.

This module is the only place those derived columns are computed.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from jaxtyping import Float, Int

__all__ = [
    "FULL_VOCAB",
    "RANGE",
    "SAMPLED_ONLY",
    "clause_column",
    "from_logprobs",
    "from_measured",
    "worst",
]

# metric ranges known a priori: the bounded-mean bound needs them
RANGE = {"tv": (0.0, 1.0), "top1_flip": (0.0, 1.0)}
# metrics that need the full vocabulary: a sampled-token log cannot give them
FULL_VOCAB = ("logit_drift", "logit_oscillation", "tv", "kl", "top1_flip")
# the columns a sampled token alone determines (a truncated-support caveat concerns them)
SAMPLED_ONLY = ("log_ratio", "abs_log_ratio")

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


def from_logprobs(
    log_w: Column,
    train_logprob: Column,
    position: Int[np.ndarray, " tokens"],
    prompt: Int[np.ndarray, " tokens"],
) -> dict[str, np.ndarray]:
    """The token table of sampled tokens: ``log_w`` = ℓ − ℓ' with ℓ = log π(y) by K_train and
    ℓ' = log π'(y) by K_inf (as the caller measured it), ``train_logprob`` = ℓ."""
    return {
        "log_ratio": log_w,
        "abs_log_ratio": np.abs(log_w),
        "token_prob": np.exp(train_logprob),
        "position": position,
        "prompt": prompt,
    }


def worst(col: str, values: Column) -> tuple[Column, int]:
    """Replace non-finite values by the metric's worst value; return them and their count."""
    bad = ~np.isfinite(values)
    n = int(bad.sum())
    if n:
        values = np.where(bad, RANGE.get(col, (0.0, np.finfo(np.float64).max))[1], values)
    return values, n
