"""Composition: for every guarantee of a contract, the tightest chain its premises support.

``derive(contract)`` turns each guarantee into a :class:`~bounds.derivation.Derivation`:
the premise facts (``premises.gather``) become per-token routes (TV, KL, log ratio), those
become the guarantee's quantity (sequence TV by four routes, reward drift, policy-gradient
bias, clip budget), and the route with the smallest value at the clauses' maxima wins; the
others are kept as alternatives. Every route is an upper bound for every premise value, and
every route is nondecreasing in each variable, so the value at the maxima is the worst case.

Every premise counts: the winning route is marked attained (a bound above max refutes the
guarantee) only when its own bound is the supremum and every clause named in ``from`` is a fact
on it; a clause it does not use, or that gives nothing, leaves a counterexample to the route
free to violate that clause. Runtime clauses are the conditions the premises hold under; their
``sequence_length`` bounds the horizon of every sequence-level quantity.
"""

from __future__ import annotations

from fractions import Fraction
from types import MappingProxyType

import sympy

from kernel_contracts.bounds._evaluate import evaluate
from kernel_contracts.bounds.derivation import Alternative, Derivation, Variable
from kernel_contracts.bounds.pg.links import clip_budget_drift
from kernel_contracts.bounds.pg.routes import pg_bias_notes, pg_bias_routes
from kernel_contracts.bounds.premises import (
    Fact,
    Premises,
    gather,
    truncation_blocks,
    truncation_notes,
)
from kernel_contracts.bounds.route import NoLemma, Route, combine
from kernel_contracts.bounds.sequence.lemmas import sequence_routes
from kernel_contracts.bounds.token.lemmas import kl_tilt_sup
from kernel_contracts.contracts import Contract, Guarantee, exact

__all__ = ["derive"]


class _Ctx:
    """The symbols and values one guarantee's derivation works with."""

    def __init__(self, contract: Contract, g: Guarantee, premises: Premises):
        self.contract, self.g, self.premises = contract, g, premises
        self.T = sympy.Symbol("T", positive=True)
        self.consts: dict[str, Fraction] = {"T": exact(contract.policy.temperature)}
        # the longest generated sequence: policy.max_new_tokens, or less where a runtime
        # clause in `from` bounds the sequence length (a continuation is never longer)
        self.max_len = premises.horizon(contract.policy.max_new_tokens)

    def const(self, name: str, value: float | int | Fraction) -> sympy.Symbol:
        self.consts[name] = value if isinstance(value, Fraction) else exact(value)
        return sympy.Symbol(name, positive=True)

    def values(self, facts: tuple[Fact, ...]) -> dict[str, Fraction]:
        vals = dict(self.consts)
        for f in facts:
            vals.update({v.name: v.hi for v in f.variables})
            vals.update(dict(f.constants))
        return vals

    def value(self, route: Route) -> float:
        return evaluate(route.expr, self.values(route.facts))

    def best(self, routes: list[Route]) -> Route | None:
        return min(routes, key=self.value) if routes else None

    # ---- per-token routes -------------------------------------------------------------
    def tv_routes(self) -> list[Route]:
        out = []
        for f in self.premises.of("osc"):
            out.append(
                Route(
                    "token_tv_tanh",
                    sympy.tanh(f.expr / (4 * self.T)),
                    (f,),
                    (*f.chain, "token_tv_tanh"),
                    attained=True,
                )
            )
        for f in self.premises.of("ratio"):
            out.append(
                Route(
                    "ratio_to_tv",
                    sympy.tanh(f.expr / 2),
                    (f,),
                    (*f.chain, "ratio_to_tv"),
                    attained=True,
                )
            )
        for f in self.premises.of("tv"):
            name = "tv_clause" if f.leak else "signed_ratio_tv"
            out.append(Route(name, f.expr, (f,), f.chain, attained=f.attained))
        return out

    def loose_tv_routes(self) -> list[Route]:
        out = []
        for f in self.premises.of("osc"):
            s = f.expr / self.T
            out.append(Route("token_tv_linear", s / 4, (f,), (*f.chain, "token_tv_linear")))
            out.append(
                Route("token_tv_exp", (sympy.exp(s) - 1) / 2, (f,), (*f.chain, "token_tv_exp"))
            )
        return out

    def etv_routes(self) -> list[Route]:
        return [
            Route("expected_tv", f.expr, (f,), f.chain, True, attained=f.attained)
            for f in self.premises.of("etv")
        ]

    def kl_routes(self) -> list[Route]:
        out = []
        for f in self.premises.of("osc"):
            out.append(
                Route(
                    "token_kl_exact",
                    kl_tilt_sup(f.expr / self.T),
                    (f,),
                    (*f.chain, "token_kl_exact"),
                    # exact only on its K(s) branch, s ≥ 1/8; below it s²/8 exceeds the sup K(s)
                    attained=evaluate(f.expr / self.T, self.values((f,))) >= 0.125,
                )
            )
        for f in self.premises.of("ratio"):
            out.append(
                Route(
                    "ratio_to_kl",
                    f.expr * sympy.tanh(f.expr / 2),
                    (f,),
                    (*f.chain, "ratio_to_kl"),
                    attained=True,
                )
            )
        return out

    def log_ratio_routes(self) -> list[Route]:
        out = [
            Route(
                "token_log_ratio",
                f.expr / self.T,
                (f,),
                (*f.chain, "token_log_ratio"),
                attained=True,
            )
            for f in self.premises.of("osc")
        ]
        out += [
            Route("log_ratio_clause", f.expr, (f,), f.chain, attained=True)
            for f in self.premises.of("ratio")
        ]
        return out

    # ---- quantities -------------------------------------------------------------------
    def token_tv(self) -> tuple[list[Route], list[Route]]:
        worst = self.tv_routes()
        return (worst, self.loose_tv_routes()) if worst else (self.etv_routes(), [])

    def sequence_tv(self) -> tuple[list[Route], list[Route]]:
        horizon = self.g.horizon or self.contract.policy.max_new_tokens
        L = self.const("L", self.premises.horizon(horizon))
        eps = self.best(self.tv_routes())
        kappa = self.best(self.kl_routes())
        ratio = self.best(self.log_ratio_routes())
        if eps is None and kappa is None and ratio is None:
            etv = self.best(self.etv_routes())
            if etv is None:
                return [], []
            return [
                combine(
                    "expected_sequence_tv",
                    sympy.Min(1, L * etv.expr),
                    etv,
                    lemma="expected_sequence_tv",
                    attained=False,  # first order only
                )
            ], []
        exprs = sequence_routes(eps and eps.expr, kappa and kappa.expr, ratio and ratio.expr, L)
        base = {
            "sequence_tv_coupling": eps,
            "sequence_tv_ratio": ratio,
            "sequence_tv_pinsker": kappa,
            "sequence_tv_bretagnolle_huber": kappa,
        }
        # only the coupling route is attained: at L = 1 (it is the token TV) and from a TV
        # clause (leak construction); the KL and ratio routes lie above the true supremum
        coupling_exact = self.consts["L"] == 1 or (eps is not None and eps.name == "tv_clause")
        return [
            combine(n, e, base[n], lemma=n, attained=coupling_exact and "coupling" in n)
            for n, e in exprs.items()
        ], []

    def reward_drift(self) -> tuple[list[Route], list[Route]]:
        if self.g.reward_range is None:
            raise NoLemma("reward_drift needs reward_range: [a, b]")
        a, b = (exact(x) for x in self.g.reward_range)
        span = self.const("reward_span", b - a)
        routes, loose = self.sequence_tv() if self.g.scope == "sequence" else self.token_tv()
        scale = [combine(r.name, span * r.expr, r, lemma="reward_drift_tv") for r in routes]
        return scale, [combine(r.name, span * r.expr, r, lemma="reward_drift_tv") for r in loose]

    def pg_bias(self) -> tuple[list[Route], list[Route]]:
        return pg_bias_routes(self)

    def clip_budget(self) -> tuple[list[Route], list[Route]]:
        if self.g.clip_epsilon is None:
            raise NoLemma("clip_budget needs clip_epsilon")
        eps_c = self.const("clip_epsilon", self.g.clip_epsilon)
        out = [
            Route(
                "clip_budget",
                clip_budget_drift(f.expr / self.T, eps_c),
                (f,),
                (*f.chain, "token_log_ratio", "clip_budget"),
                attained=True,
            )
            for f in self.premises.of("osc")
        ]
        out += [
            Route(
                "clip_budget",
                (sympy.exp(f.expr) - 1) / eps_c,
                (f,),
                (*f.chain, "clip_budget"),
                attained=True,
            )
            for f in self.premises.of("ratio")
        ]
        return out, []

    def token_kl(self) -> tuple[list[Route], list[Route]]:
        loose = [
            Route(
                "token_kl_hoeffding",
                (f.expr / self.T) ** 2 / 8,
                (f,),
                (*f.chain, "token_kl_hoeffding"),
            )
            for f in self.premises.of("osc")
        ]
        return self.kl_routes(), loose

    def token_log_ratio(self) -> tuple[list[Route], list[Route]]:
        return self.log_ratio_routes(), []


_PER_TOKEN_ONLY = {"token_log_ratio", "token_kl", "clip_budget"}


def _empty(g: Guarantee, reason: str, notes: tuple[str, ...] = ()) -> Derivation:
    return Derivation(
        guarantee=g.id,
        quantity=g.quantity,
        chain=(),
        premises=tuple(g.from_),
        expr=None,
        variables=(),
        constants=MappingProxyType({}),
        threshold=exact(g.max),
        value=float("nan"),
        route="",
        reason=reason,
        notes=notes,
    )


def _derive_one(contract: Contract, g: Guarantee) -> Derivation:
    notes = list(truncation_notes(contract))
    if not g.from_:
        return _empty(g, "the guarantee names no premise clauses in `from`", tuple(notes))
    blocked = truncation_blocks(contract, g)
    if blocked:
        return _empty(g, blocked, tuple(notes))
    T = sympy.Symbol("T", positive=True)
    prem = gather(contract, tuple(g.from_), T)
    notes += prem.unusable
    if prem.unknown:
        return _empty(g, f"`from` names unknown clause(s): {', '.join(prem.unknown)}", tuple(notes))
    if prem.contradiction:
        return _empty(g, prem.contradiction, tuple(notes))
    ctx = _Ctx(contract, g, prem)
    builder = getattr(ctx, g.quantity, None)
    if builder is None:
        return _empty(g, f"no lemma derives quantity {g.quantity!r}", tuple(notes))
    try:
        routes, loose = builder()
    except NoLemma as e:
        return _empty(g, str(e), tuple(notes))
    if not routes:
        kinds = sorted({f.kind for f in prem.facts})
        why = f"no lemma gives {g.quantity} from the premises {list(g.from_)}" + (
            f" (they give: {', '.join(kinds)})" if kinds else " (none of them is usable)"
        )
        if g.quantity in _PER_TOKEN_ONLY and "etv" in kinds:
            why += "; a statistical clause bounds only an expectation, and this quantity needs "
            why += "a per-token bound"
        return _empty(g, why, tuple(notes))
    scored = sorted(((ctx.value(r), i, r) for i, r in enumerate(routes)), key=lambda t: t[:2])
    value, _, win = scored[0]
    alternatives = tuple(Alternative(r.name, r.expr, v) for v, _, r in scored[1:]) + tuple(
        Alternative(r.name, r.expr, ctx.value(r)) for r in loose
    )
    for f in win.facts:
        notes += f.notes
    variables: list[Variable] = []
    for f in win.facts:
        variables += [v for v in f.variables if v not in variables]
    names = {s.name for s in win.expr.free_symbols}
    variables = [v for v in variables if v.name in names]
    var_names = {v.name for v in variables}
    constants = {
        k: v for k, v in ctx.values(win.facts).items() if k in names and k not in var_names
    }
    clause_ids = tuple(
        dict.fromkeys((*(c for f in win.facts for c in f.clauses), *prem.conditions))
    )
    notes += [
        f"{cid}: runtime conditions under which the premises are claimed" for cid in prem.conditions
    ]
    if "L" in constants and prem.max_length is not None:
        notes.append(
            f"horizon L = {constants['L']}: a generated sequence is never longer than the "
            f"runtime clauses' sequence_length bound {prem.max_length}, so L ≤ "
            f"min(policy.max_new_tokens = {contract.policy.max_new_tokens}, {prem.max_length})"
        )
    assumptions = tuple(g.assume)
    if g.quantity == "pg_bias" and "support_overlap" not in assumptions:
        assumptions = (*assumptions, "support_overlap")
        notes.append("support_overlap is assumed (automatic for an untruncated softmax)")
    if g.quantity == "pg_bias":
        where = "policy.max_new_tokens"
        if ctx.max_len < contract.policy.max_new_tokens:
            where = f"the runtime clauses' sequence_length bound, below {where}"
        notes += pg_bias_notes(g.estimator, ctx.max_len, where)
    lemmas = tuple(f"lemma:{name}" for name in win.chain)
    confidences = [f.confidence for f in win.facts if f.confidence is not None]
    extra: dict[str, object] = {"scope": "expectation" if win.expectation else "every_token"}
    # A bound above max refutes the guarantee only where the bound is the supremum of the
    # quantity (at the clauses' maxima; the bound is nondecreasing) and every clause named in
    # `from` is a fact on the route: a clause the route does not use (or cannot use) narrows
    # the kernel pairs the supremum ranges over, and a counterexample may violate it.
    unused = prem.left_out(g.from_, win.name, {c for f in win.facts for c in f.clauses})
    extra["attained"] = win.attained and not unused
    if unused:
        extra["unused"] = unused
    if confidences:
        extra["confidence"] = min(confidences)
        if len(confidences) > 1:
            notes.append(
                "several statistical premises: each holds at its own confidence; "
                "jointly at least 1 − Σ(1 − c_i) by the union bound"
            )
            extra["confidence"] = max(0.0, 1 - sum(1 - c for c in confidences))
    return Derivation(
        guarantee=g.id,
        quantity=g.quantity,
        chain=win.chain,
        premises=(*clause_ids, *assumptions, *lemmas),
        expr=win.expr,
        variables=tuple(variables),
        constants=MappingProxyType(constants),
        threshold=exact(g.max),
        value=value,
        alternatives=alternatives,
        route=win.name,
        latex=sympy.latex(win.expr),
        notes=tuple(dict.fromkeys(notes)),
        extra=MappingProxyType(extra),
    )


def derive(contract: Contract) -> tuple[Derivation, ...]:
    """One :class:`Derivation` per guarantee of ``contract``, in the same order."""
    return tuple(_derive_one(contract, g) for g in contract.guarantees)
