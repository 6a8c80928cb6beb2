"""The cost of ``kernels.on_kernel`` against the hand-wired TinyLM on the same kernel, one run.

    python bench/bench_transform.py [--preset h100-fp8] [--batch 8] [--seq 64] [--repeat 5]

Both sides compute the same bits: the shipped TinyLM with the inference kernel's matmuls
injected through ``Ops`` (plain float32 attention), against the TinyLM on plain ops run through
``on_kernel(..., attention="float32")``. Printed for each jitted forward pass: the seconds to
trace and lower it (for ``on_kernel`` this includes tracing the model to a jaxpr and
interpreting it), to compile it, and a steady-state call, with their ratios; each side is
warmed once first (so caches both share, the emulated matmul's own traces, are full) and the
runs are interleaved so load hits both alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import interleaved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="h100-fp8")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import jax
    import numpy as np

    from kernel_contracts.contracts import PRESETS
    from kernel_contracts.kernels import on_kernel
    from kernel_contracts.kernels.model.tinylm import load_pretrained, with_ops
    from kernel_contracts.kernels.ops import PlainAttention, inference_ops

    spec = PRESETS[args.preset]
    model = load_pretrained("tiny-lm")
    rng = np.random.default_rng(0)
    tokens = jax.numpy.asarray(rng.integers(0, 256, (args.batch, args.seq)), jax.numpy.int32)
    ops = dataclasses.replace(inference_ops(spec, args.batch), attention=PlainAttention())
    hand_model = with_ops(model, ops)
    transformed = on_kernel(lambda t: model(t), spec, batch_size=args.batch, attention="float32")

    def hand_fn(t):
        return hand_model(t)

    def stages(fn) -> tuple[float, float]:
        """Seconds to trace and lower, and to compile, a fresh ``jax.jit`` of ``fn``."""
        t0 = time.perf_counter()
        lowered = jax.jit(lambda t: fn(t)).lower(tokens)  # a fresh function: no cache hit
        t1 = time.perf_counter()
        lowered.compile()
        return t1 - t0, time.perf_counter() - t1

    stages(hand_fn)  # warm the caches both sides share (the emulated matmul's own traces)
    stages(transformed)
    cost = {"hand": [float("inf")] * 2, "transform": [float("inf")] * 2}
    for _ in range(2):
        for name, fn in (("hand", hand_fn), ("transform", transformed)):
            cost[name] = [min(a, b) for a, b in zip(cost[name], stages(fn), strict=True)]
    hand, ours = jax.jit(hand_fn), jax.jit(transformed)
    wall, _, out = interleaved(
        {
            "hand": lambda: jax.block_until_ready(hand(tokens)),
            "transform": lambda: jax.block_until_ready(ours(tokens)),
        },
        args.repeat,
    )
    same = bool(np.array_equal(np.asarray(out["hand"]), np.asarray(out["transform"])))
    print(f"TinyLM forward, {args.preset}, tokens {args.batch}x{args.seq}, {jax.default_backend()}")
    print(f"bit-identical outputs: {same}")
    print("| stage (best of 2, steady call best of repeats) | hand-wired Ops | on_kernel | ratio |")
    print("|---|---|---|---|")
    rows = (
        ("trace + lower", cost["hand"][0], cost["transform"][0]),
        ("compile", cost["hand"][1], cost["transform"][1]),
        ("steady call", wall["hand"], wall["transform"]),
    )
    for label, a, b in rows:
        print(f"| {label} | {a:.3f} s | {b:.3f} s | {b / a:.2f} |")


if __name__ == "__main__":
    main()
