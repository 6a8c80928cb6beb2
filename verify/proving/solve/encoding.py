"""A derived bound and its threshold as a self-contained SMT-LIB2 refutation query.

The query asserts, each under a name so that unsat cores can cite it:

* ``premise_<clause>``: the premise variables of a contract clause lie in their box;
* ``lemma_<f>.<k>``: a true fact about one application ``f(arg)`` (its enclosure, see
  ``verify.proving.solve.enclosures``), stated for every argument in the interval the premises
  allow;
* ``def_<name>``: a definition (a fresh name for a compound argument or a reciprocal);
* ``goal``: the negated claim, ``bound > threshold``.

Every named assertion holds at the true values for every point of the box, except ``goal``;
so ``unsat`` means no point of the box violates the claim. The text is written here (not by a
solver), so it does not depend on the solver's version and a re-checker can regenerate it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import sympy

from kernel_contracts.verify.proving.solve import intervals, ranges
from kernel_contracts.verify.proving.solve.enclosures import DEFAULT_BITS, ExpEnclosure, enclose
from kernel_contracts.verify.proving.solve.intervals import ExprError, Interval

__all__ = ["Box", "EncodeError", "Query", "encode", "smt_number"]

Box = tuple[tuple[str, str, Fraction, Fraction], ...]  # (symbol, clause, lo, hi)

_SIMPLE = re.compile(r"[A-Za-z~!@$%^&*_+=<>?/-][A-Za-z0-9~!@$%^&*_+=<>.?/-]*\Z")
_FRESH = re.compile(r"[a-z]+\.\d+\Z")
_FUNCS = {sympy.exp: "exp", sympy.log: "log", sympy.tanh: "tanh"}
_FUNCTIONS = {"exp": sympy.exp, "log": sympy.log, "tanh": sympy.tanh, "sqrt": sympy.sqrt}


# the compound terms whose range over the box is stated as a lemma in tightened queries
_RANGED = (sympy.Add, sympy.Mul, sympy.Pow, sympy.Min, sympy.Max)


class EncodeError(ExprError):
    """The bound cannot be written as a query (unsupported form, or a domain problem)."""


_MAX_BITS = 4096


@dataclass(frozen=True)
class Query:
    """One SMT-LIB2 query with what it was built from."""

    text: str
    box: Box
    degree: int
    bits: int
    names: tuple[str, ...]  # the named assertions, in order


def smt_number(v: Fraction) -> str:
    """A rational as an SMT-LIB2 real term (``EncodeError`` past ``_MAX_BITS`` bits)."""
    v = Fraction(v)
    if max(v.numerator.bit_length(), v.denominator.bit_length()) > _MAX_BITS:
        # e.g. exp(4·10^4) at T = 1e-6: thousands of digits, beyond what the solver handles
        raise EncodeError(f"a constant of more than {_MAX_BITS} bits cannot be encoded")
    mag = (
        f"{abs(v.numerator)}.0"
        if v.denominator == 1
        else (f"(/ {abs(v.numerator)}.0 {v.denominator}.0)")
    )
    return f"(- {mag})" if v < 0 else mag


def _symbol(name: str) -> str:
    if _FRESH.match(name):
        raise EncodeError(f"symbol name {name!r} is reserved for solver constants")
    if _SIMPLE.match(name):
        return name
    if "|" in name or "\\" in name:
        raise EncodeError(f"symbol name {name!r} cannot be written in SMT-LIB2")
    return f"|{name}|"


def _horner(coefficients: Sequence[Fraction], t: str) -> str:
    acc = smt_number(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = f"(+ {smt_number(c)} (* {t} {acc}))"
    return acc


def _within(term: str, lo: Fraction, hi: Fraction) -> str:
    return f"(and (<= {smt_number(lo)} {term}) (<= {term} {smt_number(hi)}))"


def _exp_facts(enc: ExpEnclosure, x: str, y: str) -> str:
    """``enc`` as one formula tying ``y = exp(x)`` to ``x``."""
    parts = [_within(y, enc.value_lo, enc.value_hi)]
    for p in enc.pieces:
        t = x if p.centre == 0 else f"(- {x} {smt_number(p.centre)})"
        bounds = f"(and (<= {_horner(p.lower, t)} {y}) (<= {y} {_horner(p.upper, t)}))"
        if len(enc.pieces) > 1:
            bounds = f"(=> {_within(x, p.lo, p.hi)} {bounds})"
        parts.append(bounds)
    return f"(=> {_within(x, enc.lo, enc.hi)} (and {' '.join(parts)}))"


# the highest power written exactly (a chain of squarings); a higher one is enclosed
EXACT_POWER = 16


class _Writer:
    def __init__(self, env: Mapping[str, Interval], names: Mapping[str, str], degree, pieces, bits):
        self.env, self.names = env, names
        self.degree, self.pieces, self.bits = degree, pieces, bits
        self.decls: list[str] = []
        self.asserts: list[tuple[str, str, str]] = []  # (name, formula, comment)
        self.memo: dict[sympy.Expr, tuple[str, Interval]] = {}
        self.ranges: dict[sympy.Expr, Interval] = {}  # shared by every interval evaluation
        self.range_facts = False  # state each sum's range as a lemma (with tightened ranges)
        self.count = 0

    def fresh(self, kind: str) -> str:
        self.count += 1
        name = f"{kind}.{self.count}"
        self.decls.append(f"(declare-const {name} Real)")
        return name

    def atom(self, e: sympy.Expr, term: str) -> str:
        """``term`` itself if it is a name or a number, else a fresh name defined as it."""
        if not term.startswith("(") or e.is_Number:
            return term
        name = self.fresh("arg")
        self.asserts.append((f"def_{name}", f"(= {name} {term})", f"{name} = {e}"))
        return name

    def term(self, e: sympy.Expr) -> tuple[str, Interval]:
        if e in self.memo:
            return self.memo[e]
        rng = intervals.evaluate(e, self.env, self.ranges)
        fixed = None if isinstance(e, sympy.Symbol) else _exact(e, self.env, self.names)
        if fixed is not None:  # rational arithmetic on constants, folded
            t = smt_number(fixed)
        elif isinstance(e, sympy.Symbol):
            t = smt_number(self.env[e.name][0]) if e.name not in self.names else self.names[e.name]
        elif e.is_Number:
            t = smt_number(intervals.number(e))
        elif isinstance(e, sympy.Add | sympy.Mul):
            op = "+" if isinstance(e, sympy.Add) else "*"
            t = f"({op} {' '.join(self.term(a)[0] for a in e.args)})"
        elif isinstance(e, sympy.Pow):
            t = self.power(e)
        elif e.func in _FUNCS:
            t = self.function(_FUNCS[e.func], e.args[0], str(e))
        elif isinstance(e, sympy.Min | sympy.Max):
            t = self.extremum(e)
        else:
            raise EncodeError(f"unsupported operation {type(e).__name__} in {e}")
        if self.range_facts and isinstance(e, _RANGED) and fixed is None:
            t = self.ranged(e, t, rng)
        self.memo[e] = (t, rng)
        return t, rng

    def power(self, e: sympy.Pow) -> str:
        base, exponent = e.args
        exponent = intervals.integer_exponent(exponent, self.env)
        if not isinstance(exponent, sympy.Rational) or exponent.q not in (1, 2):
            raise EncodeError(f"unsupported exponent {exponent} in {e}")
        n = int(exponent.p)
        if exponent.q == 2:
            b = self.function("sqrt", base, f"sqrt({base})")
            rng = intervals.evaluate(sympy.sqrt(base), self.env, self.ranges)
        else:
            b, rng = self.term(base)
            b = self.atom(base, b) if n < 0 else b
        if n < 0:
            if rng[0] <= 0 <= rng[1]:
                raise EncodeError(f"division by {base}, which may be zero on {_show(rng)}")
            inv = self.fresh("inv")
            self.asserts.append((f"def_{inv}", f"(= (* {inv} {b}) 1.0)", f"{inv} = 1/({base})"))
            b, n, rng = inv, -n, (1 / rng[1], 1 / rng[0])
        if n == 0:
            return "1.0"
        if n <= 3:
            return b if n == 1 else f"(* {' '.join([b] * n)})"
        return self.big_power(base, b, n, rng)

    def big_power(self, base: sympy.Expr, b: str, n: int, rng: Interval) -> str:
        """``b**n`` by repeated squaring through fresh names (low degree for the solver),
        with the range of the result as a lemma. Above ``EXACT_POWER`` the power is a fresh name
        known only by that range (its enclosure over the piece, outward-rounded; a piece split
        in two narrows it): z3's nlsat stops counting its resource units on the squaring chain
        of a high power, so the budget could no longer decide such a query, the clock would."""
        b = b if not b.startswith("(") else self.atom(base, b)
        if n > EXACT_POWER:
            p_lo, p_hi = intervals.evaluate(sympy.Pow(sympy.Symbol("_b"), n), {"_b": rng})
            result = self.fresh("pow")
            fact = f"(=> {_within(b, rng[0], rng[1])} {_within(result, p_lo, p_hi)})"
            self.asserts.append((f"lemma_{result}", fact, f"{result} = ({base})**{n}, enclosed"))
            return result
        result, square, k = None, b, n
        while True:
            if k & 1:
                result = square if result is None else self.define(f"(* {result} {square})")
            k >>= 1
            if not k:
                break
            square = self.define(f"(* {square} {square})")
        p_lo, p_hi = intervals.evaluate(sympy.Pow(sympy.Symbol("_b"), n), {"_b": rng})
        fact = f"(=> {_within(b, rng[0], rng[1])} {_within(result, p_lo, p_hi)})"
        self.asserts.append((f"lemma_{result}", fact, f"{result} = ({base})**{n}"))
        return result

    def ranged(self, e: sympy.Expr, term: str, rng: Interval) -> str:
        """``term`` named, with its range over the box as a lemma: a sum whose operands cancel
        (the KL supremum's closed form) is out of the solver's reach from its parts alone."""
        name = self.atom(e, term)
        if name == term:
            return term
        lo, hi = (
            intervals.round_down(rng[0], self.bits + 8),
            intervals.round_up(rng[1], self.bits + 8),
        )
        self.asserts.append((f"range_{name}", _within(name, lo, hi), f"{name} ∈ {_show(rng)}"))
        return name

    def define(self, term: str) -> str:
        name = self.fresh("pow")
        self.asserts.append((f"def_{name}", f"(= {name} {term})", f"{name} = {term}"))
        return name

    def function(self, func: str, arg: sympy.Expr, source: str) -> str:
        a, (lo, hi) = self.term(arg)
        if func == "log" and lo <= 0:
            raise EncodeError(f"log of {arg}, which may be ≤ 0 on {_show((lo, hi))}")
        if func == "sqrt" and lo < 0:
            raise EncodeError(f"sqrt of {arg}, which may be < 0 on {_show((lo, hi))}")
        a = self.atom(arg, a)
        constant = lo == hi
        # the lemma's domain, rounded outward to the enclosure's precision (shorter text)
        lo, hi = intervals.round_down(lo, self.bits + 8), intervals.round_up(hi, self.bits + 8)
        y = self.fresh(func)
        enc = enclose(func, lo, hi, self.degree, self.pieces, self.bits)
        if constant:
            # a function of a constant (log hi of a ratio band): the enclosure of its value is
            # all the solver needs; a polynomial tie would make it one more nonlinear unknown.
            # The enclosure is the one the argument ranges of enclosing lemmas were computed
            # with, so no model can leave those lemmas' domains through this value's slack.
            value = intervals.evaluate(_FUNCTIONS[func](arg), self.env, self.ranges)
            self.asserts.append((f"lemma_{y}", _within(y, *value), f"{y} = {source}"))
            return y
        if func == "exp":
            fact = _exp_facts(enc.exp, a, y)
        elif func == "tanh":
            e = self.fresh("exp")
            self.asserts.append(
                (f"lemma_{e}", _exp_facts(enc.exp, f"(* 2.0 {a})", e), f"{e} = exp(2*{a})")
            )
            rng = _within(y, enc.value_lo, enc.value_hi)
            fact = f"(and (= (* {y} (+ {e} 1.0)) (- {e} 1.0)) (=> {_within(a, lo, hi)} {rng}))"
        elif func == "log":
            fact = f"(and (=> {_within(a, lo, hi)} {_within(y, enc.value_lo, enc.value_hi)}) "
            fact += f"{_exp_facts(enc.exp, y, a)})"
        else:  # sqrt
            rng = _within(y, enc.value_lo, enc.value_hi)
            fact = f"(and (<= 0.0 {y}) (= (* {y} {y}) {a}) (=> {_within(a, lo, hi)} {rng}))"
        self.asserts.append((f"lemma_{y}", fact, f"{y} = {source}"))
        return y

    def extremum(self, e: sympy.Expr) -> str:
        op = "<=" if isinstance(e, sympy.Min) else ">="
        terms = [self.term(a)[0] for a in e.args]
        acc = terms[0]
        for t in terms[1:]:
            acc = f"(ite ({op} {acc} {t}) {acc} {t})"
        return acc


def _exact(e: sympy.Expr, env: Mapping[str, Interval], variables) -> Fraction | None:
    """The exact value of a rational expression in the constants, else ``None``."""
    if e.is_Number:
        return intervals.number(e)
    if isinstance(e, sympy.Symbol):
        return None if e.name in variables or e.name not in env else env[e.name][0]
    if isinstance(e, sympy.Add | sympy.Mul | sympy.Min | sympy.Max):
        parts = [_exact(a, env, variables) for a in e.args]
        if any(p is None for p in parts):
            return None
        if isinstance(e, sympy.Add):
            return sum(parts, Fraction(0))
        if isinstance(e, sympy.Mul):
            out = Fraction(1)
            for p in parts:
                out *= p
            return out
        return min(parts) if isinstance(e, sympy.Min) else max(parts)
    if isinstance(e, sympy.Pow) and isinstance(e.args[1], sympy.Integer):
        base, n = _exact(e.args[0], env, variables), int(e.args[1])
        if base is None or (base == 0 and n < 0):
            return None
        return base**n
    return None


def _loose(expr: sympy.Expr, env: Mapping[str, Interval]) -> bool:
    """Whether naive interval arithmetic fails on ``expr`` over a box with one free variable,
    or is loose there (``ranges.loose``): a function of ``expr`` and the box alone, so a
    re-checker writes the same query."""
    var = ranges.free_variable(expr, env)
    if var is None:
        return False
    try:
        return ranges.loose(expr, env, var, intervals.evaluate(expr, env))
    except ExprError:
        return True


@functools.lru_cache(maxsize=64)
def _tight(expr: sympy.Expr, env: tuple[tuple[str, Interval], ...]) -> dict:
    """``ranges.tighten`` once per expression and box (a proof encodes one box many times)."""
    return ranges.tighten(expr, dict(env))


def _show(rng: Interval) -> str:
    return f"[{_g(rng[0])}, {_g(rng[1])}]"


def _g(v: Fraction) -> str:
    """``v`` to 6 significant digits, also beyond the float range (a range of 1/5e-324)."""
    try:
        return f"{float(v):.6g}"
    except OverflowError:
        import mpmath

        return mpmath.nstr(mpmath.mpf(v.numerator) / v.denominator, 6)


def encode(
    expr: sympy.Expr,
    box: Box,
    constants: Mapping[str, Fraction],
    threshold: Fraction,
    *,
    degree: int = 5,
    pieces: int = 1,
    bits: int = DEFAULT_BITS,
    title: str = "",
) -> Query:
    """The query "some point of ``box`` has ``expr > threshold``" (expected ``unsat``)."""
    env: dict[str, Interval] = {k: (Fraction(v), Fraction(v)) for k, v in constants.items()}
    names: dict[str, str] = {}
    for sym, _clause, lo, hi in box:
        env[sym] = (Fraction(lo), Fraction(hi))
        names[sym] = _symbol(sym)
    w = _Writer(env, names, degree, pieces, bits)
    try:
        if _loose(expr, env):
            # naive interval ranges lose the dependency between operands (the KL supremum's
            # closed form looks negative past its kink): centered-form ranges, each sum's
            # range stated as a lemma
            w.ranges = dict(_tight(expr, tuple(sorted(env.items()))))
            w.range_facts = True
        bound, _ = w.term(expr)
    except ExprError as err:
        raise EncodeError(str(err)) from None
    lines = ["(set-logic QF_NRA)", "(set-option :produce-unsat-cores true)"]
    if title:
        lines.append(f"; {title}")
    lines.append(f"; bound: {sympy.sstr(expr)}")
    if constants:
        shown = ", ".join(f"{k} = {Fraction(v)}" for k, v in sorted(constants.items()))
        lines.append(f"; constants: {shown}")
    lines += [f"(declare-const {names[sym]} Real)" for sym, *_ in box] + w.decls
    premises: dict[str, list[str]] = {}
    for sym, clause, lo, hi in box:
        premises.setdefault(clause, []).append(_within(names[sym], Fraction(lo), Fraction(hi)))
    named: list[str] = []
    for clause, parts in premises.items():
        name = _symbol(f"premise_{clause}")
        body = parts[0] if len(parts) == 1 else f"(and {' '.join(parts)})"
        lines.append(f"(assert (! {body} :named {name}))")
        named.append(name)
    for name, formula, comment in w.asserts:
        lines.append(f"; {comment}")
        lines.append(f"(assert (! {formula} :named {name}))")
        named.append(name)
    lines.append(f"(assert (! (> {bound} {smt_number(threshold)}) :named goal))")
    named.append("goal")
    lines += ["(check-sat)", "(get-unsat-core)", ""]
    return Query("\n".join(lines), box, max(1, degree | 1), bits, tuple(named))
