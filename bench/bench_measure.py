"""Benchmarks of full-vocabulary measurement, and the table of measured divergence by preset.

    python bench/bench_measure.py throughput [--tokens 4096] [--vocab 32768]
    python bench/bench_measure.py table [--prompts 64] [--new-tokens 64]

``throughput`` times ``kernels.measure.measure`` (JAX) against the straightforward numpy
implementation (``measure_numpy`` in float32, run over blocks of rows so its temporaries fit in
memory) on random logits, and compares the bytes of logits read per second with the machine's
memory bandwidth measured in the same run (a large array copy, read + write bytes, and a
read-only reduction).

``table`` runs the shipped policy through K_train = fp32 and K_inf = each preset (the
``emulate`` evidence path) and prints a Markdown table of drift, TV and |log ratio| quantiles.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from timing import best


def throughput(tokens: int, vocab: int, repeat: int, numpy_rows: int) -> None:
    import jax
    import jax.numpy as jnp

    from kernels.measure import measure, measure_numpy

    rng = np.random.default_rng(0)
    z = (rng.standard_normal((tokens, vocab), np.float32) * 3).astype(np.float32)
    zp = z + (rng.standard_normal((tokens, vocab), np.float32) * 0.01).astype(np.float32)
    y = rng.integers(0, vocab, tokens)
    logit_bytes = z.nbytes + zp.nbytes

    # memory bandwidth, same run: numpy copy (read + write) and a jitted read-only reduction
    big = np.ones(z.size, np.float32)
    dst = np.empty_like(big)
    t_copy = best(lambda: np.copyto(dst, big), repeat)
    copy_bw = 2 * big.nbytes / t_copy
    zj, zpj, yj = jnp.asarray(z), jnp.asarray(zp), jnp.asarray(y)
    reduce = jax.jit(lambda a, b: jnp.max(a) + jnp.max(b))
    reduce(zj, zpj).block_until_ready()
    t_read = best(lambda: reduce(zj, zpj).block_until_ready(), repeat)
    read_bw = logit_bytes / t_read

    def run_jax():
        out = measure(zj, zpj, yj, 1.0)
        jax.block_until_ready(out)

    run_jax()  # compile
    t_jax = best(run_jax, repeat)

    def run_numpy():
        for i in range(0, tokens, numpy_rows):
            s = slice(i, i + numpy_rows)
            measure_numpy(z[s], zp[s], y[s], 1.0, dtype=np.float32)

    t_np = best(run_numpy, 1)
    jax_bw = logit_bytes / t_jax
    print(f"full-vocabulary measurement, {tokens} tokens x {vocab} vocab (float32 logits)")
    print(f"  jax (kernels.measure):        {t_jax:8.3f} s  {tokens / t_jax:12.0f} tokens/s")
    print(f"  numpy (straightforward, f32): {t_np:8.3f} s  {tokens / t_np:12.0f} tokens/s")
    print(f"  speed-up jax / numpy:         {t_np / t_jax:8.2f} x")
    print(f"  logits read by jax:           {jax_bw / 1e9:8.2f} GB/s")
    print(f"  memory bandwidth, numpy copy (read+write): {copy_bw / 1e9:6.2f} GB/s")
    print(f"  memory bandwidth, jitted read-only max:    {read_bw / 1e9:6.2f} GB/s")
    print(f"  share of copy bandwidth:      {jax_bw / copy_bw:8.1%}")
    print(f"  share of read bandwidth:      {jax_bw / read_bw:8.1%}")
    print(f"  devices: {jax.devices()}")


def _tightness(tab, temperature: float) -> float:
    """The largest measured TV as a share of its bound tanh(osc / 4T) (≤ 1 when it holds)."""
    bound = np.tanh(tab["logit_oscillation"].astype(np.float64) / (4 * temperature))
    tv = tab["tv"].astype(np.float64)
    return float(np.max(np.where(bound > 0, tv / np.where(bound > 0, bound, 1.0), 0.0)))


def table(prompts: int, new_tokens: int, seed: int, temperature: float) -> None:
    from contracts import PRESETS
    from contracts.model import (
        Contract,
        EmulateEvidence,
        Evidence,
        KernelPair,
        Policy,
        Source,
    )
    from kernels.emulate import emulate

    rows = []
    for name, spec in PRESETS.items():
        contract = Contract(
            version=1,
            name=f"fp32-vs-{name}",
            policy=Policy(temperature=temperature, vocab_size=256, max_new_tokens=new_tokens),
            kernels=KernelPair(train=PRESETS["fp32"], inference=spec),
            source=Source(path="<bench>", sha256="", canonical=""),
            evidence=Evidence(
                emulate=EmulateEvidence(prompts=prompts, max_new_tokens=new_tokens, seed=seed)
            ),
        )
        t0 = time.perf_counter()
        tab = emulate(contract)
        seconds = time.perf_counter() - t0
        rows.append((name, tab, seconds))
        print(f"{name}: {len(tab['tv'])} tokens in {seconds:.1f} s", file=sys.stderr)

    def q(x, level):
        return float(np.quantile(x, level))

    print(
        f"Shipped policy `tiny-lm`, K_train = fp32, {prompts} held-out prompts x {new_tokens} "
        f"sampled tokens (T = {temperature}, seed {seed}); quantiles over tokens.\n"
    )
    print(
        "| K_inf preset | tokens | drift p50 | drift p99 | drift max | TV p50 | TV p99 | TV max "
        "| \\|log ratio\\| p99 | \\|log ratio\\| max | top-1 flips | max TV / tanh(osc/4T) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, tab, _ in rows:
        d, tv, lr = tab["logit_drift"], tab["tv"], np.abs(tab["log_ratio"])
        print(
            f"| {name} | {len(d)} | {q(d, 0.5):.2e} | {q(d, 0.99):.2e} | {d.max():.2e} "
            f"| {q(tv, 0.5):.2e} | {q(tv, 0.99):.2e} | {tv.max():.2e} "
            f"| {q(lr, 0.99):.2e} | {lr.max():.2e} | {tab['top1_flip'].mean():.2%} "
            f"| {_tightness(tab, temperature):.3f} |"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--tokens", type=int, default=4096)
    t.add_argument("--vocab", type=int, default=32768)
    t.add_argument("--repeat", type=int, default=3)
    t.add_argument("--numpy-rows", type=int, default=256)
    b = sub.add_parser("table")
    b.add_argument("--prompts", type=int, default=64)
    b.add_argument("--new-tokens", type=int, default=64)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args(argv)
    if args.cmd == "throughput":
        throughput(args.tokens, args.vocab, args.repeat, args.numpy_rows)
    else:
        table(args.prompts, args.new_tokens, args.seed, args.temperature)
    return 0


if __name__ == "__main__":
    sys.exit(main())
