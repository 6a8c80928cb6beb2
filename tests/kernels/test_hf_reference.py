"""The Llama 3 / Qwen2 / Qwen3 decoders against the reference implementation's own logits.

tests/data/hf/make_reference.py (run with torch and transformers, outside this project's
dependencies) wrote each family's tiny checkpoint in the hub's format (bfloat16 safetensors, the
hub's tensor names and config keys; Llama in two shards with the index) and the logits
transformers computes from it in float32, over a whole sequence and decoding token by token
through its KV cache. Here the same folders are loaded and run on plain float32 ops, and one
on the portable layers of K_train and K_inf (``kernels.numerics.portable``: the same bits on every
backend).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors import safe_open

from kernel_contracts.kernels.model.hf.checkpoint import hf_tensors, load_decoder
from kernel_contracts.kernels.model.hf.config import RopeConfig, parse_config, read_config
from kernel_contracts.kernels.model.hf.decoder import Decoder
from kernel_contracts.kernels.model.hf.rope import inverse_frequencies
from kernel_contracts.kernels.model.tinylm import with_ops
from kernel_contracts.kernels.ops import Layers, plain_ops

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "hf"
FAMILIES = ("llama3", "qwen2", "qwen3")
# float32 rounding of logits of magnitude ~3: the measured gap is about 2e-6
TOLERANCE = dict(rtol=1e-5, atol=1e-5)


@nnx.jit
def _both(model, tokens):
    """Whole-sequence logits, and the logits of every position fed one token at a time
    through ``model.ops.cache`` (one compilation for both)."""
    seqs, length = tokens.shape
    caches = model.init_cache(seqs, length)

    def body(caches, t):
        logits, caches = model.step(tokens[:, t], t, caches)
        return caches, logits

    _, logits = jax.lax.scan(body, caches, jnp.arange(length))
    return model(tokens), jnp.swapaxes(logits, 0, 1)


@pytest.fixture(scope="module")
def loaded():
    return {f: (load_decoder(str(DATA / f)), np.load(DATA / f / "reference.npz")) for f in FAMILIES}


@pytest.fixture(scope="module")
def ours(loaded):
    """Each family's (whole-sequence, incremental) logits on the reference tokens."""
    out = {}
    for family, (model, ref) in loaded.items():
        full, decoded = _both(model, jnp.asarray(ref["tokens"]))
        out[family] = (np.asarray(full), np.asarray(decoded))
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_full_sequence_logits_match_reference(loaded, ours, family):
    np.testing.assert_allclose(ours[family][0], loaded[family][1]["logits"], **TOLERANCE)


@pytest.mark.parametrize("family", FAMILIES)
def test_incremental_decoding_matches_reference_cache(loaded, ours, family):
    np.testing.assert_allclose(ours[family][1], loaded[family][1]["decode_logits"], **TOLERANCE)


def test_portable_layers_match_reference(loaded, ours):
    """With portable layers (K_train's and K_inf's: ``kernels.numerics.portable``'s RMS norms, q/k
    norms too, SiLU and rotary embeddings) and plain matmuls and attention, the logits still match
    transformers' (Qwen3: every layer switch but the biases and the rope scaling)."""
    model, ref = loaded["qwen3"]
    ops = dataclasses.replace(plain_ops(), name="portable-layers", layers=Layers(portable=True))
    full, decoded = _both(with_ops(model, ops), jnp.asarray(ref["tokens"]))
    np.testing.assert_allclose(np.asarray(full), ref["logits"], **TOLERANCE)
    np.testing.assert_allclose(np.asarray(decoded), ref["decode_logits"], **TOLERANCE)
    assert not np.array_equal(np.asarray(full), ours["qwen3"][0])  # the layers did switch


def test_each_family_switch_is_exercised(loaded):
    llama, qwen2, qwen3 = (loaded[f][0].config for f in FAMILIES)
    assert llama.rope.kind == "llama3" and not llama.tie_word_embeddings
    assert (DATA / "llama3" / "model.safetensors.index.json").is_file()
    assert qwen2.qkv_bias and not qwen2.o_bias and qwen2.tie_word_embeddings
    assert qwen3.qk_norm and qwen3.head_dim * qwen3.num_attention_heads != qwen3.hidden_size
    assert all(c.num_key_value_heads < c.num_attention_heads for c in (llama, qwen2, qwen3))


def test_llama3_rope_scaling_moves_the_reference_angles(loaded):
    # the comparison can tell: at the reference's positions, the llama3 scaling turns the
    # rotary angles of every frequency band but the highest, one by more than 0.5 rad, so a decoder
    # that ignored it could not match (all three wavelength bands of the recipe occur)
    model, ref = loaded["llama3"]
    rope, head_dim = model.config.rope, model.config.head_dim
    scaled = inverse_frequencies(rope, head_dim)
    plain = inverse_frequencies(RopeConfig(theta=rope.theta), head_dim)
    last = ref["tokens"].shape[1] - 1
    moved = np.abs(scaled - plain) * last
    assert moved[0] == 0.0 and (moved[1:] > 0).all() and moved.max() > 0.5
    wavelen = 2 * np.pi / plain
    old = rope.original_max_position_embeddings
    low, high = old / rope.low_freq_factor, old / rope.high_freq_factor
    assert (wavelen < high).any() and (wavelen > low).any()
    assert ((wavelen >= high) & (wavelen <= low)).any()


@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_weights_load_bit_exact(loaded, family):
    model, _ = loaded[family]
    folder = DATA / family
    index = folder / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values()))
        if index.is_file()
        else ["model.safetensors"]
    )
    expected = hf_tensors(model.config)
    pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    checked = 0
    for file in files:
        with safe_open(str(folder / file), framework="numpy") as f:
            for name in f.keys():  # noqa: SIM118 (a safetensors file is not iterable)
                stored = f.get_tensor(name)
                node = pure
                for part in expected[name].path:
                    node = node[part]
                ours = np.asarray(node)
                assert ours.dtype == stored.dtype, name
                back = expected[name].to_hf(ours)
                assert back.tobytes() == stored.tobytes(), name
                checked += 1
    assert checked == len(expected)


def test_newer_rope_parameters_spelling_reads_the_same():
    raw = json.loads((DATA / "llama3" / "config.json").read_text())
    scaling = raw.pop("rope_scaling")
    raw["rope_parameters"] = {**scaling, "rope_theta": raw.pop("rope_theta")}
    assert parse_config(raw) == read_config(str(DATA / "llama3"))


def test_random_decoder_runs_the_loaded_layout():
    # a decoder built from a config has the layout a checkpoint loads into
    config = read_config(str(DATA / "qwen2"))
    built = nnx.to_pure_dict(nnx.state(Decoder(config), nnx.Param))
    loaded = nnx.to_pure_dict(nnx.state(load_decoder(str(DATA / "qwen2")), nnx.Param))
    shapes = jax.tree.map(lambda a: a.shape, built)
    assert shapes == jax.tree.map(lambda a: a.shape, loaded)
