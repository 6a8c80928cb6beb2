"""K_train and K_inf tokens per second on a 0.5B-parameter decoder, against plain inference.

The model is ``kernels.model.hf``'s decoder with Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14
query heads, 2 key/value heads of 64, intermediate 4864, vocabulary 151936, tied embeddings,
q/k/v biases), random weights. Four workloads run in one process, on the default JAX device:

- plain forward: the teacher-forced pass over every token on plain ops (float32 ``jnp``
  matmuls on a CPU; bfloat16 matmuls with float32 accumulation on a GPU: the usual plain
  inference kernel there);
- K_train: the same pass on the contract's training kernel (``--train``, default fp32:
  emulated float32 matmuls, reference attention);
- plain decode: ``kernels.model.decode.generate`` of ``--new-tokens`` tokens after each prompt on
  plain ops (contiguous float32 KV cache);
- K_inf: the same decode on the inference kernel (``--preset``, default h100-fp8: emulated
  matmuls with batch-dependent reduction splits, paged low-precision KV cache).

Each workload is compiled, then timed (median of ``--repeats`` calls). Tokens per second count
the tokens a call processes (batch × sequence for a forward, batch × new tokens for a decode);
the ratios divide each emulated kernel's time by its plain twin's, measured in the same run. On
a GPU the peak device memory after each workload is printed too.

    python bench/bench_hf_decoder.py                 # CPU: batch 1, 4 + 4 tokens
    python bench/bench_hf_decoder.py --gpu-shape     # batch 8 x 2048 tokens (1024 + 1024)

``--layers N`` keeps the shape but runs fewer layers (for a quick look; the recorded figures
say if they used it).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from timing import median_ready

from kernel_contracts.contracts import preset
from kernel_contracts.kernels.model.decode import generate, teacher_force
from kernel_contracts.kernels.model.hf.config import parse_config
from kernel_contracts.kernels.model.hf.decoder import Decoder
from kernel_contracts.kernels.model.tinylm import with_ops
from kernel_contracts.kernels.ops import (
    ContiguousCache,
    Ops,
    PlainAttention,
    inference_ops,
    plain_ops,
    train_ops,
)

QWEN25_05B = {
    "architectures": ["Qwen2ForCausalLM"],
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
}


@dataclass(frozen=True)
class Bf16Matmul:
    """Plain bfloat16 inference matmul: bfloat16 operands, float32 accumulation and result."""

    def __call__(self, x, w):
        return jnp.matmul(
            x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32
        )


def plain_inference_ops(gpu: bool) -> Ops:
    if gpu:
        return Ops("plain-bf16", Bf16Matmul(), PlainAttention(), ContiguousCache())
    return plain_ops()


def _peak() -> int | None:
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def main(argv=None, *, stdout=sys.stdout) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=4, help="prompt tokens per sequence")
    p.add_argument("--new-tokens", type=int, default=4, help="tokens decoded per sequence")
    p.add_argument("--gpu-shape", action="store_true", help="batch 8, 1024 + 1024 tokens")
    p.add_argument("--layers", type=int, default=QWEN25_05B["num_hidden_layers"])
    p.add_argument("--preset", default="h100-fp8", help="K_inf's preset")
    p.add_argument("--train", default="fp32", help="K_train's preset")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--json", metavar="PATH", help="also write the figures here")
    args = p.parse_args(argv)
    if args.gpu_shape:
        args.batch, args.prompt, args.new_tokens = 8, 1024, 1024
    gpu = jax.default_backend() == "gpu"

    t0 = time.perf_counter()
    config = parse_config(dict(QWEN25_05B, num_hidden_layers=args.layers))
    model = Decoder(config, seed=0)
    params = sum(a.size for a in jax.tree.leaves(nnx.state(model, nnx.Param)))
    built = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    length = args.prompt + args.new_tokens
    tokens = jnp.asarray(rng.integers(0, config.vocab_size, (args.batch, length)), jnp.int32)
    prompts = tokens[:, : args.prompt]
    key, temperature = jax.random.key(0), jnp.float32(1.0)
    plain = with_ops(model, plain_inference_ops(gpu))
    k_train = with_ops(model, train_ops(preset(args.train)))
    k_inf = with_ops(model, inference_ops(preset(args.preset), batch_size=args.batch))

    def forward(m):
        return lambda: teacher_force(m, tokens, prompt_len=1)

    def decode(m):
        return lambda: generate(m, prompts, key, temperature, new_tokens=args.new_tokens)

    work = {
        "plain forward": (forward(plain), args.batch * (length - 1)),
        "K_train forward": (forward(k_train), args.batch * (length - 1)),
        "plain decode": (decode(plain), args.batch * args.new_tokens),
        "K_inf decode": (decode(k_inf), args.batch * args.new_tokens),
    }
    results = {}
    for name, (fn, count) in work.items():
        c0 = time.perf_counter()
        seconds = median_ready(lambda fn=fn: fn(), repeats=args.repeats)
        total = time.perf_counter() - c0
        results[name] = {"seconds": seconds, "tokens": count, "tokens_per_s": count / seconds,
                         "compile_and_runs_s": total, "peak_bytes": _peak()}  # fmt: skip

    ratio_train = results["K_train forward"]["seconds"] / results["plain forward"]["seconds"]
    ratio_inf = results["K_inf decode"]["seconds"] / results["plain decode"]["seconds"]
    device = jax.devices()[0]
    stdout.write(
        f"decoder: Qwen2.5-0.5B shape, {args.layers} layers, {params / 1e6:.0f}M parameters "
        f"(built in {built:.1f} s); batch {args.batch}, {args.prompt} prompt + "
        f"{args.new_tokens} new tokens; device {device.platform} ({device.device_kind}); "
        f"K_train {args.train}, K_inf {args.preset}, plain {plain.ops.name}\n"
    )
    stdout.write(f"{'workload':<16} {'tokens':>7} {'seconds':>9} {'tokens/s':>10}"
                 f"{'  peak GiB' if gpu else ''}\n")  # fmt: skip
    for name, r in results.items():
        peak = f"  {r['peak_bytes'] / 2**30:8.2f}" if gpu and r["peak_bytes"] else ""
        stdout.write(f"{name:<16} {r['tokens']:>7} {r['seconds']:>9.3f} "
                     f"{r['tokens_per_s']:>10.2f}{peak}\n")  # fmt: skip
    stdout.write(
        f"K_train / plain forward: {ratio_train:.1f}x the time; "
        f"K_inf / plain decode: {ratio_inf:.1f}x the time (emulated inference at "
        f"{100 / ratio_inf:.1f}% of plain inference's tokens/s)\n"
    )
    if args.json:
        doc = {"params": params, "layers": args.layers, "batch": args.batch,
               "prompt": args.prompt, "new_tokens": args.new_tokens,
               "device": f"{device.platform} {device.device_kind}",
               "machine": platform.machine(), "results": results,
               "ratio_train": ratio_train, "ratio_inf": ratio_inf}  # fmt: skip
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
