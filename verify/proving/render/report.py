"""The proof-carrying report: one frozen record, rendered as JSON, Markdown and HTML.

The JSON form is the contract between the toolkit and a reviewer: ``python -m verify check``
re-checks it from its own contents (and the contract file, when present) alone. Writing the
renderings to files is ``verify.common.outputs``'s job.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from kernel_contracts.verify.common.clauses import ClauseResult
from kernel_contracts.verify.common.escalation import Decision, decision_json
from kernel_contracts.verify.common.status import Status, worst
from kernel_contracts.verify.common.support import Support, support_json
from kernel_contracts.verify.proving.obligations import Obligation, obligation_json
from kernel_contracts.verify.proving.solve.budget import Budget

__all__ = [
    "FORMAT",
    "ContractInfo",
    "Report",
    "clause_json",
    "overall",
    "report_json",
]

FORMAT = "kernel-contracts/report/1"


@dataclass(frozen=True)
class ContractInfo:
    path: str
    sha256: str
    canonical: str
    name: str

    @property
    def canonical_sha256(self) -> str:
        return hashlib.sha256(self.canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Report:
    """Everything one run decided, and what each decision rests on."""

    contract: ContractInfo
    toolkit: str
    python: str
    solvers: Mapping[str, str | None]
    obligations: tuple[Obligation, ...]
    clauses: tuple[ClauseResult, ...]
    evidence: Mapping[str, object] | None
    escalation: tuple[Decision, ...]
    timing: Mapping[str, float] = field(default_factory=dict)
    # what the evidence says of each guarantee's premises (``verify.common.support``); empty when
    # the run was given no evidence
    support: tuple[Support, ...] = ()
    # what the solvers were allowed to spend, in their own units (``solver_budget``)
    budget: Budget = field(default_factory=Budget)

    @property
    def status(self) -> Status:
        return overall(self)

    @property
    def exit_code(self) -> int:
        return self.status.exit_code


def overall(report: Report) -> Status:
    """The worst verdict of all obligations, clauses and premise supports."""
    return worst(
        [o.status for o in report.obligations]
        + [c.status for c in report.clauses]
        + [s.status for s in report.support]
    )


def clause_json(c: ClauseResult) -> Mapping[str, object]:
    out = asdict(c)
    out["status"] = c.status.label
    out["basis"] = dict(c.basis) or None
    return out


def report_json(report: Report) -> dict:
    """The report as JSON-ready data (``format`` names this layout)."""
    status = report.status
    return {
        "format": FORMAT,
        "status": status.label,
        "exit_code": status.exit_code,
        "contract": {
            "path": report.contract.path,
            "sha256": report.contract.sha256,
            "canonical": report.contract.canonical,
            "canonical_sha256": report.contract.canonical_sha256,
            "name": report.contract.name,
        },
        "toolkit": {"version": report.toolkit},
        "python": report.python,
        "solvers": dict(report.solvers),
        "solver_budget": report.budget.json(),
        "obligations": [obligation_json(o) for o in report.obligations],
        "clauses": [clause_json(c) for c in report.clauses],
        "evidence": report.evidence,
        "escalation": [decision_json(d) for d in report.escalation],
        "support": [support_json(s) for s in report.support],
        "timing": dict(report.timing),
    }


def dumps(report: Report) -> str:
    return json.dumps(report_json(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def python_version() -> str:
    return sys.version.split()[0]
