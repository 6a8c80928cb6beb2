"""Emulated inference of the shipped model against the same model on plain float32 ops.

Decodes ``--new-tokens`` tokens after each of ``--batch`` prompts with
``kernels.model.decode.generate`` (one ``lax.scan`` in one ``nnx.jit``: prompt and generated tokens
one position at a time, the KV cache in the kernel's format), once on ``kernels.ops.plain_ops()``
(float32 ``jnp`` matmuls and attention) and once per preset on ``kernels.ops.inference_ops`` (every
matmul under the preset's emulated arithmetic with batch-dependent reduction splits, attention
through the paged low-precision KV cache), on the default JAX device. Prints generated tokens per
second and the emulated/plain ratio, measured in the same run (median of ``--repeats`` compiled
calls).

``--write-reference PATH`` stores the emulated logits' bits (a sha256 per preset) and
``--reference PATH`` compares against such a file: run it on the CPU, then on an accelerator,
to check that the emulation gives the same bits on both. Exit code 1 on a difference.

    python bench/bench_decode.py --write-reference decode.json     # CPU
    python bench/bench_decode.py --reference decode.json           # GPU: ratio and bits
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import median_ready

from kernel_contracts.contracts import preset
from kernel_contracts.kernels.model.decode import generate
from kernel_contracts.kernels.model.tinylm import load_pretrained
from kernel_contracts.kernels.ops import inference_ops, plain_ops

PRESETS = ("h100-fp8", "bf16")


def _run(model, prompts, new_tokens: int):
    key = jax.random.key(0)
    temperature = jnp.float32(1.0)
    return lambda: generate(model, prompts, key, temperature, new_tokens=new_tokens)


def _digest(logits) -> str:
    return hashlib.sha256(
        np.ascontiguousarray(np.asarray(logits, np.float32)).tobytes()
    ).hexdigest()


def main(argv=None, *, stdout=sys.stdout) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8, help="prompts decoded together")
    p.add_argument("--prompt", type=int, default=8, help="prompt length")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--presets", nargs="+", default=list(PRESETS))
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write-reference", metavar="PATH")
    mode.add_argument("--reference", metavar="PATH")
    args = p.parse_args(argv)
    vocab = load_pretrained().config.vocab
    rng = np.random.default_rng(0)
    prompts = jnp.asarray(rng.integers(0, vocab, (args.batch, args.prompt)), jnp.int32)
    generated = args.batch * args.new_tokens
    device = jax.devices()[0]
    stdout.write(f"device: {device.device_kind} ({device.platform}), jax {jax.__version__}\n")
    stdout.write(
        f"{args.batch} prompts x {args.prompt} tokens, {args.new_tokens} new tokens each\n\n"
    )
    stdout.write(
        "| ops | s per call | generated tokens/s | vs plain fp32 |\n|---|---:|---:|---:|\n"
    )
    plain = median_ready(_run(load_pretrained(ops=plain_ops()), prompts, args.new_tokens),
                         repeats=args.repeats)  # fmt: skip
    stdout.write(f"| plain fp32 | {plain:.4f} | {generated / plain:,.0f} | 1.000 |\n")
    digests = {}
    for name in args.presets:
        model = load_pretrained(ops=inference_ops(preset(name), args.batch))
        call = _run(model, prompts, args.new_tokens)
        t = median_ready(call, repeats=args.repeats)
        digests[name] = _digest(call()[1])
        stdout.write(f"| {name} (emulated) | {t:.4f} | {generated / t:,.0f} | {plain / t:.3f} |\n")
    shape = {"batch": args.batch, "prompt": args.prompt, "new_tokens": args.new_tokens}
    if args.write_reference:
        with open(args.write_reference, "w", encoding="utf-8") as f:
            json.dump({"shape": shape, "logits_sha256": digests}, f, indent=2)
        stdout.write(f"\nwrote {args.write_reference}\n")
    if args.reference:
        with open(args.reference, encoding="utf-8") as f:
            ref = json.load(f)
        if ref.get("shape") != shape:
            stdout.write(f"\nreference shape {ref.get('shape')} differs from {shape}\n")
            return 1
        bad = [n for n, d in digests.items() if ref["logits_sha256"].get(n) != d]
        stdout.write("\nemulated logits: " + (f"DIFFER for {bad}" if bad else "same bits") + "\n")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
