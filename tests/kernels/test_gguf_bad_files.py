"""GGUF files that cannot be used: each gives every problem at once, at its file and metadata key
or tensor name, never a traceback; the command line exits 2."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from kernel_contracts.kernels.model.gguf import load_gguf, read_gguf_config, read_gguf_tokenizer
from kernel_contracts.kernels.model.hf.errors import CheckpointError
from tests.kernels.gguf_files import write_tiny

LOADED = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "good.gguf"
    write_tiny(path)
    return path.read_bytes()


def _problems(path, read=load_gguf) -> list[tuple[str, str]]:
    with pytest.raises(CheckpointError) as info:
        read(str(path))
    assert all(p.file == str(path) for p in info.value.problems)
    return [(p.key, p.message) for p in info.value.problems]


def _header(*kv: bytes, tensors: int = 0, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, len(kv)) + b"".join(kv)


def _key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


def test_bad_magic(tmp_path, good):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGML" + good[4:])
    assert _problems(path) == [("", "cannot read as GGUF: not a GGUF file: it starts with "
                                "b'GGML', not b'GGUF'")]  # fmt: skip


def test_unsupported_version(tmp_path, good):
    path = tmp_path / "v.gguf"
    path.write_bytes(good[:4] + struct.pack("<I", 7) + good[8:])
    assert _problems(path) == [("", "cannot read as GGUF: GGUF version 7 (supported: 2, 3)")]
    path.write_bytes(good[:4] + struct.pack(">I", 3) + good[8:])
    assert _problems(path) == [
        ("", "cannot read as GGUF: a big-endian GGUF file (version 3); only little-endian loads")
    ]


@pytest.mark.parametrize("cut", [3, 20, 300, 5000])
def test_truncated_inside_the_header(tmp_path, good, cut):
    path = tmp_path / "t.gguf"
    path.write_bytes(good[:cut])
    ((key, message),) = _problems(path, read_gguf_config)
    assert key == "" and message.startswith("cannot read as GGUF: ")
    # a length read past the end, or a count that the bytes left cannot hold
    assert f"the file holds {cut})" in message or " cannot fit in the " in message


def test_truncated_inside_the_data(tmp_path, good):
    path = tmp_path / "t.gguf"
    path.write_bytes(good[: len(good) - 4000])
    problems = _problems(path)
    assert problems and all(
        "reaches beyond the end of the file" in m and key.startswith(("blk.1.", "output_norm"))
        for key, m in problems
    )


def test_an_array_too_long_for_the_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "a.gguf"
    path.write_bytes(_header(_key("x") + struct.pack("<IIQ", 9, 0, 2**62)))
    assert _problems(path) == [("", "cannot read as GGUF: x: 4611686018427387904 items of type 0 "
                                "cannot fit in the 0 bytes left")]  # fmt: skip


def test_a_string_too_long_and_an_unknown_value_type(tmp_path):
    path = tmp_path / "s.gguf"
    path.write_bytes(_header(struct.pack("<Q", 2**40) + bytes(23)))
    assert _problems(path) == [("", "cannot read as GGUF: the file ends inside metadata key 0 "
                                "at offset 32 (it needs 1099511627776 bytes, the file holds "
                                "55)")]  # fmt: skip
    path.write_bytes(_header(_key("k") + struct.pack("<I", 42)))
    assert _problems(path) == [("", "cannot read as GGUF: k: unknown value type 42")]


def test_more_tensors_counted_than_written(tmp_path, good):
    path = tmp_path / "c.gguf"
    count = struct.unpack("<Q", good[8:16])[0]
    path.write_bytes(good[:8] + struct.pack("<Q", count + 1000) + good[16:])
    ((key, message),) = _problems(path)
    assert key == "" and message.startswith("cannot read as GGUF: ")


def test_unknown_architecture(tmp_path):
    path = tmp_path / "arch.gguf"
    write_tiny(path, arch="gpt2")
    assert _problems(path) == [
        ("general.architecture", "unsupported architecture 'gpt2' (supported: llama)")
    ]


def test_unsupported_quantization_type(tmp_path):
    path = tmp_path / "q.gguf"
    write_tiny(path, types={"blk.0.attn_v.weight": "Q5_0", "blk.1.ffn_up.weight": "Q5_1"})
    assert _problems(path) == [
        ("blk.0.attn_v.weight", f"unsupported tensor type Q5_0 (supported: {LOADED})"),
        ("blk.1.ffn_up.weight", f"unsupported tensor type Q5_1 (supported: {LOADED})"),
    ]


def test_tokenizer_missing_from_the_metadata(tmp_path):
    path = tmp_path / "tok.gguf"
    write_tiny(path, meta={k: None for k in ("tokenizer.ggml.model", "tokenizer.ggml.tokens")})
    assert _problems(path, read_gguf_tokenizer) == [
        ("tokenizer.ggml.model", "missing: the file holds no tokenizer")
    ]
    path = tmp_path / "merges.gguf"
    write_tiny(path, meta={"tokenizer.ggml.merges": None, "tokenizer.ggml.pre": ("str", "x")})
    assert _problems(path, read_gguf_tokenizer) == [
        ("tokenizer.ggml.merges", "missing: the file holds no tokenizer"),
        ("tokenizer.ggml.pre", "unsupported pre-tokenizer 'x' (supported: default, gpt2, smollm)"),
    ]


def test_metadata_that_cannot_make_a_decoder(tmp_path):
    path = tmp_path / "meta.gguf"
    write_tiny(
        path,
        meta={
            "llama.block_count": None,
            "llama.attention.head_count_kv": ("u32", 3),
            "llama.rope.scaling.type": ("str", "yarn"),
            "llama.attention.layer_norm_rms_epsilon": ("str", "small"),
        },
    )
    assert _problems(path) == [
        ("llama.block_count", "missing"),
        ("llama.attention.layer_norm_rms_epsilon", "must be a positive number, got 'small'"),
        ("llama.rope.scaling.type", "rope scaling 'yarn' is not supported"),
    ]
    write_tiny(path, meta={"llama.attention.head_count_kv": ("u32", 3)})
    assert _problems(path) == [
        ("llama.attention.head_count_kv", "3 does not divide num_attention_heads 4")
    ]


def test_missing_unexpected_and_misshapen_tensors(tmp_path):
    path = tmp_path / "tensors.gguf"
    write_tiny(
        path,
        drop=("blk.1.ffn_up.weight",),
        tensors={
            "blk.0.attn_q.bias": np.zeros(32, np.float32),
            "blk.0.ffn_gate.weight": np.zeros((64, 16), np.float32),
        },
    )
    assert _problems(path) == [
        ("blk.0.attn_q.bias", "unexpected tensor for a llama decoder of this shape"),
        ("blk.0.ffn_gate.weight", "shape [64, 16], expected [64, 32]"),
        ("blk.1.ffn_up.weight", "missing tensor"),
    ]
    write_tiny(path, meta={"llama.block_count": ("u32", 3)})
    problems = _problems(path)
    assert len(problems) == 9 and all(k.startswith("blk.2.") for k, _ in problems)
    assert ("blk.2.attn_q.weight", "missing tensor") in problems


def test_not_a_file(tmp_path):
    """Refused before a byte is read (contracts.bounded): a directory, a device, a FIFO."""
    assert _problems(tmp_path / "none.gguf") == [("", "no such file")]
    assert _problems(tmp_path) == [("", "is a directory, not a regular file")]
    (tmp_path / "zero.gguf").symlink_to("/dev/zero")
    assert _problems(tmp_path / "zero.gguf") == [("", "is a character device, not a regular file")]
    os.mkfifo(tmp_path / "fifo.gguf")
    assert _problems(tmp_path / "fifo.gguf") == [("", "is a FIFO (named pipe), not a regular file")]


def test_a_header_over_its_limit_is_refused(tmp_path, good, monkeypatch):
    import kernel_contracts.kernels.model.gguf.header as header

    monkeypatch.setattr(header, "LIMITS", {"gguf_metadata": 1024})
    path = tmp_path / "big.gguf"
    path.write_bytes(good)
    ((key, message),) = _problems(path, read_gguf_config)
    assert (key, message) == ("", "cannot read as GGUF: tokenizer.ggml.tokens: 264 items of type "
                               "8 cannot fit in the 423 bytes left under the header limit of "
                               "1 KiB")  # fmt: skip
