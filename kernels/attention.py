"""Attention for the two kernels: exact full-sequence (training) and paged, tiled decoding.

* :func:`reference_attention` is the training kernel: teacher-forced softmax attention over the
  whole sequence in float32 (one max-subtracted softmax).
* :class:`PagedKVCache` stores keys and values in pages of ``page_size`` positions, in the
  ``kv_cache`` format of an ``AttentionSpec`` (a real low-precision dtype; values are rounded
  with the saturating cast of :mod:`kernels.numerics.formats` and unit scale, the serving default,
  and stored as their bit patterns, :func:`kernels.numerics.bitround.encode`, in unsigned
  integers of the format's width, never by a float conversion; an integer store also keeps a
  compiler from widening the whole cache to update one position, as XLA's CPU backend does
  for an 8-bit float array).
* :func:`decode_attention` is the inference kernel: one query per sequence attends to the cached
  positions with an online softmax over tiles of whole pages. The tile size is ``spec.tiles``:
  ``"full"`` (one tile), an integer number of positions (rounded up to whole pages), or
  ``"adaptive"``: ``clamp(next_pow2(ceil(length / 16 / page_size)), 1, 256 // page_size)``
  pages, so it grows with the sequence length. With ``batching="dynamic"`` the tiles are dealt
  into ``reduction_splits(batch_size, length, ...)`` contiguous splits reduced separately and
  merged at the end (flash-decoding), so the result depends on the batch size.

Online softmax, per tile ``t`` with scores ``s``: ``m_t = max s``, ``l_t = Σ exp(s - m_t)``,
``a_t = Σ exp(s - m_t) v``; a split folds its tiles in order
(``m' = max(m, m_t)``, ``l' = l e^{m-m'} + l_t e^{m_t-m'}``, same for ``a``), and the splits are
merged in order the same way; the output is ``a / l``. All in float32, with the arithmetic of
:mod:`kernels.numerics.portable`, so every backend computes the same bits: scores and weighted sums
of values are exact products summed in binary64 by a fixed pairwise tree and rounded once (the
score scale applied before that rounding); ``exp``, the softmax and the division are portable;
a tile's ``l_t`` and ``a_t`` are pairwise trees over its pages of pairwise trees over each
page's positions (``l_t`` rounded to float32 at every level, ``a_t``'s exact products summed
in binary64 and rounded once), and each merge forms
``l e^{m-m'} + l_t e^{m_t-m'}`` from exact products with one rounding.

References:
    M. Milakov and N. Gimelshein, "Online normalizer calculation for softmax", arXiv 1805.02867.
    T. Dao et al., "FlashAttention", arXiv 2205.14135; T. Dao et al., "Flash-Decoding for
    long-context inference", 2023. W. Kwon et al., "Efficient Memory Management for Large
    Language Model Serving with PagedAttention", arXiv 2309.06180.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, no_type_check

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from kernel_contracts.contracts import AttentionSpec
from kernel_contracts.kernels.batching import reduction_splits
from kernel_contracts.kernels.numerics import portable
from kernel_contracts.kernels.numerics.bitround import UNSIGNED, encode
from kernel_contracts.kernels.numerics.formats import (
    format_info,
    min_normal_exponent,
    saturating_cast,
)

__all__ = [
    "PagedKVCache",
    "decode_attention",
    "kv_splits",
    "masked_attention",
    "reference_attention",
    "tile_pages",
    "widen_heads",
]


def widen_heads(kv: Float[ArrayLike, "*lead kv_heads dim"], heads: int) -> Array:
    """Each of ``kv``'s heads repeated for the query heads it serves (``heads`` a whole
    multiple of ``kv``'s); ``kv`` itself when the counts are equal."""
    kv = jnp.asarray(kv)
    groups, rest = divmod(heads, kv.shape[-2])
    if rest or groups < 1:
        raise ValueError(f"{heads} query heads cannot share {kv.shape[-2]} cached heads")
    return kv if groups == 1 else jnp.repeat(kv, groups, axis=-2)


def reference_attention(
    q: Float[ArrayLike, "heads seq dim"],
    k: Float[ArrayLike, "heads seq dim"],
    v: Float[ArrayLike, "heads seq dim"],
    *,
    causal: bool = True,
) -> Float[Array, "heads seq dim"]:
    """Exact float32 softmax attention over the whole sequence (the training kernel)."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    mask = jnp.arange(n_k)[None, :] <= jnp.arange(n_q)[:, None] + (n_k - n_q)
    return masked_attention(q, k, v, mask if causal else jnp.ones_like(mask))


def masked_attention(
    q: Float[ArrayLike, "heads q dim"],
    k: Float[ArrayLike, "heads k dim"],
    v: Float[ArrayLike, "heads k dim"],
    mask: Bool[ArrayLike, "q k"],
) -> Float[Array, "heads q dim"]:
    """Softmax attention of each query over the keys ``mask`` allows, with the arithmetic of
    :mod:`kernels.numerics.portable` (module docstring): the scaled scores and the weighted values
    are exact products summed by the binary64 tree and rounded once."""
    q, k, v = (jnp.asarray(a, jnp.float32) for a in (q, k, v))
    scale = 1.0 / np.sqrt(q.shape[-1])
    s = portable.sum_products(q[:, :, None, :], k[:, None, :, :], scale)  # heads, q, k
    p = portable.softmax(jnp.where(jnp.asarray(mask)[None], s, -jnp.inf), axis=-1)
    return portable.sum_products(p[:, :, None, :], jnp.swapaxes(v, 1, 2)[:, None, :, :])


@no_type_check  # a pytree: JAX rebuilds it with tracers, placeholders and per-layer stacks
@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PagedKVCache:
    """Keys and values in pages of a low-precision dtype, with a page table per sequence.

    ``k_pages``/``v_pages``: (num_pages, page_size, heads, dim), the bit patterns of the cache
    format (``dtype``) in unsigned integers of its width;
    ``page_table``: (num_seqs, pages_per_seq) int32 page ids; ``lengths``: (num_seqs,) int32.
    """

    k_pages: Array
    v_pages: Array
    page_table: Int[Array, "seqs pages"]
    lengths: Int[Array, " seqs"]
    page_size: int = dataclasses.field(metadata=dict(static=True))
    kv_format: str = dataclasses.field(metadata=dict(static=True))

    @classmethod
    def create(
        cls, num_seqs: int, max_len: int, heads: int, dim: int, spec: AttentionSpec
    ) -> PagedKVCache:
        """An empty cache for ``num_seqs`` sequences of up to ``max_len`` positions.

        Pages of different sequences are interleaved in memory (sequence ``s`` owns pages
        ``s, s + num_seqs, ...``), as a paged allocator leaves them.
        """
        info = format_info(spec.kv_cache)
        ps = spec.page_size
        if not isinstance(ps, int) or ps < 1:
            raise ValueError(f"attention.page_size must be a positive integer, got {ps!r}")
        for name, value in (
            ("num_seqs", num_seqs),
            ("max_len", max_len),
            ("heads", heads),
            ("dim", dim),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        pages = -(-max_len // ps)
        table = (np.arange(pages)[None, :] * num_seqs + np.arange(num_seqs)[:, None]).astype(
            np.int32
        )
        zeros = jnp.zeros((num_seqs * pages, ps, heads, dim), UNSIGNED[8 * info.dtype.itemsize])
        return cls(
            zeros, zeros, jnp.asarray(table), jnp.zeros((num_seqs,), jnp.int32), ps, spec.kv_cache
        )

    @property
    def dtype(self) -> np.dtype:
        """The cache format's dtype, whose bit patterns the pages hold."""
        return format_info(self.kv_format).dtype

    @property
    def capacity(self) -> int:
        """Positions each sequence can hold."""
        return self.page_table.shape[1] * self.page_size

    def append(
        self, k: Float[ArrayLike, "seqs heads dim"], v: Float[ArrayLike, "seqs heads dim"]
    ) -> PagedKVCache:
        """A new cache with one more position per sequence holding ``k`` and ``v``."""
        if (
            not isinstance(self.lengths, jax.core.Tracer)
            and int(jnp.max(self.lengths, initial=0)) >= self.capacity
        ):
            raise ValueError(f"PagedKVCache is full ({self.capacity} positions per sequence)")
        seqs = jnp.arange(self.page_table.shape[0])
        page = self.page_table[seqs, self.lengths // self.page_size]
        slot = self.lengths % self.page_size
        info = format_info(self.kv_format)

        def put(pages, new):
            # rounded by integer operations, then stored as its bit pattern: no float
            # conversion to the narrow dtype (a compiler may erase one followed by the
            # widening read in gather)
            new = saturating_cast(jnp.asarray(new, jnp.float32), self.kv_format)
            bits = encode(
                new,
                info.mantissa_bits,
                min_normal_exponent(self.kv_format),
                8 * pages.dtype.itemsize,
                has_inf=info.has_inf,
            )
            return pages.at[page, slot].set(bits, mode="drop")

        return dataclasses.replace(
            self,
            k_pages=put(self.k_pages, k),
            v_pages=put(self.v_pages, v),
            lengths=self.lengths + 1,
        )

    def gather(self) -> tuple[Float[Array, "seqs pos heads dim"], ...]:
        """Every sequence's keys and values in position order, as float32."""
        seqs, pages = self.page_table.shape

        def one(pages_arr):
            g = pages_arr[self.page_table]  # seqs, pages, page_size, heads, dim
            g = lax.bitcast_convert_type(g, self.dtype)  # the patterns read as the format
            return g.reshape(seqs, pages * self.page_size, *g.shape[3:]).astype(jnp.float32)

        return one(self.k_pages), one(self.v_pages)


def tile_pages(length: Int[ArrayLike, ""], spec: AttentionSpec, capacity_pages: int) -> Array:
    """Pages per attention tile for a sequence of ``length`` positions (see module docstring)."""
    ps = spec.page_size
    if spec.tiles == "full":
        return jnp.int32(capacity_pages)
    if spec.tiles == "adaptive":
        want = jnp.maximum(1, -(-length // (16 * ps)))
        pow2 = jnp.left_shift(1, 32 - lax.clz(want.astype(jnp.int32) - 1))  # 2**ceil(log2(want))
        return jnp.clip(pow2, 1, max(1, 256 // ps)).astype(jnp.int32)
    try:
        size = int(spec.tiles)
    except (TypeError, ValueError):
        raise ValueError(
            f"attention.tiles must be 'full', 'adaptive' or a positive integer, got {spec.tiles!r}"
        ) from None
    if size < 1:
        raise ValueError(f"attention.tiles must be a positive integer, got {spec.tiles!r}")
    return jnp.int32(-(-size // ps))


def _merge(m, l, a, m2, l2, a2):
    """Fold (m2, l2, a2) into (m, l, a); empty states have m = -inf."""
    new = jnp.maximum(m, m2)
    safe = jnp.where(jnp.isfinite(new), new, 0.0)
    e1 = jnp.where(jnp.isfinite(m), portable.exp(m - safe), 0.0)
    e2 = jnp.where(jnp.isfinite(m2), portable.exp(m2 - safe), 0.0)
    # l·e1 + l2·e2 with both products exact and one rounding, as every backend computes it
    weights = jnp.stack([e1, e2], axis=-1)
    total = portable.sum_products(jnp.stack([l, l2], axis=-1), weights)
    acc = portable.sum_products(jnp.stack([a, a2], axis=-1), weights[..., None, :])
    return new, total, acc


def _tile_sums(p_pages, values, in_tile):
    """``a_t = Σ p·v`` of each tile: [heads, pages, page] weights, [pos, heads, dim] values and
    [tiles, pages] membership give [heads, tiles, dim]. The products are exact in binary64,
    summed by the tree over each page's positions and then over each tile's pages, and rounded
    once to float32."""
    heads, pages, size = p_pages.shape
    with jax.enable_x64(True):
        p64 = portable.widen(p_pages)[:, :, None, :]  # heads, pages, 1, page
        v64 = portable.widen(values).reshape(pages, size, heads, -1)
        v64 = jnp.transpose(v64, (2, 0, 3, 1))  # heads, pages, dim, page
        per_page = portable.sum64(p64 * v64)  # heads, pages, dim: exact products
        per_page = jnp.swapaxes(per_page, 1, 2)[:, None]  # heads, 1, dim, pages
        return portable.to_float32(portable.sum64(jnp.where(in_tile[:, None, :], per_page, 0.0)))


def _decode_one(q, keys, values, length, tp, page_size: int, splits: int):
    """One sequence: q (heads, dim), keys/values (pos, heads, dim) -> (heads, dim)."""
    pos = keys.shape[0]
    n_tiles_max = -(-pos // page_size)
    scale = 1.0 / np.sqrt(q.shape[-1])
    s = portable.sum_products(q[:, None, :], jnp.swapaxes(keys, 0, 1), scale)  # heads, pos
    valid = jnp.arange(pos) < length
    s = jnp.where(valid[None, :], s, -jnp.inf)
    tile = (jnp.arange(pos) // page_size) // tp
    seg_max = jax.vmap(lambda r: jax.ops.segment_max(r, tile, n_tiles_max))(s)  # heads, tiles
    m_t = jnp.where(jnp.isfinite(seg_max), seg_max, -jnp.inf)
    shift = jnp.where(jnp.isfinite(m_t), m_t, 0.0)[:, tile]
    p = jnp.where(valid[None, :], portable.exp(s - shift), 0.0)
    # each tile's sums: every page's by the pairwise tree over its positions, then the tile's
    # by the pairwise tree over the pages, the other tiles' pages set to 0
    heads, dim = q.shape
    p_pages = p.reshape(heads, n_tiles_max, page_size)
    page_tile = jnp.arange(n_tiles_max) // tp
    in_tile = page_tile[None, :] == jnp.arange(n_tiles_max)[:, None]  # tiles, pages
    l_page = portable.ordered_sum(p_pages, axis=-1)  # heads, pages
    l_t = portable.ordered_sum(jnp.where(in_tile[None], l_page[:, None, :], 0.0), axis=-1)
    a_t = _tile_sums(p_pages, values, in_tile)  # heads, tiles, dim
    n_tiles = jnp.maximum(1, -(-length // (tp * page_size)))
    per_split = -(-n_tiles // splits)
    init = (
        jnp.full((splits, heads), -jnp.inf),
        jnp.zeros((splits, heads)),
        jnp.zeros((splits, heads, dim)),
    )

    def fold(state, t):
        m, l, a = state
        sp = jnp.minimum(t // per_split, splits - 1)
        merged = _merge(m[sp], l[sp], a[sp], m_t[:, t], l_t[:, t], a_t[:, t])
        live = t < n_tiles
        m = m.at[sp].set(jnp.where(live, merged[0], m[sp]))
        l = l.at[sp].set(jnp.where(live, merged[1], l[sp]))
        a = a.at[sp].set(jnp.where(live, merged[2], a[sp]))
        return (m, l, a), None

    (m, l, a), _ = lax.scan(fold, init, jnp.arange(n_tiles_max))
    acc = (m[0], l[0], a[0])
    for i in range(1, splits):
        acc = _merge(*acc, m[i], l[i], a[i])
    _, l_all, a_all = acc
    quotient = portable.divide(a_all, jnp.where(l_all > 0, l_all, 1.0)[:, None])
    return jnp.where(l_all[:, None] > 0, quotient, 0.0)


def kv_splits(
    batch_size: int, max_len: int, page_size: int, batching: Literal["dynamic", "fixed"]
) -> int:
    """How many splits :func:`decode_attention` deals the tiles of a cache made for
    ``max_len`` positions into: the reduction splits of its capacity (whole pages) at
    ``batch_size``, at most one per page."""
    pages = -(-max_len // page_size)
    return min(reduction_splits(batch_size, pages * page_size, batching), pages)


def decode_attention(
    q: Float[ArrayLike, "seqs heads dim"],
    cache: PagedKVCache,
    spec: AttentionSpec,
    *,
    batch_size: int,
    batching: Literal["dynamic", "fixed"] = "dynamic",
) -> Float[Array, "seqs heads dim"]:
    """One decoding step of tiled online-softmax attention over a paged cache.

    ``batch_size`` is the number of sequences the serving batch holds (static); with
    ``batching="dynamic"`` it sets the number of KV splits (:func:`reduction_splits`).
    """
    q = jnp.asarray(q, jnp.float32)
    keys, values = (widen_heads(kv, q.shape[-2]) for kv in cache.gather())
    capacity_pages = cache.page_table.shape[1]
    splits = kv_splits(batch_size, cache.capacity, cache.page_size, batching)

    def one(qs, ks, vs, length):
        tp = tile_pages(length, spec, capacity_pages)
        return _decode_one(qs, ks, vs, length, tp, cache.page_size, splits)

    return jax.vmap(one)(q, keys, values, cache.lengths)
