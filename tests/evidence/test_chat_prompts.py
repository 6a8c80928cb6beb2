"""``evidence.emulate.chat_template: true`` on a tiny GGUF file: each line of the prompt file is
rendered through the file's chat template, encoded whole, and served whole (the prompts of a
batch right-padded to the longest); the longest and the new tokens are the only sequence
length the sweep may choose. Checked without running the model (the
shipped SmolLM2 contract runs one end to end: tests/evidence/test_smollm2_contract.py)."""

from __future__ import annotations

import pytest

from kernel_contracts.contracts import loads
from kernel_contracts.kernels.model.hf.tokenizer import encode
from kernel_contracts.kernels.model.user_model import UserModelError
from tests.kernels.gguf_files import tokens, write_tiny


def contract_text(prompts: str = "chat.txt", lengths: str = "") -> str:
    return (
        "contract: 1\nname: chat\nkernels:\n  train: {preset: fp32}\n"
        "  inference: {preset: fp32}\nnumerical:\n  - {id: N1, metric: logit_drift, max: 1.0}\n"
        + (f"runtime:\n  - {{id: R1, sequence_length: {lengths}}}\n" if lengths else "")
        + f'evidence:\n  emulate:\n    model: "gguf:tiny.gguf"\n    prompts: {prompts}\n'
        "    chat_template: true\n    max_new_tokens: 2\n"
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat")
    write_tiny(root / "tiny.gguf", seed=1)
    write_tiny(root / "plain.gguf", meta={"tokenizer.chat_template": None})
    (root / "chat.txt").write_text("the he\n\nhe 12\n")  # two messages, one blank line
    (root / "uneven.txt").write_text("the\nhe he he\n")
    return root


def _load(folder, text: str):
    path = folder / "c.yaml"
    path.write_text(text)
    return loads(text, str(path))


def test_chat_prompts_are_rendered_and_served_whole(folder):
    from kernel_contracts.evidence.emulate import length_range, sweep

    contract = _load(folder, contract_text(lengths="[1, 64]"))
    from kernel_contracts.kernels.model.gguf.load import read_gguf_tokenizer

    want = [
        f"<|im_start|>user\n{m}<|im_end|>\n" for m in ("the he", "he 12")
    ]  # the template's own text: it has no generation cue
    ids = encode(read_gguf_tokenizer(str(folder / "tiny.gguf")), want)
    vocab = {t: i for i, t in enumerate(tokens())}
    assert ids[0][0] == vocab["<|im_start|>"] and len(ids[0]) == len(ids[1])
    width = len(ids[0])
    # one length: the whole prompt and the two new tokens, whatever range R1 allows
    assert length_range(contract) == (width + 2, width + 2)
    assert sweep(contract) == [(None, width + 2)]


def test_chat_prompts_of_different_lengths_are_each_served_whole(folder):
    # 10 and 13 tokens: each right-padded to the longest and decoded from its own end, so the
    # one sequence length the sweep may choose is the longest prompt's and the new tokens
    from kernel_contracts.evidence.emulate import length_range, sweep

    contract = _load(folder, contract_text(prompts="uneven.txt", lengths="[1, 64]"))
    assert length_range(contract) == (15, 15)
    assert sweep(contract) == [(None, 15)]


def test_a_template_less_file_is_refused_at_the_chat_key(folder):
    from kernel_contracts.evidence.emulate import length_range

    text = contract_text(lengths="[1, 64]").replace("tiny.gguf", "plain.gguf")
    with pytest.raises(UserModelError) as info:
        length_range(_load(folder, text))
    assert info.value.key == "evidence.emulate.chat_template"
    assert "tokenizer.chat_template: the file has no chat template" in str(info.value)


def test_chat_prompts_longer_than_the_context_are_refused(folder):
    from kernel_contracts.evidence.emulate import length_range

    text = contract_text().replace("max_new_tokens: 2", "max_new_tokens: 60")
    with pytest.raises(UserModelError) as info:
        length_range(_load(folder, text))
    assert str(info.value) == (
        "evidence.emulate.chat_template: the chat prompts (12 tokens) and max_new_tokens (60) "
        "exceed the model's context of 64 tokens"
    )
