"""Re-checking a report's clause verdicts, escalation decisions, premise support and
obligations' re-derivable fields against the contract rebuilt from the report's canonical form
(part of ``verify check``).

Every helper reports differences through ``diff(where, message)``.
"""

from __future__ import annotations

import math

from kernel_contracts.evidence.table import (
    SAMPLED_ONLY,
    clause_column,
    reading,
    slice_columns,
    slice_needs,
    unmeasurable,
)
from kernel_contracts.verify.common.escalation import decide, decision_json
from kernel_contracts.verify.common.static_clauses import (
    NO_EVIDENCE,
    skipped_measurements,
    static_clauses,
)
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.decide.verdicts import numerical_verdict, statistical_verdict
from kernel_contracts.verify.proving.check.confidence import recompute, recompute_lower
from kernel_contracts.verify.proving.render.report import clause_json

__all__ = [
    "CLAUSE_KEYS",
    "OBLIGATION_KEYS",
    "STATIC_KEYS",
    "check_clauses",
    "check_escalation",
    "check_keys",
    "check_outline",
    "check_support",
    "clause_keys",
]

# the fields of an obligation that its guarantee alone decides
# (``verify.proving.obligations.outline``)
STATIC_KEYS = (
    "id", "quantity", "statement", "premises", "chain", "symbolic", "variables", "constants",
    "threshold", "alternatives", "route", "notes",
)  # fmt: skip
OBLIGATION_KEYS = frozenset(STATIC_KEYS) | {
    "status", "premises_used", "bound", "bound_interval", "smtlib", "unsat_core",
    "counterexample", "time_ms", "reason",
}  # fmt: skip
CLAUSE_KEYS = frozenset(
    ("id", "family", "slice", "status", "metric", "statistic", "threshold", "samples", "value",
     "bound", "confidence", "fingerprint", "source", "reason", "lower", "basis")
)  # fmt: skip
_NO_MODULE = "evidence measurement not available"  # verify.proving.runner.NO_EVIDENCE_MODULE


def check_keys(value, allowed, where: str, diff, *, owner: str = "report") -> bool:
    """``value`` must be an object with exactly the fields ``allowed`` (an extra one is a field
    "no ``owner`` has")."""
    if not isinstance(value, dict):
        diff(where, "not an object")
        return False
    extra, missing = sorted(set(value) - set(allowed)), sorted(set(allowed) - set(value))
    if extra:
        diff(where, f"fields no {owner} has: {extra}")
    if missing:
        diff(where, f"missing fields: {missing}")
    return not extra and not missing


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_outline(o: dict, expected: dict, where: str, diff) -> bool:
    """Compare the fields the guarantee decides with ``expected`` (``obligation_json`` of the
    contract's ``outline``); True when all agree."""
    ok = True
    for key in STATIC_KEYS:
        got, want = o.get(key), expected[key]
        if key == "symbolic" and isinstance(got, dict):
            for part in ("srepr", "text", "latex"):
                if got.get(part) != want[part]:
                    diff(f"{where}.symbolic.{part}", f"{_short(got.get(part))} but the contract's "
                         f"premises give {_short(want[part])}")  # fmt: skip
                    ok = False
            if set(got) != set(want):
                diff(f"{where}.symbolic", f"fields {sorted(got)}, not {sorted(want)}")
                ok = False
        elif key == "constants" and isinstance(got, dict) and got != want:
            for name in sorted(set(got) | set(want)):
                if name not in want:
                    diff(f"{where}.constants.{name}", "is no constant the contract defines")
                elif got.get(name) != want[name]:
                    diff(f"{where}.constants.{name}", f"{_short(got.get(name))} but the contract "
                         f"gives {want[name]}")  # fmt: skip
            ok = False
        elif got != want:
            diff(f"{where}.{key}", f"{_short(got)} but the contract gives {_short(want)}")
            ok = False
    return ok


def clause_keys(contract) -> list[tuple[str, str, str]]:
    """``(id, family, slice)`` of every clause verdict, in report order."""
    keys = [(c.id, "numerical", c.slice) for c in contract.numerical]
    keys += [(c.id, "statistical", s) for c in contract.statistical for s in c.slices]
    keys += [(c.id, "runtime", "all") for c in contract.runtime]
    keys += [(c.id, "observability", "all") for c in contract.observability]
    return keys


def _caveat(info) -> bool:
    """Whether a log source's truncated-support shift keeps its log-ratio verdicts open."""
    shift = info.get("truncated_support_shift") if isinstance(info, dict) else None
    if not isinstance(shift, dict):
        return False
    declared = shift.get("declared") is True
    corrected = shift.get("corrected_with_log_kept_mass") is True
    return (declared and not corrected) or (not declared and shift.get("detected") is True)


def _number(value, where, diff, *, integer=False) -> bool:
    kinds = int if integer else int | float
    if value is None or (
        isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)
    ):
        return True
    diff(where, f"not a finite number: {_short(value)}")
    return False


def _measured(c: dict, clause, family: str, sources: dict, where: str, diff, contract) -> None:
    """Check one measured verdict: its labels against the contract, its source against the
    report's evidence, and its status against the verdict its numbers give."""
    label = c.get("status")
    status = Status.parse(label)
    skipped = status is Status.SKIPPED
    statistic = "max" if family == "numerical" else clause.statistic
    confidence = None if family == "numerical" or skipped else float(clause.confidence)
    for key, want in (("metric", clause.metric), ("statistic", statistic),
                      ("threshold", float(clause.max)), ("confidence", confidence)):  # fmt: skip
        if c.get(key) != want:
            diff(f"{where}.{key}", f"{_short(c.get(key))} but the contract gives {_short(want)}")
    info = sources.get((c.get("source"), c.get("fingerprint")))
    if info is None:
        diff(f"{where}.source", "names no evidence source of the report (label and fingerprint)")
    samples, value, bound = c.get("samples"), c.get("value"), c.get("bound")
    numbers = [
        _number(samples, f"{where}.samples", diff, integer=True),
        _number(value, f"{where}.value", diff),
        _number(bound, f"{where}.bound", diff),
        _number(c.get("lower"), f"{where}.lower", diff),
    ]
    if not all(numbers):
        return
    if not isinstance(samples, int) or samples < 0:
        diff(f"{where}.samples", f"not a count: {_short(samples)}")
        return
    if not isinstance(c.get("reason"), str) or (status is not Status.HELD and not c["reason"]):
        diff(f"{where}.reason", f"{label} without a reason")
    column = clause_column(family, clause.metric)
    kind = info.get("kind") if isinstance(info, dict) else None
    if skipped:
        if samples or any(c.get(k) is not None for k in ("value", "bound", "lower", "basis")):
            diff(where, "skipped, but it carries measurements")
        if info is not None and not _may_skip(kind, column, contract, c.get("slice")):
            diff(f"{where}.status", f"skipped, but a {kind} source measures {column} on slice "
                 f"{c.get('slice')!r}")  # fmt: skip
        return
    lower = reading(kind, column) == "lower"
    top = math.inf if bound is None else bound
    caveat = (column in SAMPLED_ONLY or lower) and _caveat(info)
    computed = _computed(c, clause, family, samples, caveat, where, diff)
    if computed is None:
        return
    if not computed or caveat:  # no bound computed, or a truncated-support caveat
        allowed = {Status.INCONCLUSIVE}
    elif family == "numerical":
        allowed = {numerical_verdict(samples, top, clause.max, column, lower)}
    elif lower:  # per-token lower bounds: never held; violated on a lower bound above max
        found = (
            top if clause.statistic == "max" else recompute_lower(c, clause, column, where, diff)
        )
        if found is None:
            return
        allowed = {statistical_verdict(samples, clause.min_samples, math.inf, clause.max,
                                       lambda: found)}  # fmt: skip
    elif clause.statistic == "max":
        allowed = {statistical_verdict(samples, clause.min_samples, top, clause.max)}
    else:
        found = recompute(c, clause, column, where, diff)
        if found is None:
            return
        allowed = {statistical_verdict(samples, clause.min_samples, found[0], clause.max,
                                       lambda: found[1])}  # fmt: skip
    if status not in allowed:
        shown = " or ".join(sorted(s.label for s in allowed))
        lcb = f", lower {c.get('lower')!r}" if c.get("lower") is not None else ""
        diff(f"{where}.status", f"{label}, but its numbers ({samples} samples, bound "
             f"{bound!r}{lcb}, max {float(clause.max)!r}) give {shown}")  # fmt: skip


def _computed(c: dict, clause, family: str, samples: int, caveat: bool, where, diff):
    """Whether the run computed the verdict's numbers (False: no token, fewer than
    ``min_samples``, or a truncated-support caveat, and the verdict is inconclusive); None
    after reporting numbers that contradict the statistic (a maximum's bound is the maximum
    itself and has no lower bound nor basis)."""
    statistical = family == "statistical"
    if samples == 0 or (statistical and (caveat or samples < clause.min_samples)):
        extra = [k for k in ("value", "bound", "lower", "basis") if c.get(k) is not None]
        if extra and (statistical or samples == 0):
            diff(where, f"no bound is computed on {samples} samples here, but it carries "
                 f"{', '.join(extra)}")  # fmt: skip
            return None
        return False
    if family == "numerical" or clause.statistic == "max":
        extra = [k for k in ("lower", "basis") if c.get(k) is not None]
        if extra:
            diff(where, f"a maximum has no {' nor '.join(extra)}")
            return None
        if c.get("value") != c.get("bound"):
            diff(f"{where}.bound", f"{c.get('bound')!r} but the maximum is the value "
                 f"{c.get('value')!r}")  # fmt: skip
            return None
    return True


def _may_skip(kind, column: str, contract, slice_name) -> bool:
    """Whether a source of ``kind`` may skip ``column`` on slice ``slice_name``: it cannot give
    the column, or the slice selects on a column it does not record."""
    if unmeasurable(kind, column) is not None:
        return True
    allowed = slice_columns(kind)
    if allowed is None or not isinstance(slice_name, str):
        return False
    try:
        sl = contract.slice(slice_name)
    except KeyError:
        return True  # an unknown slice is reported with the list of keys
    return any(n not in allowed for n in slice_needs(sl))


def check_clauses(clauses, contract, evidence, diff) -> list[tuple[str, Status]]:
    """Check every clause verdict against the contract; returns ``(id, status)`` pairs.

    Runtime and observability verdicts, and the skipped measurements of a report without
    evidence, are decided by the contract alone and must be identical. Measured verdicts are
    recomputed from their numbers (``verify.decide.verdicts``)."""
    if not isinstance(clauses, list):
        diff("clauses", "missing")
        return []
    static = {(c.id, c.slice): clause_json(c) for c in static_clauses(contract, evidence)}
    if evidence is None:
        wanted = contract.evidence.emulate or contract.evidence.logprobs
        reason = _NO_MODULE if wanted else NO_EVIDENCE
        static |= {(c.id, c.slice): clause_json(c) for c in skipped_measurements(contract, reason)}
    listed = evidence.get("sources") if isinstance(evidence, dict) else None
    sources = {
        (s.get("label"), s.get("fingerprint")): s
        for s in (listed if isinstance(listed, list) else [])
        if isinstance(s, dict)
    }
    out, keys = [], []
    for i, c in enumerate(clauses):
        if not check_keys(c, CLAUSE_KEYS, f"clauses[{i}]", diff):
            continue
        where = f"clauses[{c.get('id')}/{c.get('slice')}]"
        key = (c.get("id"), c.get("family"), c.get("slice"))
        keys.append(key)
        label = c.get("status")
        if label not in ("held", "violated", "inconclusive", "skipped"):
            diff(f"{where}.status", f"not a clause verdict: {_short(label)}")
            continue
        out.append((c.get("id"), Status.parse(label)))
        want = static.get((key[0], key[2]))
        if want is not None and want["family"] == key[1]:
            for k in sorted(CLAUSE_KEYS):
                if c.get(k) != want[k]:
                    diff(f"{where}.{k}", f"{_short(c.get(k))} but the contract gives "
                         f"{_short(want[k])}")  # fmt: skip
        elif key[1] in ("numerical", "statistical") and evidence is not None:
            try:
                clause = contract.clause(key[0])
            except KeyError:
                continue  # reported with the list of keys below
            _measured(c, clause, key[1], sources, where, diff, contract)
    # several evidence sources give several adjacent verdicts of one (clause, slice)
    keys = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    expected = clause_keys(contract)
    if keys != expected:
        diff("clauses", f"{_show(keys)} but the contract gives {_show(expected)}")
    return out


def _show(keys) -> str:
    return "[" + ", ".join(f"{i}/{f}/{s}" for i, f, s in keys) + "]"


def check_escalation(decisions, rules, verdicts, diff) -> None:
    """Recompute the escalation decisions from the contract's rules and the verdicts."""
    if not isinstance(decisions, list):
        diff("escalation", "missing")
        return
    expected = [decision_json(d) for d in decide(rules, verdicts)]
    if len(decisions) != len(expected):
        diff("escalation", f"{len(decisions)} decisions for {len(expected)} rules")
        return
    for i, (got, want) in enumerate(zip(decisions, expected, strict=True)):
        if not check_keys(got, want, f"escalation[{i}]", diff):
            continue
        for key, value in want.items():
            if got.get(key) != value:
                diff(f"escalation[{i}].{key}", f"{_short(got.get(key))} but recomputed "
                     f"{_short(value)}")  # fmt: skip


def check_support(recorded, contract, evidence, clause_statuses, diff) -> list[Status]:
    """Recompute the premise support (``verify.common.support``) from the report's clause verdicts;
    it is listed exactly when evidence was given. Returns its statuses."""
    from kernel_contracts.verify.common.support import support, support_json

    given = evidence is not None or bool(contract.evidence.emulate or contract.evidence.logprobs)
    want = []
    if given:
        want = support(((g.id, tuple(g.from_)) for g in contract.guarantees), clause_statuses)
    if recorded != [support_json(s) for s in want]:
        diff("support", f"{recorded!r} but the clause verdicts give "
             f"{[support_json(s) for s in want]!r}")  # fmt: skip
    return [s.status for s in want]
