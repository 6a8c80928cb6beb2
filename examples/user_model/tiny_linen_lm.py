"""A tiny byte-level decoder LM written in Flax Linen, with no knowledge of kernel-contracts.

Its entry point ``logits(params, tokens)`` is what a contract names as
``model: "tiny_linen_lm:logits"``: ``params`` is the Linen variable dict
(``{"params": {...}}``), ``tokens`` int32 ``[batch, seq]``, the result float32 logits
``[batch, seq, 256]``. ``train.py`` beside this file writes ``params.npz``.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

VOCAB, D_MODEL, LAYERS, HEADS, D_FF, CONTEXT = 256, 40, 1, 2, 128, 64


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, mask):
        h = nn.RMSNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=HEADS, use_bias=False)(h, mask=mask)
        h = nn.Dense(D_FF)(nn.RMSNorm()(x))
        return x + nn.Dense(D_MODEL)(nn.gelu(h))


class LM(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        seq = tokens.shape[-1]
        pos = self.param("pos", nn.initializers.normal(0.01), (CONTEXT, D_MODEL))
        x = nn.Embed(VOCAB, D_MODEL)(tokens) + pos[None, :seq]
        mask = nn.make_causal_mask(tokens)
        for _ in range(LAYERS):
            x = Block()(x, mask)
        return nn.Dense(VOCAB, use_bias=False)(nn.RMSNorm()(x))


def logits(params, tokens):
    """Next-token logits at every position: float32 ``[batch, seq, 256]``."""
    return LM().apply(params, jnp.asarray(tokens, jnp.int32))
