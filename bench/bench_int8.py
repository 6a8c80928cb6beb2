"""Benchmark: the emulated int8 matmul against plain float32 ``jnp.dot`` and the h100-fp8
emulation, and its measured error against the a priori epilogue bound.

All ratios come from one run on one machine (best of ``--repeats`` interleaved calls after a
compile call each).

    python bench/bench_int8.py                        # (256, 1024, 1024)
    python bench/bench_int8.py --shape 64 4096 512
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from timing import interleaved

from kernel_contracts.bounds import matmul_error
from kernel_contracts.contracts import preset
from kernel_contracts.kernels._matmul import int8_matmul, matmul
from kernel_contracts.kernels.numerics.scaling import quantize_rows_int8_np


def main(argv=None, *, stdout=sys.stdout) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shape", type=int, nargs=3, default=(256, 1024, 1024), metavar=("M", "K", "N")
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    def out(line=""):
        print(line, file=stdout, flush=True)

    rng = np.random.default_rng(0)
    m, k, n = args.shape
    x = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((k, n)), jnp.float32)
    int8 = dataclasses.replace(preset("a100-int8").matmul, k_max=max(k, 1))
    fp8 = preset("h100-fp8").matmul
    fns = {
        "float32 jnp.dot": jax.jit(lambda a, b: jnp.dot(a, b, precision="highest")),
        "a100-int8": jax.jit(lambda a, b: matmul(a, b, int8)),
        "h100-fp8": jax.jit(lambda a, b: matmul(a, b, fp8)),
    }
    calls = {name: (lambda f=f: jax.block_until_ready(f(x, w))) for name, f in fns.items()}
    for call in calls.values():
        call()  # compile
    wall, cpu, _ = interleaved(calls, args.repeats)
    base = wall["float32 jnp.dot"]
    out(f"backend: {jax.default_backend()}; shape (M, K, N) = {tuple(args.shape)}")
    out()
    out("| kernel | best wall (ms) | ratio vs float32 jnp.dot | best CPU (ms) |")
    out("|---|---:|---:|---:|")
    for name in calls:
        ms, ratio, cpu_ms = wall[name] * 1e3, wall[name] / base, cpu[name] * 1e3
        out(f"| {name} | {ms:.1f} | {ratio:.1f}x | {cpu_ms:.1f} |")

    # the epilogue's error against ŝ_x·ŝ_w·S, as a share of the a priori bound θ·Σ|x̂ŵ|
    sub = 16
    got = int8_matmul(np.asarray(x[:sub]), np.asarray(w[:, :sub]), int8, impl="numpy")
    theta = matmul_error(int8, k).relative
    qx, sx = quantize_rows_int8_np(np.asarray(x[:sub]), False, "float32")
    qw, sw = quantize_rows_int8_np(np.asarray(w[:, :sub]).T, False, "float32")
    worst = 0.0
    for i in range(sub):
        for j in range(sub):
            scale = Fraction(float(sx[i, 0])) * Fraction(float(sw[j, 0]))
            err = abs(Fraction(float(got.y[i, j])) - scale * int(got.exact[i, j]))
            mass = scale * int(np.abs(qx[i].astype(np.int64) * qw[j].astype(np.int64)).sum())
            worst = max(worst, float(err / (Fraction(theta) * mass)))
    out()
    out(f"a priori epilogue bound at K = {k}: θ = {theta:.4g} (relative to Σ|x̂ŵ|); measured")
    out(f"worst error over {sub}×{sub} outputs: {worst:.3f} of the bound")
    return 0


if __name__ == "__main__":
    sys.exit(main())
