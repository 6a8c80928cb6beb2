"""Tiny GGUF files, written with the ``gguf`` package's writer as llama.cpp's converter lays them
out, load as the decoder they were written from; their tokenizer and chat template read back."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as package_dequantize
from gguf.quants import quantize

from kernel_contracts.kernels.model.checkpoints import (
    checkpoint_config,
    checkpoint_sha256,
    checkpoint_tokenizer,
    load_checkpoint,
)
from kernel_contracts.kernels.model.gguf import (
    chat_template,
    load_gguf,
    read_gguf_config,
    read_gguf_tokenizer,
    unpermute,
)
from kernel_contracts.kernels.model.gguf.package import packaged_file
from kernel_contracts.kernels.model.hf.tokenizer import encode
from tests.kernels.gguf_files import TEMPLATE, config, permute, tokens, write_tiny

TOKENS = jnp.asarray(np.random.default_rng(0).integers(0, len(tokens()), (2, 9)), jnp.int32)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_tiny(path)


def test_unpermute_inverts_the_converters_row_order():
    w = np.arange(4 * 8 * 3, dtype=np.float32).reshape(32, 3)  # 4 heads of 8 rows
    stored = permute(w, 4)
    # within a head the converter interleaves the two halves: rows 0, 4, 1, 5, 2, 6, 3, 7
    assert stored[:8, 0].tolist() == [0, 12, 3, 15, 6, 18, 9, 21]
    np.testing.assert_array_equal(unpermute(stored, 4), w)


def test_a_tiny_file_loads_as_the_decoder_it_was_written_from(tiny):
    path, model = tiny
    loaded = load_gguf(str(path))
    assert loaded.config == model.config
    np.testing.assert_array_equal(np.asarray(loaded(TOKENS)), np.asarray(model(TOKENS)))


def test_without_the_row_order_fix_the_logits_differ(tiny, monkeypatch):
    """The fix matters: loaded as stored, the q/k rows rotate the wrong pairs."""
    path, model = tiny
    import kernel_contracts.kernels.model.gguf.load as load

    monkeypatch.setattr(load, "unpermute", lambda w, heads: w)
    wrong = np.asarray(load.load_gguf(str(path))(TOKENS))
    assert np.abs(wrong - np.asarray(model(TOKENS))).max() > 1e-3


def test_untied_head_and_config(tmp_path):
    path = tmp_path / "untied.gguf"
    model = write_tiny(path, tied=False, seed=3)
    c = read_gguf_config(str(path))
    assert c == config(tied=False) and not c.tie_word_embeddings
    assert checkpoint_config(f"gguf:{path}") == c
    got = load_checkpoint(f"gguf:{path}")(TOKENS)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(model(TOKENS)))


def test_quantized_tensors_load_as_the_packages_own_dequantization(tmp_path):
    path = tmp_path / "q.gguf"
    types = {"token_embd.weight": "Q8_0", "blk.0.attn_q.weight": "Q4_1",
             "blk.1.ffn_down.weight": "Q4_0"}  # fmt: skip
    model = write_tiny(path, types=types)
    loaded = load_gguf(str(path))
    embed = np.asarray(model.embed_tokens[...])
    q8 = GGMLQuantizationType.Q8_0
    want = package_dequantize(quantize(embed, q8), q8)
    np.testing.assert_array_equal(np.asarray(loaded.embed_tokens[...]), want)
    assert np.abs(want - embed).max() > 0  # the round trip is lossy: this checks the bytes
    down = np.asarray(loaded.layers[1].mlp.down_proj.kernel[...])
    q4 = GGMLQuantizationType.Q4_0
    hf_down = np.asarray(model.layers[1].mlp.down_proj.kernel[...]).T
    np.testing.assert_array_equal(down, package_dequantize(quantize(hf_down, q4), q4).T)


def test_tokenizer_and_chat_template(tiny):
    path, _ = tiny
    tk = read_gguf_tokenizer(str(path))
    vocab = {t: i for i, t in enumerate(tokens())}
    text = "the 12<|im_start|>he"
    ids = encode(tk, [text])[0]
    # "the" has no merge for "t"+"he" without the space; " 12": digits split one by one (the
    # smollm pre-tokenizer), so the merges "1 2" and "Ġ 1" never apply; the special is whole
    assert ids == [vocab["t"], vocab["he"], vocab["Ġ"], vocab["1"], vocab["2"],
                   vocab["<|im_start|>"], vocab["he"]]  # fmt: skip
    assert encode(tk, [" the"])[0] == [vocab["Ġthe"]]
    assert tk.decode(ids, skip_special_tokens=False) == text
    assert encode(checkpoint_tokenizer(f"gguf:{path}"), [text])[0] == ids
    assert chat_template(str(path)) == TEMPLATE


def test_the_gpt2_pre_tokenizer_merges_digits(tmp_path):
    path = tmp_path / "gpt2.gguf"
    write_tiny(path, meta={"tokenizer.ggml.pre": ("str", "gpt2")})
    vocab = {t: i for i, t in enumerate(tokens())}
    # GPT-2's split keeps " 12" one piece: the best merge, "1 2", applies before "Ġ 1"
    assert encode(read_gguf_tokenizer(str(path)), [" 12"])[0] == [vocab["Ġ"], vocab["12"]]


def test_sha256_is_the_files(tiny):
    import hashlib

    path, _ = tiny
    assert checkpoint_sha256(f"gguf:{path}") == hashlib.sha256(path.read_bytes()).hexdigest()
    assert checkpoint_sha256(f"gguf:{path}.missing") is None


def test_a_packaged_file_is_found_without_importing_its_package():
    assert packaged_file("no-such-distribution-here", "x.gguf") is None
    assert packaged_file("pytest", "no/such/file.gguf") is None
