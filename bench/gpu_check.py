"""GPU check (one NVIDIA GPU, written for an H200): compiled Pallas emulation vs CPU reference.

1. Correctness: the compiled Pallas kernel (``interpret=False``, Triton) and the pure-JAX path,
   both running on the GPU, must equal the NumPy reference (CPU) bit for bit, for every preset,
   on aligned and ragged shapes, with and without split-K.
2. Throughput at (4096, 4096, 4096): the emulated ``h100-fp8`` Pallas kernel vs native bfloat16
   ``jnp.dot`` (float32 accumulation) on the same GPU.

Prints a small Markdown table. Without a GPU it says so and exits with code 0. Exit code 1 if
any result differs from the reference.

    python bench/gpu_check.py [--size 4096] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import median_ready as timed

from contracts import preset
from kernels._matmul import matmul

PRESETS = ("h100-fp8", "h100-fp8-fast-accum", "bf16", "mxfp8")
SHAPES = ((256, 1024, 256), (200, 300, 130))


def main(argv=None, *, stdout=sys.stdout) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    def out(line=""):
        print(line, file=stdout, flush=True)

    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        out("gpu_check: no GPU visible to JAX; skipped (nothing was checked).")
        return 0
    out(f"device: {gpus[0].device_kind}; jax {jax.__version__}")
    rng = np.random.default_rng(0)
    failures = 0
    out()
    out("| preset | shape | splits | Pallas == reference | pure JAX == reference |")
    out("|---|---|---:|---|---|")
    for name in PRESETS:
        spec = preset(name).matmul
        for m, k, n in SHAPES:
            x = rng.standard_normal((m, k)).astype(np.float32)
            w = rng.standard_normal((k, n)).astype(np.float32)
            for splits in (1, 3):
                with jax.default_device(jax.devices("cpu")[0]):
                    ref = np.asarray(matmul(x, w, spec, impl="numpy", splits=splits))
                xg, wg = jax.device_put(x, gpus[0]), jax.device_put(w, gpus[0])
                res = []
                for impl in ("pallas", "jax"):
                    try:
                        got = np.asarray(
                            matmul(xg, wg, spec, impl=impl, splits=splits, interpret=False)
                        )
                        ok = got.shape == ref.shape and bool(
                            np.all(
                                (got.view(np.uint32) == ref.view(np.uint32))
                                | (np.isnan(got) & np.isnan(ref))
                            )
                        )
                        res.append("yes" if ok else f"NO ({int(np.sum(got != ref))} differ)")
                    except Exception as e:  # report and go on: this is a check script
                        ok = False
                        res.append(f"ERROR {type(e).__name__}: {str(e).splitlines()[0][:80]}")
                    failures += not ok
                out(f"| {name} | {m}x{k}x{n} | {splits} | {res[0]} | {res[1]} |")

    s = args.size
    x = jnp.asarray(rng.standard_normal((s, s)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((s, s)), jnp.float32)
    xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    native = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
    t_native = timed(native, xb, wb, repeats=args.repeats)
    flops = 2.0 * s**3
    out()
    out(f"| kernel at {s}^3 | time (ms) | TFLOP/s | share of native bf16 |")
    out("|---|---:|---:|---:|")
    out(f"| native bf16 jnp.dot | {t_native * 1e3:.2f} | {flops / t_native / 1e12:.1f} | 100% |")
    for name in ("h100-fp8", "bf16"):
        spec = preset(name).matmul
        emu = jax.jit(lambda a, b, spec=spec: matmul(a, b, spec, impl="pallas", interpret=False))
        try:
            t = timed(emu, x, w, repeats=max(1, args.repeats // 2))
            out(
                f"| emulated {name} (Pallas) | {t * 1e3:.2f} | {flops / t / 1e12:.2f} | "
                f"{100 * t_native / t:.1f}% |"
            )
        except Exception as e:
            failures += 1
            out(f"| emulated {name} (Pallas) | ERROR {type(e).__name__} | | |")
    out()
    out("all results equal the CPU reference" if not failures else f"{failures} FAILURES")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
