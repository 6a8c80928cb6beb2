"""Verdicts of numerical and statistical clauses on one evidence source's summaries.

Numerical: the maximum over the slice ≤ ``max`` → held, else violated. Statistical: the upper
confidence bound ≤ ``max`` → held; the lower confidence bound > ``max`` → violated; too few
tokens or an infinite bound → inconclusive, never held; else inconclusive. The bounds come from
``bounds`` (order statistics, Clopper–Pearson, the bounded-mean bound) applied to a summary's
dominating values, which keeps them conservative when the summary is a histogram.
"""

from __future__ import annotations

import math

import numpy as np

from kernel_contracts.evidence.table import RANGE, SAMPLED_ONLY, clause_column, reading
from kernel_contracts.verify.common.clauses import ClauseResult
from kernel_contracts.verify.common.status import Status

__all__ = [
    "BINARY",
    "lower_mean_bound",
    "lower_statistic",
    "mean_bounds",
    "numerical_result",
    "numerical_verdict",
    "quantile_lower_bound",
    "quantile_lower_rank",
    "rate_bounds",
    "statistical_result",
    "statistical_verdict",
]

# columns whose values are 0 or 1: their mean is a rate
BINARY = frozenset({"top1_flip"})


def numerical_verdict(
    samples: int, maximum: float, limit: float, column: str, lower_only: bool = False
) -> Status:
    """The verdict of a numerical clause from its numbers (``verify check`` recomputes it):
    no token → inconclusive; the maximum ≤ ``limit`` → held (inconclusive for a column that
    describes the sampled token only, or that bounds the metric from below: ``lower_only``),
    else violated."""
    if samples == 0:
        return Status.INCONCLUSIVE
    if maximum > limit:
        return Status.VIOLATED
    return Status.INCONCLUSIVE if lower_only or column in SAMPLED_ONLY else Status.HELD


def statistical_verdict(
    samples: int, min_samples: int, bound: float, limit: float, lower=None
) -> Status:
    """The verdict of a statistical clause from its numbers (``verify check`` recomputes it):
    fewer than ``min_samples`` (or no) tokens → inconclusive; ``bound`` (an upper confidence
    bound, or the sample maximum) ≤ ``limit`` → held; above it → violated when ``lower`` is
    None (``bound`` is the sample maximum itself) or the lower confidence bound ``lower()``
    exceeds ``limit``, else inconclusive."""
    if samples == 0 or samples < min_samples:
        return Status.INCONCLUSIVE
    if bound <= limit:
        return Status.HELD
    return Status.VIOLATED if lower is None or lower() > limit else Status.INCONCLUSIVE


def _result(clause, family, slice_name, source, **kw) -> ClauseResult:
    return ClauseResult(
        id=clause.id,
        family=family,
        slice=slice_name,
        metric=clause.metric,
        threshold=float(clause.max),
        fingerprint=f"sha256:{source.fingerprint}",
        source=source.label,
        **kw,
    )


def _unmeasured(clause, family, col, slice_name, source, statistic) -> ClauseResult | None:
    if col in source.metric_skip:
        reason = source.metric_skip[col]
    elif slice_name in source.slice_skip:
        reason = source.slice_skip[slice_name]
    else:
        return None
    return _result(
        clause,
        family,
        slice_name,
        source,
        status=Status.SKIPPED,
        statistic=statistic,
        reason=reason,
    )


def numerical_result(clause, source) -> ClauseResult:
    col = clause_column("numerical", clause.metric)
    skipped = _unmeasured(clause, "numerical", col, clause.slice, source, "max")
    if skipped is not None:
        return skipped
    s = source.summaries[(clause.slice, col)]
    what = "|log ratio|" if col == "abs_log_ratio" else col
    common = {"statistic": "max", "samples": s.count}
    if s.count == 0:
        return _result(
            clause,
            "numerical",
            clause.slice,
            source,
            status=Status.INCONCLUSIVE,
            reason="no tokens in this slice",
            **common,
        )
    bad = source.nonfinite.get((clause.slice, col), 0)
    lower = reading(source.kind, col) == "lower"
    status = numerical_verdict(s.count, s.maximum, clause.max, col, lower)
    reason = f"max {what} over {s.count} tokens is {s.maximum:.6g} (limit {clause.max:g})"
    if lower:
        reason = _LOWER_NUMERICAL[status is Status.VIOLATED].format(
            what=what, n=s.count, value=s.maximum, limit=clause.max
        )
    if bad:
        reason += f"; {bad} tokens had a non-finite value, counted as the worst"
    if status is Status.INCONCLUSIVE and not lower:
        # the proofs read a log-ratio clause over every token of the vocabulary (|log w(y)| ≤ r
        # for all y); the sampled tokens cannot show that, though one of them can refute it
        status = Status.INCONCLUSIVE
        reason += (
            "; only sampled tokens were seen, and the clause bounds every token of the vocabulary"
        )
    if col in source.metric_caveat:
        status, reason = Status.INCONCLUSIVE, source.metric_caveat[col]
    return _result(
        clause,
        "numerical",
        clause.slice,
        source,
        status=status,
        value=s.maximum,
        bound=s.maximum,
        reason=reason,
        **common,
    )


_LOWER_NUMERICAL = {
    True: "the sampled tokens' log-probs prove {what} ≥ {value:.6g} on one of {n} tokens, above "
    "the limit {limit:g}",
    False: "the sampled tokens' log-probs bound {what} only from below (largest lower bound "
    "{value:.6g} over {n} tokens, limit {limit:g}): they cannot show the clause holds",
}


def quantile_lower_rank(n: int, q: float, confidence: float) -> int | None:
    """The largest k with P(Binom(n, q) ≥ k) ≥ confidence; None when there is none.

    It comes from ``bounds.stats.quantile_ucb_rank`` at level 1 − confidence: the smallest
    rank k' with P(Binom(n, q) ≤ k' − 1) ≥ that level (less a hair, so the rank below it
    qualifies strictly), and k = k' − 1. It depends on n, q and confidence only.
    """
    from kernel_contracts.bounds.stats import quantile_ucb_rank

    level = 1.0 - confidence - 2e-9
    first = quantile_ucb_rank(n, q, level) if level > 0 else 1
    k = n if first is None else first - 1
    return None if k < 1 else k


def quantile_lower_bound(s, q: float, confidence: float) -> float:
    """X_(k) for the largest k with P(Binom(n, q) ≥ k) ≥ confidence (``quantile_lower_rank``);
    −inf when there is none.

    X_(k) > ξ_q needs at most k − 1 samples ≤ ξ_q, and P(X ≤ ξ_q) ≥ q, so
    P(X_(k) > ξ_q) ≤ P(Binom(n, q) ≤ k − 1) ≤ 1 − confidence: X_(k) is a lower bound.
    """
    k = quantile_lower_rank(s.count, q, confidence)
    return -math.inf if k is None else s.order_statistic(k)[0]


def rate_bounds(k: int, n: int, c: float) -> tuple[float, float]:
    """The Clopper–Pearson (upper, lower) bounds of a rate after ``k`` events in ``n`` tokens."""
    from kernel_contracts.bounds.stats import clopper_pearson_lower, clopper_pearson_upper

    return float(clopper_pearson_upper(k, n, c)), clopper_pearson_lower(k, n, c)


def mean_bounds(n: int, mean: float, variance: float, col: str, c: float) -> tuple[float, float]:
    """The bounded-mean (upper, lower) bounds of the mean of ``col`` (range ``RANGE[col]``)
    from ``n`` values of mean ``mean`` and sample variance ``variance``."""
    from kernel_contracts.bounds.stats import mean_ucb_moments

    lo, hi = RANGE[col]
    ucb = float(mean_ucb_moments(n, mean, variance, lo, hi, c))
    return ucb, -float(mean_ucb_moments(n, -mean, variance, -hi, -lo, c))


def _statistical_bounds(clause, col, s):
    """(point estimate, upper bound, lower bound, how, basis) of the clause's statistic;
    ``basis`` holds what ``verify check`` needs beyond the count and the point estimate to
    recompute both bounds (``verify.proving.check.confidence``)."""
    from kernel_contracts.bounds.stats import quantile_ucb_rank

    c, n = clause.confidence, s.count
    if clause.statistic == "quantile":
        q = clause.q
        rank, up = max(1, math.ceil(q * n)), quantile_ucb_rank(n, q, c)
        value = s.order_statistic(rank)[1]
        ucb = math.inf if up is None else float(s.upper_values()[up - 1])
        how = f"order-statistic bound of the {q:g}-quantile"
        basis = (("value_rank", rank), ("bound_rank", up),
                 ("lower_rank", quantile_lower_rank(n, q, c)))  # fmt: skip
        return value, ucb, quantile_lower_bound(s, q, c), how, basis
    if clause.statistic == "exceed_rate":
        k = s.exceed_count(float(clause.threshold))
        how = f"Clopper–Pearson bound of P({col} > {clause.threshold:g}) ({k} of {n} tokens)"
        return k / n, *rate_bounds(k, n, c), how, (("count", k),)
    if col not in RANGE:
        how = (
            f"the mean of {col} has no distribution-free confidence bound (its range is "
            "unbounded); use a quantile or exceed_rate clause"
        )
        return s.mean, math.inf, -math.inf, how, ()
    if col in BINARY and s.total == round(s.total):
        k = round(s.total)
        how = f"Clopper–Pearson bound of the rate ({k} of {n} tokens)"
        return k / n, *rate_bounds(k, n, c), how, (("count", k),)
    if not s.is_exact:
        how = "the bounded-mean bound needs exact values and this summary is a histogram"
        return s.mean, math.inf, -math.inf, how, (("sketch", "histogram"),)
    lo, hi = RANGE[col]
    variance = float(np.var(s.values, ddof=1)) if n >= 2 else 0.0
    ucb, lcb = mean_bounds(n, s.mean, variance, col, c)
    return s.mean, ucb, lcb, f"bounded-mean bound on [{lo:g}, {hi:g}]", (("variance", variance),)


def lower_mean_bound(n: int, mean: float, variance: float, top: float, c: float) -> float:
    """The bounded-mean lower bound of E[min(x, top)] from ``n`` values of min(x, top) with mean
    ``mean`` and sample variance ``variance``: a lower bound of E[x] for x ≥ 0."""
    from kernel_contracts.bounds.stats import mean_ucb_moments

    return -float(mean_ucb_moments(n, -mean, variance, -top, 0.0, c))


def lower_top(clause, col: str) -> float:
    """Where a mean of per-token lower bounds is cut: the metric's upper end where it has one,
    else 2·max (1 when max is 0), fixed by the clause alone."""
    return RANGE[col][1] if col in RANGE else (2 * float(clause.max) or 1.0)


def lower_statistic(clause, col, s):
    """(the statistic, a lower confidence bound of it or None, how, basis) for a column of
    per-token lower bounds of ``col``'s metric (a sampled-token log's ``LOWER_BOUNDED``
    columns); ``basis`` holds what ``verify check`` needs to recompute the bound.

    Each statistic here is nondecreasing in every token's value, so a lower confidence bound
    of it computed on the lower bounds is one of the metric's own. A mean is bounded below
    through min(x, M) ∈ [0, M] (``lower_top``): E[x] ≥ E[min(x, M)]. The maximum has no
    confidence level: the largest lower bound is itself a bound of the metric's maximum.
    """
    c, n = clause.confidence, s.count
    if clause.statistic == "max":
        return s.maximum, None, f"the largest per-token lower bound of {col}", ()
    if clause.statistic == "quantile":
        q = clause.q
        rank, k = max(1, math.ceil(q * n)), quantile_lower_rank(n, q, c)
        value = s.order_statistic(rank)[1]
        lcb = None if k is None else s.order_statistic(k)[0]
        return value, lcb, f"the lower bound of the {q:g}-quantile", (
            ("value_rank", rank), ("lower_rank", k))  # fmt: skip
    if clause.statistic == "exceed_rate":
        k = s.exceed_count(float(clause.threshold))
        how = f"the Clopper–Pearson lower bound of P({col} > {clause.threshold:g}) ({k} of {n})"
        return k / n, rate_bounds(k, n, c)[1], how, (("count", k),)
    if not s.is_exact:
        return s.mean, None, "the mean's lower bound (none: the summary is a histogram)", (
            ("sketch", "histogram"),)  # fmt: skip
    top = lower_top(clause, col)
    cut = np.minimum(s.values, top)
    mean = float(np.mean(cut))
    variance = float(np.var(cut, ddof=1)) if n >= 2 else 0.0
    how = f"the bounded-mean lower bound of E[min({col}, {top:g})]"
    basis = (("cut_mean", mean), ("cut_variance", variance))
    return s.mean, lower_mean_bound(n, mean, variance, top, c), how, basis


def statistical_result(clause, slice_name: str, source) -> ClauseResult:
    col = clause_column("statistical", clause.metric)
    skipped = _unmeasured(clause, "statistical", col, slice_name, source, clause.statistic)
    if skipped is not None:
        return skipped
    s = source.summaries[(slice_name, col)]
    common = {"statistic": clause.statistic, "samples": s.count, "confidence": clause.confidence}

    def done(status, reason, value=None, bound=None, lower=None, basis=()):
        return _result(
            clause,
            "statistical",
            slice_name,
            source,
            status=status,
            reason=reason,
            value=value,
            bound=bound,
            lower=lower,
            basis=basis,
            **common,
        )

    if s.count == 0:
        return done(Status.INCONCLUSIVE, "no tokens in this slice")
    if s.count < clause.min_samples:
        return done(Status.INCONCLUSIVE, f"{s.count} tokens < min_samples {clause.min_samples}")
    if col in source.metric_caveat:
        return done(Status.INCONCLUSIVE, source.metric_caveat[col])
    bad = source.nonfinite.get((slice_name, col), 0)
    extra = f"; {bad} non-finite values counted as the worst" if bad else ""
    if reading(source.kind, col) == "lower":
        value, lcb, how, basis = lower_statistic(clause, col, s)
        top = value if clause.statistic == "max" else lcb
        status = statistical_verdict(s.count, clause.min_samples, math.inf, clause.max,
                                     lambda: -math.inf if top is None else top)  # fmt: skip
        shown = f"{how} is {'none' if top is None else f'{top:.6g}'}"
        shown += "" if clause.statistic == "max" else f" at confidence {clause.confidence:g}"
        shown += f" (limit {clause.max:g})"
        # a maximum is its own bound (no level, no basis); else only the lower bound exists
        kept = {"bound": value} if clause.statistic == "max" else {"lower": lcb, "basis": basis}
        if status is Status.VIOLATED:
            why = f"{shown}: the sampled tokens' log-probs prove it violated{extra}"
        else:
            why = (f"{shown}: the sampled tokens' log-probs bound {col} only from below, so they "
                   f"cannot show the clause holds{extra}")  # fmt: skip
        return done(status, why, value, **kept)
    if clause.statistic == "max":
        status = statistical_verdict(s.count, clause.min_samples, s.maximum, clause.max)
        reason = (
            f"empirical: the maximum over {s.count} measured tokens is {s.maximum:.6g} (limit "
            f"{clause.max:g}); no confidence bound covers unseen tokens{extra}"
        )
        return done(status, reason, s.maximum, s.maximum)
    value, ucb, lcb, how, basis = _statistical_bounds(clause, col, s)
    status = statistical_verdict(s.count, clause.min_samples, ucb, clause.max, lambda: lcb)
    bounds = {
        "bound": ucb if math.isfinite(ucb) else None,
        "lower": lcb if math.isfinite(lcb) else None,
        "basis": basis,
    }
    if status is Status.HELD:
        return done(Status.HELD, f"{how}: {ucb:.6g} ≤ {clause.max:g}{extra}", value, **bounds)
    if status is Status.VIOLATED:
        reason = (
            f"{how}: lower bound {lcb:.6g} > {clause.max:g} at confidence "
            f"{clause.confidence:g}{extra}"
        )
        return done(Status.VIOLATED, reason, value, **bounds)
    if not math.isfinite(ucb):
        if clause.statistic == "quantile":
            how = (
                f"too few tokens ({s.count}) for a finite {how} at confidence {clause.confidence:g}"
            )
        return done(Status.INCONCLUSIVE, how + extra, value, **bounds)
    reason = (
        f"{how}: upper bound {ucb:.6g} > {clause.max:g} but lower bound {lcb:.6g} ≤ "
        f"{clause.max:g}: more tokens are needed to decide{extra}"
    )
    return done(Status.INCONCLUSIVE, reason, value, **bounds)
