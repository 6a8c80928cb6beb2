"""verify: z3 obligations, proof-carrying reports, the re-checker and the command line.

Importing ``verify`` is light: the solver, sympy and the measuring code load on first use.
Concerns have their packages (``solve``, ``check``, ``render``, ``cli``, ``decide`` for the
evidence clauses, and the running pipeline's ``monitor``, ``routing``, ``promotion``); a module
whose main function shares its name is private (``verify._run`` defines ``run``).
"""

from __future__ import annotations

import importlib

from verify.clauses import ClauseResult
from verify.status import Status, worst

__all__ = [
    "ClauseResult",
    "Obligation",
    "Report",
    "Status",
    "check_report",
    "conformance_main",
    "discharge",
    "enclose",
    "encode",
    "export_main",
    "localize_main",
    "main",
    "prove",
    "report_json",
    "run",
    "synthesize",
    "to_html",
    "to_markdown",
    "worst",
]

_LAZY = {
    "Obligation": "verify.obligations",
    "discharge": "verify.obligations",
    "Report": "verify.render.report",
    "report_json": "verify.render.report",
    "enclose": "verify.solve.enclosures",
    "encode": "verify.solve.encoding",
    "export_main": "verify.export",
    "localize_main": "verify.localize.command",
    "conformance_main": "verify.conformance.command",
    "prove": "verify.solve.solver",
    "run": "verify._run",
    "to_html": "verify.render.documents",
    "to_markdown": "verify.render.documents",
    "check_report": "verify.check.recheck",
    "synthesize": "verify.synth",
    "main": "verify.cli.commands",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'verify' has no attribute {name!r}")
