"""The decoding loop of ``kernels.model.decode.generate``, unpadded and padded, on a decoder of
SmolLM2-135M's shape.

A padded program (a traced ``prompt_len``: one program for every prompt length up to the
width, or each row its own length) must cost what the unpadded program costs for the same
tokens, and give the same bits. Each way runs in a fresh process, one after another, on a
Hugging Face decoder with SmolLM2-135M's sizes and random weights (hidden 576, 9 query and 3
key/value heads, FFN 1536, vocabulary 49,152, tied embeddings; ``--layers`` of its 30 layers)
through the h100-fp8 inference kernel at a batch of ``--batch`` prompts of ``--prompt``
tokens, ``--new-tokens`` generated:

- ``unpadded``: ``prompt_len`` left out (a ``lax.scan`` over the positions);
- ``padded``: ``prompt_len`` the prompts' width, traced;
- ``per row``: ``prompt_len`` a ``[batch]`` vector, every row the full width.

Each prints the first call (trace, compile and run: the persistent compilation cache off) and
the median of ``--repeats`` compiled calls, wall and CPU seconds (user + system of the process,
all threads: less sensitive than the wall time to load from other processes), and a digest of
the tokens and logits, which must be the same for the three. Ratios are against ``unpadded`` of
the same run. Run it with another checkout's interpreter to time that tree's loop the same way
(the script uses only names that both trees have).

    python bench/bench_decode_loop.py [--layers 4] [--batch 8] [--prompt 40] [--new-tokens 16]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time

WAYS = ("unpadded", "padded", "per row")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _child(args) -> None:
    """One way in this process; prints one JSON line."""
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    import jax.numpy as jnp
    import numpy as np

    from kernel_contracts.contracts import preset
    from kernel_contracts.kernels.model.decode import generate
    from kernel_contracts.kernels.model.hf.config import DecoderConfig
    from kernel_contracts.kernels.model.hf.decoder import Decoder
    from kernel_contracts.kernels.ops import inference_ops

    config = DecoderConfig(
        family="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
        num_hidden_layers=args.layers, num_attention_heads=9, num_key_value_heads=3,
        head_dim=64, max_position_embeddings=2048, rms_norm_eps=1e-5,
        tie_word_embeddings=True, qkv_bias=False, o_bias=False, mlp_bias=False, qk_norm=False,
    )  # fmt: skip
    model = Decoder(config, seed=0, ops=inference_ops(preset("h100-fp8"), args.batch))
    prompts = jax.random.randint(jax.random.key(1), (args.batch, args.prompt), 0, 49152)
    lengths = {
        "unpadded": None,
        "padded": jnp.int32(args.prompt),
        "per row": jnp.full((args.batch,), args.prompt, jnp.int32),
    }[args.way]

    def call():
        out = generate(
            model, prompts, jax.random.key(0), jnp.float32(1.0), lengths,
            new_tokens=args.new_tokens,
        )  # fmt: skip
        return jax.block_until_ready(out)

    t0, c0 = time.perf_counter(), _cpu()
    tokens, logits = call()
    first = (time.perf_counter() - t0, _cpu() - c0)
    walls, cpus = [], []
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), _cpu()
        call()
        walls.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
    sha = hashlib.sha256()
    for a in (tokens, logits):
        sha.update(np.ascontiguousarray(np.asarray(a)).tobytes())
    print(json.dumps({
        "first": first, "wall": statistics.median(walls), "cpu": statistics.median(cpus),
        "digest": sha.hexdigest()[:16],
    }))  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=40)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)  # a child process
    args = parser.parse_args(argv)
    if args.way is not None:
        _child(args)
        return 0
    shape = (
        f"{args.layers} layers, batch {args.batch}, {args.prompt} prompt + "
        f"{args.new_tokens} new tokens, h100-fp8"
    )
    print(f"generate on a SmolLM2-shaped decoder ({shape}); each way a fresh process")
    print(
        "| way | first call wall s (CPU s) | compiled call wall s | CPU s | of unpadded | digest |"
    )
    print("|---|---:|---:|---:|---:|---|")
    base = None
    digests = set()
    for way in WAYS:
        command = [sys.executable, __file__, *(argv or sys.argv[1:]), "--way", way]
        done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ))
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        r = json.loads(done.stdout.strip().splitlines()[-1])
        base = r["cpu"] if base is None else base
        digests.add(r["digest"])
        print(
            f"| {way} | {r['first'][0]:.1f} ({r['first'][1]:.1f}) | {r['wall']:.2f} | "
            f"{r['cpu']:.2f} | {r['cpu'] / base:.2f} | `{r['digest']}` |"
        )
    if len(digests) != 1:
        print("the three ways gave different bits", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
