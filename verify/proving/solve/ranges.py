"""Tight ranges of every sub-expression of a bound over a box with one free variable.

``intervals.evaluate`` encloses an expression by naive interval arithmetic, which loses the
dependency between operands: the exact KL supremum K(x) = log((e^x − 1)/x) − 1 + x/(e^x − 1)
on x ∈ [1/8, 0.2] encloses to about [−0.85, 1.07] while its true range is [0.0019, 0.0049],
so a square root of 1 − e^{−L·K} looks like the square root of a negative number. The centered
form removes most of that loss: on a piece P with centre c,

    f(P) ⊆ f(c) + f'(P)·(P − c),

where f(c) is a point evaluation (tight) and f'(P) an enclosure of the derivative computed by
interval arithmetic with forward-mode differentiation, so the excess shrinks with the square of
the piece width. ``tighten`` splits the variable's interval into pieces, takes for every
sub-expression the hull over the pieces of (centered form ∩ naive form), and intersects that
with the naive range over the whole box. Each step encloses the true range, so the result is
a sound memo for ``intervals.evaluate`` — only tighter.

Min and Max are differentiated as the hull of their arguments' derivatives (of those that can
be the active one): f(x) − f(c) is the integral of the active argument's derivative, which lies
in that hull, for arguments that are absolutely continuous (every bound's are).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from fractions import Fraction

import sympy

from kernel_contracts.verify.proving.solve import intervals
from kernel_contracts.verify.proving.solve.intervals import ExprError, Interval

__all__ = ["free_variable", "loose", "tighten"]

_ZERO: Interval = (Fraction(0), Fraction(0))
_ONE: Interval = (Fraction(1), Fraction(1))


def _add(a: Interval, b: Interval) -> Interval:
    return intervals.round_down(a[0] + b[0]), intervals.round_up(a[1] + b[1])


def _neg(a: Interval) -> Interval:
    return -a[1], -a[0]


def _hull(a: Interval, b: Interval) -> Interval:
    return min(a[0], b[0]), max(a[1], b[1])


def _meet(a: Interval, b: Interval) -> Interval:
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    if lo > hi:  # two enclosures of one value always overlap: this is a bug, not a range
        raise ExprError(f"disjoint enclosures [{a[0]}, {a[1]}] and [{b[0]}, {b[1]}]")
    return lo, hi


def _mul(a: Interval, b: Interval) -> Interval:
    return intervals.mul(a, b)


class _Pass:
    """One pass over a piece, children first: each node's derivative enclosure, and its value
    enclosure tightened by the centered form before its parent uses it."""

    def __init__(self, env: Mapping[str, Interval], var: str, centre: Fraction):
        self.env, self.var = env, var
        lo, hi = env[var]
        self.offsets = (lo - centre, hi - centre)
        self.centre_env = {**env, var: (centre, centre)}
        self.at_centre: dict[sympy.Expr, Interval] = {}
        self.value: dict[sympy.Expr, Interval] = {}
        self.deriv: dict[sympy.Expr, Interval | None] = {}

    def walk(self, e: sympy.Expr) -> tuple[Interval, Interval | None]:
        if e in self.deriv:
            return self.value[e], self.deriv[e]
        for a in e.args:
            self.walk(a)
        v = intervals.evaluate(e, self.env, self.value)  # the children are in the memo
        try:  # none where it is unbounded on the piece (sqrt at 0): the naive value stands
            d = self._derivative(e)
            f_c = intervals.evaluate(e, self.centre_env, self.at_centre)
        except ExprError:
            d = f_c = None
        if d is not None and f_c is not None:
            v = _meet(v, _add(f_c, _mul(d, self.offsets)))
        self.value[e], self.deriv[e] = v, d
        return v, d

    def _derivative(self, e: sympy.Expr) -> Interval:
        if isinstance(e, sympy.Symbol):
            return _ONE if e.name == self.var else _ZERO
        if e.is_Number:
            return _ZERO
        args = [self.walk(a) for a in e.args]
        if any(da is None for _, da in args):
            raise ExprError("a derivative is unbounded on this piece")
        if isinstance(e, sympy.Add):
            d = _ZERO
            for _, da in args:
                d = _add(d, da)
            return d
        if isinstance(e, sympy.Mul):
            d = _ZERO
            for i, (_, di) in enumerate(args):
                term = di
                for j, (vj, _) in enumerate(args):
                    if j != i:
                        term = _mul(term, vj)
                d = _add(d, term)
            return d
        if isinstance(e, sympy.Pow):
            (base, db), _ = args
            n = intervals.integer_exponent(e.args[1], self.env)
            if not isinstance(n, sympy.Rational) or n.q not in (1, 2):
                raise ExprError(f"unsupported exponent {n}")
            if n == 0:
                return _ZERO
            # d(b^n) = n·b^(n−1)·db, with b^(n−1) from the same vocabulary
            lower = intervals.power(base, n - 1, e.args[0])
            k = intervals.number(n)
            return _mul(_mul((k, k), lower), db)
        if e.func is sympy.exp:
            (_, da), v = args[0], self.value[e]
            return _mul(v, da)
        if e.func is sympy.log:
            (a, da) = args[0]
            return _mul(intervals.inverse(a, e.args[0]), da)
        if e.func is sympy.tanh:
            (_, da), v = args[0], self.value[e]
            sq = intervals.int_power(v, 2, "tanh")
            return _mul(_add(_ONE, _neg(sq)), da)
        if isinstance(e, sympy.Min | sympy.Max):
            pick = min if isinstance(e, sympy.Min) else max
            # an argument can be active only if it can reach the extremum's range
            bound = pick(a[1] for a, _ in args) if pick is min else pick(a[0] for a, _ in args)
            live = [da for a, da in args if (a[0] <= bound if pick is min else a[1] >= bound)]
            d = live[0]
            for x in live[1:]:
                d = _hull(d, x)
            return d
        raise ExprError(f"unsupported operation {type(e).__name__} in {e}")


_MAX_DEPTH = 14  # a piece is halved at most this often (width 2^-14 of the first pieces)
_MAX_PASSES = 400  # pieces evaluated in all, across the refinement


def tighten(
    expr: sympy.Expr, env: Mapping[str, Interval], *, pieces: int = 16
) -> dict[sympy.Expr, Interval]:
    """A memo for ``intervals.evaluate``: each sub-expression of ``expr`` with a range over
    ``env`` that encloses its true range and is no wider than the naive one (see the module
    docstring). With no single free variable, the naive memo. A piece whose ranges leave an
    operation outside its domain, or whose range of ``expr`` is far wider than the values at
    its ends, is halved (near a kink of Min/Max the centered form needs narrow pieces). Raises
    ``ExprError`` where even the narrowest pieces leave an operation outside its domain."""
    var = free_variable(expr, env)
    if var is None:
        naive: dict[sympy.Expr, Interval] = {}
        intervals.evaluate(expr, env, naive)
        return naive
    lo, hi = env[var]
    step = (hi - lo) / pieces
    todo = [
        (lo + i * step, hi if i == pieces - 1 else lo + (i + 1) * step, 0) for i in range(pieces)
    ]
    best: dict[sympy.Expr, Interval] = {}
    passes = 0
    while todo:
        a, b, depth = todo.pop()
        passes += 1
        run = _Pass({**env, var: (a, b)}, var, (a + b) / 2)
        try:
            run.walk(expr)
            bad = loose(expr, {**env, var: (a, b)}, var, run.value[expr])
        except ExprError:
            if depth >= _MAX_DEPTH or passes >= _MAX_PASSES:
                raise
            bad = True
        if bad and depth < _MAX_DEPTH and passes < _MAX_PASSES:
            m = (a + b) / 2
            todo += [(a, m, depth + 1), (m, b, depth + 1)]
            continue
        for node, got in run.value.items():
            best[node] = got if node not in best else _hull(best[node], got)
    out = {}
    for node, got in best.items():
        with contextlib.suppress(ExprError):  # the naive range over the box may cut some off
            got = _meet(got, intervals.evaluate(node, env, {}))
        out[node] = got
    return out


def free_variable(expr: sympy.Expr, env: Mapping[str, Interval]) -> str | None:
    """The one symbol of ``expr`` whose range in ``env`` is not a point, else ``None``."""
    names = {s.name for s in expr.free_symbols}
    free = [k for k, (lo, hi) in env.items() if lo != hi and k in names]
    return free[0] if len(free) == 1 else None


def loose(expr: sympy.Expr, env: Mapping[str, Interval], var: str, rng: Interval) -> bool:
    """Whether ``rng``, an enclosure of ``expr`` over ``env``, is over four times the spread
    of the values at the two ends of ``var``'s interval."""
    ends = [intervals.evaluate(expr, {**env, var: (x, x)}, {}) for x in env[var]]
    spread = max(e[1] for e in ends) - min(e[0] for e in ends)
    return rng[1] - rng[0] > 4 * spread + Fraction(1, 1 << 40)
