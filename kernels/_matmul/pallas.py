"""The Pallas implementation: one program per 128×128 output block walks all of K.

Each program keeps a binary64 accumulator block and a binary32 part sum in registers and reads
one K column of its ``x`` block and one K row of its ``w`` block per product, exactly as the
definition orders them. Compiled through Triton on NVIDIA GPUs (which support binary64 and
64-bit integer bit operations); ``interpret=True`` runs the same kernel body on the CPU.

The kernel body, its wrapper and the reference it is tested against
(:func:`kernels._matmul.reference.reduce_quantized_np`) follow the Pallas ops convention.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jaxtyping import Array, ArrayLike, Float

from kernel_contracts.kernels._matmul.plan import Plan
from kernel_contracts.kernels._matmul.rounding import round_accumulator
from kernel_contracts.kernels._matmul.shared import lay_out, pad_to, scaled_term
from kernel_contracts.kernels.numerics.formats import flush

__all__ = ["reduce_quantized_pallas"]


def _kernel(x_ref, w_ref, sx_ref, sw_ref, o_ref, *, plan: Plan):
    bm, bn = o_ref.shape
    g, m, rz = plan.group, plan.mantissa_bits, plan.toward_zero
    n_runs = -(-plan.k // plan.scaling.block) if plan.block_scaled else 1

    # loop indices are int64 under x64; the interpreter re-evaluates index arithmetic when
    # lowering (outside the x64 context), so keep every index int32
    def part_body(p, total):
        p = p.astype(jnp.int32)

        def chunk_body(c, part_sum):
            c = c.astype(jnp.int32)
            base = (p * plan.chunks + c) * plan.groups

            def group_body(j, acc):
                col = (base + j.astype(jnp.int32)) * g
                t = None
                for i in range(g):
                    xv = x_ref[:, pl.ds(col + i, 1)].astype(jnp.float64)
                    wv = w_ref[pl.ds(col + i, 1), :].astype(jnp.float64)
                    prod = xv * wv
                    t = prod if t is None else t + prod
                return round_accumulator(acc + t, m, rz)

            acc = lax.fori_loop(0, plan.groups, group_body, jnp.zeros((bm, bn), jnp.float64))
            if plan.block_scaled:
                start = p * plan.part_len + c * plan.chunk_len
                r = jnp.minimum(start // plan.scaling.block, n_runs - 1)
                term = scaled_term(acc, sx_ref[:, pl.ds(r, 1)], sw_ref[pl.ds(r, 1), :])
            else:
                term = acc.astype(jnp.float32)
            return flush(part_sum + term)

        part_sum = lax.fori_loop(0, plan.chunks, chunk_body, jnp.zeros((bm, bn), jnp.float32))
        return flush(total + part_sum)

    o_ref[...] = lax.fori_loop(0, plan.parts, part_body, jnp.zeros((bm, bn), jnp.float32))


def reduce_quantized_pallas(
    xq: Float[ArrayLike, "m k"],
    sx: Float[ArrayLike, "m runs"],
    wq_t: Float[ArrayLike, "n k"],
    sw_t: Float[ArrayLike, "n runs"],
    plan: Plan,
    *,
    block_m: int = 128,
    block_n: int = 128,
    interpret: bool | None = None,
    num_warps: int | None = None,
) -> Float[Array, "m n"]:
    """Steps 2-6 of the definition with ``pl.pallas_call``; returns the float32 total.

    Must be traced with ``jax.enable_x64``. ``interpret=None`` compiles on a GPU backend and
    interprets elsewhere.
    """
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    m, n = xq.shape[0], wq_t.shape[0]
    slots = plan.steps * plan.group
    x = pad_to(lay_out(xq, plan).reshape(slots, m).T, 0, block_m)  # (Mp, slots)
    w = pad_to(lay_out(wq_t, plan).reshape(slots, n), 1, block_n)  # (slots, Np)
    sxp = pad_to(sx, 0, block_m, 1.0)
    swp = pad_to(sw_t.T, 1, block_n, 1.0)
    mp, np_ = x.shape[0], w.shape[1]
    runs = sx.shape[1]
    params = {}
    if not interpret:
        from jax.experimental.pallas import triton as pl_triton

        params["compiler_params"] = pl_triton.CompilerParams(num_warps=num_warps or 8, num_stages=1)
    total = pl.pallas_call(
        partial(_kernel, plan=plan),
        out_shape=jax.ShapeDtypeStruct((mp, np_), jnp.float32),
        grid=(mp // block_m, np_ // block_n),
        in_specs=[
            pl.BlockSpec((block_m, slots), lambda i, j: (i, 0)),
            pl.BlockSpec((slots, block_n), lambda i, j: (0, j)),
            pl.BlockSpec((block_m, runs), lambda i, j: (i, 0)),
            pl.BlockSpec((runs, block_n), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((block_m, block_n), lambda i, j: (i, j)),
        interpret=interpret,
        name="emulated_matmul",
        **params,
    )(x, w, sxp, swp)[:m, :n]
    if not plan.block_scaled:
        total = scaled_term(total, sx[:, :1], sw_t[:, 0][None, :])
    return total
