"""A candidate bound of a derivation (a route) and how routes compose.

A :class:`Route` is one way to bound a guarantee's quantity: a sympy expression in the premise
facts' variables and constants, the facts it rests on, the lemma chain, whether it bounds an
expectation over tokens rather than every token, and whether it is attained (the supremum of
the quantity at the clauses' maxima, so that a refutation is sound).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from kernel_contracts.bounds.premises import Fact
from kernel_contracts.contracts import KernelContractsError

__all__ = ["NoLemma", "Route", "combine"]


@dataclass(frozen=True)
class Route:
    """One candidate bound for a quantity, with everything it rests on."""

    name: str
    expr: sympy.Expr
    facts: tuple[Fact, ...]
    chain: tuple[str, ...]
    expectation: bool = False  # bounds a mean over tokens, not every token
    # the bound equals the supremum of the quantity at the clauses' maxima, so a bound above
    # a guarantee's max there means the guarantee itself is false (a refutation is sound)
    attained: bool = False


def combine(
    name: str, expr: sympy.Expr, *parts: Route, lemma: str | None = None, attained: bool = True
) -> Route:
    """``attained``: the link itself is attained whenever its inputs are (e.g. (b − a)·TV)."""
    facts = tuple(dict.fromkeys(f for p in parts for f in p.facts))
    chain = tuple(dict.fromkeys(c for p in parts for c in p.chain))
    if lemma:
        chain = (*chain, lemma)
    exp = any(p.expectation for p in parts)
    return Route(name, expr, facts, chain, exp, attained and all(p.attained for p in parts))


class NoLemma(KernelContractsError):
    """A guarantee lacks a field its lemma needs."""
