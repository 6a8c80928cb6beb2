"""Mergeable summaries: merges are exact and order-free, and the quantile sketch is sound."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts.contracts.model import Slice
from kernel_contracts.evidence.summary import (
    EDGES,
    MissingColumn,
    merge,
    merge_all,
    select,
    summarize,
)
from tests.support.strategies import examples

THRESHOLDS = (-1.0, 0.0, 0.01, 2.5)


def _same(a, b):
    assert a.count == b.count
    assert a.exact_sum == b.exact_sum
    assert a.minimum == b.minimum and a.maximum == b.maximum
    assert a.exceed == b.exceed
    assert a.is_exact == b.is_exact
    if a.is_exact:
        np.testing.assert_array_equal(a.values, b.values)
    else:
        np.testing.assert_array_equal(a.hist, b.hist)
    assert a.sum_sq == pytest.approx(b.sum_sq, rel=1e-12)


values = st.lists(
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False), min_size=0, max_size=60
)


@examples(80)
@given(values, values, values, st.sampled_from([4, 50, 1000]))
def test_merge_is_associative_commutative_and_equals_unsharded(a, b, c, cap):
    sa, sb, sc = (summarize(np.array(v), thresholds=THRESHOLDS, cap=cap) for v in (a, b, c))
    left = merge(merge(sa, sb), sc)
    right = merge(sa, merge(sb, sc))
    swapped = merge(sc, merge(sb, sa))
    whole = summarize(np.array(a + b + c), thresholds=THRESHOLDS, cap=cap)
    for other in (right, swapped, whole):
        _same(left, other)


def test_exact_sum_is_exact():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(5000) * np.exp(rng.uniform(-200, 200, 5000))
    x = np.r_[x, 5e-324, -5e-324, 0.0, 1e300, -1e300, 2.0**-1074]
    s = summarize(x)
    assert Fraction(s.exact_sum, 1 << 1126) == sum(Fraction(float(v)) for v in x)
    assert s.mean == float(sum(Fraction(float(v)) for v in x) / len(x))


def test_histogram_mode_is_sound_and_tight():
    rng = np.random.default_rng(1)
    x = np.r_[rng.lognormal(-5, 3, 20000), -rng.lognormal(-2, 2, 3000), np.zeros(50), 3e6]
    s = summarize(x, cap=1000)
    assert not s.is_exact
    truth = np.sort(x)
    up, lo = s.upper_values(), s.lower_values()
    assert (up >= truth).all() and (lo <= truth).all()
    # within one bin (2^(1/64)) of the truth away from zero and the overflow bins
    inner = (np.abs(truth) > 2.0**-39) & (np.abs(truth) < 2.0**19)
    assert (np.abs(up[inner]) <= np.abs(truth[inner]) * 2 ** (1 / 64) * (1 + 1e-12)).all()
    for k in (1, 7, 500, 11111, 23050):
        lo_k, hi_k = s.order_statistic(k)
        assert lo_k <= truth[k - 1] <= hi_k
    assert s.order_statistic(s.count) == (2.0**20, 3e6)  # overflow bin, capped by the max


def test_values_on_bin_edges_stay_in_their_bin():
    x = EDGES[10:-10:37].copy()
    s = summarize(x, cap=0)
    np.testing.assert_array_equal(s.upper_values(), np.sort(x))


def test_exceedances_and_spread():
    x = np.array([-2.0, -1.0, 0.0, 0.005, 0.01, 0.02, 3.0])
    s = summarize(x, thresholds=THRESHOLDS, cap=3)
    assert s.exceed == (5, 4, 2, 1)
    assert s.exceed_count(0.01) == 2
    with pytest.raises(KeyError):
        s.exceed_count(0.5)  # histogram mode: only tracked thresholds
    e = summarize(x)
    assert e.exceed_count(0.5) == 1
    assert s.mean == pytest.approx(x.mean())
    assert s.std == pytest.approx(x.std())
    assert s.as_dict()["sketch"] == "histogram"


def test_bad_inputs():
    with pytest.raises(ValueError, match="finite values only"):
        summarize(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="do not merge"):
        merge(summarize(np.ones(2), thresholds=(1,)), summarize(np.ones(2)))
    with pytest.raises(ValueError):
        summarize(np.ones(3)).order_statistic(4)


def test_merge_all_over_shards():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(3000)
    shards = np.array_split(x, 7)
    parts = [{("all", "m"): summarize(p, cap=256)} for p in shards]
    merged = merge_all(parts)[("all", "m")]
    _same(merged, summarize(x, cap=256))


def test_select_slices():
    cols = {
        "token_prob": np.array([0.001, 0.5, 0.009, 0.01, 0.9]),
        "position": np.array([0, 10, 2048, 4000, 5]),
        "prompt": np.array([0, 1, 2, 0, 1], dtype=np.int32),
    }
    tail = Slice("tail", token_prob=(0, 0.01))
    assert select(cols, tail).tolist() == [True, False, True, True, False]
    long = Slice("long", position=(2048, None))
    assert select(cols, long).tolist() == [False, False, True, True, False]
    math = Slice("math", prompt="^math/")
    names = ("math/1", "code/2", "math/3")
    assert select(cols, math, prompt_names=names).tolist() == [True, False, True, True, False]
    str_cols = {"prompt": np.array(["math/1", "x", "math/2"])}
    assert select(str_cols, math).tolist() == [True, False, True]
    assert select(cols, Slice("all")).all()
    with pytest.raises(MissingColumn) as err:
        select(cols, Slice("flat", entropy=(3.0, None)))
    assert str(err.value) == "entropy"


@examples(150)
@given(
    st.lists(
        st.one_of(
            st.floats(-1e300, 1e300, allow_nan=False, allow_infinity=False),
            st.floats(-1e-10, 1e-10, allow_nan=False),
            st.sampled_from([0.0, -0.0, 5e-324, 2.0**20, -(2.0**20), 2.0**-40]),
        ),
        min_size=1,
        max_size=80,
    )
)
def test_histogram_bounds_every_order_statistic(xs):
    """Sketch soundness on any finite values: the k-th value lies in order_statistic(k)."""
    x = np.array(xs)
    s = summarize(x, cap=0)
    truth = np.sort(x)
    assert (s.upper_values() >= truth).all() and (s.lower_values() <= truth).all()
    for k in range(1, len(xs) + 1):
        lo, hi = s.order_statistic(k)
        assert lo <= truth[k - 1] <= hi
