"""Premise facts: what each contract clause named in a guarantee's ``from`` gives the chain.

A numerical clause gives a per-token fact of one of three kinds — an oscillation bound
(``osc``, in logit units), a log-ratio bound (``ratio``) or a TV bound (``tv``). A statistical
clause gives an expectation fact (``etv``: a bound on the mean per-token TV), carried with its
confidence; a zero exceedance rate of the signed log ratio gives a per-token TV fact. A clause
on a slice that provably holds every token (``covers_every_token``) is read as one on ``all``.
A runtime clause is a condition the premises are claimed under; its ``sequence_length`` bounds
the horizon. Clauses that give nothing usable are listed with the reason; truncated sampling
(``truncation_blocks``) leaves the sampling law's quantities without any premise that bounds
them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

import sympy

from kernel_contracts.bounds.derivation import Variable
from kernel_contracts.contracts import (
    Contract,
    Guarantee,
    NumericalClause,
    Slice,
    StatisticalClause,
    exact,
)

__all__ = [
    "Fact",
    "Premises",
    "covers_every_token",
    "gather",
    "truncation_blocks",
    "truncation_notes",
]


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
    # the fact's bound is the supremum of its quantity (TV, or mean TV) over kernel pairs that
    # satisfy the clause (e.g. Pinsker's mean-KL form is not)
    attained: bool = True
    # a per-token TV fact that allows every pair of that TV, a leak of mass to a token the
    # inference kernel almost never samples included (the constructions that attain the capped
    # estimators' TV forms); a one-sided ratio bound w ≤ e^θ forbids that leak
    leak: bool = True


@dataclass(frozen=True)
class Premises:
    facts: tuple[Fact, ...]
    unusable: tuple[str, ...]  # "<clause>: why it gives nothing here"
    unknown: tuple[str, ...]  # ids in `from` that name no clause at all
    conditions: tuple[str, ...] = ()  # runtime clauses: the conditions the premises hold under
    # the longest sequence the runtime clauses allow (``sequence_length`` hi), if any bounds it
    max_length: int | None = None
    # the runtime clauses whose sequence-length ranges share no length (the premises are then
    # claimed under no condition that can occur), as one reason
    contradiction: str = ""

    def of(self, kind: str) -> tuple[Fact, ...]:
        return tuple(f for f in self.facts if f.kind == kind)

    def horizon(self, length: int) -> int:
        """``length``, or the runtime clauses' longest sequence where that is shorter."""
        return length if self.max_length is None else min(length, self.max_length)

    def left_out(self, from_, route: str, on_route: set[str]) -> tuple[str, ...]:
        """The clauses of ``from_`` (runtime conditions aside) that are no fact on ``route``,
        each with why: a counterexample to the route need not satisfy them."""
        why = {u.split(":", 1)[0]: u for u in self.unusable}
        return tuple(
            why.get(cid, f"{cid}: not used by route {route!r}")
            for cid in dict.fromkeys(from_)
            if cid not in self.conditions and cid not in on_route
        )


def _var(prefix: str, clause_id: str, hi: float) -> Variable:
    return Variable(name=f"{prefix}_{clause_id}", lo=Fraction(0), hi=exact(hi), clause=clause_id)


def _sym(v: Variable) -> sympy.Symbol:
    return sympy.Symbol(v.name, nonnegative=True)


def covers_every_token(sl: Slice) -> bool:
    """Whether slice ``sl`` provably holds every token: each of its (closed) ranges contains the
    whole range its quantity can take — token_prob [0, 1], position, entropy and margin
    [0, ∞) — and it has no prompt pattern (a pattern is not decided here)."""
    if sl.prompt is not None:
        return False
    for name, top in (("token_prob", 1), ("position", None), ("entropy", None), ("margin", None)):
        rng = getattr(sl, name)
        if rng is None:
            continue
        lo, hi = rng
        if lo is not None and lo > 0:
            return False
        if hi is not None and (top is None or hi < top):
            return False
    return True


def _every_token(contract: Contract, name: str) -> bool:
    if name == "all":
        return True
    try:
        return covers_every_token(contract.slice(name))
    except KeyError:  # a slice the contract does not define holds no token we know of
        return False


def _coverage_note(cid: str, names) -> tuple[str, ...]:
    named = [n for n in names if n != "all"]
    if not named:
        return ()
    return (f"{cid}: slice {named[0]!r} holds every token (its ranges cover every value), so the "
            "clause is read as one on all",)  # fmt: skip


def _numerical(contract: Contract, c: NumericalClause) -> Fact | str:
    if not _every_token(contract, c.slice):
        return f"{c.id}: holds only on slice {c.slice!r}, not on every token"
    fact = _numerical_fact(c)
    if isinstance(fact, Fact) and c.slice != "all":
        fact = replace(fact, notes=(*fact.notes, *_coverage_note(c.id, (c.slice,))))
    return fact


def _numerical_fact(c: NumericalClause) -> Fact | str:
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


def _signed_ratio_zero(c: StatisticalClause, where: str, conf: float) -> Fact:
    """P(log w > θ) = 0: w ≤ e^θ on every token, so TV ≤ 1 − e^{−θ} (``signed_ratio_to_tv``)."""
    name = f"thr_{c.id}"
    theta = sympy.Symbol(name, nonnegative=True)
    note = (
        f"{where}: P(log w > θ) ≤ 0 with θ = {c.threshold}: w ≤ e^θ on every token the "
        "inference kernel can sample (its softmax has full support), so TV ≤ 1 − e^{−θ} on "
        "every token (θ = 0: the two laws are equal)"
    )
    consts = ((name, exact(c.threshold)),)
    chain = ("signed_ratio_to_tv",)
    expr = 1 - sympy.exp(-theta)
    return Fact("tv", expr, (), consts, (c.id,), chain, (note,), conf, c.metric, c.statistic,
                leak=False)  # fmt: skip


def _mean_kl(c: StatisticalClause, where: str, conf: float) -> Fact:
    """E[kl] ≤ m: E[TV] ≤ min(1, √(m/2)) (``mean_kl_to_tv``: Pinsker, then Jensen)."""
    v = _var("mean", c.id, c.max)
    note = (
        f"{where}: bounds the mean of kl = max(KL(π‖π'), KL(π'‖π)); Pinsker's inequality "
        "(either direction) and Jensen's (√ is concave) give E[TV] ≤ √(E[kl]/2); the guarantee "
        "is read as an expectation"
    )
    expr = sympy.Min(sympy.sqrt(_sym(v) / 2), 1)
    return Fact("etv", expr, (v,), (), (c.id,), ("mean_kl_to_tv",), (note,), conf, c.metric,
                c.statistic, attained=False)  # fmt: skip


def _statistical(contract: Contract, c: StatisticalClause, T: sympy.Expr) -> Fact | str:
    if not any(_every_token(contract, n) for n in c.slices):
        return f"{c.id}: holds only on slices {list(c.slices)}, not on every token"
    fact = _statistical_fact(c, T)
    if isinstance(fact, Fact) and "all" not in c.slices:
        every = [n for n in c.slices if _every_token(contract, n)]
        fact = replace(fact, notes=(*fact.notes, *_coverage_note(c.id, every)))
    return fact


def _statistical_fact(c: StatisticalClause, T: sympy.Expr) -> Fact | str:
    conf = float(c.confidence)
    where = f"{c.id} (confidence {conf})"
    signed = c.metric == "log_ratio" and c.statistic == "exceed_rate"
    if signed and c.max == 0 and c.threshold is not None:
        return _signed_ratio_zero(c, where, conf)
    if c.metric == "kl" and c.statistic == "mean":
        return _mean_kl(c, where, conf)
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


def _lengths(contract: Contract, ids: list[str]) -> tuple[int | None, str]:
    """The longest sequence the runtime clauses ``ids`` allow together, and a reason if their
    sequence-length ranges share no length."""
    ranges = [(c.id, c.sequence_length) for c in contract.runtime
              if c.id in ids and c.sequence_length is not None]  # fmt: skip
    if not ranges:
        return None, ""
    lo, hi = max(r[0] for _, r in ranges), min(r[1] for _, r in ranges)
    if lo > hi:
        shown = ", ".join(f"{cid}: sequence_length {list(r)}" for cid, r in ranges)
        return hi, (f"the runtime clauses allow no common sequence length ({shown}): the "
                    "premises are claimed under no condition that can hold")  # fmt: skip
    return hi, ""


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
            got = _numerical(contract, numerical[cid])
        elif cid in statistical:
            got = _statistical(contract, statistical[cid], T)
        else:
            unknown.append(cid)
            continue
        if isinstance(got, str):
            unusable.append(got)
        else:
            facts.append(got)
    max_length, contradiction = _lengths(contract, conditions)
    return Premises(tuple(facts), tuple(unusable), tuple(unknown), tuple(conditions),
                    max_length, contradiction)  # fmt: skip


def truncation_notes(contract: Contract) -> tuple[str, ...]:
    p = contract.policy
    if not p.truncated:
        return ()
    notes = [
        f"sampling is truncated (top_p={p.top_p}, top_k={p.top_k}): a log-ratio or clip "
        "bound is on the full-vocabulary log-probs; the truncated sampling law itself changes "
        "its kept support at near-ties, which no logit-level bound controls"
    ]
    if p.logprobs == "processed":
        notes.append(
            "logprobs are processed (renormalised over the kept support): measured log ratios "
            "carry the support shift log(S_inf/S_train) of the kept masses on every token; it "
            "is reported separately and not folded into the kernel bound"
        )
    return tuple(notes)


# quantities of the sampling law itself: truncation (top-k, top-p) makes it discontinuous in
# the logits, so no logit-level premise bounds them (greedy decoding: TV = 1 at a near-tie)
_OF_THE_SAMPLING_LAW = {"token_tv", "token_kl", "sequence_tv", "reward_drift", "pg_bias"}
# quantities of the logged log-probs: bounded when those are the full-vocabulary ones
_OF_THE_LOGPROBS = {"token_log_ratio", "clip_budget"}


def truncation_blocks(contract: Contract, g: Guarantee) -> str | None:
    """Why truncated sampling leaves ``g`` without a bound, or ``None``."""
    p = contract.policy
    if not p.truncated:
        return None
    how = "greedy decoding (top_k = 1)" if p.top_k == 1 else f"top_p={p.top_p}, top_k={p.top_k}"
    if g.quantity in _OF_THE_SAMPLING_LAW:
        return (
            f"sampling is truncated ({how}): the kept support changes where two logits nearly "
            "tie, which no logit-level premise controls (two tokens whose logits differ by less "
            "than the drift swap sides and the truncated laws differ by TV up to 1), so "
            f"{g.quantity} has no bound"
        )
    if g.quantity in _OF_THE_LOGPROBS and p.logprobs == "processed":
        return (
            f"sampling is truncated ({how}) and the logged log-probs are processed "
            "(renormalised over the kept support): a token kept by one kernel and cut by the "
            f"other has log ratio ±∞, so {g.quantity} has no bound"
        )
    return None
