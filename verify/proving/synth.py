"""``python -m verify synth CONTRACT.yaml``: the loosest premise thresholds, proved.

For each guarantee the chain is inverted (``bounds.loosest``: for each premise variable, the
largest short rational such that the bound stays within the guarantee's max), the value is
written as an exact decimal, and the obligation with that premise range is proved by z3 before
anything is printed. When the loosest value is not proved within the solver budget (z3
resource units, ``verify.proving.solve.budget``), a few short decimals up to 10% below it are
tried, and the first one proved is printed with a note;
when none is, the note says which budget to give or which value to set. The output is a YAML
snippet to paste into the contract.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction

from kernel_contracts.contracts import Contract, NumericalClause
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import discharge
from kernel_contracts.verify.proving.solve.budget import Budget

__all__ = ["Synthesis", "synth_main", "synthesize"]


@dataclass(frozen=True)
class Synthesis:
    """The loosest proved value of one premise clause's ``max`` for one guarantee."""

    guarantee: str
    clause: str
    family: str
    value: Fraction | None  # None: nothing could be synthesized or proved
    status: Status
    note: str


def decimal_text(v: Fraction) -> str:
    """The exact decimal text of ``v`` (which must have a finite decimal expansion)."""
    sign = "-" if v < 0 else ""
    v = abs(v)
    digits = 0
    while (v * 10**digits).denominator != 1:
        digits += 1
        if digits > 60:
            raise ValueError(f"{v} has no short decimal form")
    n = int(v * 10**digits)
    if digits == 0:
        return f"{sign}{n}"
    whole, frac = divmod(n, 10**digits)
    return f"{sign}{whole}.{frac:0{digits}d}"


def _short(v: Fraction) -> Fraction:
    """``v`` itself when it has a short decimal form, else rounded down to 9 decimals."""
    d = v.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return v if d == 1 else Fraction(int(v * 10**9), 10**9)


def synthesize(contract: Contract, *, budget: Budget | None = None) -> tuple[Synthesis, ...]:
    """For each guarantee and premise variable: the loosest clause max, proved (each try within
    ``budget``, the default one when ``None``)."""
    from kernel_contracts import bounds

    budget = budget or Budget()
    out = []
    for d in bounds.derive(contract):
        if d.expr is None or not d.variables:
            note = d.reason or "the bound has no premise variable to loosen"
            out.append(Synthesis(d.guarantee, "", "", None, Status.UNKNOWN, note))
            continue
        best = bounds.loosest(d)
        for v in d.variables:
            family = (
                "numerical" if isinstance(contract.clause(v.clause), NumericalClause)
                else "statistical"
            )  # fmt: skip
            if best is None or v.name not in best:
                # the bound exceeds max even at the premise's smallest value; the bound is not
                # shown to be the supremum there (a sliver ramp, a route that leaves premises
                # out), so this refutes nothing
                note = (
                    "no premise value keeps the chain's bound within the guarantee (the bound "
                    "is not shown to be the supremum there, so the guarantee is not refuted)"
                )
                out.append(Synthesis(d.guarantee, v.clause, family, None, Status.UNKNOWN, note))
                continue
            loosest = _short(Fraction(best[v.name]))
            value, status, note = loosest, Status.UNKNOWN, ""
            for candidate in _candidates(loosest):
                loosened = tuple(
                    dataclasses.replace(w, hi=candidate) if w.name == v.name else w
                    for w in d.variables
                )
                ob = discharge(dataclasses.replace(d, variables=loosened), budget=budget)
                if ob.status is Status.PROVED:
                    value, status = candidate, ob.status
                    note = f"{d.quantity} ≤ {float(d.threshold):.6g} proved with {v.name} ≤ "
                    note += f"{decimal_text(candidate)}"
                    if candidate != loosest:
                        note += (
                            f" (the loosest value, {decimal_text(loosest)}, was not proved "
                            f"within a solver budget of {budget.rlimit})"
                        )
                    break
            else:
                note = _not_proved(v.name, loosest, budget.rlimit)
            out.append(Synthesis(d.guarantee, v.clause, family, value, status, note))
    return tuple(out)


# how far below the loosest value synth tries when the loosest one is not proved in time
_FALLBACKS = (Fraction(999, 1000), Fraction(99, 100), Fraction(9, 10))


def _candidates(loosest: Fraction) -> list[Fraction]:
    """The loosest value, then a few short decimals a little below it (a value on the edge can
    outlast the solver's budget where a slightly smaller one is proved at once)."""
    out = [loosest]
    for factor in _FALLBACKS:
        v = loosest * factor
        digits = max(0, 3 - math.floor(math.log10(v))) if v > 0 else 0
        shorter = Fraction(math.floor(v * 10**digits), 10**digits)
        if 0 < shorter < out[-1]:
            out.append(shorter)
    return out


def _not_proved(name: str, loosest: Fraction, rlimit: int) -> str:
    """What to do when neither the loosest value nor one a little below it was proved."""
    return (
        f"the chain's bound allows {name} ≤ {decimal_text(loosest)}, but neither that value nor "
        f"one up to 10% below it was proved within a solver budget of {rlimit} per try; run "
        f"synth again with a larger budget (--solver-budget {4 * rlimit}), or set this "
        f"clause's max below {decimal_text(loosest)} and run python -m verify on the contract"
    )


def render(results: tuple[Synthesis, ...]) -> str:
    """The YAML snippet, one commented block per guarantee and premise."""
    lines = []
    for s in results:
        if s.value is None or s.status is not Status.PROVED:
            lines.append(f"# {s.guarantee}: {s.clause + ': ' if s.clause else ''}{s.note}")
            continue
        lines += [
            f"# {s.guarantee}: {s.note}",
            f"{s.family}:",
            f"  - id: {s.clause}",
            f"    max: {decimal_text(s.value)}",
        ]
    return "\n".join(lines) + "\n"


def synth_main(path: str, budget: Budget, *, stdout, stderr) -> int:
    """The ``synth`` command: 0 every value proved, 3 otherwise, 2 unusable contract."""
    from kernel_contracts.verify.common.inputs import load_contract

    contract = load_contract(path, stderr)
    if contract is None:
        return 2
    results = synthesize(contract, budget=budget)
    stdout.write(render(results))
    return 0 if results and all(s.status is Status.PROVED for s in results) else 3
