"""Conformance of a kernel implementation to its spec, with fault injection as positive
controls (``python -m verify conformance``)."""

from kernel_contracts.verify.diagnostics.conformance.checks import (
    CHECKS,
    Baseline,
    Check,
    Observed,
    Verdict,
)
from kernel_contracts.verify.diagnostics.conformance.suite import Model, Row, Table, run_suite

__all__ = [
    "CHECKS",
    "Baseline",
    "Check",
    "Model",
    "Observed",
    "Row",
    "Table",
    "Verdict",
    "run_suite",
]
