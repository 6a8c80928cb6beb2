"""The token table of a contract's kernel pair on the shipped policy: ``emulate_contract``
(``evidence.emulate``: the contract read into plain values) and ``kernels.emulation.emulate``
on those values."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.contracts.model import RuntimeClause
from kernel_contracts.evidence.emulate import PROMPT_BYTES, emulate_contract
from kernel_contracts.kernels.emulation import (
    TABLE_COLUMNS,
    Decoding,
    decoder_pair,
    emulate,
    prompts_from,
)
from kernel_contracts.kernels.model.tinylm import load_pretrained, pretrained_extra
from kernel_contracts.kernels.ops import plain_ops
from tests.kernels.test_measure_bounds import (  # same shapes: compiled once
    TEMPERATURE,
    contract_for,
)

NEW = 8


@pytest.fixture(scope="module")
def three_prompts():
    """Three prompts served in batches of two (the runtime clause caps the batch)."""
    contract = dataclasses.replace(
        contract_for("h100-fp8", prompts=3, new_tokens=NEW),
        runtime=(RuntimeClause(id="R1", batch_size=(1, 2)),),
    )
    calls = []
    table = emulate_contract(contract, progress=lambda done, total: calls.append((done, total)))
    return contract, table, calls


def test_token_table_layout(three_prompts):
    _, table, calls = three_prompts
    assert tuple(table) == TABLE_COLUMNS
    rows = 3 * NEW
    for key, column in table.items():
        assert column.shape == (rows,), key
    for key in ("position", "prompt", "token", "top1_flip"):
        assert table[key].dtype == np.int64, key
    np.testing.assert_array_equal(table["prompt"], np.repeat([0, 1, 2], NEW))
    np.testing.assert_array_equal(
        table["position"], np.tile(np.arange(PROMPT_BYTES, PROMPT_BYTES + NEW), 3)
    )
    assert set(np.unique(table["top1_flip"])) <= {0, 1}
    assert np.all((table["token"] >= 0) & (table["token"] < 256))
    assert np.all((table["token_prob"] > 0) & (table["token_prob"] <= 1))
    assert calls == [(2, 3), (3, 3)]


def test_table_is_aligned_with_a_teacher_forced_pass(three_prompts):
    """token_prob and entropy are π_train at the right positions of the right tokens."""
    contract, table, _ = three_prompts
    ev = contract.evidence.emulate
    windows = pretrained_extra("tiny-lm")["heldout_windows"].astype(np.int32)
    prompts = prompts_from(windows, ev.prompts, PROMPT_BYTES, ev.seed)
    tokens = table["token"].reshape(3, NEW)
    seqs = np.concatenate([prompts, tokens], axis=1)
    model = load_pretrained("tiny-lm", plain_ops())
    logits = np.asarray(model(jnp.asarray(seqs[:, :-1])))[:, PROMPT_BYTES - 1 :] / TEMPERATURE
    top = logits.max(-1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    prob = np.take_along_axis(np.exp(logp), tokens[..., None], -1)[..., 0]
    np.testing.assert_allclose(table["token_prob"], prob.reshape(-1), rtol=1e-3, atol=1e-7)
    entropy = -(np.exp(logp) * logp).sum(-1)
    np.testing.assert_allclose(table["entropy"], entropy.reshape(-1), rtol=1e-3, atol=1e-6)


def test_the_kernels_take_plain_values(three_prompts):
    """The contract's table is ``kernels.emulation.emulate`` on plain values: the model on the
    two presets at the serving batch, held-out prompts, and the fill of the short last batch
    (seeded by its start), one call for each batch or both batches in one call."""
    contract, table, _ = three_prompts
    ev, policy = contract.evidence.emulate, contract.policy
    pair_args = (load_pretrained("tiny-lm"), contract.kernels.train, contract.kernels.inference)
    decoding = Decoding(NEW, policy.temperature, policy.top_k, policy.top_p)
    pair = decoder_pair(*pair_args, batch=2, decoding=decoding)
    windows = pretrained_extra("tiny-lm")["heldout_windows"].astype(np.int32)
    prompts = prompts_from(windows, 3, PROMPT_BYTES, ev.seed)
    fill = prompts_from(windows, 1, PROMPT_BYTES, ev.seed + 1 + 2)
    again = emulate(pair, prompts, seed=ev.seed, fill=fill)
    for key in TABLE_COLUMNS:
        np.testing.assert_array_equal(again[key], table[key], err_msg=key)
    with pytest.raises(ValueError, match="need 1 fill rows, got 2"):
        emulate(pair, prompts, seed=ev.seed, fill=np.concatenate([fill, fill]))
    # the contract's two batches ran in one call (each with its own key): the bits of one
    # call a batch, checked above; the same pair built to serve them so gives them too
    grouped = decoder_pair(*pair_args, batch=2, decoding=decoding, groups=2)
    assert grouped.groups == 2
    again = emulate(grouped, prompts, seed=ev.seed, fill=fill)
    for key in TABLE_COLUMNS:
        np.testing.assert_array_equal(again[key], table[key], err_msg=key)


def test_a_matmul_scaled_per_tensor_serves_one_batch_a_call(monkeypatch):
    """One scale over all the rows of a matmul (``per_tensor``, the fast-accumulation preset)
    ties a batch's rows together: its batches are never put together in one call."""
    from kernel_contracts.evidence import emulate as evidence_emulate

    served = []

    def spy(*args, **kwargs):
        served.append(kwargs["groups"])
        raise RuntimeError("stop")

    monkeypatch.setattr(evidence_emulate, "decoder_pair", spy)
    for name, groups in (("h100-fp8", 3), ("h100-fp8-fast-accum", 1)):
        contract = dataclasses.replace(
            contract_for(name, prompts=3, new_tokens=NEW),
            runtime=(RuntimeClause(id="R1", batch_size=(1, 1)),),
        )
        with pytest.raises(RuntimeError, match="stop"):
            emulate_contract(contract)
        assert served.pop() == groups, name


@pytest.mark.slow
def test_seeded_and_deterministic(three_prompts):
    contract, table, _ = three_prompts
    again = emulate_contract(contract)
    for key in TABLE_COLUMNS:
        np.testing.assert_array_equal(again[key], table[key], err_msg=key)
    other = emulate_contract(
        dataclasses.replace(
            contract,
            evidence=dataclasses.replace(
                contract.evidence,
                emulate=dataclasses.replace(contract.evidence.emulate, seed=1),
            ),
        )
    )
    assert not np.array_equal(other["token"], table["token"])


def test_too_long_a_continuation_is_a_clear_error():
    with pytest.raises(ValueError, match=r"max_new_tokens must be in \[1, 127\]"):
        emulate_contract(contract_for("fp32", new_tokens=128))
    with pytest.raises(ValueError, match="prompts must be at least 1"):
        emulate_contract(contract_for("fp32", prompts=0))
