"""The Llama 3 / Qwen2 / Qwen3 decoder (Flax NNX), its matmuls and attention injected as ``Ops``.

One module serves the three families; the ``DecoderConfig`` switches what differs (q/k/v and
o biases, MLP biases, q/k RMSNorm, tied embeddings, rotary scaling). Pre-norm blocks::

    h = x + o_proj(attention(rope(q_norm(q_proj(n))), rope(k_norm(k_proj(n))), v_proj(n)))
    y = h + down_proj(silu(gate_proj(m)) * up_proj(m))

with ``n = input_layernorm(x)``, ``m = post_attention_layernorm(h)``, and the logits
``lm_head(norm(y_last))`` (the embedding's transpose when tied). Grouped-query attention
repeats each key/value head for the query heads of its group; the decoding cache holds each
key/value head once and its ``attend`` repeats them (``kernels.attention.widen_heads``).

As in :mod:`kernels.model.tinylm`, every matmul (projections, MLP, LM head) is ``self.ops.matmul``,
whole-sequence attention is ``self.ops.attention`` and incremental decoding reads and writes
``self.ops.cache``; RMSNorm, rotary embeddings, SiLU, biases, residual adds and the embedding
lookup are float32 in both kernels, RMSNorm, SiLU and the rotary embeddings computed by
``self.ops.layers``: plain ``jnp`` under ``plain_ops`` (differentiable), the same bits on every
backend under ``train_ops`` and ``inference_ops`` (:mod:`kernels.numerics.portable`: the RMS norm's
mean square summed exactly in binary64, the rotary products exact in binary64 and rounded once after
their add). ``kernels.model.tinylm.with_ops`` switches the kernels, and
``kernels.model.decode.generate`` / ``teacher_force`` run this model as they run TinyLM.

Parameters carry the reference implementation's names (``embed_tokens``, ``layers/i/self_attn/
q_proj``, ``mlp/gate_proj``, ``input_layernorm``, ``norm``, ``lm_head``, ...). Projection
kernels are stored input-first with the head axes apart: ``q_proj.kernel`` is
``[hidden, heads, head_dim]``, ``k_proj``/``v_proj`` ``[hidden, kv_heads, head_dim]``,
``o_proj`` ``[heads, head_dim, hidden]``, ``gate_proj``/``up_proj`` ``[hidden, intermediate]``,
``down_proj`` ``[intermediate, hidden]``, ``lm_head.kernel`` ``[hidden, vocab]``. Loaded
weights keep their stored dtype (bfloat16 stays bfloat16, bit for bit) and are widened to
float32 where they are used.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, ArrayLike, Float, Int

from kernel_contracts.kernels.attention import widen_heads
from kernel_contracts.kernels.model.hf.config import DecoderConfig
from kernel_contracts.kernels.model.hf.rope import cos_sin, inverse_frequencies, rotate
from kernel_contracts.kernels.ops import Ops, plain_ops, prepared

__all__ = ["FLOAT32_BLOCK", "Attention", "Decoder", "DecoderLayer", "Linear", "Mlp", "RMSNorm"]

_STD = 0.02
# the plain matmul's block when no ops are given (kernels.numerics.blocked): XLA's CPU dot alone
# left SmolLM2's float32 logits 1.8 times as far from float64 as transformers' float32 run
FLOAT32_BLOCK = 64


def _normal(rng: np.random.Generator | None, shape) -> Array:
    # numpy, not jax.random: no per-shape compilation when a model is built; no generator:
    # zeros, for a model whose parameters are about to be replaced (free under eval_shape)
    if rng is None:
        return jnp.zeros(shape, jnp.float32)
    return jnp.asarray((_STD * rng.standard_normal(shape)).astype(np.float32))


# a projection's kernel axes contracted with its input: the first one, but o_proj's first two
_INPUT_AXES = {"o_proj": 2}


class Linear(nnx.Module):
    """A projection: ``kernel`` ``[in, *out]`` and, when ``bias``, ``bias`` ``[*out]``."""

    def __init__(
        self, shape: tuple[int, ...], bias: bool, rng: np.random.Generator | None, *, out: int
    ):
        self.kernel = nnx.Param(_normal(rng, shape))
        # the output axes are the last ``out`` axes of the kernel
        self.bias = nnx.Param(jnp.zeros(shape[-out:], jnp.float32)) if bias else None


class RMSNorm(nnx.Module):
    """The scale of one RMSNorm (the ``weight`` of the reference implementation)."""

    def __init__(self, size: int):
        self.weight = nnx.Param(jnp.ones((size,), jnp.float32))


class Attention(nnx.Module):
    def __init__(self, c: DecoderConfig, rng: np.random.Generator | None):
        d, h, kv, hd = c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = Linear((d, h, hd), c.qkv_bias, rng, out=2)
        self.k_proj = Linear((d, kv, hd), c.qkv_bias, rng, out=2)
        self.v_proj = Linear((d, kv, hd), c.qkv_bias, rng, out=2)
        self.o_proj = Linear((h, hd, d), c.o_bias, rng, out=1)
        self.q_norm = RMSNorm(hd) if c.qk_norm else None
        self.k_norm = RMSNorm(hd) if c.qk_norm else None


class Mlp(nnx.Module):
    def __init__(self, c: DecoderConfig, rng: np.random.Generator | None):
        d, f = c.hidden_size, c.intermediate_size
        self.gate_proj = Linear((d, f), c.mlp_bias, rng, out=1)
        self.up_proj = Linear((d, f), c.mlp_bias, rng, out=1)
        self.down_proj = Linear((f, d), c.mlp_bias, rng, out=1)


class DecoderLayer(nnx.Module):
    def __init__(self, c: DecoderConfig, rng: np.random.Generator | None):
        self.input_layernorm = RMSNorm(c.hidden_size)
        self.self_attn = Attention(c, rng)
        self.post_attention_layernorm = RMSNorm(c.hidden_size)
        self.mlp = Mlp(c, rng)


# ----------------------------------------------------------------------- computation


def _rms_norm(
    ops: Ops, x: Float[ArrayLike, "... d"], weight: Float[ArrayLike, " d"], eps: float
) -> Array:
    """``x·rsqrt(mean(x²) + eps)·weight`` in float32 by ``ops.layers`` (plain: the bits of the
    reference implementation's ``weight·(x·rsqrt(mean(x²) + eps))``: a product of three
    factors rounded in the same order)."""
    return ops.layers.rms_norm(x.astype(jnp.float32), weight, eps)


def _project(
    ops: Ops, x: Float[ArrayLike, "... k"], p: dict, out: tuple[int, ...], inputs: int = 1
) -> Array:
    """``x @ kernel + bias`` through ``ops.matmul``: ``x``'s last ``inputs`` axes are
    contracted with the kernel's rows, and the result's last axes are ``out``. ``p["kernel"]``
    is the kernel flattened to ``[in, out]`` and prepared for the matmul
    (:meth:`Decoder._stacked`)."""
    flat_in = int(np.prod(x.shape[x.ndim - inputs :]))
    y = ops.matmul(x.reshape(*x.shape[: x.ndim - inputs], flat_in), p["kernel"])
    y = y.reshape(*y.shape[:-1], *out)
    if "bias" not in p:
        return y
    return y + jnp.reshape(p["bias"], (1,) * (y.ndim - len(out)) + tuple(out))


def _qkv(p: dict, x: Array, c: DecoderConfig, ops: Ops, cos: Array, sin: Array):
    """Rotated queries ``[..., heads, hd]`` and keys, values ``[..., kv_heads, hd]``."""
    n = _rms_norm(ops, x, p["input_layernorm"]["weight"], c.rms_norm_eps)
    a = p["self_attn"]
    heads, kv_heads = (c.num_attention_heads, c.head_dim), (c.num_key_value_heads, c.head_dim)
    q = _project(ops, n, a["q_proj"], heads)
    k, v = (_project(ops, n, a[name], kv_heads) for name in ("k_proj", "v_proj"))
    if c.qk_norm:
        q = _rms_norm(ops, q, a["q_norm"]["weight"], c.rms_norm_eps)
        k = _rms_norm(ops, k, a["k_norm"]["weight"], c.rms_norm_eps)
    return rotate(q, cos, sin, ops.layers), rotate(k, cos, sin, ops.layers), v


def _finish(p: dict, x: Array, attended: Array, c: DecoderConfig, ops: Ops) -> Array:
    """The attention output's projection, the residual add and the MLP."""
    d, f = (c.hidden_size,), (c.intermediate_size,)
    h = x + _project(ops, attended, p["self_attn"]["o_proj"], d, inputs=2)
    m = _rms_norm(ops, h, p["post_attention_layernorm"]["weight"], c.rms_norm_eps)
    mlp = p["mlp"]
    gated = ops.layers.silu(_project(ops, m, mlp["gate_proj"], f)) * _project(
        ops, m, mlp["up_proj"], f
    )
    return h + _project(ops, gated, mlp["down_proj"], d)


def _layer_forward(p, x, c: DecoderConfig, ops: Ops, cos, sin):
    q, k, v = _qkv(p, x, c, ops, cos, sin)
    heads = c.num_attention_heads
    attended = ops.attention(q, widen_heads(k, heads), widen_heads(v, heads))
    return _finish(p, x, attended, c, ops)


def _layer_step(p, x, cache, c: DecoderConfig, ops: Ops, cos, sin):
    q, k, v = _qkv(p, x, c, ops, cos, sin)
    cache = ops.cache.append(cache, k, v)  # the key/value heads; attend widens them
    return _finish(p, x, ops.cache.attend(q, cache), c, ops), cache


class Decoder(nnx.Module):
    """A Llama 3, Qwen2 or Qwen3 causal LM running on the kernels in ``self.ops``.

    The layers run as one ``lax.scan`` over their stacked parameters, so each kernel is traced
    once per model, not once per layer. ``seed`` draws random weights (normal, std 0.02; norm
    scales 1, biases 0) for a model that is not loaded from a checkpoint (``None``: zeros, for a
    model whose parameters a checkpoint replaces). Without ``ops`` the model runs on plain
    float32 ops whose matmuls sum in blocks of ``FLOAT32_BLOCK`` (``plain_ops(block=64)``: a
    float32 forward within the reference implementation's own float32 distance of a float64
    one); give ``plain_ops()`` to trace it for ``on_kernel``.
    """

    def __init__(self, config: DecoderConfig, *, seed: int | None = 0, ops: Ops | None = None):
        rng = None if seed is None else np.random.default_rng(seed)
        c = self.config = config
        self.ops = ops if ops is not None else plain_ops(block=FLOAT32_BLOCK)
        self.embed_tokens = nnx.Param(_normal(rng, (c.vocab_size, c.hidden_size)))
        self.layers = nnx.List([DecoderLayer(c, rng) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size)
        self.lm_head = (
            None
            if c.tie_word_embeddings
            else Linear((c.hidden_size, c.vocab_size), False, rng, out=1)
        )

    def _inv_freq(self) -> Array:
        # a constant of the config: computed in NumPy, folded into the compiled function
        return jnp.asarray(inverse_frequencies(self.config.rope, self.config.head_dim))

    @property
    def context(self) -> int:
        """The longest sequence the model runs (``max_position_embeddings``)."""
        return self.config.max_position_embeddings

    def _stacked(self) -> dict[str, Any]:
        """The layers' parameters stacked on a leading axis, each projection's kernel flattened
        to ``[in, out]`` and in the form the matmul reads (:func:`~kernels.ops.prepared`:
        quantized once, not once per layer call or decode step)."""
        layers = [nnx.to_pure_dict(nnx.state(layer, nnx.Param)) for layer in self.layers]
        stacked = jax.tree.map(lambda *a: jnp.stack([x.astype(jnp.float32) for x in a]), *layers)
        for block in (stacked["self_attn"], stacked["mlp"]):
            for name, p in block.items():
                if isinstance(p, dict) and "kernel" in p:
                    kernel, inputs = p["kernel"], _INPUT_AXES.get(name, 1)
                    rows = int(np.prod(kernel.shape[1 : 1 + inputs]))
                    flat = kernel.reshape(kernel.shape[0], rows, -1)
                    p["kernel"] = prepared(self.ops.matmul, flat)
        return stacked

    def head_weight(self) -> Any:
        """The LM head (the embedding's transpose where tied) in the form the matmul reads
        (quantized once: a decoding loop prepares it outside the steps that use it)."""
        if self.lm_head is None:
            head = self.embed_tokens[...].astype(jnp.float32).T
        else:
            head = self.lm_head.kernel[...].astype(jnp.float32)
        return prepared(self.ops.matmul, head)

    def head_logits(
        self, x: Float[ArrayLike, "*rows hidden"], head: Any
    ) -> Float[Array, "*rows vocab"]:
        """The logits of the last layer's output ``x`` through ``head`` (``head_weight()``)."""
        weight = self.norm.weight[...].astype(jnp.float32)
        n = _rms_norm(self.ops, x, weight, self.config.rms_norm_eps)
        return self.ops.matmul(n, head)

    def _logits(self, x: Array) -> Array:
        return self.head_logits(x, self.head_weight())

    def _embed(self, tokens: Array) -> Array:
        return self.embed_tokens[...][tokens].astype(jnp.float32)

    def __call__(self, tokens: Int[ArrayLike, "batch seq"]) -> Float[Array, "batch seq vocab"]:
        """Teacher-forced logits of every position of whole sequences (positions from 0)."""
        seq = tokens.shape[-1]
        if seq > self.context:
            raise ValueError(f"sequence length {seq} exceeds the context {self.context}")
        cos, sin = cos_sin(jnp.arange(seq), self._inv_freq(), self.ops.layers)
        c, ops = self.config, self.ops

        def layer(x, p):
            return _layer_forward(p, x, c, ops, cos, sin), None

        x, _ = jax.lax.scan(layer, self._embed(tokens), self._stacked())
        return self._logits(x)

    def init_cache(self, num_seqs: int, max_len: int) -> Any:
        """Empty caches from ``self.ops.cache``, one per layer, stacked on a leading axis.

        Each layer's cache holds the ``num_key_value_heads`` key/value heads, each once (a
        cache of every query head would hold each as many times as its group has query
        heads); ``attend`` serves each query head from its group's head.
        """
        if max_len > self.context:
            raise ValueError(f"max_len {max_len} exceeds the context {self.context}")
        c = self.config
        one = self.ops.cache.create(num_seqs, max_len, c.num_key_value_heads, c.head_dim)
        return jax.tree.map(lambda a: jnp.stack([a] * c.num_hidden_layers), one)

    def step(
        self, tokens: Int[ArrayLike, " seqs"], position: Int[ArrayLike, ""], caches: Any
    ) -> tuple[Float[Array, "seqs vocab"], Any]:
        """Logits after one more token per sequence (all at ``position``), and the new caches."""
        x, caches = self.hidden_step(tokens, position, caches)
        return self._logits(x), caches

    def hidden_step(
        self, tokens: Int[ArrayLike, " seqs"], position: Int[ArrayLike, ""], caches: Any
    ) -> tuple[Float[Array, "seqs hidden"], Any]:
        """``step`` up to the last layer's output (the input of ``head_logits``)."""
        cos, sin = cos_sin(jnp.asarray(position), self._inv_freq(), self.ops.layers)
        c, ops = self.config, self.ops

        def layer(x, p_and_cache):
            p, cache = p_and_cache
            return _layer_step(p, x, cache, c, ops, cos, sin)

        return jax.lax.scan(layer, self._embed(tokens), (self._stacked(), caches))
