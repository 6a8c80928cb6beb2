"""Benchmark: emulated matmul vs plain float32 ``jnp.dot``, with the floor this CPU allows.

All ratios come from one run on one machine: the best of ``--repeats`` calls of every function,
interleaved (so load from other processes hits all alike), wall and CPU seconds. Besides the
emulation the run times its quantization alone (``kernels.numerics.scaling``, part of every call)
and a binary64 ``jnp.dot`` (what exact binary64 multiply-adds cost here). Each preset is also
checked bit for bit against the NumPy reference on a ``--check-shape`` slice of the same operands.

The floor table counts the vector operations per multiply-add that the definition leaves:
``K / group`` roundings per output form one dependent chain (no GEMM can batch them), each
costing the group's multiply-adds at the width the sums need (binary32 only for the float32
chain; binary64 otherwise: an e4m3 product is a multiple of ``2**-18`` below ``2**18``, so a
group sum and its addition to the accumulator need more than binary32's 24 bits), one add and
the rounding's integer operations, plus each chunk's promotion (mostly binary32 operations;
see ``vector_ops_per_mac``). A fp32 GEMM does one fused
multiply-add per product at full SIMD width (8 binary32 lanes, 4 binary64 lanes per 256-bit
vector; ``matmul`` compiles its loops for 512-bit vectors on CPU, counted here as two 256-bit
operations each, so the floor holds only as closely as the two widths run at the same lane
rate). The ratio of the two counts, plus the quantization, is the ratio an implementation of
this arithmetic would reach at the dot's sustained vector-operation rate; a target below it
would need fewer operations than exact binary64 multiply-adds allow (the float64 ``jnp.dot``
line shows what those cost here). Wall-clock ratios are further limited by how well each
implementation spreads over the cores.

    python bench/bench_matmul.py                      # (1024, 4096, 4096), all presets
    python bench/bench_matmul.py --shape 256 4096 1024 --presets h100-fp8
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import interleaved, median_ready

from kernel_contracts.contracts import preset
from kernel_contracts.kernels._matmul import make_plan, matmul
from kernel_contracts.kernels.numerics.scaling import quantize_cols, quantize_rows

PRESETS = ("h100-fp8", "h100-fp8-fast-accum", "bf16", "mxfp8")
# the targets, wall-clock ratios to float32 jnp.dot at (1024, 4096, 4096)
TARGETS = {"h100-fp8": 6.0, "bf16": 4.0, "mxfp8": 4.0}
LANES = {"binary32": 8, "binary64": 4}  # per 256-bit vector, as XLA emits on x86


def arithmetic(plan) -> str:
    """The loop the pure-JAX path runs for ``plan`` (see ``kernels._matmul.fast``)."""
    if plan.binary32_chain:
        return "binary32" + (" (data-checked)" if not plan.in_range else "")
    sums = "dot" if plan.exact_group_sums and plan.group >= 16 else "fused"
    rounding = "range-free" if plan.in_range else "full"
    return f"binary64, {sums} sums, {rounding} rounding"


def rounding_ops(plan) -> tuple[int, str]:
    """Vector operations of one accumulator rounding in the loop, and what they are."""
    if plan.binary32_chain:
        return 0, "none (the FMA rounds)"
    if not plan.in_range:
        return 15, "bit operations with flush, overflow, NaN and sign checks"
    if plan.toward_zero:
        return 1, "AND"
    if plan.mantissa_bits == 23:
        return 2, "to binary32 and back"
    return 6, "shift, AND, two adds, AND, NaN select"


def vector_ops_per_mac(plan) -> tuple[float, int, str]:
    """(vector operations per multiply-add, roundings per output, one rounding step's
    operations) of the definition on ``plan``, each operation at the narrowest width that
    keeps it exact, and none that could be left out.

    Per chunk: every group's multiply-adds, its addition to the accumulator (none for the
    first group, added to zero) and its rounding, at the accumulator's width; the promotion's
    conversion to binary32 (none when the last rounding is that conversion already); the
    promotion in binary32: the scale product, the scaled term and the addition to the part's
    sum, each flushed (abs, compare, select), or for unscaled chunks the addition alone.
    """
    width = "binary32" if plan.binary32_chain else "binary64"
    g = plan.group
    rounding, what = rounding_ops(plan)
    if plan.binary32_chain:
        per_group, step = 1, "1 FMA"  # one fused multiply-add, which rounds to binary32 itself
        wide = plan.groups * per_group
    else:  # g multiply-adds, the accumulator add, the rounding
        per_group = g + 1 + rounding
        step = f"{g} FMA + 1 add + {rounding} ({what})"
        # the promotion converts the accumulator to binary32, unless the last rounding did
        # (then that rounding's way back to binary64 is not needed either)
        to_binary32 = plan.in_range and plan.mantissa_bits == 23 and not plan.toward_zero
        conversion = -1 if to_binary32 else 1
        wide = plan.groups * per_group - 1 + conversion  # - 1: the first group is added to 0
    narrow = 12 if plan.block_scaled else 4  # binary32: (multiply, flush) x2, add, flush
    per_chunk = wide / LANES[width] + narrow / LANES["binary32"]
    ops = plan.parts * plan.chunks * per_chunk
    return ops / plan.k, plan.steps, f"{step}, {LANES[width]} lanes"


def main(argv=None, *, stdout=sys.stdout) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shape", type=int, nargs=3, default=(1024, 4096, 4096), metavar=("M", "K", "N")
    )
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--check-shape", type=int, nargs=3, default=(128, 1024, 512), metavar=("M", "K", "N")
    )
    parser.add_argument(
        "--pallas-shape", type=int, nargs=3, default=(128, 512, 128), metavar=("M", "K", "N")
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")

    def out(line=""):
        print(line, file=stdout, flush=True)

    rng = np.random.default_rng(0)
    m, k, n = args.shape
    x = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((k, n)), jnp.float32)
    dot = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST))
    with jax.enable_x64(True):
        x64, w64 = x.astype(jnp.float64), w.astype(jnp.float64)
        dot64 = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST))
        jax.block_until_ready(dot64(x64, w64))
    calls = {"fp32 dot": lambda: jax.block_until_ready(dot(x, w))}

    def on_x64(f, *a):
        def call():
            with jax.enable_x64(True):
                return jax.block_until_ready(f(*a))

        return call

    calls["fp64 dot"] = on_x64(dot64, x64, w64)
    plans = {}
    options = {"xla_cpu_prefer_vector_width": 512} if jax.default_backend() == "cpu" else None
    for name in args.presets:
        spec = preset(name).matmul
        plan = plans[name] = make_plan(spec, k)

        def quantize_both(a, b, plan=plan):
            return quantize_rows(a, plan.inputs, plan.scaling), quantize_cols(
                b, plan.inputs, plan.scaling
            )

        quantize = jax.jit(quantize_both, compiler_options=options)  # as matmul compiles
        # called as is: matmul compiles itself (with 512-bit vectors on CPU; an enclosing
        # jax.jit would compile it with its own options)
        calls[name] = lambda spec=spec: jax.block_until_ready(matmul(x, w, spec))
        calls[f"{name} quantize"] = on_x64(quantize, x, w)
    for call in calls.values():  # compile
        call()
    load_before = os.getloadavg()[0]
    wall, cpu, _ = interleaved(calls, args.repeats)
    load_after = os.getloadavg()[0]

    cm, ck, cn = args.check_shape
    same = {}
    for name in args.presets:
        spec = preset(name).matmul
        xs, ws = np.asarray(x[:cm, :ck]), np.asarray(w[:ck, :cn])
        got = np.asarray(matmul(xs, ws, spec))
        want = matmul(xs, ws, spec, impl="numpy")
        same[name] = bool(
            np.all((got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want)))
        )

    base_w, base_c = wall["fp32 dot"], cpu["fp32 dot"]
    out(f"backend: {jax.default_backend()}, devices: {jax.devices()}")
    out(
        f"shape (M, K, N) = {tuple(args.shape)}; best of {args.repeats}, interleaved; "
        f"float32 jnp.dot {base_w * 1e3:.0f} ms wall, {base_c * 1e3:.0f} ms CPU; "
        f"float64 jnp.dot {wall['fp64 dot'] / base_w:.2f}x wall, "
        f"{cpu['fp64 dot'] / base_c:.2f}x CPU"
    )
    out(
        f"{os.cpu_count()} CPUs; 1-minute load average {load_before:.2f} before the timed runs, "
        f"{load_after:.2f} after (other processes take cores from every function, not "
        "evenly: compare rows of one run only)"
    )
    out()
    out(
        "| preset | emulated (s) | ratio vs fp32 dot, wall | CPU (s) | ratio, CPU "
        f"| quantization alone, CPU | bit-identical to reference {tuple(args.check_shape)} |"
    )
    out("|---|---:|---:|---:|---:|---:|---|")
    for name in args.presets:
        q = cpu[f"{name} quantize"]
        out(
            f"| {name} | {wall[name]:.3f} | {wall[name] / base_w:.1f}x | {cpu[name]:.3f} "
            f"| {cpu[name] / base_c:.1f}x | {q / base_c:.1f}x | {'yes' if same[name] else 'NO'} |"
        )
    out()
    macs = m * k * n
    dot_rate = macs / LANES["binary32"] / base_c  # one FMA per product, 8 binary32 lanes
    out(
        "Floor: vector operations per multiply-add (counted as 256-bit vectors, a 512-bit one "
        "as two; fp32 dot = 1 FMA / 8 lanes = 0.125); the dot sustains "
        f"{dot_rate / 1e9:.1f} G vector ops per CPU second."
    )
    out(
        "Floor ratio = (vector ops per MAC) / 0.125 + quantization: what an emulation running "
        "its loop at the dot's sustained rate would reach, in CPU time, and in wall time if it "
        "spread over the cores as well as the dot. A target below it is not physical on this "
        "CPU. The wall ratio can be worse than the CPU ratio: the loops over tiles and K are "
        "sequential, and only each iteration's work is spread over the cores."
    )
    out(
        "| preset | loop arithmetic | one rounding step | roundings per output (one chain) "
        "| vector ops per MAC | floor ratio, CPU | achieved, CPU | achieved, wall "
        "| target, wall | emulation G vector ops/CPU s |"
    )
    out("|---|---|---|---:|---:|---:|---:|---:|---|---:|")
    for name in args.presets:
        plan = plans[name]
        per_mac, roundings, step = vector_ops_per_mac(plan)
        quant = cpu[f"{name} quantize"] / base_c
        floor = per_mac / 0.125 + quant
        loop_cpu = max(cpu[name] - cpu[f"{name} quantize"], 1e-9)
        achieved = wall[name] / base_w
        target = TARGETS.get(name) if tuple(args.shape) == (1024, 4096, 4096) else None
        if target is None:
            verdict = "none set"
        elif floor > target:
            verdict = f"<= {target:g}x: not physical (floor {floor:.1f}x)"
        else:
            verdict = f"<= {target:g}x: {'met' if achieved <= target else 'missed'}"
        out(
            f"| {name} | {arithmetic(plan)} | {step} | {roundings} "
            f"| {per_mac:.3f} | {per_mac / 0.125:.1f}x + {quant:.1f}x = {floor:.1f}x "
            f"| {cpu[name] / base_c:.1f}x | {achieved:.1f}x | {verdict} "
            f"| {macs * per_mac / loop_cpu / 1e9:.1f} |"
        )

    pm, pk, pn = args.pallas_shape
    xs = jnp.asarray(rng.standard_normal((pm, pk)), jnp.float32)
    ws = jnp.asarray(rng.standard_normal((pk, pn)), jnp.float32)
    out()
    out(
        f"Pallas (interpret={jax.default_backend() != 'gpu'}) vs pure JAX at "
        f"{tuple(args.pallas_shape)} (median of {args.repeats}):"
    )
    out("| preset | pure JAX (ms) | Pallas (ms) | ratio |")
    out("|---|---:|---:|---:|")
    for name in args.presets:
        spec = preset(name).matmul
        fj = jax.jit(lambda a, b, spec=spec: matmul(a, b, spec))
        fp = jax.jit(lambda a, b, spec=spec: matmul(a, b, spec, impl="pallas"))
        tj = median_ready(fj, xs, ws, repeats=args.repeats)
        tp = median_ready(fp, xs, ws, repeats=args.repeats)
        agree = bool(jnp.array_equal(fj(xs, ws), fp(xs, ws)))
        out(
            f"| {name} | {tj * 1e3:.1f} | {tp * 1e3:.1f} | {tp / tj:.1f}x"
            f"{'' if agree else ' (RESULTS DIFFER)'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
