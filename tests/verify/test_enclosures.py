"""Enclosures of exp, tanh, log, sqrt and the interval arithmetic, against mpmath at 60 digits."""

from __future__ import annotations

from fractions import Fraction as F

import mpmath
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts.verify.proving.solve.enclosures import enclose
from kernel_contracts.verify.proving.solve.intervals import ExprError, evaluate, func_down, func_up
from tests.support.strategies import examples

DOMAINS = {
    "exp": (F(-50), F(50)),
    "tanh": (F(-50), F(50)),
    "log": (F(1, 10**30), F(10**30)),
    "sqrt": (F(0), F(10**30)),
}
MP = {"exp": mpmath.exp, "tanh": mpmath.tanh, "log": mpmath.log, "sqrt": mpmath.sqrt}


def _mp(x: F):
    return mpmath.mpf(x.numerator) / x.denominator


def _true(func: str, x: F):
    with mpmath.workdps(150):  # tanh near ±1 needs the digits of 1 ∓ y
        return MP[func](_mp(x))


@st.composite
def _point_in(draw, func):
    """A rational in the domain, log-uniform for log and sqrt, with the extremes likely."""
    lo, hi = DOMAINS[func]
    if func in ("log", "sqrt"):
        k = draw(st.integers(-30, 30))
        m = draw(st.integers(1, 10**6))
        x = F(m, 10**6) * F(10) ** k
        x = min(max(x, lo), hi)
        return draw(st.sampled_from([x, x, lo, hi, F(1)]))
    x = F(draw(st.integers(-(10**6), 10**6)), 10**6) * hi
    return draw(st.sampled_from([x, x, x, lo, hi, F(0)]))


@pytest.mark.parametrize("func", sorted(DOMAINS))
@examples(60)
@given(data=st.data())
def test_enclosure_admits_the_true_graph(func, data):
    a = data.draw(_point_in(func))
    b = data.draw(_point_in(func))
    lo, hi = min(a, b), max(a, b)
    if func == "log" and lo == 0:
        lo = F(1, 10**30)
    degree = data.draw(st.sampled_from([1, 2, 3, 5, 9]))
    pieces = data.draw(st.sampled_from([1, 2, 3]))
    bits = data.draw(st.sampled_from([64, 80, 120]))
    enc = enclose(func, lo, hi, degree, pieces, bits)
    t = data.draw(st.fractions(0, 1, max_denominator=10**6))
    for x in (lo, hi, lo + (hi - lo) * t):
        with mpmath.workdps(150):
            assert enc.admits(_mp(x), _true(func, x)), (func, lo, hi, x, degree, pieces, bits)


@pytest.mark.parametrize("func", ["exp", "tanh"])
@examples(60)
@given(data=st.data())
def test_explicit_bounds_bracket_the_value(func, data):
    a = data.draw(_point_in(func))
    w = data.draw(st.sampled_from([F(0), F(1, 1000), F(1, 10), F(1), F(7)]))
    lo, hi = a, min(a + w, F(50))
    enc = enclose(func, lo, hi, data.draw(st.sampled_from([1, 3, 5, 9])))
    x = lo + (hi - lo) * data.draw(st.fractions(0, 1, max_denominator=1000))
    low, high = enc.bounds_at(x)
    with mpmath.workdps(150):
        assert _mp(low) <= _true(func, x) <= _mp(high)


@pytest.mark.parametrize("x", [F(-50), F(-1, 3), F(0), F(1, 10**20), F(1), F(50)])
def test_grid_of_extremes(x):
    for func in ("exp", "tanh"):
        low, high = enclose(func, x, x, 5).bounds_at(x)
        with mpmath.workdps(150):
            v = _true(func, x)
            assert _mp(low) <= v <= _mp(high)
            if v != 0:
                assert (high - low) <= abs(F(2, 2**70) * F(str(mpmath.nstr(v, 40))))


def test_narrow_intervals_are_tight():
    for func in ("exp", "tanh"):
        enc = enclose(func, F(1, 4), F(1, 4) + F(1, 100), degree=5, bits=80)
        for x in (F(1, 4), F(1, 4) + F(1, 200), F(1, 4) + F(1, 100)):
            low, high = enc.bounds_at(x)
            assert 0 < high - low < F(1, 10**14), func


def test_higher_degree_is_tighter():
    widths = []
    for degree in (1, 3, 5, 9):
        low, high = enclose("exp", F(0), F(1), degree).bounds_at(F(1))
        widths.append(high - low)
    assert widths == sorted(widths, reverse=True) and widths[-1] < widths[0] / 10**6


def test_domains_are_checked():
    with pytest.raises(ValueError, match="positive"):
        enclose("log", F(0), F(1))
    with pytest.raises(ValueError, match="nonnegative"):
        enclose("sqrt", F(-1), F(1))
    with pytest.raises(ValueError, match="empty"):
        enclose("exp", F(1), F(0))


@examples(80)
@given(
    x=st.fractions(F(-60), F(60), max_denominator=10**9),
    func=st.sampled_from(["exp", "tanh", "log", "sqrt"]),
)
def test_directed_function_bounds(x, func):
    if func in ("log", "sqrt"):
        x = abs(x) + F(1, 10**12) * (func == "log")
    with mpmath.workdps(100):
        v = MP[func](_mp(x))
        assert _mp(func_down(func, x)) <= v <= _mp(func_up(func, x))
        assert _mp(func_up(func, x) - func_down(func, x)) <= abs(v) * mpmath.mpf(2) ** -140


d, e = sympy.symbols("d e", positive=True)
EXPRS = [
    sympy.tanh(d / 4) * 2 + e,
    sympy.exp(2 * d) - 1,
    sympy.Min(1 - sympy.exp(-d * e), sympy.sqrt(d / 2)),
    sympy.Max(sympy.exp(d) - 1, 1 - sympy.exp(-d)) / e,
    sympy.log(1 + d) + sympy.sqrt(e) ** 3 - d**2,
    (1 - (1 - sympy.tanh(d)) ** 7) * sympy.Rational(1, 3),
]


@pytest.mark.parametrize("expr", EXPRS, ids=str)
@examples(30)
@given(
    a=st.fractions(F(0), F(3), max_denominator=1000),
    b=st.fractions(F(1, 10), F(3), max_denominator=1000),
)
def test_interval_evaluation_encloses(expr, a, b):
    lo, hi = evaluate(expr, {"d": (a, a), "e": (b, b)})
    with mpmath.workdps(150):
        v = sympy.N(expr.subs({d: sympy.Rational(a), e: sympy.Rational(b)}), 60)
        assert _mp(lo) <= mpmath.mpf(str(v)) <= _mp(hi)
        assert hi - lo <= abs(F(str(v))) * F(1, 2**100) + F(1, 2**150)
    wide = evaluate(expr, {"d": (F(0), a), "e": (b, b + 1)})
    assert wide[0] <= lo and hi <= wide[1]


def test_interval_errors_are_clear():
    with pytest.raises(ExprError, match="division"):
        evaluate(1 / d, {"d": (F(-1), F(1))})
    with pytest.raises(ExprError, match="log"):
        evaluate(sympy.log(d - 1), {"d": (F(0), F(3))})
    with pytest.raises(ExprError, match="no value"):
        evaluate(d + e, {"d": (F(0), F(1))})
    with pytest.raises(ExprError, match="unsupported"):
        evaluate(sympy.sin(d), {"d": (F(0), F(1))})
