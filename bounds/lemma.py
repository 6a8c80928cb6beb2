"""Lemmas as objects: premises, conclusion, assumptions, symbolic form, evaluators, witness.

A :class:`Lemma` is one link of the bound chain. Its ``expr`` is a sympy expression in the
symbols of :data:`SYMBOLS`; numeric evaluators (mpmath, numpy, JAX) are generated from it, so
a number and its formula never disagree. Its ``witness`` builds an explicit instance — a pair
of logit vectors or of sequence laws — and measures the true quantity on it, so the tightness
of every link is measured rather than claimed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import sympy

from kernel_contracts.bounds._evaluate import evaluate, jax_function, numpy_function, symbol_names

__all__ = ["SYMBOLS", "Lemma", "Witness"]


def _nonneg(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, nonnegative=True)


def _pos(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, positive=True)


# The symbols lemmas are written in. Derivations rename them to clause-specific symbols.
SYMBOLS: Mapping[str, sympy.Symbol] = MappingProxyType(
    {
        "delta": _nonneg("delta"),  # logit drift ‖z' − z‖∞
        "osc": _nonneg("osc"),  # oscillation max Δ − min Δ
        "r": _nonneg("r"),  # per-token |log w| bound
        "eps": _nonneg("eps"),  # per-token TV bound
        "kappa": _nonneg("kappa"),  # per-token KL bound
        "rho": _nonneg("rho"),  # exceedance probability
        "theta": _nonneg("theta"),  # level of a signed log ratio: P(log w > θ) = 0
        "T": _pos("T"),  # sampling temperature
        "L": sympy.Symbol("L", positive=True, integer=True),  # horizon
        "span": _nonneg("span"),  # reward range b − a
        "G": _nonneg("G"),  # score-norm bound
        "A": _nonneg("A"),  # advantage bound
        "c": _pos("c"),  # importance-ratio cap (c > 1 for MIS; c ≥ 0 for TIS, c = 0 a constant)
        "clip_epsilon": _pos("clip_epsilon"),  # PPO clip range ε
        "lo": _pos("lo"),  # lower end of a kept ratio band (lo = 0 has its own constant form)
        "hi": _pos("hi"),  # upper end of a kept ratio band, hi > 1
        "tau": _pos("tau"),  # divergence threshold of a token mask
        "tau_gate": _pos("tau_gate"),  # SAPO's gate temperature, the larger of τ_pos and τ_neg
        "k_pos": _pos("k_pos"),  # VESPO's power k for A ≥ 0
        "lam_pos": _pos("lam_pos"),  # VESPO's decay λ for A ≥ 0 (at least 1e−4)
        "k_neg": _pos("k_neg"),  # and for A < 0
        "lam_neg": _pos("lam_neg"),
        "kl_coef": _nonneg("kl_coef"),  # KL-Cov's coefficient κ of |log r| on picked tokens
    }
)


@dataclass(frozen=True)
class Witness:
    """An explicit instance of a lemma's setting and the true quantity measured on it."""

    lemma: str
    params: Mapping[str, float]
    achieved: float  # the true quantity at the instance (float64, log-space where it matters)
    bound: float  # the lemma's bound at the same parameters
    instance: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def ratio(self) -> float:
        """achieved / bound: 1 means the bound is attained; 1.0 when both are zero."""
        if self.bound == 0.0:
            return 1.0 if self.achieved == 0.0 else float("inf")
        return self.achieved / self.bound


@dataclass(frozen=True)
class Lemma:
    """One link of the chain: ``conclusion`` holds with bound ``expr`` under ``premises``."""

    name: str
    premises: tuple[str, ...]
    conclusion: str
    assumptions: tuple[str, ...]
    expr: sympy.Expr
    reference: str
    tightness: str  # "attained" | "approached" | "first order" | "looser" | ...
    witness: Callable[..., Witness] | None = None

    @property
    def params(self) -> tuple[str, ...]:
        """The symbol names of ``expr``, sorted; the argument order of the numeric functions."""
        return symbol_names(self.expr)

    @property
    def latex(self) -> str:
        return sympy.latex(self.expr)

    def evaluate(self, **values: float) -> float:
        """The bound at ``values`` (symbol name → number), evaluated at 50 digits."""
        return evaluate(self.expr, values)

    def numpy(self) -> Callable:
        """A vectorised numpy evaluator taking :attr:`params` positionally."""
        return numpy_function(self.expr, self.params)

    def jax(self) -> Callable:
        """A jitted JAX evaluator taking :attr:`params` positionally (imports JAX lazily)."""
        return jax_function(self.expr, self.params)
