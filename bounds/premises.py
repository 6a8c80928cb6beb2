"""Premise facts: what each contract clause named in a guarantee's ``from`` gives the chain.

A numerical clause gives a per-token fact of one of three kinds — an oscillation bound
(``osc``, in logit units), a log-ratio bound (``ratio``) or a TV bound (``tv``). A statistical
clause gives an expectation fact (``etv``: a bound on the mean per-token TV), carried with its
confidence. Clauses that give nothing usable are listed with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import sympy

from bounds.derivation import Variable
from contracts import Contract, NumericalClause, StatisticalClause, exact

__all__ = ["Fact", "Premises", "gather"]


@dataclass(frozen=True)
class Fact:
    """One bound a clause provides, as an expression in variables and constants."""

    kind: str  # "osc" | "ratio" | "tv" | "etv"
    expr: sympy.Expr
    variables: tuple[Variable, ...]
    constants: tuple[tuple[str, Fraction], ...]
    clauses: tuple[str, ...]
    chain: tuple[str, ...]
    notes: tuple[str, ...] = ()
    confidence: float | None = None
    # what the clause measured: a statistical fact from a TV clause is TV-valued (a leak
    # construction attains capped-estimator bounds from it); one from a drift clause is not
    metric: str = ""
    statistic: str = ""
    # exceedance facts of a whole-vocabulary drift metric: (ρ, oscillation level in logit
    # units) — below the level every token's tilt range is known, above it nothing is
    tail: tuple[sympy.Expr, sympy.Expr] | None = None


@dataclass(frozen=True)
class Premises:
    facts: tuple[Fact, ...]
    unusable: tuple[str, ...]  # "<clause>: why it gives nothing here"
    unknown: tuple[str, ...]  # ids in `from` that name no clause at all
    conditions: tuple[str, ...] = ()  # runtime clauses: the conditions the premises hold under

    def of(self, kind: str) -> tuple[Fact, ...]:
        return tuple(f for f in self.facts if f.kind == kind)


def _var(prefix: str, clause_id: str, hi: float) -> Variable:
    return Variable(name=f"{prefix}_{clause_id}", lo=Fraction(0), hi=exact(hi), clause=clause_id)


def _sym(v: Variable) -> sympy.Symbol:
    return sympy.Symbol(v.name, nonnegative=True)


def _numerical(c: NumericalClause) -> Fact | str:
    if c.slice != "all":
        return f"{c.id}: holds only on slice {c.slice!r}, not on every token"
    if c.metric == "logit_drift":
        v = _var("delta", c.id, c.max)
        return Fact("osc", 2 * _sym(v), (v,), (), (c.id,), ("drift_to_oscillation",))
    if c.metric == "logit_oscillation":
        v = _var("osc", c.id, c.max)
        return Fact("osc", _sym(v), (v,), (), (c.id,), ())
    if c.metric == "log_ratio":
        v = _var("r", c.id, c.max)
        note = f"{c.id}: |log w| ≤ {c.max} is read as holding for every token of the support"
        return Fact("ratio", _sym(v), (v,), (), (c.id,), (), (note,))
    if c.metric == "tv":
        v = _var("eps", c.id, c.max)
        # TV ≤ 1 anyway: a clause max above 1 must not read as a TV (or PG bias) above 1, whose
        # excess over a guarantee's max would refute a guarantee that holds
        return Fact("tv", sympy.Min(_sym(v), 1), (v,), (), (c.id,), ())
    return f"{c.id}: metric {c.metric!r} gives no per-token bound"


def _per_token_tv(metric: str, level: sympy.Expr, T: sympy.Expr) -> tuple[sympy.Expr, tuple]:
    """The per-token TV bound implied by ``metric ≤ level``, and the lemmas it uses."""
    if metric == "logit_drift":
        return sympy.tanh(2 * level / (4 * T)), ("drift_to_oscillation", "token_tv_tanh")
    if metric == "logit_oscillation":
        return sympy.tanh(level / (4 * T)), ("token_tv_tanh",)
    if metric == "abs_log_ratio":
        # a statistical log-ratio clause is about the sampled token y ∼ π' (that is what a
        # rollout log records and how it is measured), not every token of the support, so
        # only (1 − w(y))₊ ≤ 1 − e^{−level} follows, and E(1 − w)₊ is the TV
        return 1 - sympy.exp(-level), ("sampled_ratio_to_tv",)
    return level, ()  # tv


def _osc_level(metric: str, level: sympy.Expr) -> sympy.Expr | None:
    """The oscillation (logit units) that ``metric ≤ level`` implies on every token, if any."""
    return {"logit_drift": 2 * level, "logit_oscillation": level}.get(metric)


_TV_METRICS = ("logit_drift", "logit_oscillation", "abs_log_ratio", "tv")
# the signed log ratio log w of the sampled token: an upper tail P(log w > level) ≤ ρ leaves
# the lower tail free, and that is where TV = E_{π'}(1 − w)₊ lives (w → 0 on a token π' keeps
# likely); a quantile or exceedance of it bounds no TV
_SIGNED_RATIO = (
    "{id}: a {statistic} of the signed log ratio log w bounds only its upper tail; the TV "
    "E(1 − w)₊ lies in the lower tail (log w → −∞ on a token the inference kernel samples), "
    "so it gives no bound; limit metric abs_log_ratio (|log w|) instead"
)


def _statistical(c: StatisticalClause, T: sympy.Expr) -> Fact | str:
    if "all" not in c.slices:
        return f"{c.id}: holds only on slices {list(c.slices)}, not on every token"
    conf = float(c.confidence)
    where = f"{c.id} (confidence {conf})"
    if c.metric == "log_ratio" and c.statistic in ("exceed_rate", "quantile"):
        return _SIGNED_RATIO.format(id=c.id, statistic=c.statistic)
    if c.metric in _TV_METRICS and c.statistic in ("exceed_rate", "quantile"):
        if c.statistic == "exceed_rate":
            if c.threshold is None:
                return f"{c.id}: exceed_rate needs a threshold"
            rv = _var("rho", c.id, c.max)
            rho, level_name = _sym(rv), f"thr_{c.id}"
            level = sympy.Symbol(level_name, nonnegative=True)
            variables, consts = (rv,), ((level_name, exact(c.threshold)),)
        else:
            if c.q is None:
                return f"{c.id}: quantile needs q"
            lv = _var("level", c.id, c.max)
            level = _sym(lv)
            rho_name = f"rho_{c.id}"
            rho = sympy.Symbol(rho_name, nonnegative=True)
            variables, consts = (lv,), ((rho_name, 1 - exact(c.q)),)
        if c.metric == "tv":
            level = sympy.Min(level, 1)  # TV ≤ 1 anyway; keeps (1 − ρ)·level + ρ monotone in ρ
        typical, chain = _per_token_tv(c.metric, level, T)
        expr = (1 - rho) * typical + rho
        note = (
            f"{where}: P({c.metric} > level) ≤ ρ bounds only the mean per-token TV, "
            "(1 − ρ)·(TV below the level) + ρ; the guarantee is read as an expectation"
        )
        osc = _osc_level(c.metric, level)
        return Fact(
            "etv",
            expr,
            variables,
            consts,
            (c.id,),
            (*chain, "expected_tv_exceedance"),
            (note,),
            conf,
            c.metric,
            c.statistic,
            None if osc is None else (rho, osc),
        )
    if c.metric == "tv" and c.statistic == "mean":
        v = _var("mean", c.id, c.max)
        note = f"{where}: bounds the mean per-token TV; the guarantee is read as an expectation"
        expr = sympy.Min(_sym(v), 1)
        return Fact("etv", expr, (v,), (), (c.id,), (), (note,), conf, c.metric, c.statistic)
    return f"{c.id}: a {c.statistic} of {c.metric} gives no bound on the chain's quantities"


def gather(contract: Contract, from_: tuple[str, ...], T: sympy.Expr) -> Premises:
    """The facts the clauses ``from_`` give, with the clauses that give none and why."""
    facts: list[Fact] = []
    unusable: list[str] = []
    unknown: list[str] = []
    conditions: list[str] = []
    numerical = {c.id: c for c in contract.numerical}
    statistical = {c.id: c for c in contract.statistical}
    runtime = {c.id for c in contract.runtime}
    for cid in from_:
        if cid in runtime:
            conditions.append(cid)
            continue
        if cid in numerical:
            got = _numerical(numerical[cid])
        elif cid in statistical:
            got = _statistical(statistical[cid], T)
        else:
            unknown.append(cid)
            continue
        if isinstance(got, str):
            unusable.append(got)
        else:
            facts.append(got)
    return Premises(tuple(facts), tuple(unusable), tuple(unknown), tuple(conditions))
