"""Benchmark: emulated matmul vs plain float32 ``jnp.dot``, and Pallas interpret vs pure JAX.

All ratios are measured in one run on the same machine (median of ``--repeats`` timed calls
after one warm-up/compile call).

    python bench/bench_matmul.py                      # (1024, 4096, 4096), all presets
    python bench/bench_matmul.py --shape 256 4096 1024 --presets h100-fp8
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import median_ready as timed

from contracts import preset
from kernels.matmul import matmul

PRESETS = ("h100-fp8", "h100-fp8-fast-accum", "bf16", "mxfp8")


def main(argv=None, *, stdout=sys.stdout) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shape", type=int, nargs=3, default=(1024, 4096, 4096), metavar=("M", "K", "N")
    )
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--pallas-shape", type=int, nargs=3, default=(128, 512, 128), metavar=("M", "K", "N")
    )
    args = parser.parse_args(argv)

    def out(line=""):
        print(line, file=stdout, flush=True)

    rng = np.random.default_rng(0)
    m, k, n = args.shape
    x = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((k, n)), jnp.float32)
    dot = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST))
    t_dot = timed(dot, x, w, repeats=args.repeats)
    out(f"backend: {jax.default_backend()}, devices: {jax.devices()}")
    out(f"shape (M, K, N) = {tuple(args.shape)}; plain float32 jnp.dot: {t_dot * 1e3:.1f} ms")
    out()
    out("| preset | pure-JAX emulated (s) | ratio vs fp32 jnp.dot |")
    out("|---|---:|---:|")
    for name in args.presets:
        spec = preset(name).matmul
        f = jax.jit(lambda a, b, spec=spec: matmul(a, b, spec))
        t = timed(f, x, w, repeats=max(1, args.repeats // 3))
        out(f"| {name} | {t:.2f} | {t / t_dot:.1f}x |")

    pm, pk, pn = args.pallas_shape
    xs = jnp.asarray(rng.standard_normal((pm, pk)), jnp.float32)
    ws = jnp.asarray(rng.standard_normal((pk, pn)), jnp.float32)
    out()
    out(
        f"Pallas (interpret={jax.default_backend() != 'gpu'}) vs pure JAX at "
        f"{tuple(args.pallas_shape)}:"
    )
    out("| preset | pure JAX (ms) | Pallas (ms) | ratio |")
    out("|---|---:|---:|---:|")
    for name in args.presets:
        spec = preset(name).matmul
        fj = jax.jit(lambda a, b, spec=spec: matmul(a, b, spec))
        fp = jax.jit(lambda a, b, spec=spec: matmul(a, b, spec, impl="pallas"))
        tj = timed(fj, xs, ws, repeats=args.repeats)
        tp = timed(fp, xs, ws, repeats=args.repeats)
        same = bool(jnp.array_equal(fj(xs, ws), fp(xs, ws)))
        out(
            f"| {name} | {tj * 1e3:.1f} | {tp * 1e3:.1f} | {tp / tj:.1f}x"
            f"{'' if same else ' (RESULTS DIFFER)'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
