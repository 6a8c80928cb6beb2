"""An independent route to a report's numbers: parse the stored ``srepr``, evaluate with
mpmath's interval type.

This shares no code with how a report's numbers were produced (``verify.proving.solve.intervals``,
sympy trees): the ``srepr`` text is read by a small parser that accepts only the bound vocabulary
(no ``eval``: a report is untrusted input), and evaluated with ``mpmath.iv`` at its own
precision. ``tanh`` is evaluated as ``1 − 2/(exp(2x) + 1)``, in which ``x`` occurs once, so
the interval stays tight.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction

import mpmath
from mpmath import iv

from kernel_contracts.contracts import KernelContractsError

__all__ = ["Node", "SreprError", "evaluate_iv", "parse_srepr", "to_sympy"]

Node = tuple  # ("num", Fraction) | ("sym", name) | (head, child, ...)

_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z_0-9]*)|('(?:[^'\\]|\\.)*')|(-?\d+)|([(),=]))")
_HEADS = {"Add", "Mul", "Pow", "exp", "log", "tanh", "sqrt", "Min", "Max", "Abs"}
PREC = 200  # bits: not the producer's 160, on purpose


class SreprError(KernelContractsError, ValueError):
    """Text that is not a bound in the supported vocabulary."""


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise SreprError(f"unexpected text at {pos}: {text[pos : pos + 20]!r}")
        out.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
    return out


def parse_srepr(text: str) -> Node:
    """The expression tree of a sympy ``srepr`` string, restricted to the bound vocabulary."""
    if not isinstance(text, str) or len(text) > 200_000:
        raise SreprError("srepr must be a string of reasonable size")
    toks = _tokens(text)
    pos = 0

    def take(expected: str | None = None) -> str:
        nonlocal pos
        if pos >= len(toks):
            raise SreprError("unexpected end of srepr")
        t = toks[pos]
        if expected is not None and t != expected:
            raise SreprError(f"expected {expected!r}, got {t!r}")
        pos += 1
        return t

    def call(depth: int) -> Node:
        if depth > 200:
            raise SreprError("srepr nested too deeply")
        head = take()
        take("(")
        args, kwargs = [], {}
        while toks[pos] != ")" if pos < len(toks) else False:
            if pos + 1 < len(toks) and toks[pos + 1] == "=":
                key = take()
                take("=")
                kwargs[key] = take()
            elif toks[pos].startswith("'"):
                args.append(take()[1:-1])
            elif re.fullmatch(r"-?\d+", toks[pos]):
                args.append(int(take()))
            else:
                args.append(call(depth + 1))
            if pos < len(toks) and toks[pos] == ",":
                take(",")
        take(")")
        return _node(head, args, kwargs)

    tree = call(0)
    if pos != len(toks):
        raise SreprError("text after the expression")
    return tree


def _node(head: str, args: list, kwargs: dict) -> Node:
    if head == "Integer" and len(args) == 1 and isinstance(args[0], int):
        return ("num", Fraction(args[0]))
    if head == "Rational" and len(args) == 2 and all(isinstance(a, int) for a in args):
        if args[1] == 0:
            raise SreprError("Rational with zero denominator")
        return ("num", Fraction(args[0], args[1]))
    if head == "Float" and len(args) == 1 and isinstance(args[0], str):
        with mpmath.workprec(int(kwargs.get("precision", "53"))):
            value = mpmath.mpf(args[0])
        if not mpmath.isfinite(value):
            raise SreprError("non-finite Float")
        sign, man, exp, _ = value._mpf_
        v = Fraction(int(man)) * Fraction(2) ** int(exp)
        return ("num", -v if sign else v)
    if head == "Symbol" and len(args) == 1 and isinstance(args[0], str):
        if any(v not in ("True", "False") for v in kwargs.values()):
            raise SreprError("Symbol assumptions must be True or False")
        return ("sym", args[0], tuple(sorted((k, v == "True") for k, v in kwargs.items())))
    if head in _HEADS and args and all(isinstance(a, tuple) for a in args) and not kwargs:
        if (head == "Pow" and len(args) != 2) or (
            head in ("exp", "log", "tanh", "sqrt", "Abs") and (len(args) != 1)
        ):
            raise SreprError(f"{head} with {len(args)} arguments")
        return (head, *args)
    raise SreprError(f"unsupported srepr node {head}")


def _iv_num(v: Fraction):
    return iv.mpf(v.numerator) / v.denominator


def evaluate_iv(tree: Node, values: Mapping[str, Fraction]) -> tuple[Fraction, Fraction]:
    """An interval enclosing the tree's value at the point ``values`` (outward, mpmath.iv)."""
    saved = iv.prec
    iv.prec = PREC
    try:
        r = _walk(tree, values)
        return _ends(r)
    finally:
        iv.prec = saved


# magnitudes are kept within 2^±_EXP_LIMIT, as the producer keeps them, so an endpoint like
# exp(−4·10^10) is never formed as an exact rational: a tinier one rounds outward to 0 or to
# ±2^-_EXP_LIMIT, a larger one cannot be recomputed
_EXP_LIMIT = 1 << 14


def _raw(raw, up: bool) -> Fraction:
    sign, man, exp, bc = raw
    if not man and exp:
        raise SreprError("a non-finite value")
    if man and exp + bc > _EXP_LIMIT:
        raise SreprError(f"a value of magnitude 2^{exp + bc}, beyond 2^{_EXP_LIMIT}")
    if man and exp + bc < -_EXP_LIMIT:
        tiny = Fraction(1, 1 << _EXP_LIMIT)
        return (tiny if up else Fraction(0)) if not sign else (Fraction(0) if up else -tiny)
    v = Fraction(int(man)) * Fraction(2) ** int(exp)
    return -v if sign else v


def _ends(x) -> tuple[Fraction, Fraction]:
    return _raw(x._mpi_[0], up=False), _raw(x._mpi_[1], up=True)


def _walk(t: Node, values: Mapping[str, Fraction]):
    head = t[0]
    if head == "num":
        return _iv_num(t[1])
    if head == "sym":
        if t[1] not in values:
            raise SreprError(f"symbol {t[1]} has no value")
        return _iv_num(Fraction(values[t[1]]))
    args = [_walk(a, values) for a in t[1:]]
    if head == "Add":
        out = args[0]
        for a in args[1:]:
            out = out + a
        return out
    if head == "Mul":
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if head == "Pow":
        exponent = t[2]
        if exponent[0] == "sym" and exponent[1] in values:
            value = Fraction(values[exponent[1]])
            if value.denominator == 1:  # a horizon L: one integer
                exponent = ("num", value)
        if exponent[0] == "num" and exponent[1].denominator == 1:
            n = int(exponent[1])
            base = args[0] if n >= 0 else 1 / args[0]
            return base ** abs(n)
        if exponent[0] == "num" and exponent[1].denominator == 2:
            return iv.sqrt(args[0]) ** int(exponent[1].numerator)
        raise SreprError("unsupported exponent")
    if head == "exp":
        return iv.exp(args[0])
    if head == "log":
        return iv.log(args[0])
    if head == "sqrt":
        return iv.sqrt(args[0])
    if head == "tanh":
        return 1 - 2 / (iv.exp(2 * args[0]) + 1)
    if head == "Abs":
        return abs(args[0])
    ends = [_ends(a) for a in args]
    pick = min if head == "Min" else max
    lo, hi = pick(e[0] for e in ends), pick(e[1] for e in ends)
    return iv.mpf([_iv_num(lo).a, _iv_num(hi).b])


def to_sympy(t: Node):
    """The sympy expression of a parsed tree (for regenerating queries)."""
    import sympy

    heads = {"Add": sympy.Add, "Mul": sympy.Mul, "Pow": sympy.Pow, "exp": sympy.exp,
             "log": sympy.log, "tanh": sympy.tanh, "sqrt": sympy.sqrt, "Min": sympy.Min,
             "Max": sympy.Max, "Abs": sympy.Abs}  # fmt: skip
    if t[0] == "num":
        return sympy.Rational(t[1].numerator, t[1].denominator)
    if t[0] == "sym":
        return sympy.Symbol(t[1], **dict(t[2]))
    return heads[t[0]](*(to_sympy(a) for a in t[1:]))
