"""A contract's prompt file with prompts of different lengths: every prompt served whole.

A batch holds the prompts right-padded to its longest, each row with its own prompt length:
a row's tokens are its prompt's until its length, sampled after it, and its logits are taken
at its own positions (``kernels.model.decode.generate``'s ``prompt_len`` per row). Prompts of
one length keep the bits they had when every prompt was cut to the shortest: the digests
below were recorded from that code. The tiny Qwen3 checkpoint of test_hf_evidence.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernel_contracts.contracts import loads
from tests.evidence.test_hf_evidence import write_checkpoint
from tests.support.bits import digest, same_bits
from tests.support.cli_runner import run_cli

EQUAL = "w1 w2 w3 w4 w5\nw7 w8 w9 w10 w11\nw3 w3 w3 w3 w3\n"  # three prompts of five tokens
UNEVEN = "w1 w2 w3 w4 w5\nw7 w8 w9 w10 w11 w12\n\nw3 w3 w3 w3 w3 w3 w3\n"  # 5, 6 and 7


def contract_text(prompts: str, inference: str = "fp32", runtime: str = "") -> str:
    return (
        "contract: 1\nname: padded\nkernels:\n  train: {preset: fp32}\n"
        f"  inference: {{preset: {inference}}}\n"
        "numerical:\n  - {id: N1, metric: logit_drift, max: 1.0e-4}\n"
        + (f"runtime:\n  - {{id: R1, {runtime}}}\n" if runtime else "")
        + f'evidence:\n  emulate:\n    model: "hf:ckpt"\n    prompts: {prompts}\n'
        "    max_new_tokens: 2\n    seed: 1\n"
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("padded")
    write_checkpoint(root)
    for name, text in (("equal.txt", EQUAL), ("uneven.txt", UNEVEN)):
        (root / name).write_text(text)
    (root / "alone0.txt").write_text("w1 w2 w3 w4 w5\n" * 3)  # the 5-token prompt alone
    return root


def _contract(folder, *args):
    path = folder / "c.yaml"
    path.write_text(contract_text(*args))
    return loads(path.read_text(), str(path))


# (prompt file, inference preset, runtime clause, setting) -> digest of the token table,
# recorded from the emulation that cut every prompt to the shortest one
BATCH2 = "batch_size: [1, 2]"
CASES = {
    ("equal.txt", "fp32", BATCH2, None): "472886956db2b6cd",
    # the prompts of 5, 6 and 7 tokens at a sequence length of 7: each cut to 5, as the setting
    # asks, the same prompts as equal.txt
    ("uneven.txt", "fp32", f"{BATCH2}, sequence_length: [1, 7]", (None, 7)): "472886956db2b6cd",
}


@pytest.mark.slow  # one compile of the tiny checkpoint's kernel pair: about 20 s of CPU
@pytest.mark.parametrize("case", list(CASES), ids=lambda c: "-".join(map(str, c)))
def test_prompts_of_one_length_keep_their_bits(folder, case):
    from kernel_contracts.evidence.emulate import emulate_contract

    prompts, inference, runtime, setting = case
    contract = _contract(folder, prompts, inference, runtime)
    batch, length = setting or (None, None)
    table = emulate_contract(contract, batch_size=batch, sequence_length=length)
    assert digest(table) == CASES[case]


@pytest.fixture(scope="module")
def uneven(folder):
    """The token table of the prompts of 5, 6 and 7 tokens in batches of two: prompts 0 and 1,
    then prompt 2 with prompt 0 again as a dropped fill row."""
    from kernel_contracts.evidence.emulate import emulate_contract

    return emulate_contract(_contract(folder, "uneven.txt", "fp32", BATCH2))


@pytest.mark.slow  # the module's padded run: one compile of the kernel pair, about 20 s of CPU
def test_prompts_of_different_lengths_are_served_whole(uneven):
    # each prompt's two new tokens follow its own last token (cut to the shortest, every
    # prompt's would have followed position 4)
    assert uneven["prompt"].tolist() == [0, 0, 1, 1, 2, 2]
    assert uneven["position"].tolist() == [5, 6, 6, 7, 7, 8]
    # float32 on both sides: K_inf's logits at each row's own positions agree with K_train's
    # teacher-forced ones (a row read at another row's positions would drift by far more)
    assert float(np.max(uneven["logit_drift"])) < 1.0e-4


@pytest.mark.slow  # the padded run and one at one length: two compiles
def test_a_padded_prompt_gets_the_bits_it_gets_among_prompts_of_its_length(folder, uneven):
    # the 5-token prompt, padded to 7 beside the 6-token one, against the same prompt served in
    # batches of copies of itself (one length, no padding): every column the same, bit for bit
    from kernel_contracts.evidence.emulate import emulate_contract

    alone = emulate_contract(_contract(folder, "alone0.txt", "fp32", BATCH2))
    mine, theirs = uneven["prompt"] == 0, alone["prompt"] == 0
    for name in sorted(uneven):
        assert same_bits(uneven[name][mine], alone[name][theirs]), name


def test_the_lengths_reach_the_longest_prompt(folder):
    from kernel_contracts.evidence.emulate import length_range

    # from one prompt token to the longest prompt's 7 and the two new ones
    assert length_range(_contract(folder, "uneven.txt")) == (3, 9)


def test_a_prompt_the_context_cannot_hold_is_refused_not_cut(folder):
    from kernel_contracts.evidence.emulate import length_range
    from kernel_contracts.kernels.model.user_model import UserModelError

    (folder / "long.txt").write_text("w1 w2\n\n" + " ".join(["w3"] * 63) + "\n")
    with pytest.raises(UserModelError) as info:
        length_range(_contract(folder, "long.txt"))
    assert info.value.key == "evidence.emulate.prompts"
    assert str(info.value) == (
        f"evidence.emulate.prompts: {folder / 'long.txt'}:3: the prompt encodes to 63 tokens, "
        "more than the 62 that the model's context holds beside max_new_tokens (2); a prompt "
        "is served whole, never cut: shorten it"
    )


def test_the_command_line_exits_2_at_the_prompts_key(folder):
    (folder / "long1.txt").write_text(" ".join(["w3"] * 63) + "\n")
    path = folder / "long.yaml"
    path.write_text(contract_text("long1.txt"))
    code, out, err = run_cli(path, "--quiet")
    assert (code, out) == (2, "")
    assert err == (
        f"{path}:11:5: evidence.emulate.prompts: {folder / 'long1.txt'}:1: the prompt encodes "
        "to 63 tokens, more than the 62 that the model's context holds beside max_new_tokens "
        "(2); a prompt is served whole, never cut: shorten it\n"
    )
