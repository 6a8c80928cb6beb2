"""Full-vocabulary measurement on a GPU: the Pallas kernel against a plain read pass.

    python bench/bench_measure_gpu.py [--tokens 32768] [--vocab 151936] [--repeat 5]
                                      [--drift 0.01] [--sweep] [--jax] [--dry-run]

On random logits (z' = z + drift·N(0, 1), both float32 on the device: 2 × 19.9 GB at the
default shape), in one run and interleaved, best of ``--repeat``:

- the read bandwidth: the faster of two jitted passes that read the same two arrays once and do
  the least arithmetic per byte (a row maximum of each, a row sum of each);
- ``kernels.measurement.measure_pallas.measure_rows``: the kernel and its per-row epilogue, with the
  options of ``GPU_OPTIONS``, or with ``--sweep`` each of a few settings of persistent programs,
  rows per block, chunk, warps and pipeline stages (the best is reported);
- with ``--jax``, the XLA program (``kernels.measure(impl="jax")``), once.

It prints each one's bytes of logits per second and its share of the read bandwidth. Before
timing it checks the compiled kernel's columns, through ``kernels.measure(impl="pallas")`` (its
flagged rows recomputed on the JAX path), against the float64 reference on sampled rows and on
rows of every kind (peaked, flat, large drift, a large common drift, −inf on one or both sides,
NaN, all −inf): it exits 1 if any column differs beyond the tests' tolerance. On a machine
without a GPU it says so and exits 0 having measured nothing.

``--dry-run`` rehearses every step on a tiny shape (``DRY_RUN``), with the kernel interpreted
where there is no GPU (its figures then time the interpreter, not a GPU). A scripted run calls
``measure_vs_read`` (the same keywords as the options), which prints the same lines and returns
the figures as a dict.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

_RTOL = 2e-5
_FLOOR = {"kl_train_inf": 1e-12, "kl_inf_train": 1e-12, "tv": 1e-9, "log_ratio": 1e-9}


def _worst(got: dict, want: dict, temperature: float, rtol: float = _RTOL, atol=None) -> dict:
    """Per column, the largest error as a share of the tests' allowance (≤ 1 passes): relative
    2e-5 plus a floor; log_ratio's floor grows with the oscillation (float32 rounding of its
    terms); equal values (infinities, NaN) agree."""
    osc = np.where(np.isfinite(want["logit_oscillation"]), want["logit_oscillation"], 0.0)
    out = {}
    for key, w in want.items():
        g = np.asarray(got[key], np.float64)
        floor = _FLOOR.get(key, 1e-6) if atol is None else atol
        if key == "log_ratio":
            floor = np.maximum(floor, 4e-7 * (1 + osc / temperature))
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        with np.errstate(invalid="ignore"):
            share = np.where(same, 0.0, np.abs(g - w) / (rtol * np.abs(w) + floor))
        out[key] = float(np.nanmax(np.where(np.isnan(share), np.inf, share)))
    return out


def _special_rows(rng, vocab: int):
    """Rows of every kind the measurement documents, with the tolerance each is held to."""
    rows = 10
    z = (rng.normal(size=(rows, vocab)) * 3).astype(np.float32)
    zp = (z + rng.normal(size=z.shape) * 0.01).astype(np.float32)
    z[0] = rng.normal(size=vocab) * 0.01  # flat
    zp[0] = z[0] + rng.normal(size=vocab) * 1e-3
    z[1, vocab // 2] = 40.0  # peaked, its maximum mid-row
    zp[1] = z[1] + rng.normal(size=vocab) * 1e-4
    zp[2] = z[2] + rng.normal(size=vocab) * 0.8  # |u| above 1/2 and 1
    zp[3] = z[3] + 0.75 + rng.normal(size=vocab) * 1e-6  # a large common drift
    z[4, :100] = zp[4, :100] = -np.inf  # masked by both
    zp[5, 7] = -np.inf  # masked by one kernel: flagged, recomputed
    zp[6, 3] = z[6, 3] + 45.0  # u beyond the fast range: flagged
    z[7, 11] = np.nan  # flagged
    z[8] = zp[8] = -np.inf  # no distribution: flagged
    z[9, [5, vocab - 1]] = 30.0  # a tie across chunks: the first index wins
    zp[9, [5, vocab - 1]] = [30.0, 30.5]
    y = rng.integers(0, vocab, rows)
    y[4] = 10  # an observed token both kernels mask
    return z, zp, y


def check(vocab: int, sample_rows: int, z, zp, y, temperature: float) -> bool:
    """The compiled kernel's columns against float64 (sampled rows, then rows of every kind)."""
    import jax.numpy as jnp

    from kernel_contracts.kernels import measure, measure_numpy

    picks = np.linspace(0, z.shape[0] - 1, sample_rows).astype(int)
    zs, zps, ys = (np.asarray(a[picks]) for a in (z, zp, y))
    got = measure(jnp.asarray(zs), jnp.asarray(zps), jnp.asarray(ys), temperature, impl="pallas")
    worst = _worst(got, measure_numpy(zs, zps, ys, temperature), temperature)
    ok = max(worst.values()) <= 1.0
    print(f"sampled rows ({sample_rows}): worst error / allowance {max(worst.values()):.3f}")
    zx, zpx, yx = _special_rows(np.random.default_rng(1), vocab)
    got = measure(jnp.asarray(zx), jnp.asarray(zpx), jnp.asarray(yx), temperature, impl="pallas")
    want = measure(zx, zpx, yx, temperature, impl="jax")  # the JAX path's −inf/NaN semantics
    with np.errstate(all="ignore"):
        ref = measure_numpy(zx, zpx, yx, temperature)
    plain = [0, 1, 2, 3, 9]  # rows the float64 reference computes as the columns define them
    worst_ref = _worst(
        {k: np.asarray(v)[plain] for k, v in got.items()},
        {k: v[plain] for k, v in ref.items()},
        temperature,
    )
    worst_jax = _worst(
        got,
        {k: np.asarray(v, np.float64) for k, v in want.items()},
        temperature,
        rtol=1e-4,
        atol=2e-6,
    )
    flips = np.asarray(got["top1_flip"])[9]
    print(
        f"rows of every kind: worst error / allowance {max(worst_ref.values()):.3f} against "
        f"float64, {max(worst_jax.values()):.3f} against the JAX path; tie flip {flips:.0f}"
    )
    ok = ok and max(worst_ref.values()) <= 1.0 and max(worst_jax.values()) <= 1.0 and flips == 1
    for key in worst_ref:
        if worst_ref[key] > 1.0 or worst_jax[key] > 1.0:
            print(f"  {key}: {worst_ref[key]:.3g} (float64), {worst_jax[key]:.3g} (JAX path)")
    return bool(ok)


def _timed(fn, *args) -> float:
    import jax

    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


DRY_RUN = {"tokens": 24, "vocab": 700, "repeat": 1, "sample_rows": 4}  # interpret mode: tiny


def _settings(sweep: bool) -> list[dict]:
    from kernel_contracts.kernels.measurement.measure_pallas import GPU_OPTIONS

    settings = [dict(GPU_OPTIONS)]
    if sweep:
        for chunk, warps, stages in ((4096, 8, 2), (2048, 4, 2), (1024, 4, 2), (2048, 8, 3)):
            settings.append(
                {**GPU_OPTIONS, "chunk": chunk, "num_warps": warps, "num_stages": stages}
            )
        settings.append({**GPU_OPTIONS, "programs": 264})
    return settings


def measure_vs_read(
    *,
    tokens: int = 32768,
    vocab: int = 151936,
    repeat: int = 5,
    drift: float = 0.01,
    temperature: float = 1.0,
    sample_rows: int = 32,
    sweep: bool = False,
    with_jax: bool = False,
    dry_run: bool = False,
) -> dict:
    """Check the Pallas measurement kernel's columns, then time it against a read pass of the
    same arrays; print each line as it goes and return the figures (seconds, and shares of the
    read pass) as a dict. The entry point for a scripted GPU run.

    On a GPU the kernel is compiled through Triton. ``dry_run`` rehearses the same steps with
    ``DRY_RUN``'s tiny shape (the other sizes ignored) on whatever device there is, the kernel
    interpreted where that device is not a GPU: its figures then time the interpreter and say
    nothing of a GPU. Without a GPU and without ``dry_run`` nothing is measured
    (``measured`` is False). ``ok``: the columns agreed (a run that measured nothing is ok)."""
    import jax
    import jax.numpy as jnp

    from kernel_contracts.kernels import measure
    from kernel_contracts.kernels.measurement.measure_pallas import measure_rows

    gpu = jax.default_backend() == "gpu"
    result = {"device": jax.devices()[0].device_kind, "jax": jax.__version__, "gpu": gpu}
    if not gpu and not dry_run:
        print(f"no GPU here (JAX backend: {jax.default_backend()}): nothing measured")
        return {**result, "measured": False, "ok": True}
    if dry_run:
        tokens, vocab, repeat = DRY_RUN["tokens"], DRY_RUN["vocab"], DRY_RUN["repeat"]
        sample_rows = min(sample_rows, DRY_RUN["sample_rows"])
    interpret = not gpu
    mode = "compiled" if gpu else "INTERPRETED (a rehearsal: no GPU figure)"
    print(f"device: {result['device']}; jax {result['jax']}; kernel {mode}")
    n, v = tokens, vocab
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    z = jax.random.normal(k1, (n, v), jnp.float32) * 3.0
    zp = z + jax.random.normal(k2, (n, v), jnp.float32) * drift
    y = jax.random.randint(k3, (n,), 0, v, jnp.int32)
    inv_t = jnp.float32(1.0 / temperature)
    jax.block_until_ready((z, zp, y))
    gb = 2 * n * v * 4 / 1e9
    print(f"{n} x {v} float32, two arrays: {gb:.3g} GB; drift {drift}")

    t0 = time.perf_counter()
    ok = check(v, min(sample_rows, n), z, zp, y, temperature)
    print(
        f"check: {'columns agree' if ok else 'COLUMNS DIFFER'} ({time.perf_counter() - t0:.0f} s)"
    )

    reads = {
        "row max": jax.jit(lambda a, b: jnp.max(a, axis=1) + jnp.max(b, axis=1)),
        "row sum": jax.jit(lambda a, b: jnp.sum(a, axis=1) + jnp.sum(b, axis=1)),
    }
    kernels = {}
    for options in _settings(sweep):
        name = ", ".join(f"{k}={val}" for k, val in options.items())
        if name in kernels:
            continue

        def kernel(a, b, o=options):
            return measure_rows(a, b, y, inv_t, interpret=interpret, **o)

        t0 = time.perf_counter()
        print(f"compiling {name}", flush=True)
        try:
            _timed(kernel, z, zp)
        except Exception as err:  # a setting the compiler refuses: reported, not timed
            print(f"{name}: failed ({type(err).__name__}: {str(err)[:200]})")
            continue
        print(f"compiled {name} ({time.perf_counter() - t0:.1f} s)")
        kernels[name] = kernel
    for fn in reads.values():
        _timed(fn, z, zp)

    best = {name: np.inf for name in [*reads, *kernels]}
    for _ in range(repeat):
        for name, fn in [*reads.items(), *kernels.items()]:
            best[name] = min(best[name], _timed(fn, z, zp))
    read = min(best[name] for name in reads)
    print(
        f"\nread pass: {gb / read:.0f} GB/s ({read * 1e3:.2f} ms; "
        + ", ".join(f"{name} {best[name] * 1e3:.2f} ms" for name in reads)
        + ")"
    )
    for name in kernels:
        t = best[name]
        print(
            f"pallas [{name}]: {gb / t:.0f} GB/s, {100 * read / t:.1f} % of the read pass "
            f"({t * 1e3:.2f} ms)"
        )
    result.update(
        measured=True,
        shape=(n, v),
        read_s=read,
        kernel_s={name: best[name] for name in kernels},
        share={name: read / best[name] for name in kernels},
    )
    if kernels:
        top = min(kernels, key=lambda name: best[name])
        print(f"best pallas setting: [{top}] {100 * read / best[top]:.1f} % of the read pass")
        result["best"] = top
    else:
        ok = False
        print("no setting compiled")
    t_full = min(
        _timed(lambda a, b: measure(a, b, y, temperature, impl="pallas"), z, zp) for _ in range(2)
    )
    print(
        f"kernels.measure(impl='pallas'), defaults, end to end: {gb / t_full:.0f} GB/s, "
        f"{100 * read / t_full:.1f} %"
    )
    result["end_to_end_share"] = read / t_full
    if with_jax:
        fn = lambda a, b: measure(a, b, y, temperature, impl="jax")  # noqa: E731
        _timed(fn, z, zp)
        t = _timed(fn, z, zp)
        print(f"kernels.measure(impl='jax'): {gb / t:.0f} GB/s, {100 * read / t:.1f} %")
        result["jax_share"] = read / t
    result["ok"] = ok
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--drift", type=float, default=0.01)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--sample-rows", type=int, default=32)
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--jax", action="store_true")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help=f"a rehearsal at {DRY_RUN['tokens']} x {DRY_RUN['vocab']}, interpreted off a GPU",
    )
    args = parser.parse_args(argv)
    result = measure_vs_read(
        tokens=args.tokens,
        vocab=args.vocab,
        repeat=args.repeat,
        drift=args.drift,
        temperature=args.temperature,
        sample_rows=args.sample_rows,
        sweep=args.sweep,
        with_jax=args.jax,
        dry_run=args.dry_run,
    )
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
