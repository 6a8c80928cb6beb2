"""The arithmetic floor of the GPU matmul: operations per product, and the fraction of native
bfloat16 they allow on an H100 or H200 at the published peak rates.

Per product of the definition the kernel does its product work (one binary64 or binary32
multiply-add on CUDA cores, or ``dot_waste`` binary64 tensor-core multiply-adds for the masked
dots), plus, once per group, the accumulator's rounding (and the ``a + t`` add where the sums
are not fused into the multiply-adds), plus, once per chunk, the promotion. The per-group and
per-chunk operations are not written down here by hand: they are counted in the jaxpr of the
kernel's own functions (``round_accumulator*``, ``scaled_term``, ``flush``), traced for each
preset's plan. A 64-bit integer operation counts as two 32-bit ones (the GPU has no 64-bit
integer ALU); bit casts count as nothing. Each operation runs on its pipe (FP64, FP32, INT32,
FP64 tensor core); the pipes run side by side, so the busiest one sets the time per product.

    python bench/bench_matmul_floor.py           # the table of docs/kernels.md

Rates (dense, no sparsity) from NVIDIA's H100 Tensor Core GPU datasheet, SXM column (the H200
has the same SMs and clocks; its datasheet lists the same compute figures): FP64 34 TFLOPS,
FP64 tensor core 67, FP32 67, BF16 tensor core 989.5 (the datasheet's 1,979 is with
sparsity); a multiply-add is two FLOPs. INT32: 64 results per SM and clock for 32-bit integer
add, logic and shift on compute capability 9.0, as many as FP64 (NVIDIA's CUDA C++
Programming Guide, arithmetic instruction throughput), so 17 T operations per second.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from kernel_contracts.contracts import preset
from kernel_contracts.kernels._matmul import make_plan
from kernel_contracts.kernels._matmul.pallas_gpu import choose_variant, dot_waste, fused_exact
from kernel_contracts.kernels._matmul.rounding import (
    round_accumulator,
    round_accumulator_in_range,
)
from kernel_contracts.kernels._matmul.shared import scaled_term
from kernel_contracts.kernels.numerics.formats import flush

PRESETS = ("h100-fp8", "h100-fp8-fast-accum", "bf16", "mxfp8", "fp32")
SIZE = 8192  # K of the plans (the floors do not depend on it beyond the last chunk)
# operations per second (a multiply-add is one operation)
RATES = {"fp64": 17.0e12, "fp64_tensor": 33.5e12, "fp32": 33.5e12, "int32": 17.0e12}
NATIVE_BF16 = 494.75e12  # bfloat16 tensor-core multiply-adds per second (989.5 TFLOPS dense)
_FREE = {"bitcast_convert_type", "broadcast_in_dim", "reshape", "squeeze", "expand_dims"}
_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}


class Floor(NamedTuple):
    """Operations per product on each pipe, the pipe that sets the time, and the fraction of
    native bfloat16's rate that allows."""

    preset: str
    variant: str
    ops: dict[str, float]
    bound: str
    fraction: float


def pipe_ops(fn, *args) -> dict[str, float]:
    """Operations of ``fn``'s jaxpr per pipe (traced with 64-bit types)."""
    with jax.enable_x64(True):
        jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    counts = dict.fromkeys(RATES, 0.0)

    def walk(jp):
        for eqn in jp.eqns:
            subs = [p for p in eqn.params.values() if hasattr(p, "jaxpr")]
            if subs:
                for sub in subs:
                    walk(sub.jaxpr if hasattr(sub.jaxpr, "eqns") else sub)
                continue
            if eqn.primitive.name in _FREE:
                continue
            var = eqn.invars[0] if eqn.primitive.name in _COMPARE else eqn.outvars[0]
            dtype = np.dtype(var.aval.dtype)
            if dtype == np.float64:
                counts["fp64"] += 1
            elif dtype == np.float32:
                counts["fp32"] += 1
            else:  # integers and predicates; 64-bit ones as two 32-bit operations
                counts["int32"] += 2 if dtype.itemsize == 8 else 1

    walk(jaxpr)
    return counts


def floor_of(name: str, variant: str | None = None) -> Floor:
    """The floor of preset ``name`` with ``variant`` (the kernel's own choice by default)."""
    plan = make_plan(preset(name).matmul, SIZE)
    variant = variant or choose_variant(plan)
    m, rz = plan.mantissa_bits, plan.toward_zero
    rnd = round_accumulator_in_range if plan.in_range else round_accumulator
    a64 = jax.ShapeDtypeStruct((), np.float64)
    one32 = jax.ShapeDtypeStruct((), np.float32)
    ops = dict.fromkeys(RATES, 0.0)
    if variant == "fma32":  # a + x * w in binary32 is the rounding: nothing per group
        ops["fp32"] += 1
        group = {}
    elif variant == "dot":  # masked dots on tensor cores, then a + t and the rounding
        ops["fp64_tensor"] += dot_waste(plan)
        group = pipe_ops(lambda a, t: rnd(a + t, m, rz), a64, a64)
    elif fused_exact(plan):  # per-lane sums fused into the multiply-adds
        ops["fp64"] += 1
        group = pipe_ops(lambda a: rnd(a, m, rz), a64)
    else:
        ops["fp64"] += 1
        group = pipe_ops(lambda a, t: rnd(a + t, m, rz), a64, a64)
    if plan.block_scaled:
        chunk = pipe_ops(lambda f, a, s: flush(f + scaled_term(a, s, s)), one32, a64, one32)
    else:
        chunk = pipe_ops(lambda f, a: flush(f + a.astype(jnp.float32)), one32, a64)
    for pipe in ops:
        ops[pipe] += group.get(pipe, 0.0) / plan.group + chunk[pipe] / plan.chunk_len
    times = {pipe: n / RATES[pipe] for pipe, n in ops.items()}
    bound = max(times, key=times.get)
    return Floor(name, variant, ops, bound, 1.0 / NATIVE_BF16 / times[bound])


def table(floors) -> list[str]:
    """Markdown rows: preset, variant, operations per product per pipe, bound, fraction."""
    lines = [
        "| preset | variant | FP64 | FP64 tensor | FP32 | INT32 | bound by | floor, % of bf16 |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for f in floors:
        cells = " | ".join(f"{f.ops[p]:.3f}" for p in ("fp64", "fp64_tensor", "fp32", "int32"))
        lines.append(f"| {f.preset} | {f.variant} | {cells} | {f.bound} | {100 * f.fraction:.2f} |")
    return lines


def main(argv=None, *, stdout=sys.stdout, stderr=sys.stderr) -> int:
    if argv:
        print("bench_matmul_floor: takes no arguments", file=stderr)
        return 2
    floors = [floor_of(name) for name in PRESETS]
    floors.append(floor_of("h100-fp8", "dot"))  # the masked dots, for comparison
    for line in table(floors):
        print(line, file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
