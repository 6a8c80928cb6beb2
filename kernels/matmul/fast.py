"""The pure-JAX implementation: the definition vectorised over output tiles.

K is laid out as (steps, group) slots by the plan; three nested ``fori_loop``s walk parts,
chunks and groups, each group updating a binary64 accumulator tile with one rounding. Output
tiles of at most ``tile_m × tile_n`` entries are processed one after another (``lax.map``) so
that the accumulator stays in cache. Must be traced with ``jax.enable_x64``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float

from kernels.formats import flush
from kernels.matmul.plan import Plan
from kernels.matmul.rounding import round_accumulator

__all__ = ["lay_out", "reduce_quantized", "scaled_term"]


def lay_out(q_t: Float[Array, "rows k"], plan: Plan) -> Float[Array, "steps group rows"]:
    """Quantized rows (a K-major operand) arranged in the plan's (steps, group) slots."""
    pos = plan.positions()
    rows = q_t.shape[0]
    if pos.size == plan.k and np.array_equal(pos.ravel(), np.arange(plan.k)):
        return q_t.T.reshape(plan.steps, plan.group, rows)
    valid = jnp.asarray(pos >= 0)[..., None]
    gathered = jnp.take(q_t, jnp.asarray(np.maximum(pos, 0)), axis=1)  # rows, steps, group
    return jnp.where(valid, jnp.moveaxis(gathered, 0, -1), jnp.zeros((), q_t.dtype))


def scaled_term(a, sx_col, sw_row):
    """``flush(fl32(a * c))`` with ``c = flush(fl32(sx * sw))`` (exact binary64 products)."""
    c = flush((sx_col.astype(jnp.float64) * sw_row.astype(jnp.float64)).astype(jnp.float32))
    return flush((a.astype(jnp.float64) * c.astype(jnp.float64)).astype(jnp.float32))


def _reduce_tile(xs, ws, sx, sw_t, plan: Plan, runs):
    """Steps 2-6 (without the per-tensor/per-row epilogue) on one output tile.

    One loop over all groups; chunk and part ends are handled by a ``lax.cond`` (nested loops
    would make XLA copy the loop-invariant operand tiles into every inner loop).
    """
    bm, bn = xs.shape[2], ws.shape[2]
    m, rz, groups, chunks = plan.mantissa_bits, plan.toward_zero, plan.groups, plan.chunks

    def close_chunk(step, carry):
        acc, part_sum, total = carry
        chunk = step // groups  # global chunk index p * chunks + c
        if plan.block_scaled:
            r = runs[chunk]
            sxc = lax.dynamic_index_in_dim(sx, r, 1, keepdims=False)
            swc = lax.dynamic_index_in_dim(sw_t, r, 1, keepdims=False)
            term = scaled_term(acc, sxc[:, None], swc[None, :])
        else:
            term = acc.astype(jnp.float32)
        part_sum = flush(part_sum + term)
        part_end = chunk % chunks == chunks - 1
        total = jnp.where(part_end, flush(total + part_sum), total)
        part_sum = jnp.where(part_end, jnp.zeros_like(part_sum), part_sum)
        return jnp.zeros_like(acc), part_sum, total

    def body(step, carry):
        acc, part_sum, total = carry
        xg = lax.dynamic_index_in_dim(xs, step, 0, keepdims=False)
        wg = lax.dynamic_index_in_dim(ws, step, 0, keepdims=False)
        t = xg[0][:, None] * wg[0][None, :]
        for i in range(1, plan.group):
            t = t + xg[i][:, None] * wg[i][None, :]
        acc = round_accumulator(acc + t, m, rz)
        if single:
            return acc, part_sum, total
        return lax.cond(
            step % groups == groups - 1,
            lambda c: close_chunk(step, c),
            lambda c: c,
            (acc, part_sum, total),
        )

    init = (
        jnp.zeros((bm, bn), jnp.float64),
        jnp.zeros((bm, bn), jnp.float32),
        jnp.zeros((bm, bn), jnp.float32),
    )
    single = plan.parts == 1 and chunks == 1  # one chunk: close it after the loop
    out = lax.fori_loop(0, plan.steps, body, init)
    if single:
        out = close_chunk(jnp.int32(plan.steps - 1), out)
    return out[2]


def reduce_quantized(
    xq: Float[Array, "m k"],
    sx: Float[Array, "m runs"],
    wq_t: Float[Array, "n k"],
    sw_t: Float[Array, "n runs"],
    plan: Plan,
    *,
    tile_m: int = 128,
    tile_n: int = 512,
) -> Float[Array, "m n"]:
    """Steps 2-6 of the definition on quantized operands; returns the float32 total."""
    m, n = xq.shape[0], wq_t.shape[0]
    bm, bn = min(tile_m, m), min(tile_n, n)
    mt, nt = -(-m // bm), -(-n // bn)
    xs = lay_out(xq, plan).astype(jnp.float64)
    ws = lay_out(wq_t, plan).astype(jnp.float64)
    xs = jnp.pad(xs, ((0, 0), (0, 0), (0, mt * bm - m)))
    ws = jnp.pad(ws, ((0, 0), (0, 0), (0, nt * bn - n)))
    sxp = jnp.pad(sx, ((0, mt * bm - m), (0, 0)), constant_values=1)
    swp = jnp.pad(sw_t, ((0, nt * bn - n), (0, 0)), constant_values=1)
    runs = jnp.asarray(plan.chunk_runs().ravel(), jnp.int32)

    def tile(ij):
        i, j = ij // nt, ij % nt
        xt = lax.dynamic_slice_in_dim(xs, i * bm, bm, axis=2)
        wt = lax.dynamic_slice_in_dim(ws, j * bn, bn, axis=2)
        st = lax.dynamic_slice_in_dim(sxp, i * bm, bm, axis=0)
        swt = lax.dynamic_slice_in_dim(swp, j * bn, bn, axis=0)
        return _reduce_tile(xt, wt, st, swt, plan, runs)

    if mt * nt == 1:
        out = tile(jnp.int32(0))[None]
    else:
        out = jax.lax.map(tile, jnp.arange(mt * nt, dtype=jnp.int32))
    out = out.reshape(mt, nt, bm, bn).transpose(0, 2, 1, 3).reshape(mt * bm, nt * bn)
    total = out[:m, :n]
    if not plan.block_scaled:
        total = scaled_term(total, sx[:, :1], sw_t[:, 0][None, :])
    return total
