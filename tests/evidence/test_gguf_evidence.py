"""``evidence: emulate`` with a GGUF file: ``model: "gguf:PATH"``, ``prompts: FILE``, and
``verify measure --model gguf:PATH``.

A tiny Llama GGUF file (written by the ``gguf`` package's writer, with its byte-level BPE
tokenizer in the metadata) lies next to a contract; the emulation and the diagnostic commands
read the model, its digest and the prompt file's tokens from it, without ``--trust-code`` (a
GGUF file runs no code). A broken file exits 2 at the contract key (or the ``--model`` option),
naming the file and its metadata key or tensor, with no traceback. (A whole ``verify`` or
``measure`` run on the tiny file takes about two minutes here, nearly all compilation, and
depends on the model spec only through what is checked here; tests/evidence/test_hf_evidence.py
runs one end to end.)
"""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from kernel_contracts.contracts import ContractError, loads
from kernel_contracts.contracts.canonical import from_canonical
from tests.evidence.test_hf_evidence import contract_text as hf_contract_text
from tests.kernels.gguf_files import tokens, write_tiny
from tests.support.cli_runner import run_cli

PROMPTS = "the the he 12\n the 1 2 hehe\n\nhe he he he he he\n"


def contract_text(model: str = "gguf:tiny.gguf", prompts: str = "prompts.txt") -> str:
    return hf_contract_text(model, prompts)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    write_tiny(root / "tiny.gguf", seed=5)
    write_tiny(root / "notok.gguf", meta={"tokenizer.ggml.model": None})
    write_tiny(root / "arch.gguf", arch="qwen9")
    (root / "prompts.txt").write_text(PROMPTS)
    (root / "c.yaml").write_text(contract_text())
    return root


def test_gguf_model_and_prompt_file_resolve_against_the_contract(folder):
    contract = loads((folder / "c.yaml").read_text(), str(folder / "c.yaml"))
    ev = contract.evidence.emulate
    assert (ev.model, ev.prompts) == (f"gguf:{folder / 'tiny.gguf'}", str(folder / "prompts.txt"))
    # the canonical form records them relative to the contract's folder, and reads back
    rebuilt = from_canonical(contract.source.canonical)
    assert rebuilt.source.canonical == contract.source.canonical
    assert rebuilt.evidence.emulate == dataclasses.replace(
        ev, model="gguf:tiny.gguf", prompts="prompts.txt"
    )


def test_gguf_needs_a_path():
    with pytest.raises(ContractError) as info:
        loads(contract_text(model="gguf: "), "c.yaml")
    assert (
        str(info.value) == "c.yaml:10:5: evidence.emulate.model: gguf: needs a GGUF file, gguf:PATH"
    )


def test_the_emulation_reads_the_gguf_model_and_its_tokenizer(folder):
    """What the emulation takes from the model spec (the rest does not depend on where the
    decoder came from; the hf: end-to-end run covers it): the lengths its prompt file allows,
    the file's digest, and the decoder as the diagnostic commands run it."""
    import jax
    import jax.numpy as jnp

    from kernel_contracts.evidence.emulate import checkpoint_sha256, length_range, prompt_stream
    from kernel_contracts.verify.diagnostics.localize.model import choose_model

    contract = loads((folder / "c.yaml").read_text(), str(folder / "c.yaml"))
    ev = contract.evidence.emulate
    # three prompts (the blank line skipped) of 8, 8 and 11 tokens, each served whole: from one
    # prompt token to the longest and two new ones
    assert length_range(contract) == (3, 13)
    want = hashlib.sha256((folder / "tiny.gguf").read_bytes()).hexdigest()
    assert checkpoint_sha256(ev) == want
    stream = prompt_stream(ev.prompts, ev.model, 264)
    vocab = {t: i for i, t in enumerate(tokens())}
    first = ["t", "he", "Ġthe", "Ġ", "he", "Ġ", "1", "2", "Ċ"]  # digits split one by one
    assert stream[:9].tolist() == [vocab[t] for t in first]
    chosen = choose_model(contract, None, None, 16)
    assert (chosen.name, chosen.vocab, chosen.model_length) == (ev.model, 264, 64)
    shape = jax.ShapeDtypeStruct((2, 5), jnp.int32)
    assert jax.eval_shape(chosen.fn, chosen.params, shape).shape == (2, 5, 264)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("gguf:nowhere.gguf", "cannot load gguf:{folder}/nowhere.gguf: {folder}/nowhere.gguf: "
         "no such file"),
        ("gguf:arch.gguf", "cannot load gguf:{folder}/arch.gguf: {folder}/arch.gguf: "
         "general.architecture: unsupported architecture 'qwen9' (supported: llama)"),
        ("gguf:notok.gguf", "gguf:{folder}/notok.gguf: {folder}/notok.gguf: tokenizer.ggml.model: "
         "missing: the file holds no tokenizer"),
    ],
)  # fmt: skip
def test_an_unusable_gguf_file_exits_2_at_its_key(folder, model, message):
    path = folder / "bad.yaml"
    path.write_text(contract_text(model))
    code, out, err = run_cli(path, "--quiet")
    assert (code, out) == (2, "")
    assert err == f"{path}:10:5: evidence.emulate.model: {message.format(folder=folder)}\n"


def test_measure_refuses_an_unusable_gguf_file_with_exit_2(folder):
    code, out, err = run_cli("measure", "--model", f"gguf:{folder / 'arch.gguf'}")
    assert (code, out) == (2, "")
    assert "Traceback" not in err
    assert err.endswith(
        f"--model gguf:{folder / 'arch.gguf'}: {folder / 'arch.gguf'}: general.architecture: "
        "unsupported architecture 'qwen9' (supported: llama)\n"
    )
