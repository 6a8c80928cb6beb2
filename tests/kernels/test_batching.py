"""Batch variance: under ``dynamic`` a row's bits depend on its batch; under ``fixed`` not."""

from __future__ import annotations

import dataclasses
import itertools

import jax
import numpy as np
import pytest

from kernel_contracts.contracts import AttentionSpec, preset
from kernel_contracts.kernels._matmul import matmul
from kernel_contracts.kernels.attention import PagedKVCache, decode_attention, kv_splits
from kernel_contracts.kernels.batching import reduction_splits, split_class


def test_reduction_splits():
    dyn = [reduction_splits(b, 8192, "dynamic") for b in (1, 16, 17, 32, 64, 256, 1024, 4096)]
    assert dyn == [64, 64, 32, 32, 16, 4, 1, 1]
    assert all(a >= b for a, b in itertools.pairwise(dyn))  # never grows with batch
    assert reduction_splits(1, 300, "dynamic") == 2  # every part keeps >= 128 elements
    assert reduction_splits(1, 100, "dynamic") == 1
    assert {reduction_splits(b, 8192, "fixed") for b in (1, 7, 300, 5000)} == {1}
    with pytest.raises(ValueError, match="batching must be 'dynamic' or 'fixed', got 'auto'"):
        reduction_splits(1, 10, "auto")
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        reduction_splits(0, 10, "fixed")


def _row_in_batch(row, others, w, spec, batching):
    """Serve ``row`` inside a batch of ``1 + len(others)`` rows; return its result's bits."""
    batch = np.concatenate([row[None], others])
    splits = reduction_splits(batch.shape[0], w.shape[0], batching)
    return np.asarray(matmul(batch, w, spec, splits=splits))[0].view(np.uint32)


FAST = preset("h100-fp8-fast-accum").matmul
# promoted every 128, the split only re-associates float32 sums; bfloat16 output rounding hides
# that almost always, so the float32-output variant shows it
H100_F32 = dataclasses.replace(preset("h100-fp8").matmul, output="float32")
BF16_F32 = dataclasses.replace(preset("bf16").matmul, output="float32")


@pytest.mark.parametrize("spec", [FAST, H100_F32, BF16_F32], ids=["fast-accum", "h100", "bf16"])
def test_matmul_batch_variance(spec):
    rng = np.random.default_rng(0)
    k = 2048
    row = rng.standard_normal(k).astype(np.float32)
    w = rng.standard_normal((k, 64)).astype(np.float32)
    small = np.zeros((0, k), np.float32)
    big = rng.standard_normal((255, k)).astype(np.float32)
    big[:] = row  # same rows, so per-tensor activation scales cannot explain a difference
    alone = _row_in_batch(row, small, w, spec, "dynamic")
    crowded = _row_in_batch(row, big, w, spec, "dynamic")
    assert (alone != crowded).any()  # batch 1 -> 16 splits, batch 256 -> 4 splits
    fixed_alone = _row_in_batch(row, small, w, spec, "fixed")
    fixed_crowded = _row_in_batch(row, big, w, spec, "fixed")
    assert np.array_equal(fixed_alone, fixed_crowded)


@pytest.mark.slow
def test_attention_batch_variance():
    rng = np.random.default_rng(1)
    spec = AttentionSpec(kv_cache="float8_e4m3fn", page_size=16, tiles="adaptive")
    heads, dim, length = 2, 32, 600
    cache = PagedKVCache.create(1, 1024, heads, dim, spec)
    k = rng.standard_normal((length, 1, heads, dim)).astype(np.float32)
    v = rng.standard_normal((length, 1, heads, dim)).astype(np.float32)
    cache = jax.jit(
        lambda c, ks, vs: jax.lax.scan(lambda c, kv: (c.append(*kv), None), c, (ks, vs))[0]
    )(cache, k, v)
    q = rng.standard_normal((1, heads, dim)).astype(np.float32)

    def bits(batch_size, batching):
        f = jax.jit(
            lambda qq, c: decode_attention(qq, c, spec, batch_size=batch_size, batching=batching)
        )
        return np.asarray(f(q, cache)).view(np.uint32)

    assert (bits(1, "dynamic") != bits(512, "dynamic")).any()
    assert np.array_equal(bits(1, "fixed"), bits(512, "fixed"))


# -- split classes: batches that share one compiled program -------------------------------


def test_a_split_class_has_the_splits_of_each_of_its_batches():
    for batch in range(1, 1100):
        cls = split_class(batch, "dynamic")
        assert cls >= batch
        assert all(
            reduction_splits(cls, k, "dynamic") == reduction_splits(batch, k, "dynamic")
            for k in (1, 127, 128, 256, 512, 4096, 8192, 1 << 20)
        )
    # the largest such batch: one more row starts a new 16-row tile, and so other splits
    assert [split_class(b, "dynamic") for b in (1, 16, 17, 32, 33)] == [16, 16, 32, 32, 48]
    assert reduction_splits(17, 8192, "dynamic") != reduction_splits(16, 8192, "dynamic")
    assert {split_class(b, "fixed") for b in (1, 7, 300)} == {1}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8"])
def test_a_split_class_of_a_bad_batch_is_an_error(bad):
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        split_class(bad, "dynamic")
    with pytest.raises(ValueError, match="batching must be"):
        split_class(8, "static")


def test_kv_splits_are_the_decode_attention_splits():
    """``kv_splits`` is what ``decode_attention`` uses: the reduction splits of the cache's
    whole pages, at most one per page."""
    assert kv_splits(1, 100, 16, "dynamic") == min(reduction_splits(1, 112, "dynamic"), 7)
    assert kv_splits(1, 2048, 16, "dynamic") == 16
    assert kv_splits(1, 4096, 16, "dynamic") == 32
    assert kv_splits(1, 20, 16, "dynamic") == 1
    assert kv_splits(64, 4096, 16, "fixed") == 1
