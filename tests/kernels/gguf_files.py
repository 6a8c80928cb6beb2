"""Tiny GGUF files for the tests, written with the ``gguf`` package's own writer.

``write_tiny`` writes a random-weight Llama decoder (``kernels.model.hf.Decoder``) as llama.cpp's
converter would: its tensor names, its q/k row order (``permute`` below, the converter's
reordering written from its definition), its metadata keys, a small byte-level BPE tokenizer and
a chat template. Keyword arguments change or drop parts, for the bad-file corpus.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
from flax import nnx
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

from kernel_contracts.kernels.model.hf.checkpoint import hf_tensors
from kernel_contracts.kernels.model.hf.config import DecoderConfig, RopeConfig
from kernel_contracts.kernels.model.hf.decoder import Decoder

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
)
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MERGES = ("h e", "Ġ t", "Ġt he", "1 2", "Ġ 1")


def byte_alphabet() -> list[str]:
    """GPT-2's spelling of each byte 0..255 as one printable character."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def tokens() -> list[str]:
    """The tiny vocabulary: the specials, the 256 bytes, then one token per merge."""
    return [*SPECIAL, *byte_alphabet(), *("".join(m.split(" ")) for m in MERGES)]


def config(*, tied: bool = True, layers: int = 2) -> DecoderConfig:
    return DecoderConfig(
        family="llama", vocab_size=len(tokens()), hidden_size=32, intermediate_size=64,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        max_position_embeddings=64, rms_norm_eps=2.0**-17, tie_word_embeddings=tied,
        qkv_bias=False, o_bias=False, mlp_bias=False, qk_norm=False,
        rope=RopeConfig(theta=10000.0),
    )  # fmt: skip


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's q/k row order: within each head, rows [0, half) and [half, dim)
    interleaved (row i of the first half, then row i of the second)."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_LAYER = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}  # fmt: skip
_GLOBAL = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def gguf_name(hf: str) -> str:
    if hf in _GLOBAL:
        return _GLOBAL[hf]
    _, _, i, rest = hf.split(".", 3)
    part, kind = rest.rsplit(".", 1)
    return f"blk.{i}.{_LAYER[part]}.{kind}"


def hf_arrays(model) -> dict[str, np.ndarray]:
    """The stored tensors of ``model`` under their Hugging Face names, in the hub's layout."""
    pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    out = {}
    for name, info in hf_tensors(model.config).items():
        node = pure
        for part in info.path:
            node = node[part]
        out[name] = info.to_hf(np.asarray(node, np.float32))
    return out


def metadata(c: DecoderConfig) -> dict[str, Any]:
    """The metadata llama.cpp writes for ``c``, tokenizer and chat template included."""
    n = len(tokens())
    return {
        "llama.block_count": ("u32", c.num_hidden_layers),
        "llama.context_length": ("u32", c.max_position_embeddings),
        "llama.embedding_length": ("u32", c.hidden_size),
        "llama.feed_forward_length": ("u32", c.intermediate_size),
        "llama.attention.head_count": ("u32", c.num_attention_heads),
        "llama.attention.head_count_kv": ("u32", c.num_key_value_heads),
        "llama.rope.freq_base": ("f32", c.rope.theta),
        "llama.attention.layer_norm_rms_epsilon": ("f32", c.rms_norm_eps),
        "llama.vocab_size": ("u32", c.vocab_size),
        "llama.rope.dimension_count": ("u32", c.head_dim),
        "tokenizer.ggml.model": ("str", "gpt2"),
        "tokenizer.ggml.pre": ("str", "smollm"),
        "tokenizer.ggml.tokens": ("arr", tokens()),
        "tokenizer.ggml.token_type": ("arr", [3] * len(SPECIAL) + [1] * (n - len(SPECIAL))),
        "tokenizer.ggml.merges": ("arr", list(MERGES)),
        "tokenizer.ggml.bos_token_id": ("u32", 1),
        "tokenizer.ggml.eos_token_id": ("u32", 2),
        "tokenizer.chat_template": ("str", TEMPLATE),
    }


def write_tiny(
    path: pathlib.Path,
    *,
    seed: int = 0,
    tied: bool = True,
    arch: str = "llama",
    types: dict[str, str] | None = None,
    meta: dict[str, Any] | None = None,
    drop: tuple[str, ...] = (),
    tensors: dict[str, np.ndarray] | None = None,
    model=None,
) -> Decoder:
    """Write a tiny decoder as a GGUF file at ``path`` and return the decoder. ``types``: GGUF
    tensor name -> a quantized type to store it in (F32 otherwise); ``meta``: metadata entries
    to add or replace (``(kind, value)``; a value of ``None`` drops the key); ``drop``: tensor
    names left out; ``tensors``: tensors (GGUF name -> array) to add or replace."""
    model = model if model is not None else Decoder(config(tied=tied), seed=seed)
    c = model.config
    arrays = {}
    for hf, a in hf_arrays(model).items():
        if hf.endswith("q_proj.weight"):
            a = permute(a, c.num_attention_heads)
        elif hf.endswith("k_proj.weight"):
            a = permute(a, c.num_key_value_heads)
        arrays[gguf_name(hf)] = a
    arrays |= tensors or {}
    writer = GGUFWriter(str(path), arch)
    for key, entry in (metadata(c) | (meta or {})).items():
        if entry is None:
            continue
        kind, value = entry
        add = {"u32": writer.add_uint32, "f32": writer.add_float32, "str": writer.add_string,
               "arr": writer.add_array, "bool": writer.add_bool}[kind]  # fmt: skip
        add(key, value)
    for name, a in arrays.items():
        if name in drop:
            continue
        kind = (types or {}).get(name)
        if kind is None:
            writer.add_tensor(name, np.ascontiguousarray(a, np.float32))
        else:
            qtype = GGMLQuantizationType[kind]
            writer.add_tensor(name, quantize(a.astype(np.float32), qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model
