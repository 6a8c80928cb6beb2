"""The Pallas kernel shaped for GPUs: output tiles, K walked in windows, operands K-tiled.

One program per ``block_m × block_n`` output tile (a 2-D grid) walks K in *windows* of a few
groups; each window's operand slices are read from global memory as contiguous rows, and the
accumulator tile stays in registers for the whole chunk. Three arithmetic variants compute the
definition's bits (:mod:`kernels._matmul`), chosen by :func:`choose_variant`:

* ``"dot"`` (e4m3 inputs, ``Plan.exact_group_sums``, groups of 9 or more products): the
  group sums on FP64 tensor cores.
  A sum of up to four e4m3 products is exact in binary64: each product is a multiple of
  ``2**-18`` of magnitude at most ``448**2 < 2**18`` (at most 8 significant bits, and the
  exponents of all of them lie in a 36-binade range), so a sum of four is a multiple of
  ``2**-18`` below ``2**20``: 38 bits, inside binary64's 53. The sum is then the same whatever
  the order and the fusing of the multiply-adds, so a matrix unit may form it. Triton's FP64
  MMA (``mma.m8n8k4``) needs K >= 16 per dot, so a window is 16 slots holding ``16 / group``
  groups and each group's sums come from one dot in which the other groups' columns of ``x``
  are masked to zero (``group`` slots padded to a power of two); a group of 16 or more
  products is one dot of its own. Each group sum is added to the accumulator in binary64 and
  rounded with integer operations, and each chunk is promoted in binary32, on CUDA cores.
  The masked dots multiply :func:`dot_waste` products per useful one (4 for groups of 4),
  more than the FP64 tensor cores gain over CUDA cores (twice the rate), so smaller groups
  take ``"fma64"``.
* ``"fma64"``: binary64 multiply-adds on CUDA cores, one outer product per K slot (a row of
  ``x.T`` and a row of ``w``, both contiguous loads), in the definition's order. Where the
  sums are exact (:func:`fused_exact`) each product goes straight into the accumulator
  (``a + p1 + ... + pg`` has the same value as ``a + (p1 + ... + pg)`` then): per-lane
  group sums, one multiply-add per product and nothing masked (e4m3 with small groups:
  ``h100-fp8``, ``h100-fp8-fast-accum``).
* ``"fma32"`` (``Plan.binary32_chain``): binary32 multiply-adds (``acc + x * w`` with the
  product exact, so fused or not it is rounded once), for bfloat16, float16 and FP8 inputs
  rounded after every product; for bfloat16 :func:`kernels._matmul.shared.binary32_exact`
  checks the data and ``lax.cond`` falls back to ``"fma64"``.

Every rounding is an integer operation on the bit pattern (``round_accumulator*``,
``round_binary32``); no float conversion narrows a value that is widened again. Operands are
quantized outside the kernel and given to it in binary64 (binary32 for ``"fma32"``), so the
kernel converts nothing per product. Block shapes are powers of two.

Written for the Triton lowering (only ref loads and stores, ``lax.dot_general``, elementwise
and bit operations, and ``fori_loop``: no gather, no slicing of values); ``interpret=True``
runs the same kernel body on the CPU. Tested against
:func:`kernels._matmul.reference.reduce_quantized_np` (``tests/kernels/test_matmul_pallas_gpu.py``).
"""

from __future__ import annotations

from functools import partial
from math import ceil
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jaxtyping import Array, ArrayLike, Float

from kernel_contracts.kernels._matmul.plan import Plan
from kernel_contracts.kernels._matmul.rounding import round_accumulator, round_accumulator_in_range
from kernel_contracts.kernels._matmul.shared import binary32_exact, for_all, pad_to, scaled_term
from kernel_contracts.kernels.numerics.formats import flush
from kernel_contracts.kernels.numerics.portlint import order_free

__all__ = [
    "Variant",
    "allowed_variants",
    "choose_variant",
    "dot_waste",
    "fused_exact",
    "reduce_quantized_pallas_gpu",
]

Variant = Literal["dot", "fma64", "fma32"]
_DOT_K = 16  # the smallest K of a binary64 dot in Triton (MMAv2, m8n8k4 aggregated to k16)
_FMA_WINDOW = 16  # products per thread and loop iteration on the multiply-add paths
# FP64 tensor-core rate over FP64 CUDA-core rate on H100 and H200 (NVIDIA's H100 datasheet,
# SXM: 67 and 34 TFLOPS; docs/kernels.md, "The arithmetic floor")
FP64_TENSOR_TO_CUDA = 2.0
# (block_m, block_n, num_warps, num_stages) per variant, from bench/bench_matmul_gpu.py at
# 8192^3 on an H200: "dot" within 10 % for tiles from 32x64 to 128x64; "fma32" 2.2x faster at
# 128x128 with 4 warps than at 64x64 (and 2.3x faster than with 8 warps); "fma64" at 128x128
# spills (20x slower than at 64x64)
_BLOCKS = {"dot": (64, 64, 4, 2), "fma32": (128, 128, 4, 1), "fma64": (64, 64, 4, 1)}


def fused_exact(plan: Plan) -> bool:
    """True when every sum ``a + p1 + ... + pi`` inside a chunk is exact in binary64, so that
    the products may go into the accumulator one by one (same value as the definition's
    ``a + t``). For e4m3 inputs all values involved are multiples of ``2**-18``
    (``Plan.exact_group_sums``); they are exact while below ``2**35``. The accumulator's
    magnitude stays below ``C · 448**2`` toward zero, and grows by at most ``(1 + 2**-(m+1))``
    per rounding to nearest (package docstring); a factor 2 of margin covers the float
    evaluation of that bound."""
    if not plan.exact_group_sums:
        return False
    bound = plan.chunk_len * 448.0**2
    if not plan.toward_zero:
        bound *= (1 + 2.0 ** -(plan.mantissa_bits + 1)) ** ceil(plan.chunk_len / plan.group)
    return bound < 2.0**34


def allowed_variants(plan: Plan) -> tuple[Variant, ...]:
    """The variants that compute ``plan``'s bits: binary64 multiply-adds always, the binary32
    chain where the plan allows it (bfloat16 behind the data check), the binary64 dot where
    group sums are exact."""
    return (
        ("fma64",)
        + (("fma32",) if plan.binary32_chain else ())
        + (("dot",) if plan.exact_group_sums else ())
    )


def dot_waste(plan: Plan) -> float:
    """Products the ``"dot"`` variant multiplies for each product of the definition: a group
    of ``g`` slots padded to a power of two, in dots of at least ``_DOT_K`` slots whose other
    groups' columns are masked to zero (``max(16, pow2(g)) / g``; 4 for ``group = 4``)."""
    slots = 1 << (plan.group - 1).bit_length()
    return max(_DOT_K, slots) / plan.group


def choose_variant(plan: Plan) -> Variant:
    """The arithmetic the kernel uses for ``plan`` (module docstring). ``"fma32"`` for bfloat16
    inputs is taken only where the data allow it (the wrapper checks). Exact group sums go to
    the binary64 dot only when it multiplies fewer than twice the useful products
    (:func:`dot_waste` below :data:`FP64_TENSOR_TO_CUDA`, the rate ratio of FP64 tensor cores
    to FP64 CUDA cores); otherwise per-lane group sums (``"fma64"``, fused) waste nothing."""
    if plan.binary32_chain:
        return "fma32"
    if plan.exact_group_sums and dot_waste(plan) < FP64_TENSOR_TO_CUDA:
        return "dot"
    return "fma64"


class _Layout(NamedTuple):
    """K slots of one chunk: ``windows`` loop iterations of ``per_window`` groups of
    ``group_slots`` slots (a group's slots past ``plan.group``, and groups past the chunk's
    own, hold +0: ``round(a + 0) = a``)."""

    group_slots: int
    per_window: int
    windows: int

    @property
    def window_slots(self) -> int:
        return self.per_window * self.group_slots

    @property
    def chunk_slots(self) -> int:
        return self.windows * self.window_slots


def _layout(plan: Plan, variant: Variant) -> _Layout:
    if variant == "dot":
        slots = 1 << (plan.group - 1).bit_length()  # a power of two: a dot's K
        per = max(1, _DOT_K // slots)
    else:
        slots = plan.group
        per = max(1, _FMA_WINDOW // plan.group)
    return _Layout(slots, per, ceil(plan.groups / per))


def _positions(plan: Plan, lay: _Layout) -> np.ndarray:
    """K index of every slot of the kernel's layout (-1: +0 padding), flat."""
    pos = plan.positions().reshape(plan.parts, plan.chunks, plan.groups, plan.group)
    extra_groups = lay.windows * lay.per_window - plan.groups
    extra_slots = lay.group_slots - plan.group
    widths = ((0, 0), (0, 0), (0, extra_groups), (0, extra_slots))
    return np.pad(pos, widths, constant_values=-1).ravel()


def _k_major(q_t, pos: np.ndarray, k: int, dtype):
    """Quantized rows ``q_t`` (rows × K) as (slots × rows) in the layout, as ``dtype`` (a
    widening conversion: every quantized value is exact in binary32 and binary64)."""
    q = q_t.T.astype(dtype)
    if pos.size == k and np.array_equal(pos, np.arange(k)):
        return q
    taken = jnp.take(q, jnp.asarray(np.maximum(pos, 0)), axis=0)
    return jnp.where(jnp.asarray(pos >= 0)[:, None], taken, jnp.zeros((), dtype))


def _kernel(x_ref, w_ref, sx_ref, sw_ref, o_ref, *, plan: Plan, lay: _Layout, variant: Variant):
    bm, bn = o_ref.shape
    m, rz = plan.mantissa_bits, plan.toward_zero
    acc_dtype = jnp.float32 if variant == "fma32" else jnp.float64
    fused = fused_exact(plan)
    n_runs = -(-plan.k // plan.scaling.block) if plan.block_scaled else 1

    def rnd(s):
        if plan.in_range:
            return round_accumulator_in_range(s, m, rz)
        return round_accumulator(s, m, rz)

    def x_col(k):  # x's values of K slot k, one per tile row: (bm, 1)
        return x_ref[k, :][:, None]

    def w_row(k):  # w's values of K slot k, one per tile column: (1, bn)
        return w_ref[k, :][None, :]

    def window_dot(base, acc):
        xb = x_ref[:, pl.ds(base, lay.window_slots)]  # (bm, slots): rows of 16 contiguous
        wb = w_ref[pl.ds(base, lay.window_slots), :]  # (slots, bn)
        dims = (((1,), (0,)), ((), ()))

        def dot(a):  # exact sums (Plan.exact_group_sums): their order cannot change them
            with order_free():
                return lax.dot_general(
                    a, wb, dims, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float64
                )

        if lay.per_window == 1:
            return rnd(acc + dot(xb))
        group_of = jnp.arange(lay.window_slots, dtype=jnp.int32)[None, :] // lay.group_slots
        for q in range(lay.per_window):
            acc = rnd(acc + dot(jnp.where(group_of == q, xb, 0.0)))
        return acc

    def window_fma(base, acc):
        g = lay.group_slots
        for q in range(lay.per_window):
            ks = [base + q * g + i for i in range(g)]
            if variant == "fma32":  # group 1: the binary32 sum is the rounding
                acc = acc + x_col(ks[0]) * w_row(ks[0])
            elif fused:
                for k in ks:
                    acc = acc + x_col(k) * w_row(k)
                acc = rnd(acc)
            else:  # ((p1 + p2) + ...) + pg, then a + t, as defined
                t = x_col(ks[0]) * w_row(ks[0])
                for k in ks[1:]:
                    t = t + x_col(k) * w_row(k)
                acc = rnd(acc + t)
        return acc

    window = window_dot if variant == "dot" else window_fma

    # loop indices are int64 under x64; the interpreter re-evaluates index arithmetic when
    # lowering (outside the x64 context), so keep every index int32
    def part_body(p, total):
        p = p.astype(jnp.int32)

        def chunk_body(c, part_sum):
            c = c.astype(jnp.int32)
            first = (p * plan.chunks + c) * lay.chunk_slots

            def step(v, acc):
                return window(first + v.astype(jnp.int32) * lay.window_slots, acc)

            acc = lax.fori_loop(0, lay.windows, step, jnp.zeros((bm, bn), acc_dtype))
            if plan.block_scaled:
                start = p * plan.part_len + c * plan.chunk_len
                r = jnp.minimum(start // plan.scaling.block, n_runs - 1)
                term = scaled_term(acc, sx_ref[:, r][:, None], sw_ref[r, :][None, :])
            else:
                term = acc.astype(jnp.float32)  # exact: an m-bit value in binary32's range
            return flush(part_sum + term)

        part_sum = lax.fori_loop(0, plan.chunks, chunk_body, jnp.zeros((bm, bn), jnp.float32))
        return flush(total + part_sum)

    o_ref[...] = lax.fori_loop(0, plan.parts, part_body, jnp.zeros((bm, bn), jnp.float32))


def _call(xq, sx, wq_t, sw_t, plan: Plan, variant: Variant, block_m, block_n, interpret, params):
    lay = _layout(plan, variant)
    pos = _positions(plan, lay)
    dtype = jnp.float32 if variant == "fma32" else jnp.float64
    x = pad_to(_k_major(xq, pos, plan.k, dtype), 1, block_m)  # (slots, Mp)
    w = pad_to(_k_major(wq_t, pos, plan.k, dtype), 1, block_n)  # (slots, Np)
    slots = pos.size
    if variant == "dot":  # x row-major: a window is a contiguous row segment per tile row
        x = x.T
        x_spec = pl.BlockSpec((block_m, slots), lambda i, j: (i, 0))
    else:  # x K-major: a slot is a contiguous row segment of the tile's rows
        x_spec = pl.BlockSpec((slots, block_m), lambda i, j: (0, i))
    sxp = pad_to(sx, 0, block_m, 1.0)
    swp = pad_to(sw_t.T, 1, block_n, 1.0)
    mp, np_ = sxp.shape[0], swp.shape[1]
    runs = sx.shape[1]
    m, n = xq.shape[0], wq_t.shape[0]
    return pl.pallas_call(
        partial(_kernel, plan=plan, lay=lay, variant=variant),
        out_shape=jax.ShapeDtypeStruct((mp, np_), jnp.float32),
        grid=(mp // block_m, np_ // block_n),
        in_specs=[
            x_spec,
            pl.BlockSpec((slots, block_n), lambda i, j: (0, j)),
            pl.BlockSpec((block_m, runs), lambda i, j: (i, 0)),
            pl.BlockSpec((runs, block_n), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((block_m, block_n), lambda i, j: (i, j)),
        interpret=interpret,
        name=f"emulated_matmul_{variant}",
        **params,
    )(x, w, sxp, swp)[:m, :n]


def reduce_quantized_pallas_gpu(
    xq: Float[ArrayLike, "m k"],
    sx: Float[ArrayLike, "m runs"],
    wq_t: Float[ArrayLike, "n k"],
    sw_t: Float[ArrayLike, "n runs"],
    plan: Plan,
    *,
    variant: Variant | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    interpret: bool | None = None,
) -> Float[Array, "m n"]:
    """Steps 2-6 of the definition with the GPU-shaped ``pl.pallas_call``; the float32 total.

    ``variant=None`` takes :func:`choose_variant`'s (with the data check for bfloat16); a
    variant the plan does not allow raises ``ValueError``. ``block_m`` and ``block_n`` must be
    powers of two (16 at least for ``"dot"``); ``None`` takes the variant's measured defaults,
    as do ``num_warps`` and ``num_stages`` (Triton's). Must be traced with ``jax.enable_x64``.
    ``interpret=None`` compiles on a GPU backend and interprets elsewhere.
    """
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if b is not None and (b < 1 or b & (b - 1)):
            raise ValueError(f"{name} must be a power of two, got {b}")
    if variant is not None:
        allowed = allowed_variants(plan)
        if variant not in allowed:
            raise ValueError(
                f"variant {variant!r} does not compute this plan's bits; allowed: {sorted(allowed)}"
            )
    if interpret is None:
        interpret = jax.default_backend() != "gpu"

    def run(v):
        bm, bn, warps, stages = _BLOCKS[v]
        params = {}
        if not interpret:
            from jax.experimental.pallas import triton as pl_triton

            params["compiler_params"] = pl_triton.CompilerParams(
                num_warps=num_warps or warps, num_stages=num_stages or stages
            )
        return _call(xq, sx, wq_t, sw_t, plan, v, block_m or bm, block_n or bn, interpret, params)

    chosen = variant or choose_variant(plan)
    if chosen == "fma32" and not plan.in_range:  # bfloat16: only where the data allow it
        exact = for_all(binary32_exact(xq, wq_t, plan.inputs))
        total = lax.cond(exact, lambda: run("fma32"), lambda: run("fma64"))
    else:
        total = run(chosen)
    if not plan.block_scaled:
        total = scaled_term(total, sx[:, :1], sw_t[:, 0][None, :])
    return total
