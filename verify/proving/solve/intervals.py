"""Outward-rounded rational interval arithmetic over the vocabulary of derived bounds.

A derived bound (``bounds.Derivation.expr``) is a sympy expression built from ``Add``,
``Mul``, ``Pow`` (integer or half-integer exponents), ``exp``, ``log``, ``tanh``, ``sqrt``,
``Min``, ``Max``, rational numbers and symbols. ``evaluate`` encloses its value over a box of
symbol values in an interval ``(lo, hi)`` of ``Fraction`` endpoints that provably contains the
true real value: rational operations are exact and then rounded outward to ``bits``
significant bits; transcendental endpoints come from mpmath at a higher working precision
and are widened by many ulps before rounding outward.

The report checker re-derives the same numbers by a separate route
(``verify.proving.check.recompute``, mpmath's own interval type over a parsed ``srepr``), so a slip
here cannot hide there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from fractions import Fraction

import mpmath
import sympy

from kernel_contracts.contracts import KernelContractsError

__all__ = [
    "BITS",
    "ExprError",
    "Interval",
    "evaluate",
    "func_down",
    "func_up",
    "int_power",
    "integer_exponent",
    "inverse",
    "mul",
    "power",
    "round_down",
    "round_up",
    "to_fraction",
]

Interval = tuple[Fraction, Fraction]

BITS = 160  # significant bits kept on each endpoint
# binary exponents beyond ±EXP_LIMIT are not represented: a magnitude above 2^EXP_LIMIT is an
# ExprError (the bound is unknown), one below 2^-EXP_LIMIT is rounded outward to 0 or to
# ±2^-EXP_LIMIT; so every endpoint has at most about BITS + EXP_LIMIT bits and every operation
# takes bounded time (an exact power like (1 − ε)^L at L = 10^50 is never formed)
EXP_LIMIT = 1 << 14
_WORK = BITS + 40  # mpmath working precision for transcendental endpoints
_SLACK = BITS - 8  # transcendental results are widened by 2**-_SLACK relative


class ExprError(KernelContractsError, ValueError):
    """An expression outside the supported vocabulary, or outside a function's domain."""


def _scaled(v: Fraction, bits: int, rounder: Callable[[Fraction], int]) -> Fraction:
    if v == 0:
        return Fraction(0)
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if e > EXP_LIMIT:
        raise ExprError(f"a value beyond 2^{EXP_LIMIT} (about 10^{int(EXP_LIMIT * 0.30103)})")
    if e < -EXP_LIMIT:  # outward to the nearest of 0 and ±2^-EXP_LIMIT
        tiny = Fraction(1, 1 << EXP_LIMIT)
        return Fraction(rounder(v / tiny)) * tiny
    k = bits - e
    if k >= 0:
        return Fraction(rounder(v * (1 << k)), 1 << k)
    return Fraction(rounder(v / (1 << -k)) * (1 << -k))


def round_down(v: Fraction, bits: int = BITS) -> Fraction:
    """The largest dyadic rational with about ``bits`` significant bits that is ≤ ``v``."""
    return _scaled(Fraction(v), bits, math.floor)


def round_up(v: Fraction, bits: int = BITS) -> Fraction:
    """The smallest dyadic rational with about ``bits`` significant bits that is ≥ ``v``."""
    return _scaled(Fraction(v), bits, math.ceil)


def to_fraction(x: mpmath.mpf) -> Fraction:
    """The exact rational value of a finite mpmath number (``ExprError`` past 2^EXP_LIMIT)."""
    sign, man, exp, bc = mpmath.mpf(x)._mpf_
    if not man and exp:
        raise ExprError(f"non-finite value {x}")
    if man and not -2 * EXP_LIMIT <= exp + bc <= EXP_LIMIT:
        raise ExprError(f"a value of magnitude 2^{exp + bc} is beyond 2^±{EXP_LIMIT}")
    value = Fraction(int(man)) * Fraction(2) ** int(exp)
    return -value if sign else value


def _mp(x: Fraction) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


def _point(name: str, x: Fraction) -> mpmath.mpf:
    """``name`` (exp, tanh, log, sqrt) at ``x`` to the working precision."""
    if name == "exp":
        return mpmath.exp(_mp(x))
    if name == "tanh":
        return mpmath.tanh(_mp(x))
    if name == "sqrt":
        return mpmath.sqrt(_mp(x))
    if name == "log":
        # log near 1 through log1p of the exact difference keeps full relative accuracy
        if abs(x - 1) < Fraction(1, 2):
            return mpmath.log1p(_mp(x - 1))
        return mpmath.log(_mp(x))
    raise ExprError(f"unsupported function {name}")


def _approx(name: str, x: Fraction, bits: int) -> tuple[Fraction, Fraction | None]:
    """``name(x)`` and the allowance its evaluation needs either side; ``None`` where the value
    is exact (exp 0, log 1, tanh 0, sqrt 0)."""
    if (name == "exp" and x == 0) or (name == "log" and x == 1):
        return Fraction(int(name == "exp")), None
    if name in ("tanh", "sqrt") and x == 0:
        return Fraction(0), None
    with mpmath.workprec(max(_WORK, bits + 40)):
        p = _point(name, x)
        if p != 0 and mpmath.mag(p) < -EXP_LIMIT:  # e.g. exp(−4·10^10): below every endpoint
            return Fraction(0), Fraction(1, 1 << EXP_LIMIT)
        v = to_fraction(p)
    return v, abs(v) / (1 << min(_SLACK, bits + 24))


def func_down(name: str, x: Fraction, bits: int = BITS) -> Fraction:
    """A rational lower bound on ``name(x)``, tight to about ``bits`` bits."""
    v, slack = _approx(name, x, bits)
    if slack is None:
        return v
    low = round_down(v - slack, bits)
    return max(low, Fraction(0)) if name in ("exp", "sqrt") else low  # both are ≥ 0


def func_up(name: str, x: Fraction, bits: int = BITS) -> Fraction:
    """A rational upper bound on ``name(x)``, tight to about ``bits`` bits."""
    v, slack = _approx(name, x, bits)
    return v if slack is None else round_up(v + slack, bits)


def _out(lo: Fraction, hi: Fraction) -> Interval:
    return round_down(lo), round_up(hi)


def mul(a: Interval, b: Interval) -> Interval:
    """The product of two intervals, rounded outward."""
    products = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return _out(min(products), max(products))


def inverse(a: Interval, what: object) -> Interval:
    """1 / ``a``, rounded outward; ``ExprError`` naming ``what`` when ``a`` may hold zero."""
    if a[0] <= 0 <= a[1]:
        raise ExprError(f"division by {what}, which may be zero on [{a[0]}, {a[1]}]")
    return _out(1 / a[1], 1 / a[0])


def int_power(a: Interval, n: int, what: object) -> Interval:
    """``a`` to the integer power ``n``, rounded outward."""
    if n < 0:
        return int_power(inverse(a, what), -n, what)
    if n == 0:
        return Fraction(1), Fraction(1)
    lo, hi = a
    if n % 2 == 0 and lo < 0 < hi:
        return Fraction(0), _pow_round(max(-lo, hi), n, up=True)
    if n % 2 == 0 and hi <= 0:
        lo, hi = -hi, -lo
    return _signed_pow(lo, n, up=False), _signed_pow(hi, n, up=True)


def _signed_pow(x: Fraction, n: int, *, up: bool) -> Fraction:
    """x**n rounded outward (``up``: above), for odd n or x ≥ 0 (x**n is monotone in x)."""
    if x >= 0:
        return _pow_round(x, n, up=up)
    return -_pow_round(-x, n, up=not up)  # odd n: (−x)**n = −(x**n)


def _pow_round(x: Fraction, n: int, *, up: bool) -> Fraction:
    """x**n for x ≥ 0 by repeated squaring, each product rounded outward (``up``: above), so
    the endpoints keep BITS bits and no exact power of a large exponent is ever formed."""
    rnd = round_up if up else round_down
    result, square = Fraction(1), rnd(x)
    while True:
        if n & 1:
            result = rnd(result * square)
        n >>= 1
        if not n:
            return result
        square = rnd(square * square)


def _monotone(name: str, a: Interval) -> Interval:
    lo, hi = a
    if name == "log" and lo <= 0:
        raise ExprError(f"log of a quantity that may be ≤ 0 on [{lo}, {hi}]")
    if name == "sqrt" and lo < 0:
        raise ExprError(f"sqrt of a quantity that may be < 0 on [{lo}, {hi}]")
    return func_down(name, lo), func_up(name, hi)


_FUNCS = {sympy.exp: "exp", sympy.log: "log", sympy.tanh: "tanh"}


def number(expr: sympy.Expr) -> Fraction:
    """The exact rational value of a sympy number (Integer, Rational or binary Float)."""
    if isinstance(expr, sympy.Rational):
        return Fraction(int(expr.p), int(expr.q))
    if isinstance(expr, sympy.Float):
        if not expr.is_finite:
            raise ExprError(f"non-finite number {expr}")
        r = sympy.Rational(expr)
        return Fraction(int(r.p), int(r.q))
    raise ExprError(f"unsupported constant {expr}")


def evaluate(expr: sympy.Expr, env: Mapping[str, Interval], memo: dict | None = None) -> Interval:
    """An interval enclosing ``expr`` for every assignment of symbols within ``env``.

    ``memo`` (sub-expression → interval) may be shared between calls with the same ``env``.
    """
    memo = {} if memo is None else memo

    def walk(e: sympy.Expr) -> Interval:
        if e in memo:
            return memo[e]
        if isinstance(e, sympy.Symbol):
            if e.name not in env:
                raise ExprError(f"symbol {e.name} has no value or range")
            lo, hi = env[e.name]
            r = (Fraction(lo), Fraction(hi))
        elif e.is_Number:
            v = number(e)
            r = (v, v)
        elif isinstance(e, sympy.Add):
            parts = [walk(a) for a in e.args]
            r = _out(sum(p[0] for p in parts), sum(p[1] for p in parts))
        elif isinstance(e, sympy.Mul):
            r = (Fraction(1), Fraction(1))
            for a in e.args:
                r = mul(r, walk(a))
        elif isinstance(e, sympy.Pow):
            r = power(walk(e.args[0]), integer_exponent(e.args[1], env), e.args[0])
        elif e.func in _FUNCS:
            r = _monotone(_FUNCS[e.func], walk(e.args[0]))
        elif isinstance(e, sympy.Min | sympy.Max):
            parts = [walk(a) for a in e.args]
            pick = min if isinstance(e, sympy.Min) else max
            r = (pick(p[0] for p in parts), pick(p[1] for p in parts))
        else:
            raise ExprError(f"unsupported operation {type(e).__name__} in {e}")
        memo[e] = r
        return r

    return walk(expr)


def integer_exponent(exponent: sympy.Expr, env: Mapping[str, Interval]) -> sympy.Expr:
    """A symbol exponent whose value is one integer (a horizon L) as that integer; any other
    exponent unchanged."""
    if isinstance(exponent, sympy.Symbol) and exponent.name in env:
        lo, hi = env[exponent.name]
        if lo == hi and Fraction(lo).denominator == 1:
            return sympy.Integer(int(lo))
    return exponent


class _Root:
    """The name of √what in a message, written only if a message is (printing is slow)."""

    def __init__(self, what: object):
        self.what = what

    def __str__(self) -> str:
        return f"sqrt({self.what})"


def power(base: Interval, exponent: sympy.Expr, what: object) -> Interval:
    """``base`` to an integer or half-integer ``exponent``, rounded outward."""
    if not isinstance(exponent, sympy.Rational) or exponent.q not in (1, 2):
        raise ExprError(f"unsupported exponent {exponent} (integers and halves only)")
    if exponent.q == 1:
        return int_power(base, int(exponent.p), what)
    return int_power(_monotone("sqrt", base), int(exponent.p), _Root(what))
