"""A proofs run from the derivation cache: each obligation rebuilt from its stored derivation,
and decided by z3 in this run on the stored SMT-LIB2 text of its deciding queries.

``entry`` turns a run's decided obligations into a cache payload; ``replay`` turns a payload
back into obligations, or ``None`` when the payload is unusable or z3's answers now differ
from the ones the payload was made with (the run then derives everything afresh). Neither
imports sympy or the bound chain.

What a payload holds of an obligation is what its derivation fixes: the statement, premises,
chain, the bound's printed forms, the premise box, constants, threshold, the rational interval
of the bound at the worst point, the alternatives and notes, and the deciding queries (text,
piece of the box, degree, bits). The verdict is z3's answer in this run:

- proved: every piece of the partition answers ``unsat`` now (the pieces cover the box, so the
  claim holds on all of it); the unsat cores are this run's;
- refuted: the one query answers ``sat`` now and the point it gives is the confirmed
  counterexample the payload holds (for a guarantee: the model's point clamped into the piece,
  or the piece's upper corner where the model lacks a variable, as ``verify.proving.solve.solver``
  picks it; for an int8 exactness obligation the witness, which does not depend on the model), with
  that point's value interval, an exact evaluation of the bound;
- an obligation with no bound derived is undecided as its derivation says, with no query.

Each stored query is given what its derivation could give it at most (a guarantee's query the
per-query allowance of the budget, a kernel query the whole budget); z3's answers within a
budget of its resource units do not depend on time, and a query answered within fewer units is
answered alike within more, so the replay agrees with a derivation in this run.

Only runs whose every obligation was proved, refuted or had no bound are stored (``entry``
returns ``None`` otherwise): an ``unknown`` is never replayed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import NamedTuple

from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import (
    ExprText,
    Obligation,
    fraction,
    printed,
    rational,
)
from kernel_contracts.verify.proving.solve import smt
from kernel_contracts.verify.proving.solve.budget import Budget
from kernel_contracts.verify.proving.solve.solver import Counterexample, QueryRecord

__all__ = ["Versions", "entry", "replay", "versions"]

GUARANTEE, KERNEL = "guarantee", "kernel"


class Versions(NamedTuple):
    """What a report says it was made with: the toolkit's version and each solver's."""

    toolkit: str
    solvers: dict[str, str | None]


def _box_json(box) -> list:
    return [[n, c, rational(lo), rational(hi)] for n, c, lo, hi in box]


def _box(items) -> tuple[tuple[str, str, Fraction, Fraction], ...]:
    return tuple((str(n), str(c), fraction(lo), fraction(hi)) for n, c, lo, hi in items)


def _storable(o: Obligation) -> bool:
    answers = [q.answer for q in o.queries]
    if o.status is Status.PROVED:
        return bool(answers) and all(q.expected == q.answer == "unsat" for q in o.queries)
    if o.status is Status.REFUTED:
        return answers == ["sat"] and o.counterexample is not None
    return o.status is Status.UNKNOWN and o.expr is None and not o.queries


def _obligation_json(o: Obligation, kind: str) -> dict:
    expr = o.expr if o.expr is None or isinstance(o.expr, ExprText) else printed(o.expr)
    cex = o.counterexample
    return {
        "kind": kind,
        "status": o.status.label,
        "id": o.id,
        "quantity": o.quantity,
        "statement": o.statement,
        "premises": list(o.premises),
        "chain": list(o.chain),
        "expr": None if expr is None else [expr.srepr, expr.text, expr.mathml],
        "latex": o.latex,
        "variables": _box_json(o.variables),
        "constants": [[k, rational(v)] for k, v in o.constants],
        "bound": o.bound,
        "bound_interval": None
        if o.bound_interval is None
        else [rational(v) for v in o.bound_interval],
        "threshold": rational(o.threshold),
        "alternatives": [[n, f, v] for n, f, v in o.alternatives],
        "route": o.route,
        "notes": list(o.notes),
        "reason": o.reason if o.status is Status.UNKNOWN else "",
        "queries": [
            {
                "text": q.text,
                "answer": q.answer,
                "box": _box_json(q.box),
                "degree": q.degree,
                "bits": q.bits,
            }
            for q in o.queries
        ],
        "counterexample": None
        if cex is None
        else {
            "point": [[k, rational(v)] for k, v in cex.point],
            "value": [rational(v) for v in cex.value],
            "source": cex.source,
        },
    }


def entry(obligations: Sequence[Obligation], guarantees: int, versions: Versions) -> dict | None:
    """The cache payload of a run's ``obligations`` (the first ``guarantees`` of them from the
    contract's guarantees, the rest int8 exactness obligations) and of the versions its report
    names; ``None`` when one of them may not be stored (module docstring)."""
    if not all(_storable(o) for o in obligations):
        return None
    kinds = [GUARANTEE if i < guarantees else KERNEL for i in range(len(obligations))]
    return {
        "toolkit": versions.toolkit,
        "solvers": [[k, v] for k, v in versions.solvers.items()],  # in the report's order
        "obligations": [_obligation_json(o, k) for o, k in zip(obligations, kinds, strict=True)],
    }


def _outline(item: Mapping) -> Obligation:
    """The stored obligation before it is decided (raises on anything malformed)."""
    expr = item["expr"]
    interval = item["bound_interval"]
    bound = item["bound"]
    if bound is not None and not isinstance(bound, float | int):
        raise TypeError("bound")
    return Obligation(
        id=str(item["id"]),
        quantity=str(item["quantity"]),
        status=Status.UNKNOWN,
        statement=str(item["statement"]),
        premises=tuple(str(p) for p in item["premises"]),
        chain=tuple(str(c) for c in item["chain"]),
        expr=None if expr is None else ExprText(str(expr[0]), str(expr[1]), expr[2]),
        latex=str(item["latex"]),
        variables=_box(item["variables"]),
        constants=tuple((str(k), fraction(v)) for k, v in item["constants"]),
        bound=None if bound is None else float(bound),
        bound_interval=None if interval is None else (fraction(interval[0]), fraction(interval[1])),
        threshold=fraction(item["threshold"]),
        alternatives=tuple((str(n), str(f), float(v)) for n, f, v in item["alternatives"]),
        route=str(item["route"]),
        notes=tuple(str(n) for n in item["notes"]),
        reason=str(item["reason"]),
    )


def _plan(item: Mapping):
    kind, status = item["kind"], item["status"]
    if kind not in (GUARANTEE, KERNEL) or status not in ("proved", "refuted", "unknown"):
        raise ValueError("kind")
    queries = tuple(
        (str(q["text"]), str(q["answer"]), _box(q["box"]), int(q["degree"]), int(q["bits"]))
        for q in item["queries"]
    )
    cex = item["counterexample"]
    if cex is not None:
        point = tuple((str(k), fraction(v)) for k, v in cex["point"])
        value = (fraction(cex["value"][0]), fraction(cex["value"][1]))
        cex = Counterexample(point, value, str(cex["source"]))
    answers = [q[1] for q in queries]
    well_formed = {
        "proved": bool(queries) and set(answers) == {"unsat"} and cex is None,
        "refuted": answers == ["sat"] and cex is not None,
        "unknown": not queries and cex is None and item["expr"] is None,
    }
    if not well_formed[status]:
        raise ValueError("plan")
    return kind, status, queries, cex


def _first_candidate(box, model: Mapping[str, Fraction]):
    """The point ``verify.proving.solve.solver`` tries first on ``sat``: the model's, clamped into
    the piece, else the piece's upper corner."""
    if all(sym in model for sym, *_ in box):
        return tuple((s, min(max(model[s], lo), hi)) for s, _, lo, hi in box), "z3 model"
    return tuple((s, hi) for s, _, _, hi in box), "upper corner of the piece"


def _decide(base: Obligation, kind, status, queries, cex, budget: Budget) -> Obligation | None:
    start = time.perf_counter()
    records = []
    limit = budget.allowance(budget.rlimit) if kind == GUARANTEE else budget.rlimit
    limits = {"rlimit": limit, "guard_s": budget.hang_guard_s}
    for text, answer, box, degree, bits in queries:
        if answer == "unsat":  # one run with tracking gives the answer and core of two
            got = smt.z3_check_tracked(text, **limits)
        else:
            got = smt.z3_check(text, want=[s for s, *_ in box], **limits)
        if got.answer != answer:
            return None  # z3 answers otherwise now: derive afresh
        if (
            answer == "sat"
            and kind == GUARANTEE
            and _first_candidate(box, got.model)
            != (
                cex.point,
                cex.source,
            )
        ):
            return None  # another point than the one confirmed: derive afresh
        records.append(QueryRecord(text, answer, answer, box, degree, bits, got.core, got.time_ms))
    core = tuple(sorted({n for q in records for n in q.core} - {"goal"}))
    return dataclasses.replace(
        base,
        status=Status.PROVED if status == "proved" else Status.REFUTED,
        queries=tuple(records),
        unsat_core=core,
        counterexample=cex,
        reason="",
        time_ms=round((time.perf_counter() - start) * 1000, 3),
    )


def replay(payload: Mapping, *, budget: Budget) -> tuple[Obligation, ...] | None:
    """The obligations of ``payload`` decided by z3 now (module docstring), or ``None``."""
    try:
        items = [(_outline(item), *_plan(item)) for item in payload["obligations"]]
    except Exception:  # a malformed payload is a miss
        return None
    out = []
    for base, kind, status, queries, cex in items:
        if status == "unknown":
            out.append(base)
            continue
        done = _decide(base, kind, status, queries, cex, budget)
        if done is None:
            return None
        out.append(done)
    return tuple(out)


def versions(payload: Mapping) -> Versions | None:
    """The versions stored with ``payload`` (the key covers what they depend on), or ``None``
    if malformed."""
    try:
        toolkit, pairs = payload["toolkit"], [(k, v) for k, v in payload["solvers"]]
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(toolkit, str):
        return None
    if not all(isinstance(k, str) and isinstance(v, str | None) for k, v in pairs):
        return None
    return Versions(toolkit, dict(pairs))
