"""What every room of ``verify`` shares: the ordered ``status``, clause results (``clauses``),
the escalation decision (``escalation``), premise support (``support``), the clauses decided
without evidence (``static_clauses``), every command's parser (``arguments``), what a command
reads first (``inputs``) and the all-or-nothing output plan (``outputs``).

This room imports no other room of ``verify``.
"""

from kernel_contracts.verify.common.clauses import ClauseResult
from kernel_contracts.verify.common.status import Status, worst

__all__ = ["ClauseResult", "Status", "worst"]
