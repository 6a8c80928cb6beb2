"""Statistical bounds for evidence clauses: distribution-free upper confidence bounds and
sample-size planning (``bounds.stats.confidence``)."""

from kernel_contracts.bounds.stats.confidence import (
    binomial_cdf,
    clopper_pearson_lower,
    clopper_pearson_upper,
    mean_ucb,
    mean_ucb_moments,
    min_samples_quantile,
    min_samples_rate,
    quantile_ucb,
    quantile_ucb_rank,
)

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
