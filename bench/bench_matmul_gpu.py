"""GPU benchmark: the emulated presets (GPU-shaped Pallas kernel) against native matmuls.

One run on one GPU, at (size, size, size), 8192 by default: the ceilings (native bfloat16
``jnp.dot`` with float32 results, float64 ``jnp.dot``, float32 ``jnp.dot`` at
``Precision.HIGHEST``) and each emulated preset through ``matmul(impl="pallas")`` (quantization,
layout and output cast included), each as the median of ``--repeats`` timed calls after one
untimed call, with its ratio to native bfloat16 and to its arithmetic floor
(``bench_matmul_floor.py``): the floor's share of native bfloat16 at NVIDIA's published rates,
compared once with the native rate measured here and once with the published one.
``measure`` does the timing for ``gpu_acceptance.py`` too.

Before timing, every timed arithmetic is checked bit for bit against the NumPy reference on
small aligned and ragged shapes with split-K 1 and 3 (``--check-shape``): a timing of a kernel
that computes other bits would mean nothing. ``--sweep`` also times the kernel's variants and
block shapes for h100-fp8 (the masked binary64 dots among them) and bf16.

    python bench/bench_matmul_gpu.py                 # 8192^3, under 2 minutes on an H200
    python bench/bench_matmul_gpu.py --size 4096 --sweep

Needs JAX with a GPU backend (no z3). Without a GPU it says so and exits 0. Exit code 1 if a
check finds different bits or a kernel fails to run, 2 on unusable arguments.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
from bench_matmul_floor import NATIVE_BF16, floor_of
from timing import median_ready

from kernel_contracts.contracts import preset
from kernel_contracts.kernels._matmul import make_plan, matmul
from kernel_contracts.kernels._matmul.pallas_gpu import choose_variant, reduce_quantized_pallas_gpu
from kernel_contracts.kernels.numerics.formats import cast_output
from kernel_contracts.kernels.numerics.scaling import quantize_rows

PRESETS = ("h100-fp8", "h100-fp8-fast-accum", "bf16", "mxfp8")
CHECK_SHAPES = ((256, 1024, 256), (200, 300, 130))  # aligned; ragged in every dimension
# (preset, variant, block_m, block_n, num_warps, num_stages) timed by --sweep
SWEEP = (
    ("h100-fp8", "dot", 64, 64, 4, 2),  # the masked dots (the default before per-lane sums)
    ("h100-fp8", "fma64", 64, 64, 4, 1),
    ("h100-fp8", "fma64", 128, 64, 4, 1),
    ("h100-fp8", "fma64", 64, 128, 4, 1),
    ("h100-fp8", "fma64", 64, 64, 2, 1),
    ("bf16", "fma32", 64, 64, 4, 1),
    ("bf16", "fma32", 128, 128, 4, 1),
    ("bf16", "fma32", 128, 64, 4, 1),
)


def variant_fn(spec, variant, block_m, block_n, num_warps, num_stages, splits=1, interpret=False):
    """``matmul`` with the GPU kernel's variant and blocks fixed (same steps as ``matmul``);
    call it inside ``jax.enable_x64``."""

    def f(x, w):
        plan = make_plan(spec, x.shape[1], splits)
        xq, sx = quantize_rows(x, plan.inputs, plan.scaling)
        wq, sw = quantize_rows(w.T, plan.inputs, plan.scaling)
        total = reduce_quantized_pallas_gpu(
            xq, sx, wq, sw, plan, variant=variant, block_m=block_m, block_n=block_n,
            num_warps=num_warps, num_stages=num_stages, interpret=interpret,
        )  # fmt: skip
        return cast_output(total, plan.output)

    return jax.jit(f)


def same_bits(got, ref) -> int:
    """The number of outputs whose bits differ (NaNs alike)."""
    got, ref = np.asarray(got, np.float32), np.asarray(ref, np.float32)
    equal = (got.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(got) & np.isnan(ref))
    return int((~equal).sum())


def check(cases, rng, row, *, interpret=False, shapes=CHECK_SHAPES) -> int:
    """Bit-exactness of each (label, preset, sweep configuration or None) against the
    reference; None is ``matmul(impl="pallas")`` itself (the GPU kernel), checked on every
    shape and split, a sweep configuration on the last (ragged) shape with split-K 3.
    ``interpret=True`` runs the same kernels interpreted (a rehearsal off the GPU)."""
    failures = 0
    operands = {s: (rng.standard_normal(s[:2]), rng.standard_normal(s[1:])) for s in shapes}
    refs = {}
    impl = "pallas_gpu" if interpret else "pallas"
    for label, name, config in cases:
        spec = preset(name).matmul
        runs = [(s, sp) for s in shapes for sp in (1, 3)] if config is None else [
            (shapes[-1], 3)
        ]  # fmt: skip
        for shape, splits in runs:
            x, w = (a.astype(np.float32) for a in operands[shape])
            key = (name, shape, splits)
            if key not in refs:
                refs[key] = np.asarray(matmul(x, w, spec, impl="numpy", splits=splits))
            ref = refs[key]
            case = f"{label} {'x'.join(map(str, shape))} splits={splits}"
            try:
                if config is None:
                    got = matmul(x, w, spec, impl=impl, splits=splits, interpret=interpret)
                else:
                    with jax.enable_x64(True):
                        fn = variant_fn(spec, *config, splits=splits, interpret=interpret)
                        got = fn(jnp.asarray(x), jnp.asarray(w))
                bad = same_bits(got, ref)
                result = "same bits" if not bad else f"DIFFERENT: {bad} of {ref.size}"
            except Exception as e:  # report and go on: this is a bench
                bad, result = 1, f"ERROR {type(e).__name__}: {str(e)[:120]}"
            failures += bool(bad)
            row("check", case, result)
    return failures


def measure(size, repeats, presets, sweep, device, row, *, interpret=False):
    """Time the ceilings, each preset's ``matmul`` on the GPU kernel and each sweep
    configuration at (size, size, size) on ``device``, printing a row for each; the number
    of kernels that failed to run, and the records: per row its seconds, TFLOP/s and ratio to
    native bfloat16 (and, for a preset, to its arithmetic floor: ``bench_matmul_floor``).
    ``interpret=True`` times the interpreted kernels (a rehearsal: its times mean nothing)."""
    flops = 2.0 * size**3
    rng = np.random.default_rng(1)
    x = jax.device_put(rng.standard_normal((size, size)).astype(np.float32), device)
    w = jax.device_put(rng.standard_normal((size, size)).astype(np.float32), device)
    records, failures = {}, 0

    def timed(f, *operands):
        return median_ready(f, *operands, repeats=repeats)

    def record(kind, case, t, floor=None):
        rec = {"kind": kind, "seconds": t, "tflops": flops / t / 1e12}
        text = f"{t * 1e3:.1f} ms, {rec['tflops']:.2f} TFLOP/s"
        if "native bf16" in records:
            rec["pct_native_bf16"] = 100 * records["native bf16"]["seconds"] / t
            text += f", {rec['pct_native_bf16']:.2f} % of native bf16"
        if floor is not None:  # the floor as a share of native: measured and published
            rec["floor_pct_of_bf16"] = 100 * floor.fraction
            rec["pct_floor_vs_measured_bf16"] = (
                100 * rec["pct_native_bf16"] / rec["floor_pct_of_bf16"]
            )
            published = floor.fraction * 2 * NATIVE_BF16 / 1e12  # TFLOP/s
            rec["pct_floor_vs_published_rates"] = 100 * rec["tflops"] / published
            text += (
                f", {rec['pct_floor_vs_measured_bf16']:.1f} % of the floor "
                f"({rec['pct_floor_vs_published_rates']:.1f} % at published rates)"
            )
        records[case] = rec
        row(kind, case, text)

    def failed(kind, case, e):
        nonlocal failures
        failures += 1
        records[case] = {"kind": kind, "error": f"{type(e).__name__}: {str(e)[:200]}"}
        row(kind, case, f"ERROR {records[case]['error'][:120]}")

    native = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
    xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    record("ceiling", "native bf16", timed(native, xb, wb))
    del xb, wb
    highest = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST))
    record("ceiling", "float32 jnp.dot, Precision.HIGHEST", timed(highest, x, w))
    with jax.enable_x64(True):
        x64, w64 = x.astype(jnp.float64), w.astype(jnp.float64)
        record("ceiling", "float64 jnp.dot", timed(jax.jit(jnp.dot), x64, w64))
        del x64, w64

    impl = "pallas_gpu" if interpret else "pallas"
    for name in presets:
        spec = preset(name).matmul
        variant = choose_variant(make_plan(spec, size))
        case = f"{name} (pallas, {variant})"
        emu = jax.jit(lambda a, b, spec=spec: matmul(a, b, spec, impl=impl, interpret=interpret))
        try:
            record("emulated", case, timed(emu, x, w), floor_of(name, variant))
        except Exception as e:  # report and go on: this is a bench
            failed("emulated", case, e)
    for p, v, bm, bn, nw, ns in sweep:
        fn = variant_fn(preset(p).matmul, v, bm, bn, nw, ns, interpret=interpret)
        case = f"{p} {v} {bm}x{bn} warps={nw} stages={ns}"
        try:
            with jax.enable_x64(True):
                record("sweep", case, timed(fn, x, w), floor_of(p, v))
        except Exception as e:
            failed("sweep", case, e)
    return failures, records


def main(argv=None, *, stdout=sys.stdout, stderr=sys.stderr) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS)
    parser.add_argument("--sweep", action="store_true", help="time variants and block shapes")
    parser.add_argument("--no-check", action="store_true", help="skip the bit-exactness rows")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) and 2
    if args.size < 1 or args.repeats < 1:
        print("bench_matmul_gpu: --size and --repeats must be positive", file=stderr)
        return 2

    def out(line=""):
        print(line, file=stdout, flush=True)

    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        out("bench_matmul_gpu: no GPU visible to JAX; skipped (nothing was measured).")
        return 0
    out(f"device: {gpus[0].device_kind}; jax {jax.__version__}; size {args.size}")
    out()
    out("| row | case | result |")
    out("|---|---|---|")

    def row(kind, case, result):
        out(f"| {kind} | {case} | {result} |")

    rng = np.random.default_rng(0)
    sweep = [c for c in SWEEP if c[0] in args.presets] if args.sweep else []
    failures = 0
    if not args.no_check:
        cases = [(f"{name} pallas", name, None) for name in args.presets]
        cases += [(f"{c[0]} {c[1]} {c[2]}x{c[3]} w{c[4]} s{c[5]}", c[0], c[1:]) for c in sweep]
        failures += check(cases, rng, row)

    failures += measure(args.size, args.repeats, args.presets, sweep, gpus[0], row)[0]
    out()
    if failures:
        out(f"{failures} FAILURES")
    else:
        out("no checks run" if args.no_check else "all checks gave the reference's bits")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
