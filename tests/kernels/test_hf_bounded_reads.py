"""Hostile checkpoint folders: every file a folder holds or names is checked before it is read.

Each case starts from a good tiny checkpoint and plants one hostile file: ``config.json`` as a
link to ``/dev/zero`` or as a FIFO, a huge (sparse) ``config.json`` or ``tokenizer.json``, a
``weight_map`` that leads out of the folder, a safetensors header that lies about its length,
its offsets or its shapes. Each must give one ``CheckpointError`` naming the file (and the
tensor), quickly, without blocking and without allocating what the file claims.
"""

from __future__ import annotations

import json
import os
import shutil
import tracemalloc

import numpy as np
import pytest
from tokenizers import Tokenizer, models

from kernel_contracts.kernels.model.hf.checkpoint import folder_sha256, load_decoder, save_decoder
from kernel_contracts.kernels.model.hf.config import parse_config
from kernel_contracts.kernels.model.hf.decoder import Decoder
from kernel_contracts.kernels.model.hf.errors import CheckpointError
from kernel_contracts.kernels.model.hf.tokenizer import read_tokenizer
from tests.support.guard import finishes

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 32,
    "hidden_size": 16,
    "intermediate_size": 24,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 32,
}
INDEX = "model.safetensors.index.json"
SHARD1, SHARD2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
NORM = "model.norm.weight"  # F32 [16] in the single-file checkpoint


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("good")
    model = Decoder(parse_config(CONFIG), seed=0)
    save_decoder(model, str(root / "sharded"), shards=2, dtype="BF16")
    save_decoder(model, str(root / "single"))
    Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, "[UNK]")).save(
        str(root / "single" / "tokenizer.json")
    )
    return root


@pytest.fixture
def sharded(good, tmp_path):
    return shutil.copytree(good / "sharded", tmp_path / "ckpt")


@pytest.fixture
def single(good, tmp_path):
    return shutil.copytree(good / "single", tmp_path / "ckpt")


def _problems(folder, *fifos) -> list[str]:
    err = finishes(lambda: load_decoder(str(folder)), *fifos)
    assert isinstance(err, CheckpointError), repr(err)
    return [str(p) for p in err.problems]


# ---------------------------------------------------------------- config.json and tokenizer.json


def test_a_config_linked_to_dev_zero_is_refused_unread(single):
    config = single / "config.json"
    config.unlink()
    config.symlink_to("/dev/zero")
    tracemalloc.start()
    try:
        problems = _problems(single)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert problems == [f"{config}: is a symbolic link to /dev/zero, outside the folder {single}"]
    assert peak < 16 << 20
    assert finishes(lambda: folder_sha256(str(single))) is None


def test_a_config_that_is_a_fifo_or_a_directory_is_refused(single):
    config = single / "config.json"
    config.unlink()
    os.mkfifo(config)
    assert _problems(single, config) == [f"{config}: is a FIFO (named pipe), not a regular file"]
    assert finishes(lambda: folder_sha256(str(single)), config) is None
    config.unlink()
    config.mkdir()
    assert _problems(single) == [f"{config}: is a directory, not a regular file"]


def test_a_huge_config_is_refused_before_it_is_read(single):
    config = single / "config.json"
    with open(config, "r+b") as f:
        f.truncate(16 << 20 | 1)  # sparse
    assert _problems(single) == [
        f"{config}: the file holds {16 << 20 | 1} bytes, above the limit of 16 MiB"
    ]


def test_a_config_that_is_no_json_names_the_file(single):
    config = single / "config.json"
    config.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    assert _problems(single) == [f"{config}: cannot read as JSON: nested too deeply"]
    config.write_bytes(b'{"vocab_size": 3\xff}')
    assert _problems(single) == [f"{config}: not UTF-8 text (byte 0xff at offset 16)"]


def test_a_huge_tokenizer_and_a_fifo_tokenizer_are_refused(single):
    tokenizer = single / "tokenizer.json"
    assert read_tokenizer(str(single)).get_vocab_size() == 2  # the fixture's is readable
    with open(tokenizer, "r+b") as f:
        f.truncate((256 << 20) + 1)  # sparse: the test stays cheap
    err = finishes(lambda: read_tokenizer(str(single)))
    assert isinstance(err, CheckpointError)
    assert str(err) == (
        f"{tokenizer}: the file holds {(256 << 20) + 1} bytes, above the limit of 256 MiB"
    )
    tokenizer.unlink()
    os.mkfifo(tokenizer)
    err = finishes(lambda: read_tokenizer(str(single)), tokenizer)
    assert str(err) == f"{tokenizer}: is a FIFO (named pipe), not a regular file"
    tokenizer.unlink()
    tokenizer.symlink_to("/dev/zero")
    err = finishes(lambda: read_tokenizer(str(single)))
    assert str(err) == f"{tokenizer}: is a symbolic link to /dev/zero, outside the folder {single}"


# ---------------------------------------------------------------- weight_map escapes


def _point_shard(folder, target: str) -> tuple[str, int]:
    """Point every tensor of shard 2 at ``target``; its first tensor name (in the index's
    order) and the count."""
    index = folder / INDEX
    raw = json.loads(index.read_text())
    names = [n for n, f in raw["weight_map"].items() if f == SHARD2]
    for name in names:
        raw["weight_map"][name] = target
    index.write_text(json.dumps(raw))
    return names[0], len(names)


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("../outside.safetensors", "leads out of the folder through '..'"),
        ("sub/../../outside.safetensors", "leads out of the folder through '..'"),
        ("ABSOLUTE", "is an absolute path, not a file name in the folder"),
    ],
)
def test_a_weight_map_that_leads_out_of_the_folder_is_refused(sharded, target, why):
    outside = sharded.parent / "outside.safetensors"
    shutil.copy(sharded / SHARD2, outside)  # a readable file is there: it must not be read
    target = str(outside) if target == "ABSOLUTE" else target
    first, _ = _point_shard(sharded, target)
    assert _problems(sharded) == [f"{sharded / INDEX}: {first}: shard {target!r} {why}"]


def test_a_shard_linked_out_of_the_folder_is_refused(sharded):
    outside = sharded.parent / "elsewhere.safetensors"
    shutil.move(sharded / SHARD2, outside)
    (sharded / SHARD2).symlink_to(outside)
    assert _problems(sharded) == [
        f"{sharded / SHARD2}: is a symbolic link to {outside}, outside the folder {sharded}"
    ]
    assert folder_sha256(str(sharded)) is None
    (sharded / SHARD2).unlink()
    (sharded / SHARD2).symlink_to("/dev/zero")
    assert _problems(sharded) == [
        f"{sharded / SHARD2}: is a symbolic link to /dev/zero, outside the folder {sharded}"
    ]


def test_an_index_that_is_a_fifo_is_refused(sharded):
    index = sharded / INDEX
    index.unlink()
    os.mkfifo(index)
    assert _problems(sharded, index) == [f"{index}: is a FIFO (named pipe), not a regular file"]


def test_a_hub_cache_snapshot_loads_through_its_blob_links(good, tmp_path):
    repo = tmp_path / "models--org--tiny"
    blobs, snapshot = repo / "blobs", repo / "snapshots" / "0123abcd"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, file in enumerate(sorted((good / "sharded").iterdir())):
        shutil.copy(file, blobs / f"blob{i}")
        (snapshot / file.name).symlink_to(f"../../blobs/blob{i}")
    model = load_decoder(str(snapshot))
    reference = load_decoder(str(good / "sharded"))
    assert model.config == reference.config
    np.testing.assert_array_equal(model.embed_tokens[...], reference.embed_tokens[...])
    assert folder_sha256(str(snapshot)) == folder_sha256(str(good / "sharded"))


# ---------------------------------------------------------------- safetensors headers


def _header(file) -> tuple[dict, bytes]:
    data = file.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def _write(file, header: dict, body: bytes) -> None:
    raw = json.dumps(header).encode()
    file.write_bytes(len(raw).to_bytes(8, "little") + raw + body)


def _with_entry(single, **changes) -> tuple[str, list[int]]:
    """Rewrite the single file's ``model.norm.weight`` entry; its file and offsets."""
    file = single / "model.safetensors"
    header, body = _header(file)
    offsets = header[NORM]["data_offsets"]
    header[NORM] |= changes
    _write(file, header, body)
    return str(file), offsets


def _unreadable(single) -> str:
    (problem,) = _problems(single)
    return problem


def test_a_header_length_above_the_limit_is_refused_unallocated(single):
    file = single / "model.safetensors"
    file.write_bytes((2**64 - 1).to_bytes(8, "little") + b"{}")
    assert _unreadable(single) == (
        f"{file}: cannot read as safetensors: the header length {2**64 - 1} is above the "
        "limit of 64 MiB"
    )


def test_a_header_length_beyond_the_file_is_refused(single):
    file = single / "model.safetensors"
    file.write_bytes((1000).to_bytes(8, "little") + b'{"a": 1}')
    assert _unreadable(single) == (
        f"{file}: cannot read as safetensors: the header length 1000 reaches beyond the end "
        "of the file (16 bytes)"
    )
    file.write_bytes(b"\x01\x00")
    assert _unreadable(single) == (
        f"{file}: cannot read as safetensors: the file holds 2 bytes, too few for a "
        "safetensors header"
    )
    file.write_bytes((2).to_bytes(8, "little") + b"[]")
    assert _unreadable(single) == (
        f"{file}: cannot read as safetensors: the header is not a JSON object"
    )


def test_offsets_beyond_the_file_are_refused_unallocated(single):
    size = (1 << 40) // 4  # a terabyte of float32
    file, (begin, _) = _with_entry(single, shape=[size], data_offsets=[0, size * 4])
    raw = (single / "model.safetensors").read_bytes()
    data = len(raw) - 8 - int.from_bytes(raw[:8], "little")
    tracemalloc.start()
    try:
        problems = _problems(single)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert problems == [
        f"{file}: {NORM}: data_offsets [0, {size * 4}] reach beyond the end of the file (its "
        f"data holds {data} bytes)"
    ]
    assert peak < 64 << 20
    assert begin >= 0


def test_a_shape_that_does_not_match_its_bytes_is_refused(single):
    file, (begin, end) = _with_entry(single, shape=[17])
    assert _problems(single) == [
        f"{file}: {NORM}: shape [17] of F32 takes 68 bytes, but data_offsets [{begin}, {end}] "
        "hold 64"
    ]


@pytest.mark.parametrize(
    ("shape", "why"),
    [
        ([-16], "shape [-16] is not a list of non-negative integers"),
        ([16, True], "shape [16, true] is not a list of non-negative integers"),
        ("16", 'shape "16" is not a list of non-negative integers'),
        ([1.5e1], "shape [15.0] is not a list of non-negative integers"),
    ],
)
def test_negative_and_non_integer_dimensions_are_refused(single, shape, why):
    file, _ = _with_entry(single, shape=shape)
    assert _problems(single) == [f"{file}: {NORM}: {why}"]


def test_dimensions_whose_product_overflows_64_bits_are_refused(single):
    # 2^32 * 2^32 * 2^32 * 4 wraps to 0 in 64-bit arithmetic: the product is taken exactly
    file, _ = _with_entry(single, shape=[2**32, 2**32, 2**32], data_offsets=[0, 0])
    assert _problems(single) == [
        f"{file}: {NORM}: shape [4294967296, 4294967296, 4294967296] of F32 takes "
        f"{2**96 * 4} bytes, but data_offsets [0, 0] hold 0"
    ]


def test_bad_offsets_and_unknown_dtypes_are_refused_at_their_tensor(single):
    file = single / "model.safetensors"
    header, body = _header(file)
    header[NORM]["data_offsets"] = [64, 0]
    header["model.layers.0.input_layernorm.weight"]["dtype"] = "F128"
    del header["model.layers.0.post_attention_layernorm.weight"]["shape"]
    _write(file, header, body)
    assert _problems(single) == [
        f"{file}: model.layers.0.input_layernorm.weight: unknown dtype 'F128' in the header",
        f"{file}: model.layers.0.post_attention_layernorm.weight: the header entry has no shape",
        f"{file}: {NORM}: data_offsets [64, 0] are not two integers 0 <= begin <= end",
    ]


def test_a_file_cut_short_after_its_header_is_refused(single):
    file = single / "model.safetensors"
    header, body = _header(file)
    _write(file, header, body[: len(body) // 2])
    problems = _problems(single)
    assert problems and all("reach beyond the end of the file" in p for p in problems)
    assert all(p.startswith(f"{file}: ") for p in problems)
