"""Routes for ``pg_bias``: every estimator's bias bound from the premises a guarantee names.

Token-level estimators get a route per per-token fact (oscillation → the tilt form, log ratio →
the ratio form, a TV clause → the TV form); only without per-token facts do expectation
premises come in (an exceedance split, or a mean-TV form). Sequence-level estimators (``seq_is``,
``seq_tis``) scale by L = ``policy.max_new_tokens`` (less where a runtime clause in ``from``
bounds the sequence length). Forms and their suprema are in ``bounds.pg.links`` (plain,
TIS c > 1, MIS) and ``bounds.pg.closed_forms`` (the rest); a route is marked attained where its
form is the supremum at the clauses' maxima.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction

import mpmath
import sympy

from kernel_contracts.bounds._evaluate import evaluate
from kernel_contracts.bounds.pg.closed_forms import (
    ETA,
    band_drift,
    band_ratio,
    band_tv,
    in_sliver,
    k3_band,
    k_value,
    kl_anchor,
    outlier_step,
    seq_mask_azuma,
    seq_mask_ratio,
    seq_mask_tv,
    seq_tis_kl,
    seq_tis_ratio,
    seq_tis_tv,
    step_above,
    tis_small_cap_drift,
    tis_small_cap_ratio,
    tis_small_cap_tv,
)
from kernel_contracts.bounds.pg.gspo import gspo_drift, gspo_ratio
from kernel_contracts.bounds.pg.links import mis_drift, mis_ratio, tis_drift, tis_ratio
from kernel_contracts.bounds.pg.sapo import sapo_ratio, sapo_tv
from kernel_contracts.bounds.pg.tis_clip import clip_drift, clip_ratio, clip_tv
from kernel_contracts.bounds.pg.tis_norm import norm_form
from kernel_contracts.bounds.pg.vespo import (
    CLAMP_FREE,
    LAMBDA_MIN,
    peak_above,
    vespo_cap,
    vespo_ratio,
)
from kernel_contracts.bounds.premises import Fact
from kernel_contracts.bounds.route import NoLemma, Route, combine
from kernel_contracts.contracts import exact
from kernel_contracts.contracts.rejection import parse_rejection

__all__ = ["canonical", "pg_bias_notes", "pg_bias_routes"]

Form = Callable[[sympy.Expr], sympy.Expr]
Exact = Callable[[float], bool]  # whether the form is the supremum at this premise value
_ALWAYS: Exact = lambda _: True  # noqa: E731
_NEVER: Exact = lambda _: False  # noqa: E731


def pg_bias_routes(ctx) -> tuple[list[Route], list[Route]]:
    """(routes, looser alternatives) of ``ctx.g``, a pg_bias guarantee (``ctx``: derive's)."""
    g = ctx.g
    if g.score_norm is None or g.advantage is None:
        raise NoLemma("pg_bias needs score_norm (G) and advantage (A_max)")
    GA = ctx.const("G", g.score_norm) * ctx.const("A", g.advantage)
    if g.estimator == "plain":
        worst = ctx.tv_routes() or ctx.etv_routes()
        loose = ctx.loose_tv_routes() if ctx.tv_routes() else []
        return [combine(r.name, 2 * GA * r.expr, r, lemma="pg_bias_plain") for r in worst], [
            combine(r.name, 2 * GA * r.expr, r, lemma="pg_bias_plain") for r in loose
        ]
    if g.estimator == "kl_reject":
        return _kl_reject(ctx, GA), []
    builder = {
        "tis": _tis,
        "mis": _mis,
        "ppo_clip": _ppo_clip,
        "icepop": _icepop,
        "geo_mask": _geo_mask,
        "tv_mask": _tv_mask,
        "kl_mask": _kl_mask,
        "seq_is": _seq_is,
        "seq_tis": _seq_tis,
        "dppo_tv": lambda ctx, GA: _tv_mask(ctx, GA, "pg_bias_dppo_tv"),
        "dppo_kl": lambda ctx, GA: _kl_mask(ctx, GA, "pg_bias_dppo_kl"),
        "dual_clip": _dual_clip,
        "seq_mask": _seq_mask,
        "seq_outlier": _seq_outlier,
        "tis_mask": _tis_mask,
        "opsm": _opsm,
        "tis_clip": _tis_clip,
        "tis_norm": _tis_norm,
        "gspo": _gspo,
        "cispo": lambda ctx, GA: _tis_clip(ctx, GA, "pg_bias_cispo"),
        "sapo": _sapo,
        "vespo": _vespo,
        "clip_cov": lambda ctx, GA: _constant(ctx, GA, "pg_bias_clip_cov"),
        "kl_cov": _kl_cov,
    }[g.estimator]
    return [replace(r, expr=canonical(r.expr)) for r in builder(ctx, GA)], []


def pg_bias_notes(estimator: str, L: int, where: str = "policy.max_new_tokens") -> tuple[str, ...]:
    """What a pg_bias derivation assumes beyond the per-token G and A, for the report; ``where``
    says where the horizon ``L`` comes from."""
    if estimator in ("seq_is", "seq_tis"):
        return (
            f"{estimator} weights whole sequences: the bias is per sequence, with the assumed "
            f"per-sequence score norm ‖Σ_t ∇log π(y_t|y_<t)‖ ≤ L·G, L = {L} ({where})",
        )
    if estimator in ("geo_mask", "seq_outlier", "opsm"):
        return (
            f"{estimator}: per position, for sequences of at most L = {L} tokens ({where}); the "
            "worst position is the last of a full sequence",
        )
    if estimator == "gspo":
        return (
            "gspo: per position against the token's w; its weight s, the geometric mean of w "
            "over the sequence, reads every token of it, and the bound holds for any length",
        )
    if estimator == "vespo":
        return (
            f"vespo weights whole sequences by φ(W): the bias is per sequence, with the assumed "
            f"per-sequence score norm ‖Σ_t ∇log π(y_t|y_<t)‖ ≤ L·G, L = {L} ({where})",
        )
    if estimator == "clip_cov":
        return (
            "clip_cov: per position, for every batch and every draw of its covariance picks; "
            "the draw can drop any token PPO keeps whatever the mismatch, so the bound is G·A "
            "at π = π' too",
        )
    if estimator == "kl_cov":
        return (
            "kl_cov: per position, for every batch; the bias is the penalty's, κ·sign(log w)·g "
            "on the picked tokens, so the bound is G·κ with no factor A",
        )
    if estimator == "seq_mask":
        return (
            f"seq_mask weights whole sequences by W: the bias is per sequence, with the assumed "
            f"per-sequence score norm ‖Σ_t ∇log π(y_t|y_<t)‖ ≤ L·G, L = {L} ({where})",
        )
    return ()


def canonical(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` rebuilt from its arguments until that changes nothing: the form a report's
    ``srepr`` reads back to (a Max nested in a Max is flattened only when rebuilt)."""
    for _ in range(4):
        again = _rebuild(expr)
        if again == expr:
            break
        expr = again
    return expr


def _rebuild(expr: sympy.Expr) -> sympy.Expr:
    if not expr.args or isinstance(expr, sympy.Symbol | sympy.Number):
        return expr
    return expr.func(*(_rebuild(a) for a in expr.args))


def _need(ctx, field: str, what: str):
    value = getattr(ctx.g, field)
    if value is None:
        raise NoLemma(f"pg_bias with estimator {ctx.g.estimator!r} needs {what}")
    return value


def _at_max(ctx, expr: sympy.Expr, facts: tuple[Fact, ...]) -> float:
    return evaluate(expr, ctx.values(facts))


def _per_token(
    ctx,
    GA,
    name: str,
    tilt: Form | None,
    ratio: Form | None,
    tv: Form | None,
    exact_s: Exact = _ALWAYS,
    exact_r: Exact = _ALWAYS,
) -> list[Route]:
    """Routes from oscillation, log-ratio and TV facts through the estimator's three forms."""
    out = []
    for f in ctx.premises.of("osc") if tilt else ():
        s = f.expr / ctx.T
        ok = exact_s(_at_max(ctx, s, (f,)))
        out.append(Route(name, GA * tilt(s), (f,), (*f.chain, name), attained=ok))
    for f in ctx.premises.of("ratio") if ratio else ():
        ok = exact_r(_at_max(ctx, f.expr, (f,)))
        out.append(Route(f"{name}_ratio", GA * ratio(f.expr), (f,), (*f.chain, f"{name}_ratio"),
                         attained=ok))  # fmt: skip
    for f in ctx.premises.of("tv") if tv else ():
        # the TV forms are attained by leak constructions, which a one-sided ratio fact forbids;
        # at TV 0 the laws are equal and nothing is dropped (a constant form is not attained)
        ok = f.attained and f.leak and _at_max(ctx, f.expr, (f,)) > 0
        out.append(
            Route(f"{name}_tv", GA * tv(f.expr), (f,), (*f.chain, f"{name}_tv"), attained=ok)
        )
    return out


def _tails(ctx):
    """(fact, ρ, s) for every tail fact P(drift > level) ≤ ρ, s = the level's oscillation / T."""
    for f in ctx.premises.of("etv"):
        if f.tail is not None:
            rho, osc = f.tail
            yield f, rho, osc / ctx.T


def _exceedance(
    ctx,
    GA,
    lemma: str,
    tilt: Form,
    exact_s: Exact = _ALWAYS,
    geo_L=None,
    split: str = "pg_bias_geo_mask_exceedance",
) -> list:
    """E[bias] from P(drift > level) ≤ ρ: the per-position form at the level, 1 above it
    (``geo_L``: one exceeding token can drop its whole sequence, ``split`` names that step)."""
    out = []
    for f, rho, s in _tails(ctx):
        share = rho if geo_L is None else sympy.Min(1, geo_L * rho)
        split = "pg_bias_correction_exceedance" if geo_L is None else split
        chain = (*f.chain[: f.chain.index("token_tv_tanh")], lemma, split)
        expr = GA * ((1 - share) * tilt(s) + share)
        ok = exact_s(_at_max(ctx, s, (f,))) and geo_L is None
        out.append(Route(split, expr, (f,), chain, expectation=True, attained=ok))
    return out


def _mean_tv(ctx, GA, name: str, form: Form, jensen_exact: bool) -> list[Route]:
    """E[bias] from a mean-TV fact through a concave form (Jensen); exact where the fact is a
    measured mean TV and ``jensen_exact`` (every position can sit at the mean)."""
    out = []
    for r in ctx.etv_routes():
        (f,) = r.facts
        ok = jensen_exact and f.metric == "tv" and f.statistic == "mean"
        out.append(
            combine(f"{name}_mean_tv", GA * form(r.expr), r, lemma=f"{name}_tv", attained=ok)
        )
    return out


# ---- TIS and MIS -----------------------------------------------------------------------------
def _tis(ctx, GA) -> list[Route]:
    cap = exact(_need(ctx, "cap", "cap: c ≥ 0"))
    if cap > 1:
        return _capped(ctx, GA, ctx.const("c", cap), tis=True)
    if cap == 0:
        return _constant(ctx, GA, "pg_bias_tis_zero_cap")
    c = ctx.const("c", cap)
    if cap == 1:  # the c ≤ 1 forms at c = 1: tanh(s/4), tanh(r/2), ε
        tilt: Form = lambda s: sympy.tanh(s / 4)  # noqa: E731
    else:
        tilt = lambda s: tis_small_cap_drift(s, c)  # noqa: E731
    name = "pg_bias_tis_small_cap"
    out = _per_token(ctx, GA, name, tilt, lambda r: tis_small_cap_ratio(r, c),
                     lambda e: tis_small_cap_tv(e, c))  # fmt: skip
    if not out:
        out = _exceedance(ctx, GA, name, tilt) + _mean_tv(
            ctx, GA, name, lambda e: tis_small_cap_tv(e, c), jensen_exact=True
        )
    return out


def _mis(ctx, GA) -> list[Route]:
    cap = _need(ctx, "cap", "cap: c > 1")
    if exact(cap) <= 1:
        raise NoLemma(f"pg_bias with estimator 'mis' needs cap: c > 1, got {cap}")
    return _capped(ctx, GA, ctx.const("c", cap), tis=False)


def _capped(ctx, GA, c, tis: bool) -> list[Route]:
    """TIS (c > 1) and MIS: tilt and ratio forms are exact suprema, plus a TV clause's route."""
    out = []
    for f in ctx.premises.of("osc"):
        s = f.expr / ctx.T
        form, lemma = (tis_drift(s, c), "pg_bias_tis") if tis else (mis_drift(s, c), "pg_bias_mis")
        out.append(Route(lemma, GA * form, (f,), (*f.chain, lemma), attained=True))
    for f in ctx.premises.of("ratio"):
        form = tis_ratio(f.expr, c) if tis else mis_ratio(f.expr, c)
        lemma = "pg_bias_tis_ratio" if tis else "pg_bias_mis_ratio"
        # the MIS ratio form is the supremum only where e^r > c (below, the supremum is 0)
        exact_here = tis or evaluate(sympy.exp(f.expr) / c, ctx.values((f,))) > 1 + 1e-9
        out.append(Route(lemma, GA * form, (f,), (*f.chain, lemma), attained=exact_here))
    # the osc and ratio forms above are exact suprema; a TV clause adds its own route, and
    # only without any per-token fact do expectation premises come in
    tv_like = [r for r in ctx.tv_routes() if r.name == "tv_clause"]
    if not out and not tv_like:
        tv_like = ctx.etv_routes()
        out += _capped_exceedance(ctx, GA, c, tis)
    for r in tv_like:  # (w − c)₊ ≤ (w − 1)₊; π(w > c) ≤ min(1, TV·c/(c − 1)) (Jensen: concave)
        form = r.expr if tis else sympy.Min(1, r.expr * c / (c - 1))
        # the supremum of the capped bias over kernel pairs whose TV is bounded (a leak to
        # a token π' almost never samples); from a drift clause the TV is not the premise,
        # and the capped bias below the drift level is far below it: not attained there
        (f,) = r.facts
        tv_valued = f.kind == "tv" or (
            f.metric == "tv" and (tis or f.statistic == "mean")  # MIS: Jensen is exact
        )  # only where every token sits at the same TV
        out.append(
            combine(
                "pg_bias_tv_capped", GA * form, r, lemma="pg_bias_tv_capped", attained=tv_valued
            )
        )
    return out


def _capped_exceedance(ctx, GA, c, tis: bool) -> list[Route]:
    """TIS/MIS from P(drift > level) ≤ ρ: the capped form below the level, 1 above it."""
    out = []
    for f, rho, s in _tails(ctx):
        form, lemma = (
            (tis_drift(s, c), "pg_bias_tis_exceedance")
            if tis
            else (mis_drift(s, c), "pg_bias_mis_exceedance")
        )
        chain = (*f.chain[: f.chain.index("token_tv_tanh")], lemma)
        expr = GA * ((1 - rho) * form + rho)
        out.append(Route(lemma, expr, (f,), chain, expectation=True, attained=True))
    return out


def _constant(ctx, expr: sympy.Expr, lemma: str) -> list[Route]:
    """A bound that no premise changes (c = 0, seq_is): one route on every fact (it is the
    supremum at π = π', which satisfies every premise)."""
    facts = ctx.premises.facts
    return [Route(lemma, expr, facts, (lemma,), attained=True)] if facts else []


# ---- ratio bands: icepop, ppo_clip, geo_mask ---------------------------------------------------
def _band_consts(ctx, lo_v, hi_v):
    lo = 0 if lo_v == 0 else ctx.const("lo", lo_v)
    return lo, ctx.const("hi", hi_v), Fraction(lo_v), Fraction(hi_v)


def _band_exact(lo_v, hi_v) -> tuple[Exact, Exact]:
    """Where the band's tilt and ratio forms are the suprema: off the η-slivers of their jumps
    (``hi_v = None``: no upper end, so no upper jump; ``lo_v`` may be an mpmath number)."""

    def tilt_ok(s: float) -> bool:
        return lo_v == 0 or hi_v is None or not in_sliver(mpmath.exp(s), hi_v / lo_v)

    def ratio_ok(r: float) -> bool:
        x = mpmath.exp(r)
        upper_ok = hi_v is None or not in_sliver(x, hi_v)
        return upper_ok and (lo_v == 0 or not in_sliver(x, 1 / lo_v))

    return tilt_ok, ratio_ok


def _band(ctx, GA, name: str, lo_v, hi_v, L=None, ends=None, split=None) -> list[Route]:
    """``ends``: the band's ends as expressions (ppo_clip's 1 ∓ ε), else constants lo, hi;
    ``split``: the exceedance step's lemma where a sequence's other tokens move the band."""
    lo, hi, lo_f, hi_f = _band_consts(ctx, lo_v, hi_v) if ends is None else (*ends, lo_v, hi_v)
    tilt_ok, ratio_ok = _band_exact(lo_f, hi_f)
    if L is None:  # one token decides
        tilt: Form = lambda s: band_drift(s, lo, hi)  # noqa: E731
        ratio: Form = lambda r: band_ratio(r, lo, hi)  # noqa: E731
        tv: Form = lambda e: band_tv(e, lo, hi)  # noqa: E731
    else:  # geo_mask: the sequence's other tokens move the band; a TV premise leaves them free

        def idle(s: sympy.Expr) -> bool:  # the upper side is 0 on the whole premise box
            if hi is None:
                return True
            return _at_max(ctx, L * (sympy.log(hi) - s), ctx.premises.facts) >= 0

        tilt = lambda s: band_drift(s, lo, hi, L, idle(s))  # noqa: E731
        ratio = lambda r: band_ratio(r, lo, hi, L)  # noqa: E731
        tv = lambda e: sympy.Integer(1)  # noqa: E731
    out = _per_token(ctx, GA, name, tilt, ratio, tv, tilt_ok, ratio_ok)
    if not out:
        if L is None:
            out = _exceedance(ctx, GA, name, tilt, tilt_ok)
            out += _mean_tv(ctx, GA, name, tv, jensen_exact=True)
        else:
            split = split or "pg_bias_geo_mask_exceedance"
            out = _exceedance(ctx, GA, name, tilt, tilt_ok, geo_L=L, split=split)
    return out


def _icepop(ctx, GA) -> list[Route]:
    lo_v, hi_v = _need(ctx, "band", "band: [lo, hi]")
    return _band(ctx, GA, "pg_bias_icepop", lo_v, hi_v)


def _ppo_clip(ctx, GA) -> list[Route]:
    e = exact(_need(ctx, "clip_epsilon", "clip_epsilon"))
    # the band 1 ∓ ε in the symbol ε: hi − 1 stays ε (50 digits round 1 + 5e-324 to 1)
    eps = ctx.const("clip_epsilon", e)
    return _band(ctx, GA, "pg_bias_ppo_clip", 1 - e, 1 + e, ends=(1 - eps, 1 + eps))


def _geo_mask(ctx, GA) -> list[Route]:
    lo_v, hi_v = _need(ctx, "band", "band: [lo, hi]")
    L = ctx.const("L", ctx.max_len)
    if ctx.consts["L"] == 1:  # a one-token sequence: the band of that token
        return _band(ctx, GA, "pg_bias_geo_mask", lo_v, hi_v)
    return _band(ctx, GA, "pg_bias_geo_mask", lo_v, hi_v, L)


# ---- position masks ----------------------------------------------------------------------
def _mask(ctx, GA, name: str, routes: list[Route], tau) -> list[Route]:
    tau_v = ctx.consts["tau"]
    out = []
    for r in routes:
        ok = r.attained and not in_sliver(ctx.value(r), tau_v)
        out.append(combine(f"{name}_{r.name}", GA * step_above(r.expr, tau), r, lemma=name,
                           attained=ok))  # fmt: skip
    return out


def _tv_mask(ctx, GA, name: str = "pg_bias_tv_mask") -> list[Route]:
    """tv_mask, and dppo_tv (its binary TV of the sampled token is at most the TV, equal on
    two tokens, and the advantage's sign is free per token: the same forms)."""
    tau = ctx.const("tau", _need(ctx, "threshold", "threshold: τ"))
    out = _mask(ctx, GA, name, ctx.tv_routes(), tau)
    if not out:
        tilt: Form = lambda s: step_above(sympy.tanh(s / 4), tau)  # noqa: E731
        ok = lambda s: not in_sliver(mpmath.tanh(mpmath.mpf(s) / 4), ctx.consts["tau"])  # noqa: E731
        out = _exceedance(ctx, GA, name, tilt, ok)
        for r in ctx.etv_routes():  # Markov: P(TV > τ) ≤ E[TV]/τ
            (f,) = r.facts
            exact_here = f.metric == "tv" and f.statistic == "mean"
            out.append(combine("pg_bias_tv_mask_mean", GA * sympy.Min(1, r.expr / tau), r,
                               lemma="pg_bias_tv_mask_mean", attained=exact_here))  # fmt: skip
    return out


def _kl_mask(ctx, GA, name: str = "pg_bias_kl_mask") -> list[Route]:
    """kl_mask, and dppo_kl (binary KL ≤ KL by data processing, equal on two tokens)."""
    from kernel_contracts.bounds.token.lemmas import kl_tilt_sup

    tau = ctx.const("tau", _need(ctx, "threshold", "threshold: τ"))
    out = _mask(ctx, GA, name, ctx.kl_routes(), tau)
    if not out:
        tilt: Form = lambda s: step_above(kl_tilt_sup(s), tau)  # noqa: E731

        def ok(s: float) -> bool:  # the KL form is the supremum from s = 1/8 on
            k = evaluate(kl_tilt_sup(sympy.Symbol("s")), {"s": s})
            return s >= 0.125 and not in_sliver(k, ctx.consts["tau"])

        out = _exceedance(ctx, GA, name, tilt, ok)
    return out


# ---- sequence-level estimators -------------------------------------------------------------
def _seq_is(ctx, GA) -> list[Route]:
    return _constant(ctx, sympy.Integer(0), "pg_bias_seq_is")


def _seq_tis(ctx, GA) -> list[Route]:
    cap = exact(_need(ctx, "cap", "cap: c ≥ 0"))
    if ctx.max_len == 1:  # one token: seq_tis is tis
        return _tis(ctx, GA)
    L = ctx.const("L", ctx.max_len)
    LGA = L * GA
    if cap == 0:
        return _constant(ctx, LGA, "pg_bias_seq_tis_small_cap")
    c, small = ctx.const("c", cap), cap <= 1
    lemma = "pg_bias_seq_tis_small_cap" if small else "pg_bias_seq_tis"
    out = []
    for r in ctx.log_ratio_routes():  # |log W| ≤ L·r
        out.append(combine("seq_tis_ratio", LGA * seq_tis_ratio(L * r.expr, c, small), r,
                           lemma=lemma, attained=False))  # fmt: skip
    if not small:
        anchor = sympy.Rational(kl_anchor(cap))
        for r in ctx.kl_routes():  # KL_L ≤ L·κ (chain rule)
            out.append(combine("seq_tis_kl", LGA * seq_tis_kl(L * r.expr, anchor), r, lemma=lemma,
                               attained=False))  # fmt: skip
    seq, _ = ctx.sequence_tv()
    for r in seq:
        # from a TV clause the coupling route is the supremum (leak construction)
        ok = r.attained and r.name == "sequence_tv_coupling"
        out.append(combine(f"seq_tis_{r.name}", LGA * seq_tis_tv(r.expr, c, small), r,
                           lemma="pg_bias_seq_tis_tv" if ok else lemma, attained=ok))  # fmt: skip
    return out


# ---- the peers' corrections beyond the ten -----------------------------------------------
def _dual_clip(ctx, GA) -> list[Route]:
    """Dual clip drops A < 0 with w > c besides PPO's clipped tokens; the sign of A is free per
    token, so the worst case drops w ∉ [1 − ε, min(1 + ε, c)]: a band."""
    e = exact(_need(ctx, "clip_epsilon", "clip_epsilon"))
    cap = exact(_need(ctx, "cap", "cap: the dual-clip ratio c > 1"))
    eps = ctx.const("clip_epsilon", e)
    hi_v, hi = (1 + e, 1 + eps) if cap >= 1 + e else (cap, ctx.const("c", cap))
    return _band(ctx, GA, "pg_bias_dual_clip", 1 - e, hi_v, ends=(1 - eps, hi))


def _opsm(ctx, GA) -> list[Route]:
    """The off-policy sequence mask drops a sequence with A < 0 whose mean log(π'/π) exceeds δ:
    with A < 0 on every token, the geometric-mean band [e^{−δ}, ∞)."""
    delta = exact(_need(ctx, "threshold", "threshold: δ"))
    lo = sympy.exp(-ctx.const("tau", delta))
    lo_v = mpmath.exp(-mpmath.mpf(delta.numerator) / delta.denominator)
    if ctx.max_len == 1:
        return _band(ctx, GA, "pg_bias_opsm", lo_v, None, ends=(lo, None))
    L = ctx.const("L", ctx.max_len)
    return _band(ctx, GA, "pg_bias_opsm", lo_v, None, L, ends=(lo, None),
                 split="pg_bias_sequence_mask_exceedance")  # fmt: skip


def _tis_forms(ctx, cap: Fraction):
    """(tilt, ratio, TV) forms of TIS's E_π'(w − c)₊ at cap c (as ``_tis`` and ``_capped``)."""
    if cap == 0:
        one: Form = lambda _: sympy.Integer(1)  # noqa: E731
        return one, one, one
    c = ctx.const("c", cap)
    if cap > 1:
        return (lambda s: tis_drift(s, c)), (lambda r: tis_ratio(r, c)), (lambda e: e)
    if cap == 1:
        return (lambda s: sympy.tanh(s / 4)), (lambda r: tis_small_cap_ratio(r, c)), (lambda e: e)
    return (
        lambda s: tis_small_cap_drift(s, c),
        lambda r: tis_small_cap_ratio(r, c),
        lambda e: tis_small_cap_tv(e, c),
    )


def _tis_mask(ctx, GA) -> list[Route]:
    """ω = min(w, c)·1[lo ≤ w ≤ hi]. With c ≥ hi the cap never bites on a kept token and the
    estimator is the band (exact forms); below hi the discrepancy
    φ(w) = w·1[w ∉ band] + (w − c)₊·1[w ∈ band] ≤ w·1[w ∉ band] + (w − c)₊, so the sum of the
    band's and TIS's suprema, at most 1 (φ ≤ w): a bound, not marked attained."""
    cap = exact(_need(ctx, "cap", "cap: c ≥ 0"))
    lo_v, hi_v = _need(ctx, "band", "band: [lo, hi]")
    if cap >= exact(hi_v):
        return _band(ctx, GA, "pg_bias_tis_mask", lo_v, hi_v)
    lo, hi, _, _ = _band_consts(ctx, lo_v, hi_v)
    t_tilt, t_ratio, t_tv = _tis_forms(ctx, cap)
    name = "pg_bias_tis_mask_sum"
    out = []
    for f in ctx.premises.of("osc"):
        s = f.expr / ctx.T
        form = sympy.Min(1, t_tilt(s) + band_drift(s, lo, hi))
        out.append(Route(name, GA * form, (f,), (*f.chain, name), attained=False))
    for f in ctx.premises.of("ratio"):
        form = sympy.Min(1, t_ratio(f.expr) + band_ratio(f.expr, lo, hi))
        out.append(Route(f"{name}_ratio", GA * form, (f,), (*f.chain, f"{name}_ratio"),
                         attained=False))  # fmt: skip
    for f in ctx.premises.of("tv"):
        form = sympy.Min(1, t_tv(f.expr) + band_tv(f.expr, lo, hi))
        out.append(Route(f"{name}_tv", GA * form, (f,), (*f.chain, f"{name}_tv"),
                         attained=False))  # fmt: skip
    return out


def _tis_clip(ctx, GA, name: str = "pg_bias_tis_clip") -> list[Route]:
    """ω = clip(w, lo, hi): the drift and ratio forms are the suprema (``bounds.pg.tis_clip``),
    the TV form (1 + lo)·ε is approached by leaks. Without a per-token fact, a mean-TV fact
    gives E[bias] ≤ G·A·(1 + lo)·E[TV] (the form is linear), and a tail fact
    P(drift > level) ≤ ρ gives (1 − ρ)·D(level) + ρ·(1 + lo): a position past the level can cost
    1 + lo, not the 1 of the masks' split."""
    lo_v, hi_v = _need(ctx, "band", "band: [lo, hi]")
    lo, hi, _, _ = _band_consts(ctx, lo_v, hi_v)
    out = _per_token(ctx, GA, name, lambda s: clip_drift(s, lo, hi),
                     lambda r: clip_ratio(r, lo, hi), lambda e: clip_tv(e, lo))  # fmt: skip
    if not out:
        split = f"{name}_exceedance"
        for f, rho, s in _tails(ctx):
            chain = (*f.chain[: f.chain.index("token_tv_tanh")], split)
            expr = GA * ((1 - rho) * clip_drift(s, lo, hi) + rho * (1 + lo))
            out.append(Route(split, expr, (f,), chain, expectation=True, attained=True))
        out += _mean_tv(ctx, GA, name, lambda e: clip_tv(e, lo), jensen_exact=True)
    return out


def _tis_norm(ctx, GA) -> list[Route]:
    """ω = min(w, c)/m, m the batch mean: K + (1 − K)₊·D_tis with K = e^x − 1 for every batch
    (``bounds.pg.tis_norm``); a bound, not attained. A TV premise leaves m unbounded: no route."""
    cap = exact(_need(ctx, "cap", "cap: c > 1"))
    if cap <= 1:
        raise NoLemma(f"pg_bias with estimator 'tis_norm' needs cap: c > 1, got {cap}")
    c = ctx.const("c", cap)
    name = "pg_bias_tis_norm"
    out = []
    for f in ctx.premises.of("osc"):
        s = f.expr / ctx.T
        out.append(Route(name, GA * norm_form(s, tis_drift(s, c)), (f,), (*f.chain, name),
                         attained=False))  # fmt: skip
    for f in ctx.premises.of("ratio"):
        form = norm_form(f.expr, tis_ratio(f.expr, c))
        out.append(Route(f"{name}_ratio", GA * form, (f,), (*f.chain, f"{name}_ratio"),
                         attained=False))  # fmt: skip
    return out


def _gspo(ctx, GA) -> list[Route]:
    """ω = s·1[not clipped], s the sequence's geometric-mean ratio: min(1 + (e^x − 2e^{−x})₊,
    e^x − 1 + D_plain(x) + 1[e^x ≥ 1 + ε]) (``bounds.pg.gspo``); a bound, not attained. A TV premise
    leaves s unbounded: no route."""
    e = exact(_need(ctx, "clip_epsilon", "clip_epsilon"))
    eps = ctx.const("clip_epsilon", e)
    never = lambda _: False  # noqa: E731
    return _per_token(ctx, GA, "pg_bias_gspo", lambda s: gspo_drift(s, eps),
                      lambda r: gspo_ratio(r, eps), None, never, never)  # fmt: skip


def _sapo(ctx, GA) -> list[Route]:
    """ω = w·sech²(τ(w − 1)/2) with the larger temperature t (``bounds.pg.sapo``): the ratio
    form is the supremum; the drift form (the ratio form at r = s) and the TV form
    min(1, (1 + t/4)²·ε) are bounds, never attained. Without a per-token fact: the exceedance
    split (a position past the level costs at most 1) and the mean-TV form (concave)."""
    temps = _need(ctx, "temperatures", "temperatures: [tau_pos, tau_neg]")
    t = ctx.const("tau_gate", max(exact(x) for x in temps))
    name = "pg_bias_sapo"
    out = _per_token(ctx, GA, name, lambda s: sapo_ratio(s, t), lambda r: sapo_ratio(r, t),
                     lambda e: sapo_tv(e, t), exact_s=_NEVER, exact_r=_NEVER)  # fmt: skip
    out = [replace(r, attained=False) if r.name == f"{name}_tv" else r for r in out]
    if not out:
        out = _exceedance(ctx, GA, name, lambda s: sapo_ratio(s, t), exact_s=_NEVER)
        out += _mean_tv(ctx, GA, name, lambda e: sapo_tv(e, t), jensen_exact=False)
    return out


def _vespo(ctx, GA) -> list[Route]:
    """ω = φ(W) per sequence (``bounds.pg.vespo``): the ratio form at |log W| ≤ L·r while
    L·r ≤ log 1e8 (TRL's clamps act beyond), the cap 1 + max φ otherwise and from the
    sequence TV; bounds, never attained."""
    k_pos, lam_pos, k_neg, lam_neg = _need(ctx, "gamma", "gamma: [k_pos, lambda_pos, k_neg, "
                                                         "lambda_neg]")  # fmt: skip
    floor = exact(LAMBDA_MIN)
    values = (
        (exact(k_pos), max(exact(lam_pos), floor)),
        (exact(k_neg), max(exact(lam_neg), floor)),
    )
    pairs = (
        (ctx.const("k_pos", values[0][0]), ctx.const("lam_pos", values[0][1])),
        (ctx.const("k_neg", values[1][0]), ctx.const("lam_neg", values[1][1])),
    )
    peak = sympy.Rational(max(peak_above(k, lam) for k, lam in values))
    L = ctx.const("L", ctx.max_len)
    LGA, lemma = L * GA, "pg_bias_vespo"
    out = []
    for r in ctx.log_ratio_routes():  # |log W| ≤ L·r
        R = L * r.expr
        if _at_max(ctx, R, r.facts) <= CLAMP_FREE:
            out.append(combine("vespo_ratio", LGA * vespo_ratio(R, pairs, peak), r, lemma=lemma,
                               attained=False))  # fmt: skip
        else:
            out.append(combine("vespo_cap", LGA * vespo_cap(pairs, peak), r, lemma=f"{lemma}_cap",
                               attained=False))  # fmt: skip
    seq, _ = ctx.sequence_tv()
    for r in seq:
        out.append(combine(f"vespo_{r.name}", LGA * vespo_cap(pairs, peak), r, lemma=f"{lemma}_cap",
                           attained=False))  # fmt: skip
    return out


def _kl_cov(ctx, GA) -> list[Route]:
    """KL-Cov's penalty: bias ≤ G·κ on every premise (``bounds.pg.cov``), attained where every
    fact lets some w differ from 1 (a premise at 0 forces π = π', and the bias is 0)."""
    kappa = ctx.const("kl_coef", exact(_need(ctx, "kl_coef", "kl_coef: κ ≥ 0")))
    facts = ctx.premises.facts
    if not facts:
        return []
    ok = all(_at_max(ctx, f.expr, (f,)) > 0 for f in facts)
    expr = ctx.const("G", ctx.g.score_norm) * kappa
    return [Route("pg_bias_kl_cov", expr, facts, ("pg_bias_kl_cov",), attained=ok)]


def _seq_outlier(ctx, GA) -> list[Route]:
    """One token outside [lo, hi] drops its sequence. One token: the icepop band. L ≥ 2: per
    position D = 1 where a token can leave the band (an earlier one drops the position), 0
    where none can; a TV premise leaves w free (D = 1)."""
    lo_v, hi_v = _need(ctx, "band", "band: [lo, hi]")
    if ctx.max_len == 1:
        return _band(ctx, GA, "pg_bias_icepop", lo_v, hi_v)
    L = ctx.const("L", ctx.max_len)
    lo, hi, lo_f, hi_f = _band_consts(ctx, lo_v, hi_v)
    _, ratio_ok = _band_exact(lo_f, hi_f)  # the jumps sit at x = hi and x = 1/lo

    def tilt_ok(s: float) -> bool:
        return ratio_ok(s)

    name = "pg_bias_seq_outlier"
    out = _per_token(
        ctx,
        GA,
        name,
        lambda s: outlier_step(sympy.exp(s), lo, hi),
        lambda r: outlier_step(sympy.exp(r), lo, hi),
        lambda e: sympy.Integer(1),
        tilt_ok,
        ratio_ok,
    )
    if not out:
        out = _exceedance(ctx, GA, name, lambda s: outlier_step(sympy.exp(s), lo, hi), tilt_ok,
                          geo_L=L, split="pg_bias_sequence_mask_exceedance")  # fmt: skip
    return out


def _seq_mask(ctx, GA) -> list[Route]:
    """ω = W·1[lo ≤ W ≤ hi]: bias ≤ L·G·A·π_L(W ∉ [lo, hi]). One token: the icepop band.
    L ≥ 2: a concentration form (``seq_mask_azuma``), the band's ratio form at |log W| ≤ L·r
    and its TV form at the sequence TV; bounds, not suprema (not marked attained)."""
    lo_v, hi_v = _need(ctx, "band", "band: [lo, hi]")
    if ctx.max_len == 1:
        return _band(ctx, GA, "pg_bias_icepop", lo_v, hi_v)
    L = ctx.const("L", ctx.max_len)
    lo, hi, _, _ = _band_consts(ctx, lo_v, hi_v)
    LGA, lemma = L * GA, "pg_bias_seq_mask"
    out = []
    # concentration: log w ranges over an interval of width s (drift) or 2r (|log w| ≤ r)
    for kind, width in (("osc", lambda f: f.expr / ctx.T), ("ratio", lambda f: 2 * f.expr)):
        for f in ctx.premises.of(kind):
            expr = LGA * seq_mask_azuma(width(f), L, lo, hi)
            out.append(Route("seq_mask_azuma", expr, (f,), (*f.chain, lemma), attained=False))
    for r in ctx.log_ratio_routes():
        expr = LGA * seq_mask_ratio(L * r.expr, lo, hi)
        out.append(combine("seq_mask_ratio", expr, r, lemma=lemma, attained=False))
    seq, _ = ctx.sequence_tv()
    for r in seq:
        expr = LGA * seq_mask_tv(r.expr, lo, hi)
        out.append(combine(f"seq_mask_{r.name}", expr, r, lemma=lemma, attained=False))
    return out


# ---- rejection by a KL estimator, chained (kl_reject) --------------------------------------
def _kl_reject(ctx, GA) -> list[Route]:
    """Every criterion drops a set; the chain drops their union, so D ≤ min(1, Σ D_c) with D_c
    each criterion's supremum (``_criterion``). Attained where the chain has one criterion and
    its own form is attained."""
    g = ctx.g
    if g.reject is None or g.reject_threshold is None:
        raise NoLemma("pg_bias with estimator 'kl_reject' needs reject and reject_threshold")
    criteria = parse_rejection(g.reject, g.reject_threshold)
    out = []
    for kind, suffix in (("osc", ""), ("ratio", "_ratio"), ("tv", "_tv")):
        for f in ctx.premises.of(kind):
            x = f.expr / ctx.T if kind == "osc" else f.expr
            value = _at_max(ctx, x, (f,))
            parts = [_criterion(ctx, i, c, kind, x, value) for i, c in enumerate(criteria)]
            total = sympy.Min(1, sympy.Add(*(p for p, _ in parts)))
            form = parts[0][0] if len(parts) == 1 else total
            ok = len(parts) == 1 and parts[0][1] and (kind != "tv" or (f.attained and f.leak))
            name = f"pg_bias_kl_reject{suffix}"
            out.append(Route(name, GA * form, (f,), (*f.chain, name), attained=ok))
    return out


def _criterion(ctx, i: int, crit, kind: str, x, value: float) -> tuple[sympy.Expr, bool]:
    """(D_c, exact): one criterion's per-position supremum of π(dropped) from the premise
    ``x`` (s = osc/T, r, or a TV ε) whose value at the clauses' maxima is ``value``.

    One token (``token_*``, or a sequence of L = 1): a band on w, exact for k1 (w ∈ [1/b, 1/a])
    and k2 (|log w| ≤ √(2τ)); for k3 a band certified inside its roots (sound, not marked
    attained). L ≥ 2: ``seq_mean_k1`` is geo_mask's band; the others drop nothing where no
    sequence can pass the threshold and at most everything where one can (a step): the largest
    k over the premise is k_max = s²/2 (k2) or e^s − 1 − s (k3); passing needs k_max > τ
    (seq_max, seq_mean), L·k_max > τ (seq_sum), |log W| ≤ L·s outside the band (seq_sum_k1). The
    step is the supremum where the other L − 1 tokens alone pass (k2, k3 are ≥ 0, so the current
    token cannot undo it; for the signed k1 sum, the current token's π-mass can sit, up to any
    ε, on log w of the others' sign); a TV premise leaves w free."""
    L_val = ctx.max_len
    level = "token" if L_val == 1 else crit.level
    if crit.k == 1:
        a, b = ctx.const(f"a_{i}", crit.a), ctx.const(f"b_{i}", crit.b)
        lo, hi, lo_v, hi_v = 1 / b, 1 / a, 1 / mpmath.mpf(crit.b), 1 / mpmath.mpf(crit.a)
    elif level in ("token", "seq_max"):
        tau = ctx.const(f"tau_{i}", crit.tau)
        if crit.k == 2:
            lo, hi = sympy.exp(-sympy.sqrt(2 * tau)), sympy.exp(sympy.sqrt(2 * tau))
            hi_v = mpmath.exp(mpmath.sqrt(2 * mpmath.mpf(crit.tau)))
            lo_v = 1 / hi_v
        else:
            lo_f, hi_f = k3_band(exact(crit.tau))
            lo, hi = ctx.const(f"lo_{i}", lo_f), ctx.const(f"hi_{i}", hi_f)
            lo_v = mpmath.mpf(lo_f.numerator) / lo_f.denominator
            hi_v = mpmath.mpf(hi_f.numerator) / hi_f.denominator
    if level == "token":
        tilt_ok, ratio_ok = _band_exact(lo_v, hi_v)
        exact_band = crit.k != 3
        if kind == "osc":
            return band_drift(x, lo, hi), exact_band and tilt_ok(value)
        if kind == "ratio":
            return band_ratio(x, lo, hi), exact_band and ratio_ok(value)
        return band_tv(x, lo, hi), exact_band
    if kind == "tv":  # a sampled token's w is free under a TV premise (ε > 0): one drops its
        return sympy.Integer(1), value > 0  # sequence
    L = ctx.const("L", L_val)
    if crit.k == 1 and level == "seq_mean":
        idle = _at_max(ctx, L * (sympy.log(hi) - x), ctx.premises.facts) >= 0
        form = band_drift(x, lo, hi, L, idle) if kind == "osc" else band_ratio(x, lo, hi, L)
        tilt_ok, ratio_ok = _band_exact(lo_v, hi_v)
        return form, (tilt_ok if kind == "osc" else ratio_ok)(value)
    if crit.k == 1:  # seq_sum_k1: log W within ±L·x must leave [log lo, log hi]
        form = sympy.Max(step_above(L * x, sympy.log(hi)), step_above(L * x, -sympy.log(lo)))
        # attained where L − 1 others alone leave the band: the current token can put π-mass
        # near 1 on log w of the same sign (w = 1, or the raised / lowered token of a tilt)
        nearest = min(float(mpmath.log(hi_v)), float(-mpmath.log(lo_v)))
        return form, (L_val - 1) * value > nearest * 1.000001
    if level == "seq_max":
        form = outlier_step(sympy.exp(x), lo, hi)
        x_v = mpmath.exp(value)
        if crit.k == 3:  # the certified band sits 10⁻¹² inside the roots: exact away from them
            far = 1 + mpmath.mpf(10) ** -9
            passed = x_v > hi_v * far or x_v * lo_v > far
            below = x_v <= hi_v * (1 - 10 * ETA) and x_v * lo_v <= 1 - 10 * ETA
            return form, bool(passed or below)
        return form, not in_sliver(x_v, hi_v) and not in_sliver(x_v, 1 / lo_v)
    kmax = k_value(crit.k, x)
    kmax_v = float(k_value(crit.k, sympy.Float(value, 30)))
    tau = ctx.const(f"tau_{i}", crit.tau)
    if level == "seq_mean":  # the others alone pass when (L − 1)·k_max > L·τ
        return step_above(kmax, tau), (L_val - 1) * kmax_v > L_val * crit.tau * 1.000001
    return step_above(L * kmax, tau), (L_val - 1) * kmax_v > crit.tau * 1.000001
