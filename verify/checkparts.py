"""Re-checking a report's clause verdicts and escalation decisions (part of ``verify check``)."""

from __future__ import annotations

from verify.escalation import decide
from verify.status import Status

__all__ = ["check_clauses", "check_escalation", "expected_clause_keys"]

_CLAUSE_STATUSES = {"held", "violated", "inconclusive", "skipped"}
_FAMILIES = ("numerical", "statistical", "runtime", "observability")


def expected_clause_keys(canonical: dict) -> list[tuple[str, str, str]] | None:
    """``(id, family, slice)`` of every clause verdict, in report order; None if unknown."""
    if not canonical:
        return None
    keys = []
    for family in _FAMILIES:
        for c in canonical.get(family) or []:
            if family == "numerical":
                keys.append((c.get("id"), family, c.get("slice", "all")))
            elif family == "statistical":
                keys += [(c.get("id"), family, s) for s in c.get("slices") or ["all"]]
            else:
                keys.append((c.get("id"), family, "all"))
    return keys


def check_clauses(clauses, expected, diff, measured: bool = True) -> list[tuple[str, Status]]:
    """Check each clause verdict's shape and consistency; returns ``(id, status)`` pairs.

    ``measured`` says whether the report carries evidence; without it, numerical and
    statistical clauses can only be skipped."""
    if not isinstance(clauses, list):
        diff("clauses", "missing")
        return []
    out = []
    keys = []
    for i, c in enumerate(clauses):
        where = f"clauses[{i}]"
        if not isinstance(c, dict):
            diff(where, "not an object")
            continue
        where = f"clauses[{c.get('id')}/{c.get('slice')}]"
        keys.append((c.get("id"), c.get("family"), c.get("slice")))
        label = c.get("status")
        if label not in _CLAUSE_STATUSES:
            diff(f"{where}.status", f"not a clause verdict: {label!r}")
            continue
        status = Status.parse(label)
        out.append((c.get("id"), status))
        if c.get("family") in ("numerical", "statistical") and status is not Status.SKIPPED:
            if not measured:
                diff(f"{where}.status", f"{label} in a report without evidence")
            elif status in (Status.HELD, Status.VIOLATED) and (
                not isinstance(c.get("samples"), int) or c.get("samples") <= 0
            ):
                diff(f"{where}.samples", f"{label} without any sample")
        bound, threshold = c.get("bound"), c.get("threshold")
        if status in (Status.SKIPPED, Status.INCONCLUSIVE, Status.VIOLATED) and not c.get("reason"):
            diff(f"{where}.reason", f"{label} without a reason")
        numbers = isinstance(bound, int | float) and isinstance(threshold, int | float)
        if numbers and status is Status.HELD and not bound <= threshold:
            diff(where, f"held, but its bound {bound!r} exceeds its max {threshold!r}")
        if numbers and status is Status.VIOLATED and bound <= threshold and not c.get("reason"):
            diff(where, f"violated, but its bound {bound!r} is within its max {threshold!r}")
    # several evidence sources give several adjacent verdicts of one (clause, slice)
    keys = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    if expected is not None and keys != expected:
        diff("clauses", f"{_show(keys)} but the contract gives {_show(expected)}")
    return out


def _show(keys) -> str:
    return "[" + ", ".join(f"{i}/{f}/{s}" for i, f, s in keys) + "]"


class _Rule:
    def __init__(self, raw: dict):
        self.clause = raw.get("clause")
        self.severity = raw.get("severity")
        self.action = raw.get("action")
        self.status = tuple(raw.get("status") or ("violated",))


def check_escalation(decisions, rules, verdicts, diff) -> None:
    """Recompute the escalation decisions from the contract's rules and the verdicts."""
    if not isinstance(decisions, list):
        diff("escalation", "missing")
        return
    expected = decide([_Rule(r) for r in rules if isinstance(r, dict)], verdicts)
    if len(decisions) != len(expected):
        diff("escalation", f"{len(decisions)} decisions for {len(expected)} rules")
        return
    for i, (got, want) in enumerate(zip(decisions, expected, strict=True)):
        if not isinstance(got, dict):
            diff(f"escalation[{i}]", "not an object")
            continue
        for key in ("clause", "severity", "action", "fired"):
            if got.get(key) != getattr(want, key):
                diff(f"escalation[{i}].{key}", f"{got.get(key)!r} but recomputed "
                     f"{getattr(want, key)!r}")  # fmt: skip
        if got.get("observed") != list(want.observed):
            diff(f"escalation[{i}].observed", f"{got.get('observed')} but the verdicts give "
                 f"{list(want.observed)}")  # fmt: skip
