"""Evaluation speed of derived chains, and symbolic derivation time of the example contracts.

Run: python bench/bench_bounds_eval.py [--n 1000000] [--repeats 5]

1. The sequence-TV chain of a drift contract (KL route: Min/Max/exp/log/sqrt) evaluated on n
   drift values: a jitted JAX function against numpy on the same sympy-generated formula
   (best of ``repeats``, after one warm-up call; the ratio is numpy time / JAX time).
2. ``contracts.load`` + ``bounds.derive`` for every contract in contracts/examples/.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
from timing import best

from kernel_contracts import bounds
from kernel_contracts.contracts import (
    Contract,
    Guarantee,
    KernelPair,
    NumericalClause,
    Policy,
    Source,
    preset,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]


def eval_bench(n: int, repeats: int) -> None:
    c = Contract(
        version=1,
        name="bench",
        policy=Policy(max_new_tokens=512),
        kernels=KernelPair(preset("fp32"), preset("h100-fp8")),
        source=Source(path="<bench>", sha256="", canonical=""),
        numerical=(NumericalClause("N1", "logit_drift", 0.02),),
        guarantees=(Guarantee("G", "sequence_tv", 0.5, ("N1",)),),
    )
    (d,) = bounds.derive(c)
    names = sorted(s.name for s in d.expr.free_symbols)
    deltas = np.linspace(0.0, 0.5, n)
    args = [deltas if nm == "delta_N1" else float(d.constants[nm]) for nm in names]
    np_fn = bounds.numpy_function(d.expr, names)
    jax_fn = bounds.jax_function(d.expr, names)

    import jax
    import jax.numpy as jnp

    jargs = [jnp.asarray(a, dtype=jnp.float32) for a in args]
    jax_fn(*jargs).block_until_ready()  # compile
    t_np = best(lambda: np_fn(*args), repeats)
    t_jax = best(lambda: jax_fn(*jargs).block_until_ready(), repeats)
    ref = np_fn(*args)
    err = float(np.max(np.abs(np.asarray(jax_fn(*jargs)) - ref) / np.maximum(ref, 1e-30)))
    print(
        f"chain: {d.route} ({len(d.chain)} lemmas), {n:,} drift values, "
        f"backend {jax.default_backend()}"
    )
    print(f"  numpy (float64)      {t_np * 1e3:9.2f} ms")
    print(
        f"  jax.jit (float32)    {t_jax * 1e3:9.2f} ms   speed-up x{t_np / t_jax:.1f}"
        f"   max rel. diff {err:.1e}"
    )


def derive_bench(repeats: int) -> None:
    from kernel_contracts.contracts import load

    paths = sorted((ROOT / "contracts" / "examples").glob("*.yaml"))
    print(f"\nderivation of {len(paths)} example contracts (load + derive, best of {repeats})")
    for p in paths:
        c = load(str(p))
        t0 = time.perf_counter()
        bounds.derive(c)
        t_cold = time.perf_counter() - t0
        t_load = best(lambda p=p: load(str(p)), repeats)
        t = best(lambda c=c: bounds.derive(c), repeats)
        ds = bounds.derive(c)
        decided = sum(d.expr is not None for d in ds)
        print(
            f"  {p.name:<28} {len(ds):2d} guarantees ({decided} derived)  "
            f"load {t_load * 1e3:6.1f} ms  derive first {t_cold * 1e3:6.1f} ms, "
            f"repeat {t * 1e3:6.1f} ms"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    eval_bench(args.n, args.repeats)
    derive_bench(args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
