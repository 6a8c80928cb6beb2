"""Text and JSON renderings of a conformance table (``verify.diagnostics.conformance.suite``)."""

from __future__ import annotations

import json
import math

from kernel_contracts.verify.diagnostics.conformance.suite import Table

__all__ = ["to_json", "to_text"]


def _cell(table: Table, fault: str, check: str, designed: str) -> str:
    fired = table.fired(fault, check)
    mark = "n/a" if fired is None else ("X" if fired else ".")
    return f"[{mark}]" if check == designed else mark


def _names(items: tuple[str, ...]) -> str:
    return ", ".join(items) if items else "none"


def to_text(table: Table, side: str) -> str:
    """The table ``python -m verify conformance`` prints: X fired, . silent, [ ] the check
    designed for the fault, n/a not applicable."""
    width = max(len(c) for c in table.checks)
    lines = [
        f"conformance of the {side} kernel ({table.kernel}), seed {table.seed}: every fault "
        "injected into its JAX implementation, every check run on it",
        "X = detected, . = not detected, [ ] = the check designed for the fault",
        "",
        " " * 18 + " ".join(f"{c[:width]:>{width}}" for c in table.checks),
    ]
    for row in table.rows:
        if not row.applies:
            lines.append(f"{row.fault:<18}not applicable to this kernel")
            continue
        cells = [_cell(table, row.fault, c, row.designed) for c in table.checks]
        lines.append(f"{row.fault:<18}" + " ".join(f"{c:>{width}}" for c in cells))
    verdict = "ok" if table.ok else "FAILED"
    lines += [
        "",
        f"false alarms (checks firing on the null fault): {_names(table.false_alarms)}",
        f"faults their designed check missed: {_names(table.missed)}",
        f"checks that detect no fault: {_names(table.silent_checks)}",
        f"faults no check detects: {_names(table.undetected)}",
        f"checks not applicable here: {_names(table.inapplicable)}",
        f"conformance: {verdict}",
    ]
    return "\n".join(lines) + "\n"


def _number(x):
    return x if x is None or math.isfinite(x) else str(x)


def to_json(table: Table, side: str) -> str:
    """The table with every verdict's measured value and detail, and the flags."""
    rows = []
    for row in table.rows:
        verdicts = {
            c: {"fired": v.fired, "value": _number(v.value), "detail": v.detail}
            for c, v in zip(table.checks, row.verdicts, strict=False)  # none when not applicable
        }
        rows.append({"fault": row.fault, "description": row.description,
                     "applies": row.applies, "designed": row.designed or None,
                     "checks": verdicts})  # fmt: skip
    doc = {
        "kernel": side,
        "preset": table.kernel,
        "seed": table.seed,
        "checks": list(table.checks),
        "faults": rows,
        "false_alarms": list(table.false_alarms),
        "missed": list(table.missed),
        "silent_checks": list(table.silent_checks),
        "undetected": list(table.undetected),
        "inapplicable": list(table.inapplicable),
        "ok": table.ok,
    }
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"
