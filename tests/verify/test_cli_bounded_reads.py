"""Hostile files a contract names, through the command line: a checkpoint whose ``config.json``
is ``/dev/zero``, a FIFO prompt file, a shard that leads out of its folder, a YAML alias bomb
or nesting past the limit. Each exits 2 with one line naming the file and the contract key,
never a traceback, and never blocks."""

from __future__ import annotations

import io
import json
import os
import shutil
import time
import zipfile

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from kernel_contracts.kernels.model.hf.checkpoint import save_decoder
from kernel_contracts.kernels.model.hf.config import parse_config
from kernel_contracts.kernels.model.hf.decoder import Decoder
from kernel_contracts.kernels.model.user_model import UserModelError, load_params
from tests.support.cli_runner import run_cli
from tests.support.guard import finishes

CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "vocab_size": 48,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 40,
    "tie_word_embeddings": True,
}
WORDS = ["[UNK]"] + [f"w{i}" for i in range(40)]
HEAD = (
    "contract: 1\nname: hostile\nkernels:\n  train: {preset: fp32}\n  inference: {preset: fp32}\n"
)


def _contract(model: str = "hf:ckpt", prompts: str = "prompts.txt") -> str:
    return (
        HEAD + "numerical:\n  - {id: N1, metric: logit_drift, max: 1.0e-4}\n"
        f'evidence:\n  emulate:\n    model: "{model}"\n    prompts: {prompts}\n'
        "    max_new_tokens: 2\n    seed: 1\n"
    )


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    save_decoder(Decoder(parse_config(CONFIG), seed=5), str(root / "ckpt"), shards=2)
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, "[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(root / "ckpt" / "tokenizer.json"))
    return root


@pytest.fixture
def folder(good, tmp_path):
    shutil.copytree(good / "ckpt", tmp_path / "ckpt")
    (tmp_path / "prompts.txt").write_text("w1 w2 w3\nw4 w5 w6\n")
    (tmp_path / "c.yaml").write_text(_contract())
    return tmp_path


def _exits_2(*argv, fifos=(), cwd=None) -> str:
    code, out, err = finishes(lambda: run_cli(*argv, cwd=cwd), *fifos)
    assert (code, out) == (2, ""), err
    assert "Traceback" not in err and "internal error" not in err, err
    assert len(err.splitlines()) == 1, err
    return err.rstrip("\n")


def test_a_config_linked_to_dev_zero_exits_2_at_the_model_key(folder):
    config = folder / "ckpt" / "config.json"
    config.unlink()
    config.symlink_to("/dev/zero")
    err = _exits_2(folder / "c.yaml", "--quiet")
    assert err == (
        f"{folder / 'c.yaml'}:10:5: evidence.emulate.model: cannot load hf:{folder / 'ckpt'}: "
        f"{config}: is a symbolic link to /dev/zero, outside the folder {folder / 'ckpt'}"
    )
    err = _exits_2("measure", "--model", "hf:ckpt", "--prompts", "prompts.txt", cwd=folder)
    assert err == (
        "verify measure: --model hf:ckpt: ckpt/config.json: is a symbolic link to /dev/zero, "
        "outside the folder ckpt"
    )


def test_a_fifo_prompt_file_exits_2_at_the_prompts_key(folder):
    fifo = folder / "prompts.txt"
    fifo.unlink()
    os.mkfifo(fifo)
    err = _exits_2(folder / "c.yaml", "--quiet", fifos=[fifo])
    assert err == (
        f"{folder / 'c.yaml'}:11:5: evidence.emulate.prompts: cannot read {fifo}: is a FIFO "
        "(named pipe), not a regular file"
    )
    err = _exits_2("measure", "--model", "hf:ckpt", "--prompts", "prompts.txt", cwd=folder)
    assert err == "verify measure: --prompts prompts.txt: is a FIFO (named pipe), not a prompt file"


def test_a_shard_outside_the_folder_exits_2_naming_the_index(folder):
    index = folder / "ckpt" / "model.safetensors.index.json"
    raw = json.loads(index.read_text())
    first = next(iter(raw["weight_map"]))
    shard = raw["weight_map"][first]
    os.rename(folder / "ckpt" / shard, folder / shard)
    raw["weight_map"] = {k: "../" + v if v == shard else v for k, v in raw["weight_map"].items()}
    index.write_text(json.dumps(raw))
    err = _exits_2(folder / "c.yaml", "--quiet")
    assert err.endswith(
        f"{index}: {first}: shard '../{shard}' leads out of the folder through '..'"
    )


def test_a_huge_tokenizer_exits_2(folder):
    tokenizer = folder / "ckpt" / "tokenizer.json"
    with open(tokenizer, "r+b") as f:
        f.truncate((256 << 20) + 1)
    err = _exits_2("measure", "--model", "hf:ckpt", "--prompts", "prompts.txt", cwd=folder)
    assert err == (
        f"verify measure: --model hf:ckpt: ckpt/tokenizer.json: the file holds "
        f"{(256 << 20) + 1} bytes, above the limit of 256 MiB"
    )


# ---------------------------------------------------------------- YAML: aliases and nesting


def _bomb(levels: int, width: int, *, mapping: bool) -> str:
    lines = [HEAD.rstrip("\n")]
    if mapping:
        lines.append("x0: &a0 {" + ", ".join(f"k{i}: lol" for i in range(width)) + "}")
        for n in range(1, levels):
            keys = ", ".join(f"k{i}: *a{n - 1}" for i in range(width))
            lines.append(f"x{n}: &a{n} {{{keys}}}")
    else:
        lines.append("x0: &a0 [" + ", ".join(["lol"] * width) + "]")
        for n in range(1, levels):
            lines.append(f"x{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("mapping", [False, True], ids=["lists", "mappings"])
def test_an_alias_bomb_exits_2_fast_without_expanding(tmp_path, mapping):
    # 10 levels of 10 aliases: 10^10 values once expanded; the cap stops at 20000
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(10, 10, mapping=mapping))
    for command in ([], ["synth"]):
        start = time.process_time()
        err = _exits_2(*command, path)
        assert time.process_time() - start < 5.0
        assert err.startswith(f"{path}:")
        assert err.endswith(
            "the document holds more than 20000 values once aliases are expanded; aliases may "
            "not multiply content"
        )


def test_nesting_past_the_limit_exits_2(tmp_path):
    flow = tmp_path / "flow.yaml"
    flow.write_text(HEAD + "description: " + "[" * 65 + "]" * 65 + "\n")
    assert _exits_2(flow, "--quiet") == f"{flow}:6:77: the document nests deeper than 64 levels"
    ok = tmp_path / "ok.yaml"  # 63 brackets under one key: 64 levels, within the limit
    ok.write_text(HEAD + "description: " + "[" * 63 + "]" * 63 + "\n")
    assert "nests deeper" not in run_cli(ok, "--quiet")[2]
    aliased = tmp_path / "aliased.yaml"  # each level shallow, deep once aliases are followed
    levels = ["a0: &a0 [1]"] + [f"a{n}: &a{n} [*a{n - 1}]" for n in range(1, 70)]
    aliased.write_text(HEAD + "\n".join(levels) + "\n")
    err = _exits_2(aliased, "--quiet")
    assert err.startswith(f"{aliased}:") and err.endswith(
        "the document nests deeper than 64 levels (through aliases)"
    )


# ---------------------------------------------------------------- a user model's params file


def test_a_params_file_that_is_a_fifo_or_lies_about_its_arrays_is_refused(tmp_path):
    fifo = tmp_path / "params.npz"
    os.mkfifo(fifo)
    err = finishes(lambda: load_params(str(fifo)), fifo)
    assert isinstance(err, UserModelError)
    assert str(err) == (
        f"evidence.emulate.params: cannot read {fifo}: is a FIFO (named pipe), not a regular file"
    )
    fifo.unlink()
    np.savez(fifo, w=np.zeros(4, np.float32))
    assert load_params(str(fifo))[0]["w"].shape == (4,)
    # an archive whose array header claims 2^40 float32 values while its data holds 16 bytes
    member = io.BytesIO()
    np.save(member, np.zeros(4, np.float32))
    old, new = b"(4,), }", b"(1099511627776,), }"
    pad = old + b" " * (len(new) - len(old))  # the header's padding makes room
    assert member.getvalue().count(pad) == 1
    lying = tmp_path / "lying.npz"
    with zipfile.ZipFile(lying, "w") as archive:
        archive.writestr("w.npy", member.getvalue().replace(pad, new))
    err = finishes(lambda: load_params(str(lying)))
    assert isinstance(err, UserModelError)
    assert str(err).startswith(f"evidence.emulate.params: cannot read {lying} ")
    assert "declares 4398046511104 bytes of float32 [1099511627776]" in str(err)
