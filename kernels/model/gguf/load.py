"""A GGUF file as a Hugging Face decoder, its tokenizer and its chat template.

The file is opened once, as a regular file of at most ``LIMITS["weights"]`` bytes
(``contracts.bounded``); its header is read and checked (``kernels.model.gguf.header``), and each
tensor is read from the checked place into a buffer of its checked size, then dequantized to
float32 (``kernels.model.gguf.quants``). Nothing in the file is run: the chat template is
returned as text, never rendered here.

Tensor names (llama.cpp's): ``token_embd.weight``, ``blk.{i}.attn_norm.weight``,
``blk.{i}.attn_{q,k,v,output}.weight``, ``blk.{i}.ffn_norm.weight``,
``blk.{i}.ffn_{gate,up,down}.weight``, ``output_norm.weight`` and, unless the embeddings are tied,
``output.weight``; each maps onto the Hugging Face name ``kernels.model.hf.checkpoint`` loads,
and its shape (GGUF dimensions fastest first, so ``[in, out]``) is checked against it. llama.cpp's
converter reorders the rows of each query and key projection, head by head, from the rotary
layout of Hugging Face (the two halves of a head rotate together) to its own (neighbouring
pairs rotate together); ``unpermute`` puts them back.

Every problem (a header that cannot be read, metadata that cannot make a decoder, a missing,
unexpected, misshapen or unsupported tensor) is a ``CheckpointError``, each at the file and its
metadata key or tensor name.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

import numpy as np
from jaxtyping import Float

from kernel_contracts.contracts.bounded import LIMITS, open_regular
from kernel_contracts.kernels.model.gguf.header import GGUFError, Header, read_header, read_tensor
from kernel_contracts.kernels.model.gguf.metadata import gguf_config, tokenizer_spec
from kernel_contracts.kernels.model.gguf.quants import dequantize
from kernel_contracts.kernels.model.hf.checkpoint import build_decoder, hf_tensors
from kernel_contracts.kernels.model.hf.config import DecoderConfig
from kernel_contracts.kernels.model.hf.errors import CheckpointError, CheckpointProblem
from kernel_contracts.kernels.model.hf.files import refused

__all__ = [
    "chat_template",
    "gguf_sha256",
    "hf_name",
    "load_gguf",
    "read_gguf_config",
    "read_gguf_tokenizer",
    "unpermute",
]

_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")


def hf_name(name: str) -> str | None:
    """The Hugging Face tensor name of the GGUF tensor ``name``, or ``None`` (not a llama one)."""
    if name in _GLOBAL:
        return _GLOBAL[name]
    m = _BLOCK.match(name)
    if m is None or m.group(2) not in _LAYER:
        return None
    return f"model.layers.{int(m.group(1))}.{_LAYER[m.group(2)]}.{m.group(3)}"


def unpermute(w: Float[np.ndarray, "rows ..."], heads: int) -> Float[np.ndarray, "rows ..."]:
    """The rows of a query or key projection (``heads`` heads) back in Hugging Face's rotary
    order, from the order llama.cpp's converter writes (the inverse of its ``permute``)."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@contextmanager
def _opened(path: str) -> Iterator[tuple[BinaryIO, Header]]:
    """The file ``path`` open after the checks, with its checked header."""
    try:
        handle = open_regular(path, LIMITS["weights"])
    except OSError as err:
        raise refused(path, "", err) from None
    with handle:
        try:
            header = read_header(handle, os.fstat(handle.fileno()).st_size)
        except GGUFError as err:
            problem = CheckpointProblem(path, "", f"cannot read as GGUF: {err}")
            raise CheckpointError([problem]) from None
        except OSError as err:
            raise refused(path, "", err) from None
        yield handle, header


def _config(header: Header, path: str) -> DecoderConfig:
    tied = "output.weight" not in header.tensors and "output.weight" not in header.problems
    return gguf_config(header.metadata, tied, path)


def read_gguf_config(path: str) -> DecoderConfig:
    """The architecture of the GGUF file ``path``; ``CheckpointError`` otherwise."""
    with _opened(path) as (_, header):
        return _config(header, path)


def read_gguf_tokenizer(path: str):
    """The tokenizer (a ``tokenizers.Tokenizer``) the metadata of ``path`` states."""
    from kernel_contracts.kernels.model.hf.tokenizer import byte_level_bpe

    with _opened(path) as (_, header):
        spec = tokenizer_spec(header.metadata, path)
    try:
        return byte_level_bpe(
            spec.tokens, spec.merges, spec.special, split_digits=spec.split_digits
        )
    except ValueError as err:
        problem = CheckpointProblem(path, "tokenizer.ggml.merges", f"no tokenizer: {err}")
        raise CheckpointError([problem]) from None


def chat_template(path: str) -> str | None:
    """The chat template (Jinja text) of the GGUF file ``path``, or ``None`` if it has none."""
    with _opened(path) as (_, header):
        return tokenizer_spec(header.metadata, path).chat_template


def _tensors(handle: BinaryIO, header: Header, c: DecoderConfig, path: str, report):
    """Every expected tensor that could be read, in our layout, keyed by its Hugging Face name."""
    expected = hf_tensors(c)
    found: dict[str, np.ndarray] = {}
    seen: set[str] = set()
    for name in sorted(set(header.tensors) | set(header.problems)):
        hf = hf_name(name)
        if hf is not None:
            seen.add(hf)
        if name in header.problems:
            report(name, header.problems[name])
            continue
        if hf is None or hf not in expected:
            report(name, f"unexpected tensor for a {c.family} decoder of this shape")
            continue
        info, want = header.tensors[name], expected[hf]
        if info.shape != want.shape:
            report(name, f"shape {list(info.shape)}, expected {list(want.shape)}")
            continue
        values = dequantize(read_tensor(handle, info), info.type_id, info.shape[-1])
        values = values.reshape(info.shape)
        if hf.endswith("q_proj.weight"):
            values = unpermute(values, c.num_attention_heads)
        elif hf.endswith("k_proj.weight"):
            values = unpermute(values, c.num_key_value_heads)
        found[hf] = want.to_ours(values)
    gguf = {v: k for k, v in _GLOBAL.items()}
    for hf in sorted(set(expected) - seen):
        m = re.match(r"^model\.layers\.(\d+)\.(.+)\.(weight|bias)$", hf)
        if m is not None:
            part = next(k for k, v in _LAYER.items() if v == m.group(2))
            report(f"blk.{m.group(1)}.{part}.{m.group(3)}", "missing tensor")
        else:
            report(gguf.get(hf, hf), "missing tensor")
    return found


def load_gguf(path: str, ops=None):
    """The decoder stored in the GGUF file ``path`` (on the decoder's default plain float32 ops,
    matmuls summed in blocks, unless ``ops`` is given); ``CheckpointError`` with every problem
    of the file."""
    problems: list[CheckpointProblem] = []

    def report(key: str, message: str) -> None:
        problems.append(CheckpointProblem(path, key, message))

    with _opened(path) as (handle, header):
        config = _config(header, path)
        try:
            found = _tensors(handle, header, config, path, report)
        except (GGUFError, OSError) as err:
            raise CheckpointError([CheckpointProblem(path, "", f"cannot read: {err}")]) from None
    if problems:
        raise CheckpointError(problems)
    return build_decoder(config, found, path, ops)


def gguf_sha256(path: str) -> str | None:
    """sha256 of the GGUF file ``path``; ``None`` when it cannot be read or is refused."""
    try:
        with open_regular(path, LIMITS["weights"]) as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None
