"""``generate`` and ``teacher_force_padded`` with a prompt length per row: the prompts of a batch
right-padded to the longest, each row decoded from its own end. Each row gets the bits it gets
in a batch of copies of itself at one (traced) prompt length, in the same padded shape; a row's
padding columns never reach its kept tokens or logits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from kernel_contracts.kernels.model.decode import generate, teacher_force_padded
from kernel_contracts.kernels.model.tinylm import ModelConfig, TinyLM
from tests.support.bits import same_bits

SMALL = ModelConfig(d_model=32, layers=2, heads=2, d_ff=64, context=24)
NEW = 4
LENGTHS = [3, 6, 4]


@pytest.fixture(scope="module")
def runs():
    model = TinyLM(SMALL, seed=1)
    rng = np.random.default_rng(0)
    prompts = rng.integers(1, 256, (3, max(LENGTHS))).astype(np.int32)
    for row, n in enumerate(LENGTHS):
        prompts[row, n:] = 0  # right-padding
    key, t = jax.random.key(3), jnp.float32(1.0)

    def run(rows, prompt_len):
        tokens, z_inf = generate(model, jnp.asarray(rows), key, t, prompt_len, new_tokens=NEW)
        return tokens, z_inf, teacher_force_padded(model, tokens, prompt_len, new_tokens=NEW)

    padded = run(prompts, jnp.asarray(LENGTHS, jnp.int32))
    alone = [run(np.repeat(prompts[r : r + 1], 3, 0), jnp.int32(n)) for r, n in enumerate(LENGTHS)]
    return prompts, padded, alone


@pytest.mark.parametrize("row", range(len(LENGTHS)))
def test_each_row_gets_the_bits_of_its_own_length(runs, row):
    prompts, (tokens, z_inf, z_train), alone = runs
    n = LENGTHS[row]
    a_tokens, a_inf, a_train = alone[row]
    kept = slice(0, n + NEW)  # the prompt and its new tokens; later columns are never read
    assert np.array_equal(np.asarray(tokens[row, kept]), np.asarray(a_tokens[row, kept]))
    assert np.array_equal(np.asarray(tokens[row, :n]), prompts[row, :n])
    assert same_bits(z_inf[row], a_inf[row]) and same_bits(z_train[row], a_train[row])


def test_rows_read_at_their_own_positions_agree_across_kernels(runs):
    # one model on both sides (float32): decoding and teacher forcing agree at each row's own
    # positions, where a row read at another's positions would not
    _, (_, z_inf, z_train), _ = runs
    np.testing.assert_allclose(np.asarray(z_inf), np.asarray(z_train), atol=2e-5, rtol=1e-5)


class _StepOnly(nnx.Module):
    """A model with ``step`` alone: ``generate`` then computes the head and the draw at every
    step, as a model of any other shape has them."""

    def __init__(self, model):
        self.model = model

    def init_cache(self, num_seqs, max_len):
        return self.model.init_cache(num_seqs, max_len)

    def step(self, tokens, position, caches):
        return self.model.step(tokens, position, caches)


@pytest.mark.parametrize("prompt_len", ["none", "one", "per row"])
def test_skipping_the_head_at_prompt_steps_changes_no_kept_bit(prompt_len):
    """``hidden_step``, ``head_weight`` and ``head_logits`` let ``generate`` skip the head and
    the draw where every row is still fed its prompt: the tokens and every logit it returns are
    those of a model that computes them at every step."""
    model = TinyLM(SMALL, seed=2)
    rng = np.random.default_rng(1)
    prompts = jnp.asarray(rng.integers(1, 256, (3, max(LENGTHS))).astype(np.int32))
    lengths = {
        "none": None, "one": jnp.int32(5), "per row": jnp.asarray(LENGTHS, jnp.int32)
    }[prompt_len]  # fmt: skip
    key, t = jax.random.key(4), jnp.float32(0.8)
    split = generate(model, prompts, key, t, lengths, new_tokens=NEW)
    whole = generate(_StepOnly(model), prompts, key, t, lengths, new_tokens=NEW)
    assert hasattr(model, "hidden_step") and not hasattr(_StepOnly(model), "hidden_step")
    assert np.array_equal(np.asarray(split[0]), np.asarray(whole[0]))
    assert same_bits(split[1], whole[1])


def test_a_padded_program_traces_the_model_once(monkeypatch):
    """The padded loop's step is the body's jaxpr, traced once for the logits' shape too: the
    model's Python (every layer and its emulated matmuls) runs once per trace, not twice."""
    calls = []
    hidden_step = TinyLM.hidden_step

    def counted(self, *args):
        calls.append(1)
        return hidden_step(self, *args)

    monkeypatch.setattr(TinyLM, "hidden_step", counted)
    model = TinyLM(SMALL, seed=1)
    prompts = jnp.zeros((2, 5), jnp.int32)
    key, t = jax.random.key(0), jnp.float32(1.0)
    # traced only (nothing compiles)
    nnx.eval_shape(lambda m, n: generate(m, prompts, key, t, n, new_tokens=NEW), model, 3)
    assert len(calls) == 1
    nnx.eval_shape(lambda m: generate(m, prompts, key, t, new_tokens=NEW), model)
    assert len(calls) == 2  # the scan of an unpadded program, once as well
