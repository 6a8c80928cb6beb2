"""A GGUF file's metadata read as a decoder's architecture and as its tokenizer.

The architecture is ``general.architecture`` (``llama`` loads) and its keys, prefixed by that
name: ``block_count``, ``embedding_length``, ``feed_forward_length``, ``attention.head_count``,
``attention.head_count_kv`` (default: the head count), ``attention.key_length`` (default:
embedding length / heads), ``attention.layer_norm_rms_epsilon``, ``rope.freq_base`` (default
10000), ``rope.dimension_count`` (must be the head size: partial rotary is not supported),
``context_length`` and ``vocab_size`` (default: the tokenizer's token count). They are written
as the keys of a ``config.json`` and checked by ``kernels.model.hf.config.parse_config``, so
a GGUF decoder meets the checks a Hugging Face one does. Embeddings are tied when the file has
no ``output.weight``. Rope scaling (``rope.scaling.type`` other than ``none``) is refused.

The tokenizer is ``tokenizer.ggml.model`` ``gpt2`` (byte-level BPE; ``llama``'s SentencePiece
is not supported): ``tokens``, ``merges``, ``token_type`` (3, control, marks the special
tokens), ``bos_token_id`` / ``eos_token_id`` and ``pre``, the pre-tokenizer llama.cpp applies:
``smollm`` first splits every digit off on its own, as SmolLM's original tokenizer does; the
others listed in ``PRE_TOKENIZERS`` use GPT-2's split alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernel_contracts.kernels.model.hf.config import DecoderConfig, parse_config
from kernel_contracts.kernels.model.hf.errors import CheckpointError, CheckpointProblem

__all__ = ["ARCHITECTURES", "PRE_TOKENIZERS", "TokenizerSpec", "gguf_config", "tokenizer_spec"]

# general.architecture -> the config.json architecture it loads as
ARCHITECTURES = {"llama": "LlamaForCausalLM"}
# tokenizer.ggml.pre -> whether digits are split off one by one before GGUF's GPT-2 split
PRE_TOKENIZERS = {"default": False, "gpt2": False, "smollm": True}
_CONTROL = 3  # a token_type: a special token, matched whole in text

# config.json key -> (metadata key after the architecture prefix, required)
_KEYS = {
    "num_hidden_layers": ("block_count", True),
    "hidden_size": ("embedding_length", True),
    "intermediate_size": ("feed_forward_length", True),
    "num_attention_heads": ("attention.head_count", True),
    "num_key_value_heads": ("attention.head_count_kv", False),
    "head_dim": ("attention.key_length", False),
    "rms_norm_eps": ("attention.layer_norm_rms_epsilon", True),
    "rope_theta": ("rope.freq_base", False),
    "max_position_embeddings": ("context_length", True),
    "vocab_size": ("vocab_size", False),
}


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def gguf_config(meta: Mapping[str, Any], tied: bool, path: str) -> DecoderConfig:
    """The architecture the metadata ``meta`` of the file ``path`` describes (``tied``: it has
    no ``output.weight``); every problem in one ``CheckpointError``, at its metadata key."""
    problems: list[CheckpointProblem] = []

    def report(key: str, message: str) -> None:
        problems.append(CheckpointProblem(path, key, message))

    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        report(
            "general.architecture",
            "missing"
            if arch is None
            else f"unsupported architecture {arch!r} (supported: {', '.join(ARCHITECTURES)})",
        )
        raise CheckpointError(problems)
    raw: dict[str, Any] = {"architectures": [ARCHITECTURES[arch]], "tie_word_embeddings": tied}
    for hf_key, (key, required) in _KEYS.items():
        full = f"{arch}.{key}"
        if full in meta:
            value = meta[full]
            if hf_key in ("rms_norm_eps", "rope_theta"):
                if not (isinstance(value, float) and math.isfinite(value) and value > 0):
                    report(full, f"must be a positive number, got {value!r}")
                    continue
            elif not _integer(value) or value < 1:
                report(full, f"must be a positive integer, got {value!r}")
                continue
            raw[hf_key] = value
        elif required:
            report(full, "missing")
    if "vocab_size" not in raw and isinstance(meta.get("tokenizer.ggml.tokens"), list):
        raw["vocab_size"] = len(meta["tokenizer.ggml.tokens"])
    if "vocab_size" not in raw:
        report(f"{arch}.vocab_size", "missing, and no tokenizer.ggml.tokens to count")
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling != "none":
        report(f"{arch}.rope.scaling.type", f"rope scaling {scaling!r} is not supported")
    if problems:
        raise CheckpointError(problems)
    try:
        config = parse_config(raw, path)
    except CheckpointError as err:  # a size that cannot make a decoder: name our keys
        names = {hf: f"{arch}.{key}" for hf, (key, _) in _KEYS.items()}
        raise CheckpointError(
            CheckpointProblem(p.file, names.get(p.key, p.key), p.message) for p in err.problems
        ) from None
    rotary = meta.get(f"{arch}.rope.dimension_count", config.head_dim)
    if rotary != config.head_dim:
        report(
            f"{arch}.rope.dimension_count",
            f"{rotary!r}, but the head size is {config.head_dim}: partial rotary embeddings "
            "are not supported",
        )
        raise CheckpointError(problems)
    return config


@dataclass(frozen=True)
class TokenizerSpec:
    """A byte-level BPE tokenizer as a GGUF file states it."""

    tokens: tuple[str, ...]
    merges: tuple[tuple[str, str], ...]
    special: tuple[int, ...]  # ids of the control tokens
    split_digits: bool
    bos_id: int | None
    eos_id: int | None
    chat_template: str | None


def _strings(meta: Mapping[str, Any], key: str, report) -> list[str] | None:
    value = meta.get(key)
    if value is None:
        report(key, "missing: the file holds no tokenizer")
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        report(key, "must be an array of strings")
        return None
    return value


def tokenizer_spec(meta: Mapping[str, Any], path: str) -> TokenizerSpec:
    """The tokenizer in the metadata ``meta`` of the file ``path``; every problem in one
    ``CheckpointError``, at its metadata key."""
    problems: list[CheckpointProblem] = []

    def report(key: str, message: str) -> None:
        problems.append(CheckpointProblem(path, key, message))

    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        report(
            "tokenizer.ggml.model",
            "missing: the file holds no tokenizer" if kind is None else
            f"unsupported tokenizer {kind!r} (supported: gpt2, byte-level BPE)",
        )  # fmt: skip
        raise CheckpointError(problems)
    tokens = _strings(meta, "tokenizer.ggml.tokens", report)
    merges = _strings(meta, "tokenizer.ggml.merges", report)
    pairs = []
    for i, merge in enumerate(merges or ()):
        parts = merge.split(" ")
        if len(parts) != 2 or not all(parts):
            report(f"tokenizer.ggml.merges[{i}]", f"{merge!r} is not two tokens and a space")
            break
        pairs.append((parts[0], parts[1]))
    types = meta.get("tokenizer.ggml.token_type", [])
    if not isinstance(types, list) or not all(_integer(t) for t in types):
        report("tokenizer.ggml.token_type", "must be an array of integers")
        types = []
    if tokens is not None and types and len(types) != len(tokens):
        report("tokenizer.ggml.token_type", f"{len(types)} types for {len(tokens)} tokens")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        report(
            "tokenizer.ggml.pre",
            f"unsupported pre-tokenizer {pre!r} (supported: {', '.join(PRE_TOKENIZERS)})",
        )
    ids = {}
    for name in ("bos", "eos"):
        key = f"tokenizer.ggml.{name}_token_id"
        value = meta.get(key)
        if value is not None and (not _integer(value) or not 0 <= value < len(tokens or ())):
            report(key, f"{value!r} is not a token id")
            value = None
        ids[name] = value
    template = meta.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        report("tokenizer.chat_template", "must be a string")
    if problems or tokens is None:
        raise CheckpointError(problems)
    special = tuple(i for i, t in enumerate(types) if t == _CONTROL)
    return TokenizerSpec(
        tuple(tokens), tuple(pairs), special, PRE_TOKENIZERS[pre], ids["bos"], ids["eos"], template
    )
