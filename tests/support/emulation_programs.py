"""Every emulation entry point as a program to lower: ``(id, function, arguments)``.

Shared by the lints of ``tests/kernels/test_no_erasable_casts.py`` (float conversions a compiler
may erase) and ``tests/kernels/test_backend_independence.py`` (operations whose results depend
on the backend). The shapes are small: the programs are lowered, not run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import jax
import jax.numpy as jnp

from kernel_contracts.contracts import AttentionSpec, Scaling, preset
from kernel_contracts.contracts.presets import PRESETS
from kernel_contracts.kernels._matmul import emulated_dot_general, int8_matmul, matmul
from kernel_contracts.kernels.attention import PagedKVCache, decode_attention
from kernel_contracts.kernels.diagnose.rescale import TRANSFORMS, rescaled_matmul
from kernel_contracts.kernels.diagnose.transform import on_kernel
from kernel_contracts.kernels.measurement.measure_portable import _columns as _portable_block
from kernel_contracts.kernels.model.decode import sample
from kernel_contracts.kernels.model.hf.config import parse_config
from kernel_contracts.kernels.model.hf.decoder import Decoder
from kernel_contracts.kernels.model.tinylm import ModelConfig, TinyLM
from kernel_contracts.kernels.numerics.formats import cast_output, saturating_cast
from kernel_contracts.kernels.numerics.scaling import (
    quantize_cols,
    quantize_rows,
    quantize_rows_int8,
)
from kernel_contracts.kernels.ops import inference_ops, train_ops

X = jnp.zeros((4, 200), jnp.float32)  # K = 200: ragged for every block, group and chunk
W = jnp.zeros((200, 8), jnp.float32)


class Program(NamedTuple):
    id: str
    fn: Callable
    args: tuple


def matmuls() -> Iterator[Program]:
    """``matmul`` for every preset, implementation and number of splits."""
    for name, kernel in PRESETS.items():
        spec = kernel.matmul
        impls = ("jax",) if spec.is_int8 else ("jax", "pallas", "pallas_gpu")
        for impl in impls:
            for splits in (1, 3):

                def fn(x, w, spec=spec, impl=impl, splits=splits):
                    return matmul(x, w, spec, impl=impl, splits=splits, interpret=True)

                yield Program(f"matmul-{name}-{impl}-splits{splits}", fn, (X, W))


def _formats(x):
    out = []
    for fmt in ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"):
        out += [saturating_cast(x, fmt), cast_output(x, fmt)]
        for scaling in ("per_tensor", "per_row", "block:32", "mx:32"):
            spec = Scaling.parse(scaling)
            out += [*quantize_rows(x, fmt, spec), *quantize_cols(x.T, fmt, spec)]
    return out


def _mlp(params, x):
    return jnp.maximum(x @ params["w1"], 0.0) @ params["w2"]


def kernels_around_the_matmul() -> Iterator[Program]:
    """The quantizers, ``emulated_dot_general``, ``on_kernel``, int8 and ``rescaled_matmul``."""
    yield Program("formats-and-scalings", _formats, (X,))
    spec = preset("h100-fp8").matmul
    dims = (((2,), (1,)), ((0,), (0,)))
    yield Program(
        "emulated_dot_general",
        lambda a, b: emulated_dot_general(a, b, dims, spec, splits=2),
        (jnp.zeros((2, 4, 200), jnp.float32), jnp.zeros((2, 200, 8), jnp.float32)),
    )
    params = {"w1": jnp.zeros((200, 16), jnp.float32), "w2": jnp.zeros((16, 8), jnp.float32)}
    yield Program("on_kernel-mlp", on_kernel(_mlp, "h100-fp8", batch_size=8), (params, X))
    int8 = preset("a100-int8").matmul
    yield Program("int8_matmul", lambda x, w: int8_matmul(x, w, int8, specialize=False), (X, W))
    yield Program(
        "quantize_rows_int8",
        lambda x, p, d: quantize_rows_int8(x, p, d),
        (X, jnp.bool_(False), jnp.int32(2)),
    )
    for name in ("h100-fp8", "mxfp8", "a100-int8"):
        rescaled = preset(name).matmul
        for transform in TRANSFORMS:

            def fn(x, w, spec=rescaled, transform=transform):
                return rescaled_matmul(x, w, spec, transform, splits=2)

            yield Program(f"rescaled_matmul-{name}-{transform}", fn, (X, W))


def _forward_and_step(model, name: str, position: int) -> Iterator[Program]:
    """A decoder's whole-sequence forward and one decode step at ``position`` on two sequences
    of eight tokens (``name`` formatted with "forward" and "step")."""
    tokens = jnp.zeros((2, 8), jnp.int32)
    yield Program(name.format("forward"), lambda t: model(t), (tokens,))
    yield Program(
        name.format("step"),
        lambda t, c: model.step(t, jnp.int32(position), c),
        (tokens[:, 0], model.init_cache(2, 8)),
    )


def models() -> Iterator[Program]:
    """The TinyLM forward and decode step under K_inf and K_train, paged attention with each
    low-precision cache, and the sampler."""
    cfg = ModelConfig(vocab=32, d_model=16, layers=1, heads=2, d_ff=32, context=8)
    for name in ("h100-fp8", "a100-int8"):
        for kind, ops in (
            ("inference", inference_ops(preset(name), batch_size=2)),
            ("train", train_ops(preset(name))),
        ):
            yield from _forward_and_step(
                TinyLM(cfg, seed=0, ops=ops), f"tinylm-{{}}-{kind}-{name}", 0
            )
    for kv in ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"):
        spec = AttentionSpec(kv_cache=kv, page_size=4, tiles="adaptive")
        cache = PagedKVCache.create(2, 16, 2, 8, spec)
        kv_new = jnp.ones((2, 2, 8), jnp.float32)

        def step(cache, q, k, v, spec=spec):
            cache = cache.append(k, v).append(2 * k, -v)
            return decode_attention(q, cache, spec, batch_size=2), cache

        yield Program(f"decode_attention-{kv}", step, (cache, kv_new, kv_new, kv_new))
    logits = jnp.zeros((2, 32), jnp.float32)
    for top_k, top_p in ((0, 1.0), (5, 0.9)):
        yield Program(
            f"sample-top_k{top_k}-top_p{top_p}",
            lambda key, z, k=top_k, p=top_p: sample(key, z, 0.7, k, p),
            (jax.random.key(0), logits),
        )


# a tiny Qwen3 (q/k norms, grouped-query attention, head_dim apart from hidden/heads) with the
# Llama 3 rotary scaling: every switch of the decoder that computes
HF_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "vocab_size": 32,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 8,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 4,
    },
}


def hf_decoders() -> Iterator[Program]:
    """The Hugging Face decoder's forward and decode step under K_inf and K_train."""
    config = parse_config(HF_CONFIG)
    spec = preset("h100-fp8")
    for kind, ops in (
        ("inference", inference_ops(spec, batch_size=2)),
        ("train", train_ops(spec)),
    ):
        yield from _forward_and_step(Decoder(config, seed=0, ops=ops), f"hf-{{}}-{kind}", 3)


def measurements() -> Iterator[Program]:
    """The portable full-vocabulary measurement that ``evidence: emulate`` runs."""
    z = jnp.zeros((4, 40), jnp.float32)

    def measure(z, zp, y):
        with jax.enable_x64(True):
            return _portable_block(z, zp, y, 1.0 / 0.7)

    yield Program("measure-portable", measure, (z, z, jnp.zeros(4, jnp.int32)))


def every_program() -> list[Program]:
    return [
        *matmuls(),
        *kernels_around_the_matmul(),
        *models(),
        *hf_decoders(),
        *measurements(),
    ]
