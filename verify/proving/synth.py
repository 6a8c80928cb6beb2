"""``python -m verify synth CONTRACT.yaml``: the loosest premise thresholds, proved.

For each guarantee the chain is inverted (``bounds.loosest``: for each premise variable, the
largest short rational such that the bound stays within the guarantee's max), the value is
written as an exact decimal, and the obligation with that premise range is proved by z3 before
anything is printed. The output is a YAML snippet to paste into the contract.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

from contracts import Contract, NumericalClause
from verify.common.status import Status
from verify.proving.obligations import discharge

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


def synthesize(contract: Contract, *, timeout_ms: int = 5000) -> tuple[Synthesis, ...]:
    """For each guarantee and premise variable: the loosest clause max, proved."""
    import bounds

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
            value = _short(Fraction(best[v.name]))
            loosened = tuple(
                dataclasses.replace(w, hi=value) if w.name == v.name else w for w in d.variables
            )
            ob = discharge(dataclasses.replace(d, variables=loosened), timeout_ms=timeout_ms)
            note = f"{d.quantity} ≤ {float(d.threshold):.6g} proved with {v.name} ≤ {value}"
            if ob.status is not Status.PROVED:
                note = f"not proved ({ob.status.label}: {ob.reason})"
            out.append(Synthesis(d.guarantee, v.clause, family, value, ob.status, note))
    return tuple(out)


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


def synth_main(path: str, timeout_ms: int, *, stdout, stderr) -> int:
    """The ``synth`` command: 0 every value proved, 3 otherwise, 2 unusable contract."""
    from verify.common.inputs import load_contract

    contract = load_contract(path, stderr)
    if contract is None:
        return 2
    results = synthesize(contract, timeout_ms=timeout_ms)
    stdout.write(render(results))
    return 0 if results and all(s.status is Status.PROVED for s in results) else 3
