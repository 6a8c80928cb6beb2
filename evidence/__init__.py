"""evidence: what the kernels did, read from rollout logs or measured by emulation, summarised.

The flow is contracts → kernels → evidence → verify. This package reads users' logs (JSONL,
Parquet, Arrow: ``evidence.logs``), writes them from inside RL frameworks (``evidence.hooks``),
owns the token table every source is turned into (``evidence.table``),
summarises it per slice and metric in mergeable summaries (``evidence.summary``; the drift
table's cells in ``evidence.drift``) and assembles
one ``Source`` per log or emulation setting (``evidence.sources``), with the runtime envelope its
sequences were gathered in (``evidence.envelope``). ``evidence.emulate`` reads what a contract
asks to emulate (its ``evidence.emulate`` model and prompt files, its sampling policy, the
serving batch and lengths of its runtime clauses) and runs ``kernels.emulation`` on plain
values. Deciding clauses on a source is ``verify.decide``'s job.

Importing this package imports no JAX: only ``emulate_sources`` loads ``evidence.emulate`` and
through it the kernels' emulator, and a log's weight diagnostics (``evidence.weights``) load
``kernels.rl`` when the contract names an estimator.
"""

from kernel_contracts.evidence.drift import DriftCell, drift_cell, merge_tables, table_rows
from kernel_contracts.evidence.envelope import CONDITIONS, observe, settings
from kernel_contracts.evidence.logs import (
    FORMATS,
    LogError,
    LogFormat,
    LoggedSequence,
    LogTable,
    detect_format,
    framework_metrics,
    read_log,
    token_metrics,
    write_log,
)
from kernel_contracts.evidence.sources import (
    EvidenceError,
    Source,
    emulate_sources,
    log_source,
    tables_source,
)
from kernel_contracts.evidence.summary import Summary, merge, merge_all, select, summarize
from kernel_contracts.evidence.table import RANGE, clause_column, from_logprobs, from_measured
from kernel_contracts.evidence.weights import weight_diagnostics

__all__ = [
    "CONDITIONS",
    "FORMATS",
    "RANGE",
    "DriftCell",
    "EvidenceError",
    "LogError",
    "LogFormat",
    "LogTable",
    "LoggedSequence",
    "Source",
    "Summary",
    "clause_column",
    "detect_format",
    "drift_cell",
    "emulate_sources",
    "framework_metrics",
    "from_logprobs",
    "from_measured",
    "log_source",
    "merge",
    "merge_all",
    "merge_tables",
    "observe",
    "read_log",
    "select",
    "settings",
    "summarize",
    "table_rows",
    "tables_source",
    "token_metrics",
    "weight_diagnostics",
    "write_log",
]
