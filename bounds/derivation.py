"""The record of one derived guarantee: its chain, closed form, premises and alternatives."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType

import sympy

__all__ = ["Alternative", "Derivation", "Variable"]


@dataclass(frozen=True)
class Variable:
    """A free premise variable of a parametric obligation, ranging over [lo, hi]."""

    name: str  # the sympy symbol name used in the expression, e.g. "delta_N1"
    lo: Fraction
    hi: Fraction
    clause: str  # the contract clause it comes from


@dataclass(frozen=True)
class Alternative:
    """Another route to the same quantity, kept so reports can show the gap."""

    name: str
    expr: sympy.Expr
    value: float


@dataclass(frozen=True)
class Derivation:
    """How one guarantee follows from the contract's premises.

    ``expr`` is the bound in the symbols of ``variables`` and ``constants``; it is
    nondecreasing in every variable, so ``value`` (at each variable's ``hi``) is the worst case.
    ``expr`` is ``None`` exactly when no lemma applies, and then ``reason`` says why.
    """

    guarantee: str
    quantity: str
    chain: tuple[str, ...]
    premises: tuple[str, ...]
    expr: sympy.Expr | None
    variables: tuple[Variable, ...]
    constants: Mapping[str, Fraction]
    threshold: Fraction
    value: float
    alternatives: tuple[Alternative, ...] = ()
    route: str = ""
    latex: str = ""
    reason: str = ""
    notes: tuple[str, ...] = ()
    extra: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
