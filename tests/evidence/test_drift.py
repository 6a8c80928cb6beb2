"""The drift table's cells merge exactly: any split into shards, merged in any order, gives the
one-pass cell and the same table row."""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts.evidence.drift import (
    ROW_COLUMNS,
    drift_cell,
    merge,
    merge_tables,
    quantile,
    table_rows,
)
from kernel_contracts.evidence.summary import summarize
from tests.support.strategies import examples

SPECIAL = (np.nan, np.inf, -np.inf, 0.0, 5e-324)


@st.composite
def token_tables(draw):
    """Measured columns of up to 60 tokens, some non-finite, and a split into shards."""
    n = draw(st.integers(0, 60))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([1e-7, 1e-3, 1.0, 30.0]))
    cols = {
        "drift": np.abs(rng.normal(0, scale, n)),
        "tv": rng.uniform(0, min(1.0, scale), n),
        "log_ratio": rng.normal(0, scale, n),
        "top1_flip": (rng.random(n) < 0.2).astype(np.int64),
    }
    for name in ("drift", "tv", "log_ratio"):
        for i in draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=3)) if n else []:
            cols[name][i] = SPECIAL[draw(st.integers(0, len(SPECIAL) - 1))]
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=5)))
    order = draw(st.permutations(range(len(cuts) + 1)))
    return cols, cuts, order


def _rows_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        same = (isinstance(x, float) and math.isnan(x) and math.isnan(y)) or x == y
        assert same, (k, x, y)


def _same_cell(a, b) -> None:
    assert (a.tokens, a.flips, a.nonfinite) == (b.tokens, b.flips, b.nonfinite)
    for name in ("drift", "tv", "abs_log_w"):
        s, t = getattr(a, name), getattr(b, name)
        assert (s.count, s.exact_sum, s.minimum, s.maximum) == (t.count, t.exact_sum, t.minimum,
                                                                  t.maximum)  # fmt: skip
        assert s.is_exact == t.is_exact
        kept = (s.values, t.values) if s.is_exact else (s.hist, t.hist)
        np.testing.assert_array_equal(*kept)
    _rows_equal(a.row(), b.row())


@examples(60)
@given(token_tables(), st.sampled_from([3, 16, 1000]), st.randoms(use_true_random=False))
def test_merged_shards_equal_the_one_pass_cell(table, cap, rnd):
    cols, cuts, order = table
    bounds = [0, *cuts, len(cols["drift"])]
    shards = [
        drift_cell(*(cols[k][lo:hi] for k in ("drift", "tv", "log_ratio", "top1_flip")), cap=cap)
        for lo, hi in itertools.pairwise(bounds)
    ]
    whole = drift_cell(cols["drift"], cols["tv"], cols["log_ratio"], cols["top1_flip"], cap=cap)
    # in the drawn order, folded left; and as a random binary tree
    left = shards[order[0]]
    for i in order[1:]:
        left = merge(left, shards[i])
    pool = list(shards)
    while len(pool) > 1:
        a = pool.pop(rnd.randrange(len(pool)))
        b = pool.pop(rnd.randrange(len(pool)))
        pool.append(merge(a, b) if rnd.random() < 0.5 else merge(b, a))
    _same_cell(left, whole)
    _same_cell(pool[0], whole)


def test_row_values_and_non_finite_tokens():
    drift = np.array([0.5, 0.25, np.inf, 1.0])
    tv = np.array([0.1, 0.0, 0.3, 0.2])
    log_ratio = np.array([-0.2, 0.1, np.nan, 0.4])
    cell = drift_cell(drift, tv, log_ratio, np.array([0, 1, 1, 0]))
    row = cell.row()
    assert row["tokens"] == 4 and row["nonfinite"] == 1 and row["top1_flip_rate"] == 0.5
    assert row["tv_mean"] == 0.15 and row["tv_max"] == 0.3
    assert row["drift_max"] == np.finfo(np.float64).max  # the masked token shows in the max
    assert row["abs_log_w_q50"] == 0.2  # 2nd smallest of 0.1, 0.2, 0.4, max
    assert row["abs_log_w_q90"] == np.finfo(np.float64).max


def test_quantiles_past_the_cap_never_fall_below_the_truth():
    x = np.random.default_rng(1).lognormal(-4, 2, 500)
    s = summarize(x, cap=10)
    assert not s.is_exact
    for q in (0.5, 0.9, 0.99):
        true = np.sort(x)[math.ceil(q * x.size) - 1]
        assert true <= quantile(s, q) <= true * 2 ** (1 / 64)


def test_tables_merge_by_slice_and_rows_are_sorted():
    a = drift_cell(np.ones(2), np.zeros(2), np.zeros(2), np.zeros(2))
    b = drift_cell(np.full(3, 2.0), np.zeros(3), np.zeros(3), np.ones(3))
    k1, k2 = ("h100-fp8", 16, 1, 16), ("bf16", 1, 17, 32)
    merged = merge_tables([{k1: a}, {k1: b, k2: a}])
    rows = table_rows(merged)
    assert [r["preset"] for r in rows] == ["bf16", "h100-fp8"]
    assert list(rows[0]) == list(ROW_COLUMNS)
    assert rows[1]["tokens"] == 5 and rows[1]["drift_mean"] == 1.6
    assert rows[1]["top1_flip_rate"] == 0.6
    assert math.isnan(drift_cell(*(np.zeros(0),) * 4).row()["drift_mean"])
