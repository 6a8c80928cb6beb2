"""Proof obligations: one per guarantee, discharged by z3 and recorded with their evidence.

"For every premise value allowed by the contract, the chain's bound ≤ the guarantee's max."
The record keeps everything a reviewer needs to re-check the verdict without this code: the
symbolic bound (``srepr``), the premise box, the constants as exact rationals, the numeric
bound at the worst point as a rational interval, and each deciding SMT-LIB2 query with the
answer it needs and the answer it got.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.solve.budget import Budget
from kernel_contracts.verify.proving.solve.solver import Counterexample, QueryRecord

if TYPE_CHECKING:  # sympy and the bound chain load on first use: a cached run needs neither
    import sympy

    from kernel_contracts.bounds.derivation import Derivation

__all__ = [
    "ExprText",
    "Obligation",
    "discharge",
    "expr_mathml",
    "expr_srepr",
    "expr_text",
    "fraction",
    "obligation_json",
    "outline",
    "printed",
    "rational",
]


@dataclass(frozen=True)
class ExprText:
    """A bound's printed forms, standing in for its sympy expression in an obligation rebuilt
    from the derivation cache (``verify.proving.replay``): what reports show of it, and nothing
    else."""

    srepr: str
    text: str
    mathml: str | None  # presentation MathML; None where sympy's printer has none


def printed(expr: sympy.Expr) -> ExprText:
    """The printed forms of ``expr`` (those ``obligation_json`` and the renderings use)."""
    return ExprText(expr_srepr(expr), expr_text(expr), expr_mathml(expr))


def expr_srepr(expr) -> str:
    """``sympy.srepr`` of a bound (or the stored one of an ``ExprText``)."""
    if isinstance(expr, ExprText):
        return expr.srepr
    import sympy

    return sympy.srepr(expr)


def expr_text(expr) -> str:
    """``sympy.sstr`` of a bound (or the stored one of an ``ExprText``)."""
    if isinstance(expr, ExprText):
        return expr.text
    import sympy

    return sympy.sstr(expr)


def expr_mathml(expr) -> str | None:
    """Presentation MathML of a bound; ``None`` where the printer fails (a printer gap must not
    cost the report)."""
    if isinstance(expr, ExprText):
        return expr.mathml
    import sympy

    try:
        return sympy.mathml(expr, printer="presentation")
    except Exception:
        return None


@dataclass(frozen=True)
class Obligation:
    """The verdict on one guarantee and everything it rests on."""

    id: str
    quantity: str
    status: Status
    statement: str
    premises: tuple[str, ...]
    chain: tuple[str, ...]
    expr: sympy.Expr | ExprText | None
    latex: str
    variables: tuple[tuple[str, str, Fraction, Fraction], ...]  # (name, clause, lo, hi)
    constants: tuple[tuple[str, Fraction], ...]
    bound: float | None
    bound_interval: tuple[Fraction, Fraction] | None
    threshold: Fraction
    queries: tuple[QueryRecord, ...] = ()
    unsat_core: tuple[str, ...] = ()
    counterexample: Counterexample | None = None
    alternatives: tuple[tuple[str, str, float], ...] = ()  # (name, formula, value)
    route: str = ""
    notes: tuple[str, ...] = ()
    reason: str = ""
    time_ms: float = 0.0
    # z3 resource units its queries spent (not in the report: ``bench/solver_budgets.py``)
    rlimit: int = 0


def rational(v: Fraction) -> str:
    """``p/q`` (or ``p``): the exact text form of a rational in reports."""
    v = Fraction(v)
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def fraction(text: str) -> Fraction:
    """The inverse of ``rational``; raises ``ValueError`` on anything else."""
    if not isinstance(text, str) or not text or text.strip() != text or "." in text:
        raise ValueError(f"not a rational p/q: {text!r}")
    return Fraction(text)


def decimal(v: Fraction, digits: int = 6) -> str:
    """``v`` to ``digits`` significant digits, also beyond the float range (1/5e-324)."""
    try:
        return f"{float(v):.{digits}g}"
    except OverflowError:
        import mpmath

        return mpmath.nstr(mpmath.mpf(v.numerator) / v.denominator, digits)


def _statement(d: Derivation, variables, readable: str) -> str:
    where = ", ".join(
        f"{name} ∈ [{decimal(lo)}, {decimal(hi)}] ({clause})" for name, clause, lo, hi in variables
    )
    consts = ", ".join(f"{k} = {decimal(v)}" for k, v in sorted(d.constants.items()))
    text = f"{d.quantity} ≤ {readable} ≤ {decimal(d.threshold)}"
    if where:
        text = f"for every {where}: {text}"
    return f"{text} (with {consts})" if consts else text


def outline(d: Derivation) -> Obligation:
    """The obligation of derivation ``d`` before it is decided: everything but the verdict and
    what the solver found (``unknown``, no bound). ``discharge`` completes it; ``verify check``
    compares a report's statement, chain, bound text, premises and constants with it."""
    import sympy

    variables = tuple((v.name, v.clause, Fraction(v.lo), Fraction(v.hi)) for v in d.variables)
    constants = tuple(sorted((k, Fraction(v)) for k, v in d.constants.items()))
    alternatives = tuple((a.name, sympy.sstr(a.expr), float(a.value)) for a in d.alternatives)
    if d.expr is None:
        statement = f"{d.quantity} ≤ {decimal(Fraction(d.threshold))}: no bound derived"
        reason = d.reason or "no lemma of the chain applies"
    else:
        statement, reason = _statement(d, variables, sympy.sstr(d.expr)), ""
    return Obligation(
        id=d.guarantee,
        quantity=d.quantity,
        premises=tuple(d.premises),
        chain=tuple(d.chain),
        expr=d.expr,
        latex=d.latex or (sympy.latex(d.expr) if d.expr is not None else ""),
        variables=variables,
        constants=constants,
        threshold=Fraction(d.threshold),
        alternatives=alternatives,
        route=d.route,
        notes=tuple(d.notes),
        status=Status.UNKNOWN,
        statement=statement,
        bound=None,
        bound_interval=None,
        reason=reason,
    )


def discharge(d: Derivation, *, budget: Budget | None = None, **solver_options) -> Obligation:
    """Decide the obligation of derivation ``d`` within ``budget`` (the default one when
    ``None``; see ``verify.proving.solve.solver.prove``)."""
    from kernel_contracts.verify.proving.solve import intervals
    from kernel_contracts.verify.proving.solve.solver import prove

    start = time.perf_counter()
    base = outline(d)
    if d.expr is None:
        return dataclasses.replace(base, time_ms=_ms(start))
    variables, constants, statement = base.variables, base.constants, base.statement
    worst = {k: (v, v) for k, v in constants} | {n: (hi, hi) for n, _, _, hi in variables}
    try:
        interval = intervals.evaluate(d.expr, worst)
    except intervals.ExprError as err:
        reason = f"cannot evaluate the bound: {err}"
        return dataclasses.replace(base, reason=reason, time_ms=_ms(start))
    outcome = prove(
        d.expr, variables, dict(constants), Fraction(d.threshold), budget=budget or Budget(),
        title=f"obligation {d.guarantee}: {statement}", **solver_options,
    )  # fmt: skip
    status, cex, reason = outcome.status, outcome.counterexample, outcome.reason
    # ``bounds.derive`` marks whether the winning route's bound is the supremum of the
    # quantity (``extra["attained"]``); a derivation without the mark states its bound is.
    if status is Status.REFUTED and not d.extra.get("attained", True):
        # the chain's bound exceeds max, but that bound lies above the true supremum (or other
        # premises narrow the pairs it ranges over): the guarantee itself may still hold
        point = ", ".join(f"{k} = {decimal(v)}" for k, v in cex.point)
        status, cex = Status.UNKNOWN, None
        reason = _not_attained(d, point)
    return dataclasses.replace(
        base,
        status=status,
        bound=float_or_none((interval[0] + interval[1]) / 2),
        bound_interval=interval,
        queries=outcome.queries,
        unsat_core=outcome.core,
        counterexample=cex,
        reason=reason,
        time_ms=_ms(start),
        rlimit=outcome.rlimit,
    )


def _not_attained(d: Derivation, point: str) -> str:
    """Why a bound above max at ``point`` refutes nothing: premises the route leaves out (every
    premise counts: a counterexample must satisfy each of them), or a bound above the
    supremum."""
    where = f"the bound exceeds max at {point}" if point else "the bound exceeds max"
    hint = (
        "; python -m verify synth on this contract gives the largest premise max that proves it"
        if d.variables
        else ""
    )
    unused = tuple(d.extra.get("unused", ()))
    if unused:
        return (
            f"{where}, but route {d.route!r} does not rest on every clause named in `from` "
            f"({'; '.join(unused)}), so a counterexample to it need not satisfy them and the "
            "guarantee is not refuted; a lemma that uses them is needed to decide it" + hint
        )
    return (
        f"{where}, but route {d.route!r} is not attained there (its bound lies above the "
        "supremum the premises allow), so the guarantee is not refuted; a tighter lemma is "
        "needed to decide it" + hint
    )


def float_or_none(v: Fraction) -> float | None:
    """``v`` as a float; ``None`` beyond the float range (e.g. a clip share at ε = 5e-324), where
    the rational interval alone carries the value."""
    try:
        return float(v)
    except OverflowError:
        return None


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def _query_json(q: QueryRecord) -> dict:
    return {
        "text": q.text,
        "expected": q.expected,
        "answer": q.answer,
        "box": {name: [rational(lo), rational(hi)] for name, _, lo, hi in q.box},
        "degree": q.degree,
        "bits": q.bits,
        "core": list(q.core),
        "time_ms": q.time_ms,
    }


def obligation_json(o: Obligation) -> Mapping[str, object]:
    """The JSON form of an obligation (the ``obligations[]`` items of a report)."""
    cex = o.counterexample
    return {
        "id": o.id,
        "quantity": o.quantity,
        "status": o.status.label,
        "statement": o.statement,
        "premises": list(o.premises),
        "premises_used": sorted(
            {n[len("premise_") :] for n in o.unsat_core if n.startswith("premise_")}
        ),
        "chain": list(o.chain),
        "symbolic": {
            "srepr": expr_srepr(o.expr) if o.expr is not None else None,
            "text": expr_text(o.expr) if o.expr is not None else None,
            "latex": o.latex,
        },
        "variables": [
            {"name": n, "clause": c, "lo": rational(lo), "hi": rational(hi)}
            for n, c, lo, hi in o.variables
        ],
        "constants": {k: rational(v) for k, v in o.constants},
        "bound": o.bound,
        "bound_interval": (
            [rational(o.bound_interval[0]), rational(o.bound_interval[1])]
            if o.bound_interval
            else None
        ),
        "threshold": {"rational": rational(o.threshold), "float": float(o.threshold)},
        "smtlib": [_query_json(q) for q in o.queries],
        "unsat_core": list(o.unsat_core),
        "counterexample": None
        if cex is None
        else {
            "point": {k: rational(v) for k, v in cex.point},
            "value_interval": [rational(cex.value[0]), rational(cex.value[1])],
            "value": float_or_none((cex.value[0] + cex.value[1]) / 2),
            "source": cex.source,
        },
        "alternatives": [  # a loose route can overflow (e^s at T = 1e-6): JSON has no inf
            {"name": n, "formula": f, "value": v if math.isfinite(v) else None}
            for n, f, v in o.alternatives
        ],
        "route": o.route,
        "notes": list(o.notes),
        "time_ms": o.time_ms,
        "reason": o.reason,
    }
