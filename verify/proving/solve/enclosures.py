"""Sound rational enclosures of exp, tanh, log and sqrt for nonlinear real arithmetic.

z3 decides polynomial real arithmetic but knows nothing of exp, tanh or log. Each application
``y = f(x)`` in an obligation becomes a fresh real constant, tied to ``x`` by polynomial
inequalities with rational coefficients that hold for the true function whenever ``x`` lies in
a known interval ``[lo, hi]``:

* **exp**: around a rational centre ``c`` with ``t = x - c`` and odd degree ``n``, Taylor's
  theorem with the Lagrange remainder gives, for some ξ between 0 and t,
  ``exp(t) = Σ_{k≤n} t^k/k! + e^ξ t^{n+1}/(n+1)!`` with ``t^{n+1} ≥ 0``; bounding ``e^ξ`` by
  ``exp(min(0, t_lo))`` below and ``exp(max(0, t_hi))`` above, and ``exp(c)`` by outward-rounded
  rationals ``E_lo ≤ exp(c) ≤ E_hi``, yields ``E_lo·P_lo(t) ≤ exp(x) ≤ E_hi·P_hi(t)``.
  (The lower form stays valid when ``P_lo(t) < 0``, as then it is below 0 < exp(x).)
* **tanh**: exact in terms of ``e = exp(2x)``: ``y·(e + 1) = e − 1``, with ``e`` enclosed as above.
* **log**: exact in terms of exp: ``x = exp(y)`` with ``y`` in ``[log lo, log hi]`` rounded
  outward, and ``exp(y)`` enclosed as above.
* **sqrt**: exact: ``y ≥ 0 ∧ y² = x``.

Every enclosure also carries the monotone range ``[f(lo), f(hi)]`` rounded outward. The range
may be split into ``pieces`` (each with its own centre); higher ``degree``, more ``bits`` in
the rational constants, or narrower intervals tighten an enclosure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from kernel_contracts.verify.proving.solve.intervals import func_down, func_up

__all__ = [
    "Enclosure",
    "ExpEnclosure",
    "TaylorPiece",
    "enclose",
    "exp_enclosure",
    "horner",
]

DEFAULT_BITS = 80


@dataclass(frozen=True)
class TaylorPiece:
    """On ``lo ≤ x ≤ hi``: ``Σ lower[k]·(x−centre)^k ≤ exp(x) ≤ Σ upper[k]·(x−centre)^k``."""

    lo: Fraction
    hi: Fraction
    centre: Fraction
    lower: tuple[Fraction, ...]
    upper: tuple[Fraction, ...]


@dataclass(frozen=True)
class ExpEnclosure:
    """Two-sided polynomial bounds of ``exp`` on ``[lo, hi]`` and its outward range."""

    lo: Fraction
    hi: Fraction
    degree: int
    bits: int
    pieces: tuple[TaylorPiece, ...]
    value_lo: Fraction
    value_hi: Fraction

    def bounds_at(self, x: Fraction) -> tuple[Fraction, Fraction]:
        """Exact rational lower and upper bounds on ``exp(x)`` for ``lo ≤ x ≤ hi``."""
        if not self.lo <= x <= self.hi:
            raise ValueError(f"{x} outside [{self.lo}, {self.hi}]")
        lo, hi = self.value_lo, self.value_hi
        for p in self.pieces:
            if p.lo <= x <= p.hi:
                lo = max(lo, horner(p.lower, x - p.centre))
                hi = min(hi, horner(p.upper, x - p.centre))
        return lo, hi


@dataclass(frozen=True)
class Enclosure:
    """A sound description of ``y = func(x)`` for ``x`` in ``[lo, hi]``.

    ``exp`` is the exp enclosure it rests on: of ``x`` itself (func ``exp``), of ``2x``
    (``tanh``, through ``y·(e+1) = e−1``) or of ``y`` (``log``, through ``x = exp(y)``);
    ``None`` for ``sqrt``, which is exact. ``value_lo ≤ y ≤ value_hi`` always holds.
    """

    func: str
    lo: Fraction
    hi: Fraction
    value_lo: Fraction
    value_hi: Fraction
    exp: ExpEnclosure | None

    def bounds_at(self, x: Fraction) -> tuple[Fraction, Fraction]:
        """Rational bounds on ``func(x)`` implied by the enclosure (exp, tanh and sqrt)."""
        if not self.lo <= x <= self.hi:
            raise ValueError(f"{x} outside [{self.lo}, {self.hi}]")
        if self.func == "exp":
            return self.exp.bounds_at(x)
        if self.func == "tanh":
            e_lo, e_hi = self.exp.bounds_at(2 * x)
            lo, hi = (e_lo - 1) / (e_lo + 1), (e_hi - 1) / (e_hi + 1)
            return max(lo, self.value_lo), min(hi, self.value_hi)
        if self.func == "sqrt":
            return self.value_lo, self.value_hi  # exact relation; the range is all it implies
        raise ValueError(f"{self.func} is implicit; use admits()")

    def admits(self, x, y) -> bool:
        """Whether ``(x, y)`` satisfies every constraint (both Fraction, or both mpmath)."""
        q = _as(x)
        if not (q(self.lo) <= x <= q(self.hi) and q(self.value_lo) <= y <= q(self.value_hi)):
            return False
        if self.func == "exp":
            return _between(self.exp, x, y)
        if self.func == "tanh":
            # y = (e − 1)/(e + 1) ⇔ e = (1 + y)/(1 − y), with e enclosed at 2x
            return y < 1 and _between(self.exp, 2 * x, (1 + y) / (1 - y))
        if self.func == "log":
            return _between(self.exp, y, x)
        if self.func == "sqrt":
            return y >= 0
        raise ValueError(self.func)


def _as(x):
    """Identity for Fractions; conversion to mpmath numbers when ``x`` is one."""
    if isinstance(x, Fraction):
        return lambda v: v
    import mpmath

    return lambda v: mpmath.mpf(v.numerator) / v.denominator


def _between(enc: ExpEnclosure, x, y) -> bool:
    q = _as(x)
    if not (q(enc.lo) <= x <= q(enc.hi) and q(enc.value_lo) <= y <= q(enc.value_hi)):
        return False
    for p in enc.pieces:
        if q(p.lo) <= x <= q(p.hi):
            t = x - q(p.centre)
            lower = horner(tuple(q(c) for c in p.lower), t)
            upper = horner(tuple(q(c) for c in p.upper), t)
            if not lower <= y <= upper:
                return False
    return True


def horner(coefficients: tuple[Fraction, ...], t):
    """``Σ coefficients[k]·t^k``, evaluated from the highest power down."""
    acc = 0
    for c in reversed(coefficients):
        acc = acc * t + c
    return acc


def _centre(lo: Fraction, hi: Fraction) -> Fraction:
    mid = (lo + hi) / 2
    c = mid.limit_denominator(1 << 12)
    return c if lo <= c <= hi else mid


def _piece(lo: Fraction, hi: Fraction, degree: int, bits: int) -> TaylorPiece:
    c = _centre(lo, hi)
    t_lo, t_hi = lo - c, hi - c
    e_lo, e_hi = func_down("exp", c, bits), func_up("exp", c, bits)
    m_lo = func_down("exp", min(Fraction(0), t_lo), bits)
    m_hi = func_up("exp", max(Fraction(0), t_hi), bits)
    inv = [Fraction(1, math.factorial(k)) for k in range(degree + 2)]
    lower = (*tuple(e_lo * f for f in inv[:-1]), e_lo * m_lo * inv[-1])
    upper = (*tuple(e_hi * f for f in inv[:-1]), e_hi * m_hi * inv[-1])
    return TaylorPiece(lo, hi, c, lower, upper)


def exp_enclosure(
    lo: Fraction, hi: Fraction, degree: int = 5, pieces: int = 1, bits: int = DEFAULT_BITS
) -> ExpEnclosure:
    """Sound bounds of ``exp`` on ``[lo, hi]`` (an even ``degree`` is raised by one)."""
    lo, hi = Fraction(lo), Fraction(hi)
    if lo > hi:
        raise ValueError(f"empty interval [{lo}, {hi}]")
    degree = max(1, degree | 1)
    n = max(1, pieces) if hi > lo else 1
    cuts = [lo + (hi - lo) * i / n for i in range(n)] + [hi]
    parts = tuple(_piece(cuts[i], cuts[i + 1], degree, bits) for i in range(n))
    return ExpEnclosure(
        lo, hi, degree, bits, parts, func_down("exp", lo, bits), func_up("exp", hi, bits)
    )


def enclose(
    func: str,
    lo: Fraction,
    hi: Fraction,
    degree: int = 5,
    pieces: int = 1,
    bits: int = DEFAULT_BITS,
) -> Enclosure:
    """The enclosure of ``func`` (exp | tanh | log | sqrt) for arguments in ``[lo, hi]``."""
    lo, hi = Fraction(lo), Fraction(hi)
    if lo > hi:
        raise ValueError(f"empty interval [{lo}, {hi}]")
    if func == "exp":
        enc = exp_enclosure(lo, hi, degree, pieces, bits)
        return Enclosure("exp", lo, hi, enc.value_lo, enc.value_hi, enc)
    if func == "tanh":
        v_lo, v_hi = (
            max(func_down("tanh", lo, bits), Fraction(-1)),
            min(func_up("tanh", hi, bits), Fraction(1)),
        )
        return Enclosure(
            "tanh", lo, hi, v_lo, v_hi, exp_enclosure(2 * lo, 2 * hi, degree, pieces, bits)
        )
    if func == "log":
        if lo <= 0:
            raise ValueError(f"log needs a positive interval, got [{lo}, {hi}]")
        y_lo, y_hi = func_down("log", lo, bits), func_up("log", hi, bits)
        return Enclosure("log", lo, hi, y_lo, y_hi, exp_enclosure(y_lo, y_hi, degree, pieces, bits))
    if func == "sqrt":
        if lo < 0:
            raise ValueError(f"sqrt needs a nonnegative interval, got [{lo}, {hi}]")
        return Enclosure(
            "sqrt", lo, hi, func_down("sqrt", lo, bits), func_up("sqrt", hi, bits), None
        )
    raise ValueError(f"no enclosure for {func}")
