"""Premise support: what the run's evidence says of the clauses each guarantee rests on.

A proof shows "if the premises hold, the guarantee holds". When evidence is given, the run also
says whether that evidence *supports* each guarantee: for every clause named in its ``from``,
the verdicts of that clause's rows (one per slice and evidence source) decide the premise —

- ``violated``: some row is violated (the evidence contradicts the premise);
- ``held``: every row is held;
- ``inconclusive``: otherwise — the premise stayed unchecked (no row, or a row skipped or
  inconclusive: a metric the source cannot measure, a log that bounds it only from below,
  too few tokens).

A guarantee's support is the worst of its premises' (``held`` when all are held). The support
statuses count toward the report's status, so exit 0 with evidence means that the evidence
held every premise of every guarantee; a premise it left unchecked gives exit 3 and one it
contradicts exit 1. Without evidence there is no support to state and none is listed.
``verify check`` recomputes all of it from the report's own verdicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kernel_contracts.verify.common.status import Status

__all__ = ["Support", "premise_status", "support", "support_json"]


@dataclass(frozen=True)
class Support:
    """What the evidence says of the premises of one guarantee."""

    guarantee: str
    status: Status  # HELD | VIOLATED | INCONCLUSIVE (a premise no evidence decided)
    premises: tuple[tuple[str, Status], ...]  # (clause id, its premise status), in `from` order

    @property
    def unchecked(self) -> tuple[str, ...]:
        return tuple(p for p, s in self.premises if s not in (Status.HELD, Status.VIOLATED))

    @property
    def violated(self) -> tuple[str, ...]:
        return tuple(p for p, s in self.premises if s is Status.VIOLATED)

    @property
    def reason(self) -> str:
        if self.status is Status.VIOLATED:
            return f"the evidence violates premise(s) {', '.join(self.violated)}"
        if self.status is Status.HELD:
            return "the evidence held every premise"
        return f"no evidence decided premise(s) {', '.join(self.unchecked)}"


def premise_status(rows: Iterable[Status]) -> Status:
    """One premise's status from its rows' verdicts: violated if any row is, held if every
    row is (and there is one), else inconclusive (skipped when every row was skipped)."""
    rows = list(rows)
    if Status.VIOLATED in rows:
        return Status.VIOLATED
    if rows and all(s is Status.HELD for s in rows):
        return Status.HELD
    if rows and all(s is Status.SKIPPED for s in rows):
        return Status.SKIPPED
    return Status.INCONCLUSIVE


def support(
    guarantees: Iterable[tuple[str, tuple[str, ...]]],
    verdicts: Iterable[tuple[str, Status]],
) -> tuple[Support, ...]:
    """The support of each guarantee ``(id, from)`` from the clause ``verdicts`` ``(clause id,
    status)``, one per row; call it only when evidence was given."""
    rows: dict[str, list[Status]] = {}
    for cid, status in verdicts:
        rows.setdefault(cid, []).append(status)
    out = []
    for gid, premises in guarantees:
        each = tuple((p, premise_status(rows.get(p, ()))) for p in dict.fromkeys(premises))
        statuses = [s for _, s in each]
        if Status.VIOLATED in statuses:
            status = Status.VIOLATED
        elif all(s is Status.HELD for s in statuses):
            status = Status.HELD
        else:
            status = Status.INCONCLUSIVE
        out.append(Support(gid, status, each))
    return tuple(out)


def support_json(s: Support) -> Mapping[str, object]:
    """The JSON form (the ``support[]`` items of a report)."""
    return {
        "guarantee": s.guarantee,
        "status": s.status.label,
        "premises": {p: st.label for p, st in s.premises},
        "unchecked": list(s.unchecked),
        "reason": s.reason,
    }
