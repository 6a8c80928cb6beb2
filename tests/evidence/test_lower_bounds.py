"""``evidence.lower.lower_bounds`` against 50-digit arithmetic: on every pair of logged
log-probs (random, nearly equal, tiny, near 1, subnormal, 0, −inf, a hair above 0, corrected by
a log kept mass) each bound is at most the exact value of the logged doubles, and within a
relative 1e-12 of it wherever that value is a normal double (up to the largest double)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts.evidence.lower import lower_bounds, possible
from kernel_contracts.evidence.table import from_logprobs
from tests.support.strategies import examples

DIGITS = 50
NORMAL = 2.0**-1000  # an exact value at least this is held to the relative tolerance
MAX = float(np.finfo(np.float64).max)
REL = 1e-12
COLUMNS = ("logit_oscillation", "logit_drift", "tv", "kl")


def _exact(lt: float, lr: float, T: float, kept: float | None = None) -> tuple[dict, bool]:
    """The four bounds of the logged doubles, each log-prob read as min(ℓ, 0), to 50 digits,
    and whether the bounds must be close to them."""
    with mpmath.workdps(DIGITS):
        a = mpmath.mpf(min(lt, 0.0))
        b = mpmath.mpf(min(lr, 0.0))
        if kept is not None:
            b = mpmath.fadd(b, mpmath.mpf(min(kept, 0.0)), exact=True)
        if mpmath.isinf(a) and mpmath.isinf(b):
            return dict.fromkeys(COLUMNS, mpmath.mpf(0)), True
        d = abs(a - b)
        top = max(a, b)
        gap = mpmath.exp(top) * -mpmath.expm1(-d)  # e^a − e^b without cancellation
        osc = mpmath.mpf(T) * d
        bounds = {"logit_oscillation": osc, "logit_drift": osc / 2, "tv": gap, "kl": 2 * gap**2}
    return bounds, b >= -MAX  # ℓ' beyond −max (ℓ'_p + log S overflowing) is only bounded


def _check(lt, lr, T, kept=None) -> None:
    lt, lr = np.asarray(lt, np.float64), np.asarray(lr, np.float64)
    k = None if kept is None else np.asarray(kept, np.float64)
    got = lower_bounds(lt, lr, T, log_kept_mass=k)
    for i in range(lt.size):
        exact, tight = _exact(float(lt[i]), float(lr[i]), T, None if k is None else float(k[i]))
        for col in COLUMNS:
            bound, true = mpmath.mpf(float(got[col][i])), exact[col]
            loose = tight and NORMAL <= true <= MAX and bound < true * (1 - REL)
            ok = 0 <= bound <= true and not loose
            assert ok, f"{col} at ℓ={lt[i]!r}, ℓ'={lr[i]!r}, T={T!r}: {bound} vs exact {true}"


# a log-prob: random, near 0 (π ≈ 1), tiny, subnormal π, 0, −inf, a hair above 0
_logprob = st.one_of(
    st.floats(-60.0, 0.0),
    st.floats(-1e-3, 0.0),
    st.floats(-1e-300, 0.0),
    st.floats(-760.0, -700.0),
    st.floats(-1e308, -1e3),
    st.sampled_from([0.0, -0.0, -math.inf, -5e-324, -2.2250738585072014e-308, 1e-6, 1e-3]),
    st.floats(0.0, 1e-3, exclude_min=True),
)
_temperature = st.one_of(st.floats(0.05, 20.0), st.sampled_from([1.0, 0.7, 1e-3, 1e3, 1e300]))


@st.composite
def _pair(draw):
    """(ℓ, ℓ'): independent, or ℓ' a few ulps (or a small relative step) from ℓ."""
    lt = draw(_logprob)
    how = draw(st.sampled_from(["independent", "ulps", "relative"]))
    if how == "independent" or not math.isfinite(lt):
        return lt, draw(_logprob)
    if how == "ulps":
        lr = lt
        for _ in range(draw(st.integers(1, 40))):
            lr = math.nextafter(lr, -math.inf if draw(st.booleans()) else math.inf)
        return lt, lr
    return lt, lt * (1 + draw(st.floats(-1e-9, 1e-9)))


@examples(150)
@given(st.lists(_pair(), min_size=1, max_size=6), _temperature)
def test_every_lower_bound_is_at_most_the_exact_value_and_close_to_it(pairs, T):
    lt, lr = zip(*pairs, strict=True)
    _check(list(lt), list(lr), T)


@examples(100)
@given(st.lists(st.tuples(_pair(), _logprob), min_size=1, max_size=4), _temperature)
def test_a_log_kept_mass_correction_is_enclosed_not_rounded(items, T):
    # ℓ' = ℓ'_p + log S: the double sum is one rounding away from the exact one
    lt = [p[0] for p, _ in items]
    lr = [p[1] for p, _ in items]
    kept = [s for _, s in items]
    _check(lt, lr, T, kept)


def test_thousands_of_nearly_equal_pairs():
    # pairs a few ulps apart, whose exps round to the same double or to neighbours: the
    # difference of the two exps put a fifth of these above the exact gap, up to 2,000 times
    rng = np.random.default_rng(2026)
    n = 4_000
    lt = -(10.0 ** rng.uniform(-8, 1, n))
    steps = rng.integers(1, 64, n)
    lr = lt - steps * np.spacing(lt)
    _check(lt, lr, 1.0)


def test_the_cancellation_case_gives_the_exact_gap_not_an_ulp_of_one():
    lt, lr = -3.155056775283876e-05, -3.155056775283882e-05
    got = lower_bounds(np.array([lt]), np.array([lr]), 1.0)
    assert float(np.exp(lt) - np.exp(lr)) == pytest.approx(1.11e-16, rel=1e-2)  # the old value
    assert got["tv"][0] == pytest.approx(6.0986372e-20, rel=1e-7)
    assert got["tv"][0] <= float(_exact(lt, lr, 1.0)[0]["tv"])


def test_a_log_prob_above_zero_is_read_as_zero_and_never_widens_a_gap():
    lt = np.array([1e-6, 1e-6, 1e-3, -0.5, 0.0])
    lr = np.array([0.0, 2e-4, -0.1, 1e-4, -math.inf])
    got = lower_bounds(lt, lr, 1.0)
    assert possible(lt).tolist() == [0.0, 0.0, 0.0, -0.5, 0.0]
    assert got["logit_drift"][:2].tolist() == [0.0, 0.0]  # both read as 0: nothing is shown
    assert got["logit_oscillation"][2] == pytest.approx(0.1, rel=1e-12)  # not 0.101
    assert got["logit_oscillation"][3] == pytest.approx(0.5, rel=1e-12)
    assert got["tv"][4] == pytest.approx(1.0, rel=1e-12)  # π'(y) = 0: the whole mass
    assert math.isinf(got["logit_oscillation"][4])


def test_nothing_known_is_the_trivial_bound():
    got = lower_bounds(np.array([-math.inf, math.nan]), np.array([-math.inf, -0.5]), 2.0)
    for col in COLUMNS:
        assert got[col].tolist() == [0.0, 0.0]


def test_an_overflowing_oscillation_stays_finite_and_below_the_exact_value():
    got = lower_bounds(np.array([-1e308]), np.array([0.0]), 10.0)
    assert math.isfinite(got["logit_oscillation"][0])
    assert got["logit_oscillation"][0] >= MAX * (1 - REL)


def test_the_token_table_forms_its_bounds_from_the_two_logged_log_probs():
    lt = np.array([-3.155056775283876e-05, -0.5])
    lr = np.array([-3.155056775283882e-05, -0.7])
    kept = np.array([0.0, -0.1])
    where = np.zeros(2, np.int64)
    table = from_logprobs(
        lt - (lr + kept), lt, where, where, rollout_logprob=lr, log_kept_mass=kept, temperature=2.0
    )
    expected = lower_bounds(lt, lr, 2.0, log_kept_mass=kept)
    for col in COLUMNS:
        assert table[col].tolist() == expected[col].tolist()
    with pytest.raises(TypeError, match="need rollout_logprob"):
        from_logprobs(lt - lr, lt, where, where, temperature=1.0)
    assert set(from_logprobs(lt - lr, lt, where, where)).isdisjoint(COLUMNS)
