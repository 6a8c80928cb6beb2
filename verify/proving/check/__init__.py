"""``python -m verify check REPORT.json``: re-check a report without trusting it.

``recheck`` rebuilds the contract from the report's canonical form and re-derives everything
else; ``parts`` re-checks clause verdicts, escalation decisions and the re-derivable fields of
obligations; ``sources`` the evidence sources against the contract and their own fields;
``same_data`` the verdicts drawn from one source's tokens against each other; ``query``
re-runs one obligation's queries; ``recompute`` is an independent route to a report's numbers
through mpmath's interval type.
"""

from kernel_contracts.verify.proving.check.recheck import (
    CheckResult,
    ReportUnreadable,
    check_data,
    check_main,
    check_report,
)

__all__ = ["CheckResult", "ReportUnreadable", "check_data", "check_main", "check_report"]
