"""Training attention (exact) and paged, tiled decode attention."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from kernel_contracts.contracts import AttentionSpec
from kernel_contracts.kernels.attention import (
    PagedKVCache,
    _tile_sums,
    decode_attention,
    reference_attention,
    tile_pages,
)
from kernel_contracts.kernels.numerics.formats import saturating_cast_np


def naive_attention(q, k, v, causal=True):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = np.einsum("hqd,hkd->hqk", q, k) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("hqk,hkd->hqd", p / p.sum(-1, keepdims=True), v)


def test_reference_attention_is_exact_softmax_attention():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 9, 8)).astype(np.float32) for _ in range(3))
    for causal in (True, False):
        got = reference_attention(q, k, v, causal=causal)
        np.testing.assert_allclose(got, naive_attention(q, k, v, causal), rtol=2e-6, atol=2e-6)
    jitted = jax.jit(reference_attention)(q, k, v)
    np.testing.assert_allclose(jitted, reference_attention(q, k, v), rtol=1e-6, atol=1e-6)


def fill(spec, k, v, max_len=None):
    seqs, length = k.shape[0], k.shape[1]
    cache = PagedKVCache.create(seqs, max_len or length, k.shape[2], k.shape[3], spec)
    return append_all(cache, jnp.moveaxis(k, 1, 0), jnp.moveaxis(v, 1, 0))


@jax.jit
def append_all(cache, ks, vs):
    """Append position after position (a scan of ``append``)."""
    return jax.lax.scan(lambda c, kv: (c.append(*kv), None), cache, (ks, vs))[0]


@pytest.mark.parametrize(
    ("kv", "tiles", "tol"),
    [
        ("float32", "full", 1e-6),
        ("float32", "adaptive", 1e-6),
        ("float32", "8", 1e-6),
        ("bfloat16", "adaptive", 2e-2),
        ("float8_e4m3fn", "adaptive", 2e-1),
    ],
)
def test_decode_matches_training_attention(kv, tiles, tol):
    rng = np.random.default_rng(1)
    seqs, length, heads, dim = 2, 45, 2, 16
    spec = AttentionSpec(kv_cache=kv, page_size=4, tiles=tiles)
    q = rng.standard_normal((seqs, length, heads, dim)).astype(np.float32)
    k = rng.standard_normal((seqs, length, heads, dim)).astype(np.float32)
    v = rng.standard_normal((seqs, length, heads, dim)).astype(np.float32)
    cache = fill(spec, k, v, max_len=64)
    out = decode_attention(q[:, -1], cache, spec, batch_size=seqs)
    t = lambda a: np.moveaxis(a, 2, 1)  # noqa: E731  (seqs, heads, pos, dim)
    want = np.stack([naive_attention(t(q)[s], t(k)[s], t(v)[s])[:, -1] for s in range(seqs)])
    err = float(np.max(np.abs(np.asarray(out) - want)))
    assert err <= tol
    if kv != "float32":
        assert err > 1e-6  # the low-precision cache is what makes the difference
        # and decode over the same (rounded) cache contents agrees with exact attention
        kq = saturating_cast_np(k, kv)
        vq = saturating_cast_np(v, kv)
        want_q = np.stack(
            [naive_attention(t(q)[s], t(kq)[s], t(vq)[s])[:, -1] for s in range(seqs)]
        )
        np.testing.assert_allclose(out, want_q, rtol=1e-5, atol=1e-5)


def test_cache_is_paged_low_precision_and_pure():
    spec = AttentionSpec(kv_cache="float8_e4m3fn", page_size=4, tiles="adaptive")
    cache = PagedKVCache.create(3, 10, 1, 2, spec)
    assert cache.dtype == ml_dtypes.float8_e4m3fn  # held as its bit patterns
    assert cache.k_pages.dtype == np.uint8
    assert cache.page_table.shape == (3, 3) and cache.capacity == 12
    assert len(set(np.asarray(cache.page_table).ravel().tolist())) == 9  # distinct pages
    assert np.asarray(cache.page_table)[0, 1] == 3  # interleaved with the other sequences
    k = jnp.full((3, 1, 2), 1000.0)  # beyond e4m3's max: saturates
    new = cache.append(k, -k)
    assert int(cache.lengths[0]) == 0 and int(new.lengths[0]) == 1  # the old one is unchanged
    keys, values = new.gather()
    assert float(keys[0, 0, 0, 0]) == 448.0 and float(values[2, 0, 0, 1]) == -448.0
    stored = np.asarray(new.k_pages)[int(new.page_table[0, 0]), 0, 0, 0]
    assert stored == 0x7E  # e4m3fn's largest finite pattern, S.1111.110
    leaves = jax.tree_util.tree_leaves(new)
    assert len(leaves) == 4  # page_size and format are static metadata
    full = new
    for _ in range(11):
        full = full.append(k, k)
    with pytest.raises(ValueError, match=r"PagedKVCache is full \(12 positions per sequence\)"):
        full.append(k, k)


@pytest.mark.parametrize("kv", ["float8_e4m3fn", "float8_e5m2", "bfloat16"])
def test_appending_one_position_converts_no_page(kv):
    """An append writes one position's bit patterns into integer pages. Pages of an 8-bit
    float type made XLA's CPU backend widen the whole cache to float16 and narrow it back at
    every append (a copy of every page per decoding step, most of a step's time)."""
    spec = AttentionSpec(kv_cache=kv, page_size=4, tiles="adaptive")
    cache = PagedKVCache.create(3, 10, 1, 2, spec)
    k = jnp.ones((3, 1, 2))
    hlo = jax.jit(lambda c, k, v: c.append(k, v)).lower(cache, k, k).compile().as_text()
    pages = ",".join(map(str, cache.k_pages.shape))
    as_floats = re.findall(rf"= (?:f|bf)\w*\[{pages}\]", hlo)  # a value of every page, in floats
    assert as_floats == []
    assert re.search(rf"= u\d+\[{pages}\]", hlo)  # the pages themselves, as integers


def test_adaptive_tiles_grow_with_length():
    spec = AttentionSpec(kv_cache="bfloat16", page_size=16, tiles="adaptive")
    sizes = [int(tile_pages(jnp.int32(n), spec, 1024)) for n in (1, 256, 257, 1024, 4096, 9000)]
    assert sizes == [1, 1, 2, 4, 16, 16]
    assert int(tile_pages(jnp.int32(5), AttentionSpec("float32", 16, "40"), 8)) == 3
    assert int(tile_pages(jnp.int32(5), AttentionSpec("float32", 16, "full"), 8)) == 8
    with pytest.raises(ValueError, match=r"attention\.tiles must be 'full', 'adaptive' or a"):
        tile_pages(jnp.int32(5), AttentionSpec("float32", 16, "big"), 8)


@pytest.mark.slow
def test_tile_size_changes_bits_and_jit_agrees():
    rng = np.random.default_rng(2)
    k = rng.standard_normal((1, 200, 2, 16)).astype(np.float32)
    v = rng.standard_normal((1, 200, 2, 16)).astype(np.float32)
    q = rng.standard_normal((1, 2, 16)).astype(np.float32)
    outs = {}
    # most of its time is the eager call (op by op, about 9 CPU s of 21): the check without jit
    for tiles in ("full", "4"):
        spec = AttentionSpec(kv_cache="bfloat16", page_size=4, tiles=tiles)
        cache = fill(spec, k, v)
        jitted = jax.jit(
            lambda qq, c, spec=spec: decode_attention(qq, c, spec, batch_size=1, batching="fixed")
        )
        outs[tiles] = np.asarray(jitted(q, cache))
        if tiles == "4":  # with and without jit
            eager = decode_attention(q, cache, spec, batch_size=1, batching="fixed")
            np.testing.assert_array_equal(eager, outs[tiles])
    assert not np.array_equal(outs["full"], outs["4"])  # tiling changes the rounding
    np.testing.assert_allclose(outs["full"], outs["4"], rtol=1e-5, atol=1e-6)


def test_empty_sequence_gives_zeros():
    spec = AttentionSpec(kv_cache="float32", page_size=4, tiles="adaptive")
    cache = PagedKVCache.create(2, 8, 1, 4, spec)
    out = jax.jit(lambda q, c: decode_attention(q, c, spec, batch_size=2))(
        jnp.ones((2, 1, 4)), cache
    )
    assert np.array_equal(np.asarray(out), np.zeros((2, 1, 4)))


def _tree_np(v):
    """The pairwise tree along the last axis (padded with 0 to a power of two; first half plus
    second half), in NumPy float64."""
    width = 1 << max(v.shape[-1] - 1, 0).bit_length()
    v = np.concatenate([v, np.zeros((*v.shape[:-1], width - v.shape[-1]))], axis=-1)
    while v.shape[-1] > 1:
        half = v.shape[-1] // 2
        v = v[..., :half] + v[..., half:]
    return v[..., 0]


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_tile_sums_are_page_trees_then_tile_trees_rounded_once(tp):
    """``a_t``: exact products, the tree over each page's positions, then over each tile's
    pages, in binary64, one rounding to float32: bit for bit against NumPy."""
    rng = np.random.default_rng(tp)
    heads, pages, size, dim = 2, 6, 4, 3
    p = rng.uniform(0, 1, (heads, pages, size)).astype(np.float32)
    values = rng.normal(size=(pages * size, heads, dim)).astype(np.float32)
    in_tile = (np.arange(pages) // tp)[None, :] == np.arange(pages)[:, None]
    got = np.asarray(_tile_sums(jnp.asarray(p), jnp.asarray(values), jnp.asarray(in_tile)))
    v = values.astype(np.float64).reshape(pages, size, heads, dim).transpose(2, 0, 3, 1)
    per_page = _tree_np(p.astype(np.float64)[:, :, None, :] * v)  # heads, pages, dim
    masked = np.where(in_tile[None, :, None, :], per_page.transpose(0, 2, 1)[:, None], 0.0)
    want = _tree_np(masked).astype(np.float32)  # heads, tiles, dim
    assert got.shape == (heads, pages, dim)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
