"""No false 'held': when the true statistic exceeds the limit, held comes at most 1 − c of the time.

Each test draws many samples from a law whose statistic is known, sets the limit just below
the truth, and counts how often the verdict is (wrongly) held, with exact and with histogram
summaries. The count must stay within the confidence level (plus three binomial standard
deviations of Monte-Carlo noise).
"""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np
import pytest

from kernel_contracts.contracts.model import StatisticalClause
from kernel_contracts.evidence.sources import Source
from kernel_contracts.evidence.summary import summarize
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.decide.verdicts import statistical_result

TRIALS = 300


def _source(values, col, *, cap, thresholds=()):
    s = summarize(values, thresholds=thresholds, cap=cap)
    empty = MappingProxyType({})
    return Source(
        "emulate",
        "test",
        "0" * 64,
        MappingProxyType({("all", col): s}),
        empty,
        empty,
        empty,
        empty,
    )


def _rate_bound(alpha):
    return alpha + 3 * math.sqrt(alpha * (1 - alpha) / TRIALS)


@pytest.mark.parametrize("cap", [1 << 18, 40])
def test_quantile_never_falsely_held(cap):
    rng = np.random.default_rng(0)
    clause = StatisticalClause(
        id="S", metric="tv", statistic="quantile", q=0.9, max=0.895, confidence=0.9
    )
    held = violated = 0
    for _ in range(TRIALS):
        src = _source(rng.uniform(0, 1, 400), "tv", cap=cap)  # true 0.9-quantile 0.9 > 0.895
        status = statistical_result(clause, "all", src).status
        held += status is Status.HELD
        violated += status is Status.VIOLATED
    assert held / TRIALS <= _rate_bound(0.1)
    # and a limit just above the truth is rarely violated
    clause_above = StatisticalClause(
        id="S", metric="tv", statistic="quantile", q=0.9, max=0.905, confidence=0.9
    )
    wrong = sum(
        statistical_result(
            clause_above, "all", _source(rng.uniform(0, 1, 400), "tv", cap=cap)
        ).status
        is Status.VIOLATED
        for _ in range(TRIALS)
    )
    assert wrong / TRIALS <= _rate_bound(0.1)


def test_exceed_rate_never_falsely_held():
    rng = np.random.default_rng(1)
    clause = StatisticalClause(
        id="E",
        metric="abs_log_ratio",
        statistic="exceed_rate",
        threshold=0.5,
        max=0.09,
        confidence=0.9,
    )
    held = 0
    for _ in range(TRIALS):
        x = (rng.uniform(0, 1, 500) < 0.1).astype(float)  # P(x > 0.5) = 0.1 > 0.09
        src = _source(x, "abs_log_ratio", cap=50, thresholds=(0.5,))
        held += statistical_result(clause, "all", src).status is Status.HELD
    assert held / TRIALS <= _rate_bound(0.1)


def test_bounded_mean_never_falsely_held():
    rng = np.random.default_rng(2)
    clause = StatisticalClause(id="M", metric="tv", statistic="mean", max=0.29, confidence=0.9)
    held = 0
    for _ in range(TRIALS):
        x = rng.beta(0.6, 1.4, 300)  # mean 0.3 > 0.29
        held += statistical_result(clause, "all", _source(x, "tv", cap=1 << 18)).status is (
            Status.HELD
        )
    assert held / TRIALS <= _rate_bound(0.1)


def test_histogram_mean_is_not_decided():
    clause = StatisticalClause(id="M", metric="tv", statistic="mean", max=0.9, confidence=0.9)
    r = statistical_result(clause, "all", _source(np.full(100, 0.1), "tv", cap=10))
    assert r.status is Status.INCONCLUSIVE
    assert r.reason == "the bounded-mean bound needs exact values and this summary is a histogram"
