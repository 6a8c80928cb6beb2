"""Numeric evaluation of the symbolic bounds: exact-enough (mpmath), numpy, and JAX.

Every evaluator is generated from the sympy expression itself (``sympy.lambdify``), so the
numbers in a report and the formula in its proof cannot drift apart. JAX is imported only
inside :func:`jax_function`, so importing ``bounds`` never loads it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

import mpmath
import sympy

__all__ = ["evaluate", "evaluate_mp", "jax_function", "numpy_function", "symbol_names"]

Number = Fraction | float | int

# Digits used for reference evaluation; far beyond float64 so the float we report is the
# correctly rounded value of the formula, not an artefact of cancellation.
MP_DIGITS = 50


def symbol_names(expr: sympy.Expr) -> tuple[str, ...]:
    """The names of the free symbols of ``expr``, sorted."""
    return tuple(sorted(s.name for s in expr.free_symbols))


@functools.lru_cache(maxsize=512)
def _lambdified(expr: sympy.Expr, names: tuple[str, ...], module: str) -> Callable:
    by_name = {s.name: s for s in expr.free_symbols}
    args = [by_name.get(n, sympy.Symbol(n)) for n in names]
    return sympy.lambdify(args, expr, modules=module)


def _to_mp(x: Number) -> mpmath.mpf:
    if isinstance(x, Fraction):
        return mpmath.mpf(x.numerator) / x.denominator
    return mpmath.mpf(x)


def evaluate_mp(expr: sympy.Expr, values: Mapping[str, Number], digits: int = MP_DIGITS):
    """``expr`` at ``values`` as an mpmath number computed with ``digits`` significant digits.

    Raises ``KeyError`` naming any free symbol without a value.
    """
    names = symbol_names(expr)
    missing = [n for n in names if n not in values]
    if missing:
        raise KeyError(f"no value for symbol(s) {', '.join(missing)}")
    fn = _lambdified(expr, names, "mpmath")
    with mpmath.workdps(digits):
        return +fn(*[_to_mp(values[n]) for n in names])


def evaluate(expr: sympy.Expr, values: Mapping[str, Number]) -> float:
    """``expr`` at ``values`` (symbol name → number), evaluated at 50 digits, as a float."""
    return float(evaluate_mp(expr, values))


def numpy_function(expr: sympy.Expr, names: Sequence[str] | None = None) -> Callable:
    """A vectorised numpy function of the symbols ``names`` (default: sorted free symbols)."""
    names = tuple(names) if names is not None else symbol_names(expr)
    return _lambdified(expr, names, "numpy")


def jax_function(expr: sympy.Expr, names: Sequence[str] | None = None) -> Callable:
    """A jitted JAX function of the symbols ``names``; JAX is imported here and only here."""
    import jax  # lazy: a proofs-only run never pays for JAX

    names = tuple(names) if names is not None else symbol_names(expr)
    return jax.jit(_lambdified(expr, names, "jax"))
