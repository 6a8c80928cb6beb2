"""The bad-checkpoint corpus: every problem of a checkpoint folder, at its file and key, at once.

Each case starts from a good tiny checkpoint (written by ``save_decoder``: Llama, two shards
with the index, or one file) and breaks one thing: a wrong shape, a missing shard, a dtype we
cannot represent, an unsupported architecture or rope type, a missing or unexpected tensor, a
corrupt file. ``load_decoder`` must raise one ``CheckpointError`` listing exactly the expected
``file: key: message`` lines; the folder's Python files are never run.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from kernel_contracts.contracts.errors import KernelContractsError
from kernel_contracts.kernels.model.hf.checkpoint import load_decoder, save_decoder
from kernel_contracts.kernels.model.hf.config import parse_config
from kernel_contracts.kernels.model.hf.decoder import Decoder
from kernel_contracts.kernels.model.hf.errors import CheckpointError
from kernel_contracts.kernels.model.hf.tokenizer import read_tokenizer

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
SHARD1, SHARD2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("good")
    model = Decoder(parse_config(CONFIG), seed=0)
    save_decoder(model, str(root / "sharded"), shards=2, dtype="BF16")
    save_decoder(model, str(root / "single"))
    return root


@pytest.fixture
def sharded(good, tmp_path):
    return shutil.copytree(good / "sharded", tmp_path / "ckpt")


@pytest.fixture
def single(good, tmp_path):
    return shutil.copytree(good / "single", tmp_path / "ckpt")


def _problems(folder) -> list[str]:
    with pytest.raises(CheckpointError) as info:
        load_decoder(str(folder))
    assert isinstance(info.value, KernelContractsError)
    return [str(p) for p in info.value.problems]


def _edit_config(folder, **changes):
    raw = json.loads((folder / "config.json").read_text())
    raw.update(changes)
    (folder / "config.json").write_text(json.dumps(raw))


def _where(folder, name: str) -> str:
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    return weight_map[name]


def test_good_checkpoints_load(good):
    # the fixtures are sound: each case below breaks exactly one thing
    for form in ("sharded", "single"):
        model = load_decoder(str(good / form))
        assert model.config == parse_config(CONFIG)


def test_a_wrong_shape_is_named_with_both_shapes(sharded):
    name = "model.layers.0.self_attn.k_proj.weight"
    file = sharded / _where(sharded, name)
    tensors = load_file(str(file))
    tensors[name] = tensors[name][:4]
    save_file(tensors, str(file))
    assert _problems(sharded) == [f"{file}: {name}: shape [4, 16], expected [8, 16]"]


def test_a_missing_shard_is_named_once(sharded):
    (sharded / SHARD2).unlink()
    count = sum(1 for v in json.loads((sharded / "model.safetensors.index.json").read_text())[
        "weight_map"].values() if v == SHARD2)  # fmt: skip
    assert _problems(sharded) == [
        f"{sharded / SHARD2}: missing shard ({count} tensors are listed for it in "
        "model.safetensors.index.json)"
    ]


@pytest.mark.parametrize(("dtype", "label"), [(np.int8, "I8"), (np.float64, "F64")])
def test_a_dtype_we_cannot_represent_is_refused(single, dtype, label):
    file = single / "model.safetensors"
    tensors = load_file(str(file))
    tensors["model.norm.weight"] = tensors["model.norm.weight"].astype(dtype)
    save_file(tensors, str(file))
    assert _problems(single) == [
        f"{file}: model.norm.weight: unsupported dtype {label} (supported: F32, F16, BF16)"
    ]


def test_an_unsupported_architecture_is_refused_without_running_code(single):
    (single / "modeling_custom.py").write_text("raise SystemExit('checkpoint code ran')\n")
    _edit_config(
        single,
        architectures=["MistralForCausalLM"],
        auto_map={"AutoModelForCausalLM": "modeling_custom.Custom"},
    )
    assert _problems(single) == [
        f"{single / 'config.json'}: architectures: unsupported architecture "
        "'MistralForCausalLM' (supported: LlamaForCausalLM, Qwen2ForCausalLM, "
        "Qwen3ForCausalLM); checkpoint code is never run"
    ]


def test_an_unknown_rope_type_and_other_config_problems_are_gathered(single):
    _edit_config(
        single,
        rope_scaling={"rope_type": "yarn", "factor": 4.0},
        hidden_act="gelu",
        num_key_value_heads=3,
    )
    config = single / "config.json"
    assert _problems(single) == [
        f"{config}: hidden_act: only silu is supported, got 'gelu'",
        f"{config}: rope_scaling.rope_type: unsupported rope type 'yarn' (supported: "
        "default, llama3)",
        f"{config}: num_key_value_heads: 3 does not divide num_attention_heads 2",
    ]


def test_llama3_scaling_needs_its_keys(single):
    _edit_config(single, rope_scaling={"rope_type": "llama3", "factor": 8.0})
    config = single / "config.json"
    assert _problems(single) == [
        f"{config}: rope_scaling.low_freq_factor: missing (llama3 rotary scaling needs it)",
        f"{config}: rope_scaling.high_freq_factor: missing (llama3 rotary scaling needs it)",
    ]


def test_missing_and_unexpected_tensors_are_all_listed(single):
    file = single / "model.safetensors"
    tensors = load_file(str(file))
    del tensors["lm_head.weight"], tensors["model.layers.0.mlp.up_proj.weight"]
    tensors["model.layers.0.self_attn.q_proj.bias"] = np.zeros(16, np.float32)
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.zeros(4, np.float32)  # skipped
    save_file(tensors, str(file))
    assert _problems(single) == [
        f"{file}: model.layers.0.self_attn.q_proj.bias: unexpected tensor for a llama checkpoint",
        f"{file}: lm_head.weight: missing tensor",
        f"{file}: model.layers.0.mlp.up_proj.weight: missing tensor",
    ]


def test_an_index_and_its_shards_must_agree(sharded):
    index = sharded / "model.safetensors.index.json"
    raw = json.loads(index.read_text())
    name = next(n for n, f in raw["weight_map"].items() if f == SHARD1)
    raw["weight_map"][name] = SHARD2
    index.write_text(json.dumps(raw))
    assert _problems(sharded) == [
        f"{sharded / SHARD1}: {name}: in this shard but not listed for it in "
        "model.safetensors.index.json",
        f"{sharded / SHARD2}: {name}: listed in model.safetensors.index.json but not in this shard",
        f"{index}: {name}: missing tensor",
    ]


def test_a_corrupt_file_and_a_folder_without_weights(single, tmp_path):
    file = single / "model.safetensors"
    file.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00not json")
    (problem,) = _problems(single)
    assert problem.startswith(f"{file}: cannot read as safetensors: ")
    file.unlink()
    assert _problems(single) == [
        f"{single}: holds neither model.safetensors nor model.safetensors.index.json"
    ]
    assert _problems(tmp_path / "nowhere") == [
        f"{tmp_path / 'nowhere' / 'config.json'}: no such file"
    ]


def test_a_tied_head_must_equal_the_embedding(single):
    _edit_config(single, tie_word_embeddings=True)
    file = single / "model.safetensors"
    tensors = load_file(str(file))
    tensors["lm_head.weight"] = np.ascontiguousarray(tensors["model.embed_tokens.weight"] + 1)
    save_file(tensors, str(file))
    assert _problems(single) == [
        f"{file}: lm_head.weight: differs from model.embed_tokens.weight, but "
        "tie_word_embeddings is true"
    ]
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    save_file(tensors, str(file))
    assert load_decoder(str(single)).lm_head is None


def test_an_unreadable_tokenizer_is_a_checkpoint_error(single):
    (single / "tokenizer.json").write_text("{not json")
    with pytest.raises(CheckpointError) as info:
        read_tokenizer(str(single))
    assert str(info.value).startswith(f"{single / 'tokenizer.json'}: cannot read: ")
