"""The pure-JAX implementation: the definition as one fused loop per output tile.

The output is cut into tiles (``lax.map`` walks them one after another); for each tile nested
``fori_loop``s walk the parts, the chunks and K, a block of 16 to 32 products per iteration.
Each iteration's block is unrolled into one elementwise expression, which XLA compiles into a
single vectorised loop over the tile: the accumulator tile is read and written once per block
and every product, group sum and rounding happens in registers. The loops end where parts
and chunks end, so no iteration tests for a boundary.

Operands stay in their quantized layouts, ``x`` as (M, K) and ``w`` as (K, N) (quantized
without a transposed copy, ``kernels.numerics.scaling.quantize_cols``) or, from other callers, as
(N, K); each iteration slices, converts and, where its layout needs it, transposes the next
iteration's block and carries it, so the fused loop reads contiguous rows (XLA transposes whole
arrays slowly, and a slice inside the fused loop costs index arithmetic per element). One
operand is broadcast along tile rows (read as scalars), the other streamed along tile columns
(read as vectors, rows padded by 64 bytes so that one block's rows do not all map to the same
L1 cache sets); ``x`` is broadcast and ``w`` streamed, both from their own rows, unless ``w``
comes as (N, K) and the transposed problem moves less data (:func:`transposed`): the
definition is symmetric in ``x`` and ``w``.

The arithmetic is the definition's, in the cheapest form that gives its bits (``Plan``):

* ``binary32_chain`` (float32 accumulator rounded after every product, narrow inputs): plain
  float32 ``acc + x * w``. For bfloat16 inputs this needs every product exact in float32 and no
  partial sum subnormal; :func:`shared.binary32_exact` checks the data and ``lax.cond`` falls back
  to the binary64 loop otherwise (under ``vmap`` one check covers the whole batch).
* otherwise binary64 products and sums, rounded by :func:`round_accumulator_in_range` when the
  inputs cannot leave the range (``in_range``: FP8, float16), else by the full
  :func:`round_accumulator`. A group is summed in the definition's order (LLVM contracts
  each product into the running sum as an FMA, exact since binary64 products are). When the
  group sums are exact (``exact_group_sums``: e4m3), groups of 16 or more products come from
  a batched binary64 ``dot_general`` instead, which XLA blocks for registers and caches as a
  fused elementwise loop cannot.

Must be traced with ``jax.enable_x64``.
"""

from __future__ import annotations

from math import ceil
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike, Float

from kernel_contracts.kernels._matmul.plan import Plan
from kernel_contracts.kernels._matmul.rounding import round_accumulator, round_accumulator_in_range
from kernel_contracts.kernels._matmul.shared import binary32_exact, for_all, scaled_term
from kernel_contracts.kernels.numerics.formats import flush
from kernel_contracts.kernels.numerics.portlint import order_free

__all__ = ["reduce_quantized", "transposed"]

# products per loop iteration: enough to amortise the loop, few enough that the out-of-order
# window overlaps consecutive vectors of the dependent rounding chain; for the dot, one or two
# groups, so that the binary64 sums it writes and the fused loop reads back are one tile's worth
# (eight 32-product groups per dot measured 1.5x slower at (1024, 4096, 4096), mxfp8)
_BLOCK = {"binary32": 16, "binary64": 16, "dot": 32}
# rows × columns; at (1024, 4096, 4096) with the quantized operands given, tall tiles measured
# 13-25 % faster than (512, 256) for the fused loops (fewer, longer iterations to share out)
_TILE = {"binary32": (1024, 512), "binary64": (1024, 256), "dot": (1024, 512)}


# ---------------------------------------------------------------------------------------------
# the schedule: which groups one loop iteration covers


class _Schedule(NamedTuple):
    """Loop iterations over K: each covers ``chunks_per_iter`` whole chunks, or one
    ``1 / iters_per_chunk`` of a chunk (its groups padded with zeros to a multiple)."""

    groups: int  # groups per chunk, padding included
    chunks_per_iter: int
    iters_per_chunk: int
    iters: int

    @property
    def groups_per_iter(self) -> int:
        return self.groups * self.chunks_per_iter // self.iters_per_chunk


def _schedule(plan: Plan, block: int) -> _Schedule:
    """About ``block`` products per iteration. Zero groups appended to a chunk change nothing:
    ``round(a + 0) = a`` for every accumulator value ``a``."""
    target = max(1, block // plan.group)  # groups per iteration
    if plan.groups <= target:  # whole chunks, as many as fit and divide a part
        fit = min(plan.chunks, target // plan.groups)
        v = max(d for d in range(1, fit + 1) if plan.chunks % d == 0)
        return _Schedule(plan.groups, v, 1, plan.parts * plan.chunks // v)
    n = ceil(plan.groups / target)
    return _Schedule(n * ceil(plan.groups / n), 1, n, plan.parts * plan.chunks * n)


class _Operand(NamedTuple):
    """One quantized operand as the loop reads it."""

    q: Array  # (tiles, size, iters, slots), or (iters, slots, tiles, size) when k_leading
    scales: Array  # (tiles, runs, size): a chunk's scales are one contiguous row
    k_leading: bool  # K along the first axis (``w`` as given) instead of the last (``x``)


def _arranged(q: Array, s: Array, plan: Plan, sched: _Schedule, size: int, k_leading: bool):
    """An :class:`_Operand`: quantized values (``rows × K``, or ``K × rows`` when
    ``k_leading``) cut into tiles of ``size`` rows, K in the schedule's slots (padding slots
    hold +0), and the scales (``rows × runs``, or ``runs × rows``) cut alike. The values are
    only reshaped when K needs no padding and the rows fill whole tiles: no operand is ever
    transposed whole (XLA transposes large arrays slowly); the loop converts, and where its
    layout needs it transposes, one block at a time."""
    pos = plan.positions().reshape(plan.parts * plan.chunks, plan.groups, plan.group)
    pos = np.pad(pos, ((0, 0), (0, sched.groups - plan.groups), (0, 0)), constant_values=-1)
    pos = pos.reshape(sched.iters, sched.groups_per_iter * plan.group)
    kx = 0 if k_leading else 1
    rows = q.shape[1 - kx]
    tiles = -(-rows // size)
    if not (pos.size == plan.k and np.array_equal(pos.ravel(), np.arange(plan.k))):
        flat = pos.ravel()
        valid = jnp.asarray(flat >= 0)
        q = jnp.take(q, jnp.asarray(np.maximum(flat, 0)), axis=kx)
        q = jnp.where(valid[:, None] if k_leading else valid[None, :], q, jnp.zeros((), q.dtype))
    s = s if k_leading else s.T  # (runs, rows)
    fill = tiles * size - rows
    s = jnp.pad(s, ((0, 0), (0, fill)), constant_values=1)
    s = jnp.moveaxis(s.reshape(-1, tiles, size), 1, 0)
    if k_leading:
        q = jnp.pad(q, ((0, 0), (0, fill))) if fill else q
        return _Operand(q.reshape(*pos.shape, tiles, size), s, True)
    q = jnp.pad(q, ((0, fill), (0, 0))) if fill else q
    return _Operand(q.reshape(tiles, size, *pos.shape), s, False)


# ---------------------------------------------------------------------------------------------
# one tile


class _Arith(NamedTuple):
    binary32: bool  # float32 operands and accumulator (binary32_chain)
    in_range: bool  # rounding without range checks
    dot: bool  # group sums as a batched binary64 dot (exact sums, long groups)


def _reduce_tile(i, j, xo, wo, runs, plan: Plan, sched: _Schedule, arith: _Arith):
    """Steps 2-6 (without the per-tensor/per-row epilogue) on tile ``(i, j)``.

    ``xo`` is broadcast along rows, ``wo`` streamed along columns (:class:`_Operand`); returns
    the float32 total (bm, bn). Each iteration slices its own operand block out of the whole
    arrays (a tile's slice of them is never copied).
    """
    bm, bn = xo.scales.shape[2], wo.scales.shape[2]
    sx, sw = xo.scales[i], wo.scales[j]

    def block(op, tile, it):  # one tile and iteration: (size, slots), or (slots, size)
        a, zero = op.q, jnp.zeros((), jnp.int32)
        tile, it = jnp.asarray(tile, jnp.int32), jnp.asarray(it, jnp.int32)
        if op.k_leading:
            start, size = (it, zero, tile, zero), (1, a.shape[1], 1, a.shape[3])
        else:
            start, size = (tile, zero, it, zero), (1, a.shape[1], 1, a.shape[3])
        return lax.dynamic_slice(a, start, size)[0, :, 0]

    def x_block(it):  # broadcast operand, read as scalars: (bm, slots) or (slots, bm)
        b = block(xo, i, it).astype(acc_dtype)
        if arith.dot:  # (groups, group, bm) or (groups, bm, group)
            return b.reshape(-1, g, bm) if xo.k_leading else b.reshape(bm, -1, g).swapaxes(0, 1)
        return b

    def x_col(xg, c):  # the broadcast operand's values of slot c, one per tile row
        return xg[c] if xo.k_leading else xg[:, c]

    def w_block(it):  # streamed operand: (slots, bn + pad), rows read as vectors
        b = block(wo, j, it)
        b = (b if wo.k_leading else b.T).astype(acc_dtype)
        if arith.dot:  # (groups, group, bn)
            return b.reshape(-1, g, bn)
        return jnp.pad(b, ((0, 0), (0, 64 // b.dtype.itemsize)))

    m, rz, g = plan.mantissa_bits, plan.toward_zero, plan.group
    acc_dtype = jnp.float32 if arith.binary32 else jnp.float64

    def rnd(s):
        if arith.binary32:
            return s
        if arith.in_range:
            return round_accumulator_in_range(s, m, rz)
        return round_accumulator(s, m, rz)

    def group_sums(xg, wg):
        """The iteration's group sums, in order: a batched dot when ``arith.dot`` (the sums
        are exact, ``Plan.exact_group_sums``, so the dot's order and FMAs do not matter; XLA's
        dot blocks for registers and caches, which a fused loop cannot), else expressions
        that XLA fuses into the rounding chain."""
        if arith.dot:
            contract = 1 if xo.k_leading else 2
            with order_free():
                return list(lax.dot_general(xg, wg, (((contract,), (1,)), ((0,), (0,)))))
        wg = wg[:, :bn]
        sums = []
        for q in range(sched.groups_per_iter):  # ((p1 + p2) + p3) + ..., as defined
            t = x_col(xg, q * g)[:, None] * wg[q * g][None, :]
            for r in range(1, g):
                t = t + x_col(xg, q * g + r)[:, None] * wg[q * g + r][None, :]
            sums.append(t)
        return sums

    def run_groups(acc, sums):
        for t in sums:
            acc = rnd(acc + t)
        return acc

    def term(chunk, acc):
        if not plan.block_scaled:
            return acc.astype(jnp.float32)
        r = runs[chunk]
        sxc = lax.dynamic_index_in_dim(sx, r, 0, keepdims=False)
        swc = lax.dynamic_index_in_dim(sw, r, 0, keepdims=False)
        return scaled_term(acc, sxc[:, None], swc[None, :])

    def fetch(it):
        nxt = jnp.minimum(it + 1, sched.iters - 1)
        return x_block(nxt), w_block(nxt)

    def whole_chunks(it, carry):  # iteration ``it`` covers chunks_per_iter whole chunks
        part_sum, xg, wg = carry
        x_next, w_next = fetch(it)
        v_n, per = sched.chunks_per_iter, sched.groups
        sums = group_sums(xg, wg)
        for v in range(v_n):
            acc = run_groups(jnp.zeros((bm, bn), acc_dtype), sums[v * per : v * per + per])
            part_sum = flush(part_sum + term(it * v_n + v, acc))
        return part_sum, x_next, w_next

    def loop(count, first, body, carry):
        """``body(first + i, carry)`` for i < count: static bounds let XLA know the trip
        count, and a single pass is no loop at all."""
        if count == 1:
            return body(first, carry)
        return lax.fori_loop(0, count, lambda i, c: body(first + i, c), carry)

    def chunk_pieces(chunk, carry):  # chunk ``chunk`` spans iters_per_chunk iterations
        part_sum, xg, wg = carry

        def piece(it, c):
            acc, xg, wg = c
            x_next, w_next = fetch(it)
            return run_groups(acc, group_sums(xg, wg)), x_next, w_next

        n = sched.iters_per_chunk
        init = (jnp.zeros((bm, bn), acc_dtype), xg, wg)
        acc, xg, wg = loop(n, chunk * n, piece, init)
        return flush(part_sum + term(chunk, acc)), xg, wg

    def part(p, carry):  # loops end where parts end: no per-iteration test
        total, xg, wg = carry
        init = (jnp.zeros((bm, bn), jnp.float32), xg, wg)
        if sched.iters_per_chunk == 1:
            per_part = plan.chunks // sched.chunks_per_iter  # iterations per part
            ps, xg, wg = loop(per_part, p * per_part, whole_chunks, init)
        else:
            ps, xg, wg = loop(plan.chunks, p * plan.chunks, chunk_pieces, init)
        return flush(total + ps), xg, wg

    init = (jnp.zeros((bm, bn), jnp.float32), x_block(0), w_block(0))
    return loop(plan.parts, 0, part, init)[0]


def _reduce(x, sx, x_lead, w, sw, w_lead, plan: Plan, arith: _Arith, tile_m, tile_n):
    """Steps 2-6 with ``x`` broadcast along tile rows and ``w`` streamed along columns.

    Each operand is given with its scales as ``rows × K`` and ``rows × runs``, or, when
    ``*_lead``, as ``K × rows`` and ``runs × rows``; the result is ``x rows × w rows``."""
    kind = "binary32" if arith.binary32 else "dot" if arith.dot else "binary64"
    sched = _schedule(plan, _BLOCK[kind])
    m, n = x.shape[1 if x_lead else 0], w.shape[1 if w_lead else 0]
    tm, tn = _TILE[kind]
    tm, tn = tile_m or tm, tile_n or tn
    # as few tiles as the limits allow, sized evenly so that padding wastes little; few rows
    # make wider tiles (as many outputs); tile columns a multiple of 8 (one vector)
    mt = -(-m // tm)
    bm = -(-m // mt)
    nt = -(-n // max(tn, (tm * tn) // bm))
    bn = n if nt == 1 else 8 * -(-n // (8 * nt))
    nt = -(-n // bn)
    xo = _arranged(x, sx, plan, sched, bm, x_lead)
    wo = _arranged(w, sw, plan, sched, bn, w_lead)
    runs = jnp.asarray(plan.chunk_runs().ravel(), jnp.int32)

    def tile(ij):
        return _reduce_tile(ij // nt, ij % nt, xo, wo, runs, plan, sched, arith)

    if mt * nt == 1:
        out = tile(jnp.int32(0))[None]
    else:
        out = lax.map(tile, jnp.arange(mt * nt, dtype=jnp.int32))
    out = out.reshape(mt, nt, bm, bn).transpose(0, 2, 1, 3).reshape(mt * bm, nt * bn)
    total = out[:m, :n]
    if not plan.block_scaled:
        sx0 = sx[0] if x_lead else sx[:, 0]
        sw0 = sw[0] if w_lead else sw[:, 0]
        total = scaled_term(total, sx0[:, None], sw0[None, :])
    return total


def transposed(m: int, k: int, n: int, w_k_leading: bool = False) -> bool:
    """Whether an (m, k) × (k, n) product is computed as its transpose (``w`` broadcast along
    tile rows, ``x`` streamed). With ``w`` given as ``w.T`` (N × K), when that transposes fewer
    elements (x's ``m k`` and the result's ``m n`` instead of w's ``n k``) and ``x`` has enough
    rows to fill vectors. With ``w`` as given (K × N) never: then the direct orientation
    transposes nothing whole (``x`` is broadcast from its rows, ``w`` streamed from its rows)."""
    if w_k_leading:
        return False
    return m >= 128 and m * (k + n) < n * k


def _oriented(xq, sx, wq, sw, w_lead: bool, plan: Plan, arith: _Arith, tile_m, tile_n):
    """:func:`_reduce`, or the same on the transposed problem (see :func:`transposed`): the
    definition is symmetric in ``x`` and ``w`` (products, scale products and all sums
    commute), so ``out.T`` has the same bits."""
    n = wq.shape[1 if w_lead else 0]
    if transposed(xq.shape[0], xq.shape[1], n, w_lead):
        return _reduce(wq, sw, w_lead, xq, sx, False, plan, arith, tile_m, tile_n).T
    return _reduce(xq, sx, False, wq, sw, w_lead, plan, arith, tile_m, tile_n)


def reduce_quantized(
    xq: Float[ArrayLike, "m k"],
    sx: Float[ArrayLike, "m runs"],
    wq_t: Float[ArrayLike, "_n_or_k _k_or_n"],  # transposed, or as is when w_k_leading
    sw_t: Float[ArrayLike, "_n_or_runs _runs_or_n"],
    plan: Plan,
    *,
    w_k_leading: bool = False,
    tile_m: int | None = None,
    tile_n: int | None = None,
) -> Float[Array, "m n"]:
    """Steps 2-6 of the definition on quantized operands; returns the float32 total.

    ``w`` is given transposed (``wq_t`` N × K, ``sw_t`` N × runs, as ``quantize_rows(w.T)``
    returns them), or, when ``w_k_leading``, as is (K × N and runs × N, as
    ``quantize_cols(w)`` returns them; no transposed copy is made then)."""
    wide = _Arith(False, plan.in_range, plan.exact_group_sums and plan.group >= 16)

    def run(arith):
        return _oriented(xq, sx, wq_t, sw_t, w_k_leading, plan, arith, tile_m, tile_n)

    if not plan.binary32_chain:
        return run(wide)
    narrow = _Arith(True, True, False)
    if plan.in_range:
        return run(narrow)
    return lax.cond(
        for_all(binary32_exact(xq, wq_t, plan.inputs)), lambda: run(narrow), lambda: run(wide)
    )
