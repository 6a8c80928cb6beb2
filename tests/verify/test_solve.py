"""z3 obligations: proved/refuted at the edge of the tight bound, refinement, no false verdicts."""

from __future__ import annotations

from fractions import Fraction as F

import mpmath
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts.bounds.derivation import Derivation, Variable
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import discharge
from kernel_contracts.verify.proving.solve.budget import Budget
from kernel_contracts.verify.proving.solve.encoding import encode
from kernel_contracts.verify.proving.solve.solver import Step, prove
from tests.support.strategies import examples

delta, T = sympy.symbols("delta_N1 T", nonnegative=True)
TOKEN_TV = sympy.tanh(2 * delta / (4 * T))


def _derivation(expr, hi, threshold, temperature=F(1), lo=F(0)):
    return Derivation(
        guarantee="G1",
        quantity="token_tv",
        chain=("drift_to_oscillation", "token_tv_tanh"),
        premises=("N1",),
        expr=expr,
        variables=(Variable("delta_N1", lo, F(hi), "N1"),),
        constants={"T": F(temperature)},
        threshold=F(threshold),
        value=0.0,
    )


def _true_worst(expr, hi, temperature) -> mpmath.mpf:
    value = sympy.N(expr.subs({delta: sympy.Rational(hi), T: sympy.Rational(temperature)}), 60)
    with mpmath.workdps(60):
        return mpmath.mpf(str(value))


def test_edge_pair_at_delta_002_t1():
    proved = discharge(_derivation(TOKEN_TV, "0.02", "0.0100"))
    refuted = discharge(_derivation(TOKEN_TV, "0.02", "0.00999"))
    assert proved.status is Status.PROVED
    assert "premise_N1" in proved.unsat_core
    assert all(q.answer == q.expected == "unsat" for q in proved.queries)
    assert refuted.status is Status.REFUTED
    cex = dict(refuted.counterexample.point)
    assert F(0) <= cex["delta_N1"] <= F("0.02")
    assert refuted.counterexample.value[0] > F("0.00999")
    lo, hi = proved.bound_interval
    with mpmath.workdps(60):
        exact = _true_worst(TOKEN_TV, F("0.02"), 1)
        assert mpmath.mpf(lo.numerator) / lo.denominator <= exact
        assert exact <= mpmath.mpf(hi.numerator) / hi.denominator and hi - lo < F(1, 10**40)


@pytest.mark.parametrize("temperature", ["0.25", "0.7", "1", "1.5", "4"])
def test_edge_pairs_at_several_temperatures(temperature):
    t = F(temperature)
    exact = _true_worst(TOKEN_TV, F("0.02"), t)
    above = F(str(mpmath.nstr(exact * (1 + mpmath.mpf(10) ** -6), 15)))
    below = F(str(mpmath.nstr(exact * (1 - mpmath.mpf(10) ** -6), 15)))
    assert discharge(_derivation(TOKEN_TV, "0.02", above, t)).status is Status.PROVED
    out = discharge(_derivation(TOKEN_TV, "0.02", below, t))
    assert out.status is Status.REFUTED
    assert out.counterexample.value[0] > below


def test_weak_enclosure_without_refinement_is_unknown_never_wrong():
    # The claim is true by 1e-12; degree-1 enclosures with 20-bit constants cannot show it.
    exact = _true_worst(sympy.exp(delta) - 1, F(1, 2), 1)
    threshold = F(str(mpmath.nstr(exact + mpmath.mpf(10) ** -12, 30)))
    expr = sympy.exp(delta) - delta / 2  # not monotone-friendly: needs the Taylor enclosure
    exact2 = _true_worst(expr, F(1, 2), 1)
    threshold = F(str(mpmath.nstr(exact2 + mpmath.mpf(10) ** -12, 30)))
    box = (("delta_N1", "N1", F(0), F(1, 2)),)
    weak = prove(expr, box, {}, threshold, steps=(Step(1, 20),), max_pieces=1)
    assert weak.status is Status.UNKNOWN
    assert "not confirmed" in weak.reason
    refined = prove(expr, box, {}, threshold)
    assert refined.status in (Status.PROVED, Status.UNKNOWN)
    low = prove(expr, box, {}, threshold - F(1, 10**9), steps=(Step(1, 20),), max_pieces=1)
    assert low.status is Status.REFUTED  # the upper corner confirms it


def test_refinement_proves_what_a_low_degree_cannot():
    expr = sympy.exp(delta) - delta  # minimum inside: range facts alone are too loose
    box = (("delta_N1", "N1", F(-1), F(1)),)
    threshold = F("1.71829")  # e - 1 = 1.718281828...
    one_step = prove(expr, box, {}, threshold, steps=(Step(1, 64),), max_pieces=1)
    assert one_step.status is Status.UNKNOWN
    full = prove(expr, box, {}, threshold)
    assert full.status is Status.PROVED
    assert full.attempts > 1
    assert prove(expr, box, {}, F("1.71828")).status is Status.REFUTED


def test_a_spent_budget_is_unknown_and_names_the_option():
    expr = sympy.exp(delta) - delta
    box = (("delta_N1", "N1", F(-1), F(1)),)
    out = prove(expr, box, {}, F("1.718281829"), budget=Budget(rlimit=1))
    assert out.status is Status.UNKNOWN
    assert out.reason.startswith("solver budget of 1 z3 resource units (rlimit) spent with ")
    assert out.reason.endswith("; --solver-budget raises it")
    assert out.attempts == 1 and out.rlimit >= 1


def test_no_lemma_and_bad_domains_are_unknown():
    none = discharge(
        Derivation("G9", "pg_bias", (), ("N1",), None, (), {}, F(1), 0.0, reason="no lemma")
    )
    assert none.status is Status.UNKNOWN and none.reason == "no lemma"
    log_of_zero = discharge(_derivation(sympy.log(delta), "0.02", "1"))
    assert log_of_zero.status is Status.UNKNOWN and "log" in log_of_zero.reason
    unsupported = discharge(_derivation(sympy.sin(delta), "0.02", "1"))
    assert unsupported.status is Status.UNKNOWN and "unsupported" in unsupported.reason


def test_point_obligation_without_variables():
    d = Derivation("G1", "clip_budget", (), (), sympy.exp(T) - 1, (), {"T": F(1, 25)},
                   F("0.0409"), 0.0)  # fmt: skip
    assert discharge(d).status is Status.PROVED
    d2 = Derivation("G1", "clip_budget", (), (), sympy.exp(T) - 1, (), {"T": F(1, 25)},
                    F("0.0408"), 0.0)  # fmt: skip
    assert discharge(d2).status is Status.REFUTED


EXPRS = [
    TOKEN_TV,
    sympy.Min(1 - (1 - TOKEN_TV) ** 64, sympy.tanh(64 * delta / T)),
    sympy.sqrt(32 * delta**2 / T**2),
    sympy.Max(sympy.exp(2 * delta / T) - 1, 1 - sympy.exp(-2 * delta / T)) / sympy.Rational(1, 5),
    sympy.log(1 + delta) + delta**2,
    (1 + delta) ** -5 * sympy.exp(6 * delta),
]


@pytest.mark.parametrize("expr", EXPRS, ids=lambda e: sympy.sstr(e)[:40])
@examples(6)
@given(
    hi=st.fractions(F(1, 1000), F(1, 4), max_denominator=1000),
    temperature=st.sampled_from([F(1, 2), F(1), F(2)]),
    rel=st.sampled_from([-(10**-3), -(10**-7), 10**-7, 10**-3]),
)
def test_no_false_verdicts(expr, hi, temperature, rel):
    """Each verdict agrees with 60-digit truth; every refutation carries a confirmed point."""
    exact = _true_worst(expr, hi, temperature)
    threshold = F(str(mpmath.nstr(exact * (1 + mpmath.mpf(rel)), 25)))
    # z3 stops counting its units on the coupling route's degree-64 power: a short hang guard
    # ends those calls (any verdict must be sound, unknown included)
    out = discharge(_derivation(expr, hi, threshold, temperature), budget=Budget(hang_guard_s=3.0))
    if out.status is Status.PROVED:
        assert exact <= mpmath.mpf(threshold.numerator) / threshold.denominator
    elif out.status is Status.REFUTED:
        point = dict(out.counterexample.point)
        value = _true_worst(expr, point["delta_N1"], temperature)
        assert value > mpmath.mpf(threshold.numerator) / threshold.denominator
        assert out.counterexample.value[0] > threshold
    else:
        assert out.reason


def test_query_text_is_self_contained_smtlib():
    q = encode(TOKEN_TV, (("delta_N1", "N1", F(0), F(1, 50)),), {"T": F(1)}, F(1, 100))
    assert q.text.startswith("(set-logic QF_NRA)")
    assert ":named premise_N1" in q.text and ":named goal" in q.text
    assert "(check-sat)" in q.text and "(get-unsat-core)" in q.text
    assert all(f":named {n})" in q.text for n in q.names)
