"""Grouped-query decoding: each layer's cache holds every key/value head once, and decoding
gives the bits of a cache that holds a copy for every query head."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.contracts import preset
from kernel_contracts.kernels.attention import widen_heads
from kernel_contracts.kernels.model.decode import generate
from kernel_contracts.kernels.model.hf import load_decoder
from kernel_contracts.kernels.model.tinylm import with_ops
from kernel_contracts.kernels.ops import CacheOps, inference_ops, plain_ops

CHECKPOINT = Path(__file__).resolve().parents[1] / "data" / "hf" / "qwen3"  # 4 heads, 2 kv


@dataclasses.dataclass(frozen=True)
class EveryHead:
    """A cache of every query head: each key/value head is written once per query head."""

    inner: CacheOps
    heads: int

    def create(self, num_seqs: int, max_len: int, heads: int, dim: int) -> Any:
        return self.inner.create(num_seqs, max_len, self.heads, dim)

    def append(self, cache, k, v):
        return self.inner.append(cache, widen_heads(k, self.heads), widen_heads(v, self.heads))

    def attend(self, q, cache):
        return self.inner.attend(q, cache)


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint32) if a.dtype == np.float32 else a


@pytest.mark.parametrize("kind", ["h100-fp8", "plain"])
def test_one_copy_per_key_value_head_decodes_the_same_bits(kind):
    model = load_decoder(CHECKPOINT)
    c = model.config
    ops = plain_ops() if kind == "plain" else inference_ops(preset(kind), batch_size=2)
    wide = dataclasses.replace(ops, cache=EveryHead(ops.cache, c.num_attention_heads))
    prompts = jnp.asarray(np.random.default_rng(1).integers(0, c.vocab_size, (2, 3)), jnp.int32)
    runs = [
        generate(with_ops(model, o), prompts, jax.random.key(5), jnp.float32(1.0), new_tokens=4)
        for o in (ops, wide)
    ]
    (tokens, z), (tokens_wide, z_wide) = runs
    np.testing.assert_array_equal(tokens, tokens_wide)
    np.testing.assert_array_equal(_bits(z), _bits(z_wide))
    one = with_ops(model, ops).init_cache(2, 8)
    heads = [leaf.shape[-2] for leaf in jax.tree.leaves(one) if np.ndim(leaf) == 5]
    assert heads and set(heads) == {c.num_key_value_heads}  # kv heads, not query heads
    assert c.num_key_value_heads < c.num_attention_heads


def test_query_heads_must_be_a_multiple_of_the_cached_heads():
    with pytest.raises(ValueError, match="3 query heads cannot share 2 cached heads"):
        widen_heads(jnp.zeros((1, 2, 4)), 3)
