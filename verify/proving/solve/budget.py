"""The solver budget: how much work z3 and cvc5 may do, in their own deterministic units.

A wall-clock limit gives a loaded machine less work than an idle one, so the same query could be
proved on one and ``unknown`` on the other. A budget counts the solver's own resource units
instead (z3's ``rlimit``, cvc5's ``rlimit-per``): the same query with the same budget and the
same solver version gets the same answer on any machine under any load.

- ``rlimit``: z3 resource units for one obligation, shared by its queries. Each query may
  spend at most ``allowance(left)`` (a quarter of the budget, at least ``QUERY_FLOOR``, never
  more than what is left), so a refinement can still split a piece on which one query stalled;
  the units a query spent (z3's statistic ``rlimit count``) are taken from what is left. z3
  counts per context and every query runs in a fresh one, so each count is that query's own.
- ``cvc5_rlimit``: cvc5's ``rlimit-per`` for each cross-check query of ``verify check``.
- ``hang_guard_s``: a wall clock far above the budget that only guards against a solver that
  stops counting (some nonlinear procedures never look at their limits): a call still running
  after it is stopped and answers ``unknown`` with a reason that says "hang guard". It never
  decides a verdict that the budget decides.

The defaults were calibrated with ``bench/solver_budgets.py`` (the table is in the docs page on
proofs): the most a guarantee's query of a shipped contract spends is about 41 000 z3 units (a
quarter of the default budget is 24 times that), the most an int8 kernel query spends (it may
spend the whole budget) 1 540, the most cvc5 spends on one about 16 500 (60 times less than its
default). z3's pace ranges from about 3 million units a second (these queries) to about 10 000
(high-degree enclosures at the edge of a supremum: a whole allowance in about a minute on a
loaded 2-core machine), so the hang guard is five minutes. The budget alone decides only because
``verify.proving.solve.smt`` runs one fixed z3 procedure per query, without the wall-clock
switches of z3's own strategies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "DEFAULT_CVC5_RLIMIT",
    "DEFAULT_HANG_GUARD_S",
    "DEFAULT_RLIMIT",
    "QUERY_FLOOR",
    "RAISE",
    "Budget",
    "BudgetError",
    "from_args",
]

DEFAULT_RLIMIT = 4_000_000  # z3 resource units per obligation (--solver-budget)
DEFAULT_CVC5_RLIMIT = 1_000_000  # cvc5 rlimit-per, per cross-check query
DEFAULT_HANG_GUARD_S = 300.0  # seconds of wall clock per solver call (--timeout-ms)
QUERY_FLOOR = 20_000  # the least one query may spend, when the budget has that much left
RAISE = "--solver-budget raises it"  # what a reason says when a budget was too small


RLIMIT_MAX = 2**32 - 1  # z3 and cvc5 take their limits as unsigned 32-bit integers


class BudgetError(ValueError):
    """A report's ``solver_budget`` that is not a budget."""


def from_args(args) -> Budget:
    """The budget of a command line's ``--solver-budget`` and ``--timeout-ms`` (the hang guard,
    in milliseconds)."""
    return Budget(rlimit=args.solver_budget, hang_guard_s=args.timeout_ms / 1000)


@dataclass(frozen=True)
class Budget:
    """What one obligation's solver calls may spend (module docstring)."""

    rlimit: int = DEFAULT_RLIMIT
    cvc5_rlimit: int = DEFAULT_CVC5_RLIMIT
    hang_guard_s: float = DEFAULT_HANG_GUARD_S

    def __post_init__(self) -> None:
        for name in ("rlimit", "cvc5_rlimit"):
            value = getattr(self, name)
            if type(value) is not int or not 1 <= value <= RLIMIT_MAX:
                raise BudgetError(f"{name} must be an integer in [1, {RLIMIT_MAX}], not {value!r}")
        guard = self.hang_guard_s
        if isinstance(guard, bool) or not isinstance(guard, int | float):
            raise BudgetError(f"hang_guard_s must be a positive number, not {guard!r}")
        if not (math.isfinite(guard) and guard > 0):
            raise BudgetError(f"hang_guard_s must be a positive number, not {guard!r}")

    def allowance(self, left: int) -> int:
        """The most one query may spend when ``left`` units of the budget remain."""
        return max(1, min(left, max(self.rlimit // 4, min(self.rlimit, QUERY_FLOOR))))

    def json(self) -> dict:
        """The report's ``solver_budget``: each solver's budget in its own units."""
        return {
            "z3": {"rlimit": self.rlimit},
            "cvc5": {"rlimit-per": self.cvc5_rlimit},
            "hang_guard_s": self.hang_guard_s,
        }

    @classmethod
    def from_json(cls, data: object) -> Budget:
        """The budget a report's ``solver_budget`` names; raises ``BudgetError``."""
        try:
            if not isinstance(data, Mapping) or set(data) != {"z3", "cvc5", "hang_guard_s"}:
                raise BudgetError("must have exactly the keys z3, cvc5 and hang_guard_s")
            z3, cvc5 = data["z3"], data["cvc5"]
            if not isinstance(z3, Mapping) or set(z3) != {"rlimit"}:
                raise BudgetError("z3 must have exactly the key rlimit")
            if not isinstance(cvc5, Mapping) or set(cvc5) != {"rlimit-per"}:
                raise BudgetError("cvc5 must have exactly the key rlimit-per")
            return cls(z3["rlimit"], cvc5["rlimit-per"], data["hang_guard_s"])
        except BudgetError as err:
            raise BudgetError(f"solver_budget: {err}") from None

    def spent_reason(self, undecided: int, pieces: int, last: str) -> str:
        """Why an obligation is ``unknown`` when its budget is spent, naming the option."""
        return (
            f"solver budget of {self.rlimit} z3 resource units (rlimit) spent with {undecided} "
            f"of {pieces} pieces undecided ({last}); {RAISE}"
        )
