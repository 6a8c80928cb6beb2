"""``kernels.emulation.emulate`` with prompts of their own lengths (``lengths``): the table's
bookkeeping, on a stand-in pair whose ``run`` writes known tokens and logits, so no model is
compiled. Each row's new tokens, positions and logits are read from its own prompt end; a short
last batch's fill rows are dropped; prompts of one length call ``run`` as without lengths."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_contracts.kernels.emulation import Decoding, ServedPair, emulate

NEW, VOCAB = 2, 8


def stand_in(calls: list) -> ServedPair:
    """A pair of batch 2 whose K_inf 'samples' token ``position % VOCAB`` after each row's prompt
    and whose logits single out that token (both kernels the same, so the drift is 0)."""
    import jax.numpy as jnp

    def run(chunk, key, lengths=None):
        calls.append(None if lengths is None else np.asarray(lengths).tolist())
        rows, width = chunk.shape
        ends = np.full(rows, width) if lengths is None else np.asarray(lengths)
        tokens = np.concatenate([np.asarray(chunk), np.zeros((rows, NEW), np.int32)], axis=1)
        z = np.zeros((rows, NEW, VOCAB), np.float32)
        for r, end in enumerate(ends):
            for k in range(NEW):
                tokens[r, end + k] = (end + k) % VOCAB
                z[r, k, (end + k) % VOCAB] = 1.0
        return jnp.asarray(tokens), jnp.asarray(z), jnp.asarray(z)

    return ServedPair(2, Decoding(NEW, 1.0), run)


def test_each_prompt_is_read_from_its_own_end():
    calls: list = []
    prompts = np.array([[1, 1, 0, 0], [2, 2, 2, 0], [3, 3, 3, 3]], np.int32)
    table = emulate(
        stand_in(calls), prompts, seed=0, lengths=np.array([2, 3, 4]),
        fill=np.array([[1, 1, 0, 0]], np.int32), fill_lengths=np.array([2]),
    )  # fmt: skip
    assert calls == [[2, 3], [4, 2]]  # the last batch's second row a fill row
    assert table["prompt"].tolist() == [0, 0, 1, 1, 2, 2]
    assert table["position"].tolist() == [2, 3, 3, 4, 4, 5]
    assert table["token"].tolist() == [2, 3, 3, 4, 4, 5]
    assert np.all(table["logit_drift"] == 0) and np.all(table["top1_flip"] == 0)


def test_prompts_of_one_length_run_without_lengths():
    calls: list = []
    prompts = np.array([[1, 1, 1], [2, 2, 2]], np.int32)
    table = emulate(stand_in(calls), prompts, seed=0, lengths=np.array([3, 3]))
    assert calls == [None]
    assert table["position"].tolist() == [3, 4, 3, 4]


@pytest.mark.parametrize("lengths", [[0, 3], [3, 4]])
def test_lengths_outside_the_rows_are_refused(lengths):
    prompts = np.array([[1, 1, 1], [2, 2, 2]], np.int32)
    with pytest.raises(ValueError, match=r"prompt lengths must be 2 counts in \[1, 3\]"):
        emulate(stand_in([]), prompts, seed=0, lengths=np.array(lengths))


def test_a_pair_that_serves_one_length_refuses_lengths():
    pair = stand_in([])._replace(per_row=False)
    prompts = np.array([[1, 1, 0], [2, 2, 2]], np.int32)
    with pytest.raises(ValueError, match="serves a batch of prompts of one length"):
        emulate(pair, prompts, seed=0, lengths=np.array([2, 3]))
