"""The proof-carrying report (``report``: one frozen record and its JSON) and its renderings for
people (``documents``: Markdown and self-contained HTML)."""

from kernel_contracts.verify.proving.render.documents import to_html, to_markdown
from kernel_contracts.verify.proving.render.report import (
    ContractInfo,
    Report,
    clause_json,
    dumps,
    report_json,
)

__all__ = [
    "ContractInfo",
    "Report",
    "clause_json",
    "dumps",
    "report_json",
    "to_html",
    "to_markdown",
]
