"""The ordered verdicts of obligations and evidence clauses, and the exit codes they map to."""

from __future__ import annotations

import enum
from collections.abc import Iterable

__all__ = ["Status", "worst"]


class Status(enum.IntEnum):
    """Verdicts, ordered from best to worst; a report's status is the worst of its parts."""

    SKIPPED = 0  # a clause not measured, with the reason why; it never hides a worse verdict
    PROVED = 1  # an obligation z3 proved (unsat of premises and negated claim)
    HELD = 2  # an evidence clause whose confidence bound is within its limit
    UNKNOWN = 3  # an obligation neither proved nor refuted (budget spent, no lemma, loose bound)
    INCONCLUSIVE = 4  # an evidence clause with too few samples to decide
    REFUTED = 5  # an obligation with a confirmed counterexample
    VIOLATED = 6  # an evidence clause whose measurement exceeds its limit
    INVALID = 7  # unusable input: nothing was decided

    @property
    def label(self) -> str:
        return self.name.lower()

    @property
    def exit_code(self) -> int:
        """0 all proved and held; 1 refuted or violated; 2 unusable input; 3 undecided."""
        if self is Status.INVALID:
            return 2
        if self >= Status.REFUTED:
            return 1
        if self >= Status.UNKNOWN:
            return 3
        return 0

    @classmethod
    def parse(cls, label: str) -> Status:
        return cls[label.upper()]


def worst(statuses: Iterable[Status]) -> Status:
    """The worst of ``statuses``; ``SKIPPED`` for none (nothing was decided)."""
    return max(statuses, default=Status.SKIPPED)
