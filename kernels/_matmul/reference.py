"""The NumPy reference: the package docstring's definition, followed literally.

Loops over parts, chunks and groups (vectorised only over the M×N output entries), NumPy
binary64/binary32 arithmetic, the frexp-based rounding and the NumPy quantizer. Slow; meant for
small shapes and for checking the fast paths.
"""

from __future__ import annotations

import numpy as np

from kernel_contracts.contracts import MatmulSpec
from kernel_contracts.kernels._matmul.plan import Plan, make_plan
from kernel_contracts.kernels._matmul.rounding import round_accumulator_np
from kernel_contracts.kernels.numerics.formats import cast_output_np, flush_np
from kernel_contracts.kernels.numerics.scaling import quantize_rows_np

__all__ = ["matmul_reference", "reduce_quantized_np"]


def _f32_times(a: np.ndarray, c: np.ndarray) -> np.ndarray:
    """flush(fl32(a * c)) with the product exact in binary64 and rounded once."""
    with np.errstate(over="ignore", invalid="ignore"):
        return flush_np((a.astype(np.float64) * c.astype(np.float64)).astype(np.float32))


def reduce_quantized_np(
    xq: np.ndarray, sx: np.ndarray, wq_t: np.ndarray, sw_t: np.ndarray, plan: Plan
) -> np.ndarray:
    """Steps 2-6 of the definition on quantized operands; returns the float32 total.

    ``xq`` M×K and ``sx`` M×runs; ``wq_t`` N×K and ``sw_t`` N×runs (``w`` transposed).
    """
    m, n = xq.shape[0], wq_t.shape[0]
    x64 = xq.astype(np.float64)
    w64 = wq_t.astype(np.float64)
    runs = plan.chunk_runs()
    total = np.zeros((m, n), np.float32)
    for p in range(plan.parts):
        part_sum = np.zeros((m, n), np.float32)
        for c in range(plan.chunks):
            start = p * plan.part_len + c * plan.chunk_len
            stop = min(start + plan.chunk_len, plan.k)
            acc = np.zeros((m, n), np.float64)
            for g0 in range(start, max(stop, start), plan.group):
                t = None
                for k in range(g0, min(g0 + plan.group, stop)):
                    prod = x64[:, k, None] * w64[None, :, k]
                    t = prod if t is None else t + prod
                with np.errstate(invalid="ignore"):
                    acc = round_accumulator_np(acc + t, plan.mantissa_bits, plan.toward_zero)
            if plan.block_scaled:
                r = runs[p, c]
                scale = _f32_times(sx[:, r, None], sw_t[None, :, r])
                term = _f32_times(acc.astype(np.float32), scale)
            else:
                term = acc.astype(np.float32)
            with np.errstate(invalid="ignore", over="ignore"):
                part_sum = flush_np(part_sum + term)
        with np.errstate(invalid="ignore", over="ignore"):
            total = flush_np(total + part_sum)
    if not plan.block_scaled:
        scale = _f32_times(sx[:, 0, None], sw_t[None, :, 0])
        total = _f32_times(total, scale)
    return total


def matmul_reference(x, w, spec: MatmulSpec, *, splits: int = 1) -> np.ndarray:
    """The definition on NumPy arrays: ``x`` (..., K), ``w`` (K, N) -> float32 (..., N)."""
    x = np.asarray(x, np.float32)
    w = np.asarray(w, np.float32)
    if w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[0]:
        raise ValueError(f"matmul shapes do not fit: x {x.shape}, w {w.shape}")
    lead, k = x.shape[:-1], x.shape[-1]
    plan = make_plan(spec, k, splits)
    if k == 0 or x.size == 0 or w.shape[1] == 0:  # an empty sum is +0
        return np.zeros((*lead, w.shape[1]), np.float32)
    xq, sx = quantize_rows_np(x.reshape(-1, k), plan.inputs, plan.scaling)
    wq_t, sw_t = quantize_rows_np(w.T, plan.inputs, plan.scaling)
    total = reduce_quantized_np(xq, sx, wq_t, sw_t, plan)
    return cast_output_np(total, plan.output).reshape(*lead, w.shape[1])
