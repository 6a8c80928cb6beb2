"""Statistical bounds for evidence clauses: upper confidence bounds and sample-size planning.

Every bound here is distribution-free and holds at the stated confidence for every sample
size (no asymptotics). Binomial tails are summed exactly in log space; wherever floating-point
rounding could matter, the comparison is biased so the bound comes out larger, never smaller.

References:
    David & Nagaraja, "Order Statistics" (3rd ed., 2003), §7.1 — distribution-free
        confidence bounds for quantiles from order statistics.
    Clopper & Pearson, "The use of confidence or fiducial limits illustrated in the case of
        the binomial", Biometrika 26 (1934).
    Hoeffding, "Probability inequalities for sums of bounded random variables" (1963).
    Maurer & Pontil, "Empirical Bernstein bounds and sample variance penalization" (2009),
        Theorem 4.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import mpmath
import numpy as np
from jaxtyping import Float

__all__ = [
    "binomial_cdf",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "mean_ucb",
    "mean_ucb_moments",
    "min_samples_quantile",
    "min_samples_rate",
    "quantile_ucb",
    "quantile_ucb_rank",
]

# Relative slack applied against us in every floating-point comparison of probabilities.
_SLACK = 1e-9

Samples = Float[np.ndarray, "n"] | Sequence[float]


def _check_level(name: str, x: float, *, open_low: bool = True) -> None:
    if not (math.isfinite(x) and (0.0 < x < 1.0 if open_low else 0.0 <= x < 1.0)):
        raise ValueError(f"{name} must lie in (0, 1), got {x!r}")


def _samples(samples: Samples) -> np.ndarray:
    x = np.asarray(samples, dtype=np.float64).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError("samples must be finite numbers")
    return x


@functools.lru_cache(maxsize=32)
def _log_choose(n: int, k_max: int) -> np.ndarray:
    lg = math.lgamma
    return np.array([lg(n + 1) - lg(j + 1) - lg(n - j + 1) for j in range(k_max + 1)])


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) ≤ k), summed in log space (relative error ~1e-13)."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    j = np.arange(k + 1, dtype=np.float64)
    logs = _log_choose(n, k) + j * math.log(p) + (n - j) * math.log1p(-p)
    m = float(np.max(logs))
    return min(1.0, math.exp(m) * float(np.sum(np.exp(logs - m))))


def quantile_ucb(samples: Samples, q: float, confidence: float) -> float:
    """An upper confidence bound for the q-quantile of the sampled law, at ``confidence``.

    With X_(1) ≤ … ≤ X_(n) sorted, X_(k) < ξ_q requires at least k samples below ξ_q, an event
    of probability ≤ P(Binomial(n, q) ≥ k) for any law. The smallest k with
    P(Binomial(n, q) ≤ k − 1) ≥ confidence makes X_(k) the bound (``quantile_ucb_rank``).
    Returns +inf when even k = n does not qualify (too few samples).
    """
    _check_level("q", q)
    _check_level("confidence", confidence)
    x = np.sort(_samples(samples))
    k = quantile_ucb_rank(x.size, q, confidence)
    return math.inf if k is None else float(x[k - 1])


def quantile_ucb_rank(n: int, q: float, confidence: float) -> int | None:
    """The rank k (1-based) of the order statistic X_(k) that :func:`quantile_ucb` returns from
    ``n`` samples: the smallest k with P(Binomial(n, q) ≤ k − 1) ≥ confidence; None when no
    k ≤ n qualifies. It depends on n, q and confidence only, never on the values."""
    _check_level("q", q)
    _check_level("confidence", confidence)
    if n == 0:
        return None
    j = np.arange(n + 1, dtype=np.float64)
    logs = _log_choose(n, n) + j * math.log(q) + (n - j) * math.log1p(-q)
    pmf = np.exp(logs - np.max(logs))
    cdf = np.cumsum(pmf) / np.sum(pmf)  # cdf[i] = P(Bin ≤ i)
    need = confidence + _SLACK
    ok = np.nonzero(cdf[:n] >= need)[0]  # i = k − 1 ranges over 0 … n − 1
    return None if ok.size == 0 else int(ok[0]) + 1


def clopper_pearson_upper(k: int, n: int, confidence: float) -> float:
    """The one-sided Clopper–Pearson upper bound on a rate after ``k`` events in ``n`` trials.

    The p with P(Binomial(n, p) ≤ k) = 1 − confidence, found by bisection and returned from
    the side that keeps the bound conservative; 1 when k = n.
    """
    _check_level("confidence", confidence)
    if not (isinstance(n, int | np.integer) and isinstance(k, int | np.integer)):
        raise TypeError("k and n must be integers")
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 ≤ k ≤ n and n ≥ 1, got k={k}, n={n}")
    if k == n:
        return 1.0
    alpha = 1.0 - confidence
    if k == 0:  # closed form (1 − p)^n = α, nudged up by the slack
        return min(1.0, -math.expm1(math.log(alpha) / n) * (1 + _SLACK))
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if binomial_cdf(k, n, mid) > alpha * (1 - _SLACK):
            lo = mid
        else:
            hi = mid
    return hi


def clopper_pearson_lower(k: int, n: int, confidence: float) -> float:
    """The one-sided Clopper–Pearson lower bound on a rate after ``k`` events in ``n`` trials:
    1 − the upper bound of the complementary rate (n − k events); 0 when k = 0."""
    return 1.0 - float(clopper_pearson_upper(n - k, n, confidence))


def mean_ucb(samples: Samples, lo: float, hi: float, confidence: float) -> float:
    """An upper confidence bound for the mean of a law supported on [lo, hi].

    The smaller of Hoeffding's and the empirical Bernstein bound (Maurer & Pontil), each at
    level (1 − confidence)/2, so the minimum holds at ``confidence`` by the union bound; it
    depends on the samples through their count, mean and variance (``mean_ucb_moments``).
    """
    _check_level("confidence", confidence)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"need finite lo < hi, got [{lo}, {hi}]")
    x = _samples(samples)
    if np.any((x < lo) | (x > hi)):
        raise ValueError(f"samples must lie in [{lo}, {hi}]")
    n = x.size
    if n == 0:
        return float(hi)
    var = float(np.var(x, ddof=1)) if n >= 2 else 0.0
    return mean_ucb_moments(n, float(np.mean(x)), var, lo, hi, confidence)


def mean_ucb_moments(
    n: int, mean: float, variance: float, lo: float, hi: float, confidence: float
) -> float:
    """:func:`mean_ucb` from ``n`` samples in [lo, hi] with mean ``mean`` and sample variance
    ``variance`` (ddof 1; unused when n < 2): the same arithmetic, so a bound recorded with
    its inputs can be recomputed exactly."""
    _check_level("confidence", confidence)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"need finite lo < hi, got [{lo}, {hi}]")
    if not (math.isfinite(mean) and math.isfinite(variance) and variance >= 0.0):
        raise ValueError(f"need a finite mean and variance ≥ 0, got {mean!r}, {variance!r}")
    if n == 0:
        return float(hi)
    width = hi - lo
    if n < 2:
        return min(hi, mean + width * math.sqrt(math.log(1 / (1 - confidence)) / (2 * n)))
    delta = (1 - confidence) / 2
    hoeffding = mean + width * math.sqrt(math.log(1 / delta) / (2 * n))
    log_term = math.log(2 / delta)
    bernstein = mean + math.sqrt(2 * variance * log_term / n) + 7 * width * log_term / (3 * (n - 1))
    return float(min(hi, hoeffding, bernstein))


def _ceil_log_ratio(num: float, den: float) -> int:
    """ceil(log(num)/log(den)) for num, den in (0, 1), computed at 50 digits."""
    with mpmath.workdps(50):
        n = int(mpmath.ceil(mpmath.log(mpmath.mpf(num)) / mpmath.log(mpmath.mpf(den))))
    return max(n, 1)


def min_samples_quantile(q: float, confidence: float) -> int:
    """The fewest samples for which :func:`quantile_ucb` can be finite: 1 − q^n ≥ confidence."""
    _check_level("q", q)
    _check_level("confidence", confidence)
    n = _ceil_log_ratio(1 - confidence, q)
    while 1 - q**n < confidence + _SLACK:  # match quantile_ucb's conservative comparison
        n += 1
    return n


def min_samples_rate(rate: float, confidence: float) -> int:
    """The fewest trials for which zero events give a Clopper–Pearson bound ≤ ``rate``.

    Zero events in n trials bound the rate by 1 − (1 − confidence)^{1/n}, which is ≤ rate
    once n ≥ log(1 − confidence)/log(1 − rate) (the "rule of three" for 95%).
    """
    _check_level("rate", rate)
    _check_level("confidence", confidence)
    n = _ceil_log_ratio(1 - confidence, 1 - rate)
    while clopper_pearson_upper(0, n, confidence) > rate:
        n += 1
    return n
