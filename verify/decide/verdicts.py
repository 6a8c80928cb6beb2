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

from evidence.table import RANGE, SAMPLED_ONLY, clause_column
from verify.clauses import ClauseResult
from verify.status import Status

__all__ = [
    "numerical_result",
    "numerical_verdict",
    "quantile_lower_bound",
    "statistical_result",
    "statistical_verdict",
]

_BINARY = frozenset({"top1_flip"})


def numerical_verdict(samples: int, maximum: float, limit: float, column: str) -> Status:
    """The verdict of a numerical clause from its numbers (``verify check`` recomputes it):
    no token → inconclusive; the maximum ≤ ``limit`` → held (inconclusive for a column that
    describes the sampled token only), else violated."""
    if samples == 0:
        return Status.INCONCLUSIVE
    if maximum > limit:
        return Status.VIOLATED
    return Status.INCONCLUSIVE if column in SAMPLED_ONLY else Status.HELD


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
    status = numerical_verdict(s.count, s.maximum, clause.max, col)
    reason = f"max {what} over {s.count} tokens is {s.maximum:.6g} (limit {clause.max:g})"
    if bad:
        reason += f"; {bad} tokens had a non-finite value, counted as the worst"
    if status is Status.INCONCLUSIVE:
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


def quantile_lower_bound(s, q: float, confidence: float) -> float:
    """X_(k) for the largest k with P(Binom(n, q) ≥ k) ≥ confidence; −inf when there is none.

    X_(k) > ξ_q needs at most k − 1 samples ≤ ξ_q, and P(X ≤ ξ_q) ≥ q, so
    P(X_(k) > ξ_q) ≤ P(Binom(n, q) ≤ k − 1) ≤ 1 − confidence: X_(k) is a lower bound.
    The index comes from ``bounds.quantile_ucb`` run on the ranks 1 … n at level
    1 − confidence: it returns the smallest rank k' with P(Binom(n, q) ≤ k' − 1) ≥ that level
    (less a hair, so the rank below it qualifies strictly), and k = k' − 1.
    """
    from bounds import quantile_ucb

    n = s.count
    level = 1.0 - confidence - 2e-9
    first = quantile_ucb(np.arange(1, n + 1, dtype=np.float64), q, level) if level > 0 else 1
    k = n if math.isinf(first) else int(first) - 1
    return -math.inf if k < 1 else s.order_statistic(k)[0]


def _rate_bounds(k: int, n: int, c: float):
    from bounds import clopper_pearson_upper

    ucb = float(clopper_pearson_upper(k, n, c))
    return ucb, lambda: 1.0 - float(clopper_pearson_upper(n - k, n, c))


def _statistical_bounds(clause, col, s):
    """(point estimate, upper bound, lower bound thunk, how) of the clause's statistic."""
    from bounds import mean_ucb, quantile_ucb

    c, n = clause.confidence, s.count
    if clause.statistic == "quantile":
        q = clause.q
        value = s.order_statistic(max(1, math.ceil(q * n)))[1]
        ucb = float(quantile_ucb(s.upper_values(), q, c))
        how = f"order-statistic bound of the {q:g}-quantile"
        return value, ucb, lambda: quantile_lower_bound(s, q, c), how
    if clause.statistic == "exceed_rate":
        k = s.exceed_count(float(clause.threshold))
        ucb, lcb = _rate_bounds(k, n, c)
        how = f"Clopper–Pearson bound of P({col} > {clause.threshold:g}) ({k} of {n} tokens)"
        return k / n, ucb, lcb, how
    none = lambda: -math.inf  # noqa: E731
    if col not in RANGE:
        how = (
            f"the mean of {col} has no distribution-free confidence bound (its range is "
            "unbounded); use a quantile or exceed_rate clause"
        )
        return s.mean, math.inf, none, how
    if col in _BINARY and s.total == round(s.total):
        k = round(s.total)
        ucb, lcb = _rate_bounds(k, n, c)
        return k / n, ucb, lcb, f"Clopper–Pearson bound of the rate ({k} of {n} tokens)"
    if not s.is_exact:
        how = "the bounded-mean bound needs exact values and this summary is a histogram"
        return s.mean, math.inf, none, how
    lo, hi = RANGE[col]
    ucb = float(mean_ucb(s.values, lo, hi, c))
    lcb = lambda: -float(mean_ucb(-s.values, -hi, -lo, c))  # noqa: E731
    return s.mean, ucb, lcb, f"bounded-mean bound on [{lo:g}, {hi:g}]"


def statistical_result(clause, slice_name: str, source) -> ClauseResult:
    col = clause_column("statistical", clause.metric)
    skipped = _unmeasured(clause, "statistical", col, slice_name, source, clause.statistic)
    if skipped is not None:
        return skipped
    s = source.summaries[(slice_name, col)]
    common = {"statistic": clause.statistic, "samples": s.count, "confidence": clause.confidence}

    def done(status, reason, value=None, bound=None):
        return _result(
            clause,
            "statistical",
            slice_name,
            source,
            status=status,
            reason=reason,
            value=value,
            bound=bound,
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
    if clause.statistic == "max":
        status = statistical_verdict(s.count, clause.min_samples, s.maximum, clause.max)
        reason = (
            f"empirical: the maximum over {s.count} measured tokens is {s.maximum:.6g} (limit "
            f"{clause.max:g}); no confidence bound covers unseen tokens{extra}"
        )
        return done(status, reason, s.maximum, s.maximum)
    value, ucb, lcb_of, how = _statistical_bounds(clause, col, s)
    lower: list[float] = []
    status = statistical_verdict(
        s.count, clause.min_samples, ucb, clause.max, lambda: lower.append(lcb_of()) or lower[0]
    )
    if status is Status.HELD:
        return done(Status.HELD, f"{how}: {ucb:.6g} ≤ {clause.max:g}{extra}", value, ucb)
    lcb = lower[0]
    if status is Status.VIOLATED:
        reason = (
            f"{how}: lower bound {lcb:.6g} > {clause.max:g} at confidence "
            f"{clause.confidence:g}{extra}"
        )
        return done(Status.VIOLATED, reason, value, ucb)
    if not math.isfinite(ucb):
        if clause.statistic == "quantile":
            how = (
                f"too few tokens ({s.count}) for a finite {how} at confidence {clause.confidence:g}"
            )
        return done(Status.INCONCLUSIVE, how + extra, value)
    reason = (
        f"{how}: upper bound {ucb:.6g} > {clause.max:g} but lower bound {lcb:.6g} ≤ "
        f"{clause.max:g}: more tokens are needed to decide{extra}"
    )
    return done(Status.INCONCLUSIVE, reason, value, ucb)
