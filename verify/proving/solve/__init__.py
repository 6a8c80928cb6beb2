"""Solving: proof by refutation with refinement, and what the queries are made of.

``solver.prove`` decides one bound against its threshold (proved, refuted with a confirmed
counterexample, or unknown within a ``budget.Budget`` of the solver's deterministic units).
``encoding`` writes a derived bound as a self-contained SMT-LIB2 query, with sound rational
enclosures of exp, tanh, log and sqrt (``enclosures``), outward-rounded interval arithmetic
(``intervals``) and tight ranges of every sub-expression over a box (``ranges``). ``smt`` runs
the text in a solver process (``_worker``) that is killed past its hang guard: the toolkit's
only solver calls.

Only the solver's records are imported here; the sympy-based modules load on first use.
"""

from kernel_contracts.verify.proving.solve.budget import Budget, BudgetError
from kernel_contracts.verify.proving.solve.solver import (
    DEFAULT_STEPS,
    Counterexample,
    Outcome,
    QueryRecord,
    Step,
    prove,
)

__all__ = [
    "DEFAULT_STEPS",
    "Budget",
    "BudgetError",
    "Counterexample",
    "Outcome",
    "QueryRecord",
    "Step",
    "prove",
]
