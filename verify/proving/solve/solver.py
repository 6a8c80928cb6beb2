"""Proof by refutation with refinement: proved, refuted (confirmed) or unknown, within a budget.

For a bound ``f`` over a box of premise variables and a threshold ``m`` the claim is
"``f(v) ≤ m`` for every ``v`` in the box". The query asserts the premises, the enclosure
lemmas and ``f(v) > m``:

* ``unsat`` on every piece of a partition of the box ⇒ ``proved``;
* ``sat`` ⇒ the model's point (and the piece's upper corner, the worst point of a
  nondecreasing bound) are evaluated by outward-rounded interval arithmetic at 160 bits; only
  when the lower end of that interval exceeds ``m`` is the claim ``refuted``, with that point
  as the confirmed counterexample. Otherwise the enclosures were too loose: the degree and the
  constants' precision are raised, then the piece is split in two, and the pieces retried;
* a solver ``unknown`` (its allowance spent, incompleteness) splits the piece too; when the
  budget is spent the verdict is ``unknown`` with the reason, which names ``--solver-budget``.
  Nothing else yields ``proved``.

The budget (``verify.proving.solve.budget``) is counted in z3's resource units, never in time:
each query's units are taken from what is left, so the whole procedure (which pieces, which
degrees, which verdict) is the same on any machine under any load. A call stopped by the
wall-clock hang guard ends the obligation ``unknown`` with the guard's reason (its units were
not counted, so nothing after it could be decided deterministically).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.solve import smt
from kernel_contracts.verify.proving.solve.budget import RAISE, Budget

if TYPE_CHECKING:  # the records load without sympy (a cached run builds them); prove needs it
    import sympy

    from kernel_contracts.verify.proving.solve import intervals
    from kernel_contracts.verify.proving.solve.encoding import Box

__all__ = ["DEFAULT_STEPS", "Counterexample", "Outcome", "QueryRecord", "Step", "prove"]


@dataclass(frozen=True)
class Step:
    """One refinement level: Taylor degree and the bits of the enclosures' constants."""

    degree: int
    bits: int


DEFAULT_STEPS = (Step(3, 64), Step(5, 80), Step(9, 120), Step(15, 200))


@dataclass(frozen=True)
class QueryRecord:
    """A query that decided (part of) a verdict, with the answer it got."""

    text: str
    expected: str  # the answer the verdict rests on
    answer: str
    box: Box
    degree: int
    bits: int
    core: tuple[str, ...]
    time_ms: float


@dataclass(frozen=True)
class Counterexample:
    """A point of the box where the bound provably exceeds the threshold."""

    point: tuple[tuple[str, Fraction], ...]
    value: intervals.Interval  # encloses the bound at ``point``; value[0] > threshold
    source: str  # "z3 model" | "upper corner of the piece"


@dataclass(frozen=True)
class Outcome:
    status: Status
    queries: tuple[QueryRecord, ...]
    counterexample: Counterexample | None
    reason: str
    attempts: int
    time_ms: float
    rlimit: int = 0  # z3 resource units spent (deterministic, unlike ``time_ms``)

    @property
    def core(self) -> tuple[str, ...]:
        """The named assertions used by the deciding queries, without the negated claim."""
        used = {n for q in self.queries for n in q.core}
        return tuple(sorted(used - {"goal"}))


def _split(box: Box, full: Box) -> tuple[Box, Box] | None:
    """Halve ``box`` along the variable widest relative to its full range."""
    best, best_ratio = None, Fraction(0)
    for i, ((_, _, lo, hi), (_, _, flo, fhi)) in enumerate(zip(box, full, strict=True)):
        if fhi > flo and (hi - lo) / (fhi - flo) > best_ratio:
            best, best_ratio = i, (hi - lo) / (fhi - flo)
    if best is None:
        return None
    sym, clause, lo, hi = box[best]
    mid = (lo + hi) / 2
    left = (*box[:best], (sym, clause, lo, mid), *box[best + 1 :])
    right = (*box[:best], (sym, clause, mid, hi), *box[best + 1 :])
    return left, right


def _confirm(expr, constants, threshold, point: Mapping[str, Fraction]):
    from kernel_contracts.verify.proving.solve import intervals

    env = {k: (Fraction(v), Fraction(v)) for k, v in constants.items()}
    env.update({k: (v, v) for k, v in point.items()})
    value = intervals.evaluate(expr, env)
    return value if value[0] > threshold else None


def _candidates(box: Box, model: Mapping[str, Fraction]):
    """The model's point clamped into the box, then the box's upper corner."""
    if all(sym in model for sym, *_ in box):
        yield {s: min(max(model[s], lo), hi) for s, _, lo, hi in box}, "z3 model"
    yield {s: hi for s, _, _, hi in box}, "upper corner of the piece"


def prove(
    expr: sympy.Expr,
    box: Box,
    constants: Mapping[str, Fraction],
    threshold: Fraction,
    *,
    budget: Budget | None = None,
    steps: Sequence[Step] = DEFAULT_STEPS,
    max_pieces: int = 64,
    title: str = "",
) -> Outcome:
    """Decide "``expr ≤ threshold`` on all of ``box``" within ``budget`` (the default one when
    ``None``; see the module docstring)."""
    from kernel_contracts.verify.proving.solve.encoding import EncodeError, encode

    budget = budget or Budget()
    start = time.perf_counter()
    pending: list[tuple[Box, int]] = [(box, 0)]
    done: list[QueryRecord] = []
    attempts, pieces, last, spent = 0, 1, "", 0

    def finish(status, queries, reason="", cex=None) -> Outcome:
        ms = round((time.perf_counter() - start) * 1000, 3)
        return Outcome(status, tuple(queries), cex, reason, attempts, ms, spent)

    while pending:
        piece, level = pending.pop(0)
        left = budget.rlimit - spent
        if left <= 0:
            reason = budget.spent_reason(len(pending) + 1, pieces, last)
            return finish(Status.UNKNOWN, done, reason)
        step = steps[level]
        try:
            query = encode(
                expr, piece, constants, threshold, degree=step.degree, bits=step.bits, title=title
            )
        except EncodeError as err:
            return finish(Status.UNKNOWN, done, f"cannot encode the bound: {err}")
        attempts += 1
        # one query may not take the whole budget: a split may succeed where it stalls
        got = smt.z3_check(
            query.text, rlimit=budget.allowance(left), guard_s=budget.hang_guard_s,
            want=[s for s, *_ in piece],
        )  # fmt: skip
        spent += got.rlimit

        def record(expected: str, q=query, got=got) -> QueryRecord:
            return QueryRecord(
                q.text, expected, got.answer, q.box, q.degree, q.bits, got.core, got.time_ms
            )

        if got.answer == "unsat":
            done.append(record("unsat"))
            continue
        if got.answer == "sat":
            for point, source in _candidates(piece, got.model):
                value = _confirm(expr, constants, threshold, point)
                if value is not None:
                    cex = Counterexample(tuple(point.items()), value, source)
                    return finish(Status.REFUTED, [record("sat")], cex=cex)
            last = f"sat at degree {step.degree}, counterexample not confirmed"
        elif got.hang_guard:
            return finish(Status.UNKNOWN, [*done, record("unsat")], got.reason)
        else:
            last = f"z3 answered {got.answer}: {got.reason}"
        if got.answer == "sat" and level + 1 < len(steps):
            pending.insert(0, (piece, level + 1))
            continue
        halves = _split(piece, box) if pieces < max_pieces else None
        if halves is None:
            reason = f"{last}; no further refinement (degree {step.degree}, {pieces} pieces)"
            reason += f"; {RAISE}" if got.out_of_budget else ""
            return finish(Status.UNKNOWN, [*done, record("unsat")], reason)
        pieces += 1
        pending[:0] = [(halves[0], level), (halves[1], level)]
    return finish(Status.PROVED, done)
