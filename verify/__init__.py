"""verify: z3 obligations, proof-carrying reports, the re-checker and the command line.

Importing ``verify`` is light: the solver, sympy and the measuring code load on first use.
Inside, rooms with one-way doors; a room imports only the rooms listed before it:

- ``common``: what every room shares (status, clause results, escalation decisions, premise
  support, static clauses, inputs and outputs of a command, every argument parser);
- ``decide``: the evidence clauses measured and decided;
- ``proving``: obligations, the solver, a whole run, reports, the re-checker, synthesis;
- ``pipeline``: the monitor, routing, promotion stages, export and the starter contract (init);
- ``diagnostics`` (after ``common`` only): localize and conformance, for kernels;
- ``cli``: the front door, a dispatch table into the rooms. No room imports it.

No module imports another module's private (``_``) name. A module whose main function shares
its name is named otherwise (``verify.proving.runner`` defines ``run``).
"""

from __future__ import annotations

from kernel_contracts.contracts.lazy import lazy_exports
from kernel_contracts.verify.common.clauses import ClauseResult
from kernel_contracts.verify.common.status import Status, worst

__all__ = [
    "Budget",
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
    "Budget": "kernel_contracts.verify.proving.solve.budget",
    "Obligation": "kernel_contracts.verify.proving.obligations",
    "discharge": "kernel_contracts.verify.proving.obligations",
    "Report": "kernel_contracts.verify.proving.render.report",
    "report_json": "kernel_contracts.verify.proving.render.report",
    "enclose": "kernel_contracts.verify.proving.solve.enclosures",
    "encode": "kernel_contracts.verify.proving.solve.encoding",
    "export_main": "kernel_contracts.verify.pipeline.export",
    "localize_main": "kernel_contracts.verify.diagnostics.localize.command",
    "conformance_main": "kernel_contracts.verify.diagnostics.conformance.command",
    "prove": "kernel_contracts.verify.proving.solve.solver",
    "run": "kernel_contracts.verify.proving.runner",
    "to_html": "kernel_contracts.verify.proving.render.documents",
    "to_markdown": "kernel_contracts.verify.proving.render.documents",
    "check_report": "kernel_contracts.verify.proving.check.recheck",
    "synthesize": "kernel_contracts.verify.proving.synth",
    "main": "kernel_contracts.verify.cli.commands",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
