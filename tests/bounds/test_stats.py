"""Statistical bounds: exact values, coverage by simulation, sample-size planning, bad input."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from kernel_contracts.bounds import (
    clopper_pearson_upper,
    mean_ucb,
    min_samples_quantile,
    min_samples_rate,
    quantile_ucb,
)
from kernel_contracts.bounds.stats import binomial_cdf


def _mc_floor(conf: float, reps: int) -> float:
    """Nominal coverage minus 4 Monte-Carlo standard errors."""
    return conf - 4 * math.sqrt(conf * (1 - conf) / reps)


@pytest.mark.parametrize(
    ("k", "n", "conf", "expected"),
    [
        (0, 10, 0.95, 1 - 0.05 ** (1 / 10)),  # closed form (1 − p)^n = α
        (0, 300, 0.95, 1 - 0.05 ** (1 / 300)),
        (10, 10, 0.95, 1.0),
    ],
)
def test_clopper_pearson_closed_forms(k, n, conf, expected):
    assert clopper_pearson_upper(k, n, conf) == pytest.approx(expected, rel=1e-8)
    assert clopper_pearson_upper(k, n, conf) >= expected


@pytest.mark.parametrize(("k", "n", "conf"), [(1, 10, 0.95), (5, 100, 0.9), (37, 1000, 0.99)])
def test_clopper_pearson_matches_beta_quantile(k, n, conf):
    """Independent check: the regularised incomplete beta at the bound equals 1 − conf."""
    p = clopper_pearson_upper(k, n, conf)
    with mpmath.workdps(30):
        tail = mpmath.betainc(k + 1, n - k, 0, p, regularized=True)  # P(Bin(n, p) ≥ k + 1)
    assert float(1 - tail) == pytest.approx(1 - conf, rel=1e-7)
    assert float(1 - tail) <= (1 - conf) * (1 + 1e-8)  # conservative side


def test_clopper_pearson_textbook_value():
    # one event in ten trials, 95% one-sided: 0.3942 (standard tables)
    assert clopper_pearson_upper(1, 10, 0.95) == pytest.approx(0.3942, abs=1e-4)


@pytest.mark.parametrize("p", [0.001, 0.05, 0.3])
def test_clopper_pearson_exact_coverage(p):
    """Coverage computed exactly over the binomial law, not simulated."""
    n, conf = 200, 0.9
    covered = sum(
        binomial_cdf(k, n, p) - binomial_cdf(k - 1, n, p)
        for k in range(n + 1)
        if clopper_pearson_upper(k, n, conf) >= p
    )
    assert covered >= conf - 1e-9


@pytest.mark.parametrize("dist", ["exponential", "discrete", "uniform"])
def test_quantile_ucb_coverage(dist):
    rng = np.random.default_rng(1)
    q, conf, n, reps = 0.9, 0.9, 150, 1500
    if dist == "exponential":
        draw, true = (lambda: rng.exponential(1.0, n)), -math.log(1 - q)
    elif dist == "discrete":  # atoms: the quantile sits on an atom
        draw, true = (lambda: rng.integers(0, 5, n).astype(float)), 4.0
    else:
        draw, true = (lambda: rng.uniform(0, 1, n)), q
    hits = sum(quantile_ucb(draw(), q, conf) >= true for _ in range(reps))
    assert hits / reps >= _mc_floor(conf, reps)


def test_quantile_ucb_too_few_samples_is_inf():
    n = min_samples_quantile(0.999, 0.95)
    assert n == math.ceil(math.log(0.05) / math.log(0.999))
    x = np.arange(n, dtype=float)
    assert quantile_ucb(x, 0.999, 0.95) == x.max()
    assert quantile_ucb(x[:-1], 0.999, 0.95) == math.inf
    assert quantile_ucb([], 0.5, 0.9) == math.inf


def test_min_samples_rate_rule_of_three():
    n = min_samples_rate(0.001, 0.95)
    assert clopper_pearson_upper(0, n, 0.95) <= 0.001 < clopper_pearson_upper(0, n - 1, 0.95)
    assert abs(n - 3 / 0.001) < 10  # the rule of three


@pytest.mark.parametrize("kind", ["bernoulli", "beta", "low_variance"])
def test_mean_ucb_coverage(kind):
    rng = np.random.default_rng(2)
    conf, n, reps = 0.9, 100, 2000
    if kind == "bernoulli":
        draw, true = (lambda: (rng.random(n) < 0.1).astype(float)), 0.1
    elif kind == "beta":
        draw, true = (lambda: rng.beta(2, 5, n)), 2 / 7
    else:
        draw, true = (lambda: 0.5 + 0.01 * rng.random(n)), 0.505
    hits = sum(mean_ucb(draw(), 0.0, 1.0, conf) >= true for _ in range(reps))
    assert hits / reps >= _mc_floor(conf, reps)


def test_mean_ucb_bernstein_helps_low_variance():
    x = np.full(10_000, 0.5)
    hoeffding = 0.5 + math.sqrt(math.log(1 / 0.025) / (2 * x.size))
    assert mean_ucb(x, 0.0, 1.0, 0.95) < hoeffding


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: quantile_ucb([1.0, math.nan], 0.5, 0.9), "finite"),
        (lambda: quantile_ucb([1.0], 1.5, 0.9), "q must lie"),
        (lambda: mean_ucb([2.0], 0.0, 1.0, 0.9), "must lie in"),
        (lambda: clopper_pearson_upper(5, 3, 0.9), "0 ≤ k ≤ n"),
        (lambda: clopper_pearson_upper(1, 3, 1.0), "confidence must lie"),
    ],
)
def test_bad_input_is_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
