"""Exactness obligations of int8 kernels: proved by z3 over the integers, refuted by a witness.

For every kernel of the contract with ``inputs: int8`` (``bounds.intexact``), two obligations
join the report's ``obligations[]`` after the guarantees, with ids ``<side>:int32`` and
``<side>:fp32`` (a colon: no clause id can take them):

- ``<side>:int32``, quantity ``int32_range``: for every K ≤ k_max and int8 inputs, no partial
  sum leaves the int32 range (k_max·127² ≤ 2^31 − 1);
- ``<side>:fp32``, quantity ``fp32_exact``: every accumulator value has magnitude ≤ 2^24, so its
  conversion to float32 is exact (k_max·127² ≤ 2^24).

Each is one SMT-LIB2 query in integer arithmetic (QF_NIA), an induction step over the partial
sums: from "after j < K products |s| ≤ j·P" (true at j = 0) and int8 factors x, w it asserts the
negation of "|s + x·w| ≤ (j + 1)·P and |s + x·w| ≤ limit". ``unsat`` proves, by induction, that
every partial sum of every K ≤ k_max stays within the limit; the core names the premises used
(k_max and the int8 range). ``sat`` refutes only once a witness is confirmed: int8 vectors of
length k_max (``bounds.intexact.witness``) whose exact integer sum breaks the limit (or, for
float32, is an integer float32 cannot hold), evaluated here with Python integers.

The record has the fields of every obligation, so reports, renderings and ``verify check`` treat
it alike; ``check_kernel_obligation`` re-derives it from the contract and re-runs its query.
"""

from __future__ import annotations

import time
from dataclasses import replace
from fractions import Fraction

import sympy

from kernel_contracts.bounds import intexact
from kernel_contracts.bounds.apriori import matmul_error
from kernel_contracts.contracts import Contract
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import Obligation, decimal, obligation_json
from kernel_contracts.verify.proving.solve import smt
from kernel_contracts.verify.proving.solve.budget import RAISE, Budget
from kernel_contracts.verify.proving.solve.solver import Counterexample, QueryRecord

__all__ = ["check_kernel_obligation", "kernel_obligations", "kernel_outlines"]

_K, _P = sympy.Symbol("K", positive=True), sympy.Symbol("P", positive=True)
_WHAT = {
    "int32_range": "every partial sum of the int32 accumulator stays in [-2^31, 2^31 - 1]",
    "fp32_exact": "every int32 accumulator value converts to float32 exactly (|acc| ≤ 2^24)",
}


def _statement(c: intexact.Claim) -> str:
    return (
        f"for every K ∈ [1, {c.k_max}] ({c.clause}) and int8 inputs in "
        f"[-{c.qmax_x}, {c.qmax_x}] × [-{c.qmax_w}, {c.qmax_w}] ({c.inputs_clause}): "
        f"{_WHAT[c.quantity]}; max |partial sum| = K*P ≤ {c.limit} (with P = {c.product})"
    )


def _notes(c: intexact.Claim, contract: Contract) -> tuple[str, ...]:
    spec = getattr(contract.kernels, c.side).matmul
    k32 = intexact.largest_k(c.qmax_x, c.qmax_w, intexact.INT32_MAX)
    k24 = intexact.largest_k(c.qmax_x, c.qmax_w, intexact.FP32_EXACT)
    notes = [f"holds exactly for k_max ≤ {k24 if c.quantity == 'fp32_exact' else k32}"]
    if c.quantity == "fp32_exact":
        theta = matmul_error(spec, c.k_max).relative
        if c.worst <= intexact.INT32_MAX:
            source = (
                "the epilogue is the only source of divergence"
                if c.holds
                else "the int32 → float32 conversion rounds too (relative 2^-24)"
            )
            notes.append(
                f"{source}: a priori |y − ŝ_x·ŝ_w·Σq_x·q_w| ≤ {decimal(Fraction(theta))}·"
                f"Σ|x̂_i·ŵ_i| at K = {c.k_max} (bounds.apriori, epilogue "
                f"{'fused' if spec.epilogue.fused else spec.epilogue.order}, "
                f"{spec.epilogue.rounding}, output {spec.output})"
            )
        else:
            notes.append("no a priori bound: the int32 accumulator can wrap")
    w = intexact.witness(c)
    if w is not None:
        notes.append(
            f"witness: {intexact.describe(w)} after {w.first} of {w.length} products breaks "
            f"the limit {c.limit}"
            + ("" if c.quantity == "fp32_exact" else f"; int32 wraps it to {_wrap(w.total)}")
        )
    return tuple(notes)


def _wrap(n: int) -> int:
    return (n + 2**31) % 2**32 - 2**31


def _outline(c: intexact.Claim, contract: Contract) -> Obligation:
    expr = _K * _P
    bound = Fraction(c.worst)
    return Obligation(
        id=c.id,
        quantity=c.quantity,
        status=Status.UNKNOWN,
        statement=_statement(c),
        premises=(c.clause, c.inputs_clause),
        chain=("int8_product_bound", "induction_on_partial_sums"),
        expr=expr,
        latex=sympy.latex(expr),
        variables=(("K", c.clause, Fraction(1), Fraction(c.k_max)),),
        constants=(("P", Fraction(c.product)),),
        bound=float(bound),
        bound_interval=(bound, bound),
        threshold=Fraction(c.limit),
        route="induction_on_partial_sums",
        notes=_notes(c, contract),
    )


def kernel_outlines(contract: Contract) -> tuple[Obligation, ...]:
    """The kernel obligations of ``contract`` before they are decided (ids in report order)."""
    return tuple(_outline(c, contract) for c in intexact.claims(contract))


def query(c: intexact.Claim) -> str:
    """The SMT-LIB2 text of claim ``c`` (module docstring); regenerated by ``verify check``."""
    p, lim, sp = c.product, c.limit, "(+ s (* x w))"
    return "\n".join(
        (
            "(set-logic QF_NIA)",
            "(set-option :produce-unsat-cores true)",
            f"; obligation {c.id}: {_statement(c)}",
            "; induction step: after j < K products |s| <= j*P; one more product x*w keeps it",
            f"; within (j+1)*P and within the limit {lim} (at j = 0, s = 0 holds it)",
            *(f"(declare-const {v} Int)" for v in ("K", "j", "s", "x", "w")),
            f"(assert (! (and (<= 1 K) (<= K {c.k_max})) :named premise_{c.clause}))",
            f"(assert (! (and (<= (- {c.qmax_x}) x) (<= x {c.qmax_x}) (<= (- {c.qmax_w}) w) "
            f"(<= w {c.qmax_w})) :named premise_{c.inputs_clause}))",
            "(assert (! (and (<= 0 j) (< j K)) :named def_step))",
            f"(assert (! (and (<= (- (* {p} j)) s) (<= s (* {p} j))) :named lemma_induction))",
            f"(assert (! (not (and (<= (- (* {p} (+ j 1))) {sp}) (<= {sp} (* {p} (+ j 1))) "
            f"(<= (- {lim}) {sp}) (<= {sp} {lim}))) :named goal))",
            "(check-sat)",
            "(get-unsat-core)",
            "",
        )
    )


def _decide(c: intexact.Claim, base: Obligation, answer: smt.Answer) -> Obligation:
    text = query(c)
    box = (("K", c.clause, Fraction(1), Fraction(c.k_max)),)
    w = intexact.witness(c)
    if answer.answer == "unsat":
        status, expected, reason, cex = Status.PROVED, "unsat", "", None
    elif answer.answer == "sat" and w is not None:
        value = (Fraction(w.total), Fraction(w.total))
        cex = Counterexample((("K", Fraction(c.k_max)),), value, _source(w))
        status, expected, reason = Status.REFUTED, "sat", ""
    else:
        why = answer.reason or "no witness confirms the model"
        status, expected, cex = Status.UNKNOWN, "unsat", None
        reason = f"z3 answered {answer.answer}: {why}" + (
            f"; {RAISE}" if answer.out_of_budget else ""
        )
    record = QueryRecord(text, expected, answer.answer, box, 0, 0, answer.core, answer.time_ms)
    return replace(
        base,
        status=status,
        queries=(record,),
        unsat_core=tuple(sorted(set(answer.core) - {"goal"})),
        counterexample=cex,
        reason=reason,
        rlimit=answer.rlimit,
    )


def _source(w: intexact.Witness) -> str:
    return f"witness: {intexact.describe(w)}"


def kernel_obligations(
    contract: Contract, *, budget: Budget | None = None
) -> tuple[Obligation, ...]:
    """Decide the kernel obligations of ``contract``, each query with the whole ``budget``
    (the default one when ``None``; module docstring)."""
    budget = budget or Budget()
    out = []
    for c, base in zip(intexact.claims(contract), kernel_outlines(contract), strict=True):
        start = time.perf_counter()
        answer = smt.z3_check(query(c), rlimit=budget.rlimit, guard_s=budget.hang_guard_s)
        done = _decide(c, base, answer)
        out.append(replace(done, time_ms=round((time.perf_counter() - start) * 1000, 3)))
    return tuple(out)


_FREE = ("time_ms",)


def check_kernel_obligation(o: dict, contract: Contract, where: str, diff, notes, *, budget):
    """Re-check kernel obligation ``o`` of a report against ``contract``: every field re-derived
    (the query text, the bound, the witness) and the query re-run; returns the queries re-run.

    The verdict is recomputed from z3's answer now: proved ⇔ unsat; refuted ⇔ sat with the
    witness re-confirmed by exact integer arithmetic; the stored fields must then equal what
    this run derives (times are free). Every query runs within ``budget`` (the report's)."""
    claim = {c.id: c for c in intexact.claims(contract)}.get(o.get("id"))
    if claim is None:
        diff(where, "names no int8 kernel obligation of the contract")
        return 0
    w = intexact.witness(claim)
    limits = {"rlimit": budget.rlimit, "guard_s": budget.hang_guard_s}
    got = smt.z3_check(query(claim), **limits)
    if got.answer == "unsat":
        ok = smt.z3_core_suffices(query(claim), list(got.core), **limits)
        if ok.answer != "unsat":
            diff(f"{where}.smtlib[0].core", "the core alone is not unsat")
    if w is not None and not _confirmed(claim, w):
        diff(f"{where}.counterexample", "the witness does not break the claim when re-evaluated")
    expected = obligation_json(_decide(claim, _outline(claim, contract), got))
    stored = o.get("smtlib")
    if isinstance(stored, list) and stored and isinstance(stored[0], dict):
        answer = stored[0].get("answer")
        if answer in ("sat", "unsat") and answer != got.answer:
            diff(f"{where}.smtlib[0]", f"recorded answer {answer}, z3 now answers {got.answer}")
    for key, want in expected.items():
        if key in _FREE:
            continue
        have = o.get(key)
        if key == "smtlib" and isinstance(have, list):
            have = [_timeless(q) for q in have]
            want = [_timeless(q) for q in want]
        if have != want:
            diff(f"{where}.{key}", f"{_short(have)} but the contract gives {_short(want)}")
    extra = sorted(set(o) - set(expected))
    if extra:
        diff(where, f"fields no report has: {extra}")
    cross = smt.cvc5_check(query(claim), rlimit=budget.cvc5_rlimit, guard_s=budget.hang_guard_s)
    if cross is not None:
        if {cross.answer, got.answer} == {"sat", "unsat"}:
            diff(f"{where}.smtlib[0]", f"cvc5 answers {cross.answer}, z3 {got.answer}")
        notes.append(f"{where}.smtlib[0]: cvc5: {cross.answer}")
    return 1


def _timeless(q):
    return {k: v for k, v in q.items() if k != "time_ms"} if isinstance(q, dict) else q


def _confirmed(c: intexact.Claim, w: intexact.Witness) -> bool:
    """Re-evaluate the witness from its runs with Python integers and NumPy's float32, apart
    from how it was built: aligned runs of int8 values, k_max long, breaking the limit."""
    import numpy as np

    aligned = len(w.x) == len(w.w) and all(n == m for (_, n), (_, m) in zip(w.x, w.w, strict=True))
    if not aligned or sum(n for _, n in w.x) != c.k_max:
        return False
    if any(abs(v) > c.qmax_x for v, _ in w.x) or any(abs(v) > c.qmax_w for v, _ in w.w):
        return False
    total = sum(a * b * n for (a, n), (b, _) in zip(w.x, w.w, strict=True))
    if total != w.total:
        return False
    if c.quantity == "int32_range":
        return not -(2**31) <= total <= 2**31 - 1
    return abs(total) < 2**53 and int(np.float32(float(total))) != total


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
