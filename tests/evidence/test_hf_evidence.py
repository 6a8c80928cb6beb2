"""``evidence: emulate`` with a Hugging Face checkpoint: ``model: "hf:PATH"``, ``prompts: FILE``.

A tiny Qwen3 checkpoint (bfloat16 safetensors, hub names) with a word-level ``tokenizer.json``
is written next to a contract; ``python -m verify`` runs it end to end without ``--trust-code``
(a checkpoint runs no code), encodes the prompt file with the tokenizer and serves its prompts
in order. A broken checkpoint or prompt file exits 2 at the contract key, naming the file and
tensor.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from kernel_contracts.contracts import ContractError, loads
from kernel_contracts.contracts.canonical import from_canonical
from kernel_contracts.kernels.model.hf.checkpoint import folder_sha256, save_decoder
from kernel_contracts.kernels.model.hf.config import parse_config
from kernel_contracts.kernels.model.hf.decoder import Decoder
from tests.support.cli_runner import run_cli

CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 64,
}
WORDS = ["[UNK]"] + [f"w{i}" for i in range(40)]
PROMPTS = "w1 w2 w3 w4 w5\nw7 w8 w9 w10 w11 w12\n\nw3 w3 w3 w3 w3 w3 w3\n"


def contract_text(model: str = "hf:ckpt", prompts: str = "prompts.txt") -> str:
    return (
        "contract: 1\nname: hf-model\nkernels:\n  train: {preset: fp32}\n"
        "  inference: {preset: fp32}\nnumerical:\n  - {id: N1, metric: logit_drift, max: 1.0e-4}\n"
        f'evidence:\n  emulate:\n    model: "{model}"\n    prompts: {prompts}\n'
        "    max_new_tokens: 2\n    seed: 1\n"
    )


def write_checkpoint(root) -> None:
    """The tiny Qwen3 checkpoint with its word-level tokenizer, as the folder ``root/ckpt``."""
    save_decoder(Decoder(parse_config(CONFIG), seed=3), str(root / "ckpt"), dtype="BF16")
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, "[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(root / "ckpt" / "tokenizer.json"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    write_checkpoint(root)
    (root / "prompts.txt").write_text(PROMPTS)
    (root / "c.yaml").write_text(contract_text())
    return root


def test_hf_model_and_prompt_file_resolve_against_the_contract(folder):
    contract = loads((folder / "c.yaml").read_text(), str(folder / "c.yaml"))
    ev = contract.evidence.emulate
    assert (ev.model, ev.prompts) == (f"hf:{folder / 'ckpt'}", str(folder / "prompts.txt"))
    # the canonical form records them relative to the contract's folder, and reads back
    rebuilt = from_canonical(contract.source.canonical)
    assert rebuilt.source.canonical == contract.source.canonical
    assert rebuilt.evidence.emulate == dataclasses.replace(
        ev, model="hf:ckpt", prompts="prompts.txt"
    )


def test_a_prompt_file_needs_an_hf_model():
    with pytest.raises(ContractError) as info:
        loads(contract_text(model="tiny-lm"), "c.yaml")
    assert str(info.value) == (
        "c.yaml:11:5: evidence.emulate.prompts: a prompt file needs an hf: or gguf: model (its "
        "tokenizer reads it)"
    )


def test_hf_contract_runs_end_to_end_without_consent(folder):
    # float32 on both sides: K_inf decoding token by token through the paged cache agrees with
    # K_train's teacher-forced pass to 1e-4 on every logit (decoding without the rotation of
    # each step's position drifts by 0.08), so the drift clause holds and the run exits 0
    report = folder / "report.json"
    code, _, err = run_cli(folder / "c.yaml", "--json", report)
    assert code == 0, err
    doc = json.loads(report.read_text())
    assert [c["status"] for c in doc["clauses"]] == ["held"]
    source = doc["evidence"]["sources"][0]
    # the model's paths relative to the contract's folder, the checkpoint known by its digest:
    # the report says nothing of where the folder lies
    assert source["label"] == "emulate:hf:ckpt/fp32"
    assert (source["model"], source["prompts"]) == ("hf:ckpt", "prompts.txt")
    assert '"model":"hf:ckpt"' in doc["contract"]["canonical"]
    assert doc["contract"].pop("path") == str(folder / "c.yaml")  # as the command line gave it
    assert str(folder) not in json.dumps(doc)
    # three prompts (the blank line skipped) of 5, 6 and 7 tokens, each served whole; two new
    # each: the longest sequence 9 tokens, and the report re-checks the lengths it records
    assert source["tokens"] == 6 and source["sequence_length"] == 9
    assert source["checkpoint_sha256"] == folder_sha256(str(folder / "ckpt"))
    for where in (folder, folder.parent):  # re-checked beside the contract and elsewhere
        code, out, err = run_cli("check", report, cwd=where)
        assert code == 0, out + err


@pytest.mark.parametrize(
    ("model", "prompts", "key", "message"),
    [
        ("hf:nowhere", "prompts.txt", "model", "cannot load hf:{folder}/nowhere: "
         "{folder}/nowhere/config.json: no such file"),
        ("hf:ckpt", "missing.txt", "prompts", "no such file: {folder}/missing.txt"),
    ],
)  # fmt: skip
def test_an_unusable_checkpoint_or_prompt_file_exits_2_at_its_key(
    folder, model, prompts, key, message
):
    path = folder / "bad.yaml"
    path.write_text(contract_text(model, prompts))
    code, out, err = run_cli(path, "--quiet")
    line = 10 if key == "model" else 11
    assert (code, out) == (2, "")
    assert err == f"{path}:{line}:5: evidence.emulate.{key}: {message.format(folder=folder)}\n"


def test_localize_and_conformance_take_the_contracts_hf_model(folder):
    # the diagnostic commands run the contract's checkpoint as a function of (params, tokens)
    import jax
    import jax.numpy as jnp

    from kernel_contracts.verify.diagnostics.localize.model import choose_model

    contract = loads((folder / "c.yaml").read_text(), str(folder / "c.yaml"))
    chosen = choose_model(contract, None, None, 16)
    assert (chosen.name, chosen.vocab, chosen.model_length) == (f"hf:{folder / 'ckpt'}", 64, 64)
    tokens = jax.ShapeDtypeStruct((2, 5), jnp.int32)
    assert jax.eval_shape(chosen.fn, chosen.params, tokens).shape == (2, 5, 64)
    code, out, err = run_cli("localize", folder / "c.yaml", "--model", "hf:nowhere")
    assert (code, out) == (2, "")
    assert err == "--model: cannot load hf:nowhere: nowhere/config.json: no such file\n"


def test_diagnostics_cut_their_token_windows_from_the_contracts_prompt_file(folder):
    # real text, not uniform ids: the prompt file encoded whole by the checkpoint's tokenizer
    from kernel_contracts.verify.diagnostics.localize.model import choose_model, token_rows

    contract = loads((folder / "c.yaml").read_text(), str(folder / "c.yaml"))
    chosen = choose_model(contract, None, None, 16)
    stream = [WORDS.index(w) for w in PROMPTS.split()]  # the blank line holds no token
    assert chosen.windows.tolist() == [stream]
    assert (chosen.model_length, chosen.width) == (64, len(stream)) == (64, 18)
    assert chosen.tokens == f"the prompt file {folder / 'prompts.txt'}"
    rows = token_rows(chosen, 5, 16, np.random.default_rng(0)).tolist()
    for row in rows:  # each a run of the stream, at its own offset
        assert any(stream[s : s + 16] == row for s in range(len(stream) - 15)), row
    assert len({tuple(r) for r in rows}) > 1
    report = folder / "localize.json"
    argv = ("--length", 12, "--sequences", 2, "--replay", 0)
    code, out, err = run_cli("localize", folder / "c.yaml", *argv, "--json", report)
    assert code == 0, err
    assert f"2 sequences x 12 tokens (the prompt file {folder / 'prompts.txt'})" in out
    assert json.loads(report.read_text())["tokens"] == chosen.tokens
    # longer than the file's tokens: one message, exit 2, before any model runs
    for command in ("localize", "conformance"):
        code, out, err = run_cli(command, folder / "c.yaml", "--length", 19)
        assert (code, out) == (2, "")
        assert err == (
            f"--length 19: the token windows (the prompt file {folder / 'prompts.txt'}) are 18 "
            "tokens long; give --length 18 or less\n"
        )


@pytest.mark.parametrize("command", ["localize", "conformance"])
def test_the_diagnostics_report_an_unreadable_prompt_file_at_its_key(folder, command):
    path = folder / f"bad-{command}.yaml"
    path.write_text(contract_text("hf:ckpt", "missing.txt"))
    code, out, err = run_cli(command, path)
    assert (code, out) == (2, "")
    assert err == f"{path}:11:5: evidence.emulate.prompts: no such file: {folder}/missing.txt\n"
    assert not list(folder.glob("*.json.part"))
