"""The columns of a token table: what is measured per token, and what locates the token.

Kept apart from ``kernels.measurement._measure`` (which imports JAX) so that readers of token
tables, such as the evidence evaluation of a proofs-and-logs run, can name the columns without
importing JAX.
"""

from __future__ import annotations

__all__ = ["MEASURED_COLUMNS", "TABLE_COLUMNS"]

# full-vocabulary metrics of one token, computed by ``kernels.measurement._measure.measure``
MEASURED_COLUMNS = (
    "logit_drift",
    "logit_oscillation",
    "tv",
    "kl_train_inf",
    "kl_inf_train",
    "log_ratio",
    "top1_flip",
    "margin",
    "entropy",
    "token_prob",
)

# a token table, as ``kernels.emulation.emulate`` returns it: the metrics and where the token is
TABLE_COLUMNS = (*MEASURED_COLUMNS, "position", "prompt", "token")
