"""The escalation policy Π applied to a report's verdicts: which rules fire, and what to do.

Rules are checked in the contract's order. A rule names a clause (or a guarantee) and the
statuses it reacts to (``violated`` by default); it fires when any verdict of that clause,
on any slice, has one of those statuses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kernel_contracts.contracts import EscalationRule
from kernel_contracts.verify.common.status import Status

__all__ = ["Decision", "decide", "decision_json"]


@dataclass(frozen=True)
class Decision:
    """One rule, the statuses seen on its clause, and whether it fired."""

    clause: str
    severity: str
    action: str
    when: tuple[str, ...]
    observed: tuple[str, ...]
    fired: bool


def decide(
    rules: Sequence[EscalationRule], verdicts: Iterable[tuple[str, Status]]
) -> tuple[Decision, ...]:
    """Apply ``rules`` to ``(id, status)`` verdicts of obligations and clause slices."""
    seen: dict[str, list[str]] = {}
    for ident, status in verdicts:
        labels = seen.setdefault(ident, [])
        if status.label not in labels:
            labels.append(status.label)
    decisions = []
    for rule in rules:
        observed = tuple(seen.get(rule.clause, ()))
        fired = any(label in rule.status for label in observed)
        decisions.append(
            Decision(rule.clause, rule.severity, rule.action, tuple(rule.status), observed, fired)
        )
    return tuple(decisions)


def decision_json(d: Decision) -> Mapping[str, object]:
    return {
        "clause": d.clause,
        "severity": d.severity,
        "action": d.action,
        "when": list(d.when),
        "observed": list(d.observed),
        "fired": d.fired,
    }
