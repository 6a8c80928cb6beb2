"""The policy model: injected kernels, the train/inference switch, incremental decoding that
agrees with the whole-sequence pass, sampling, jitted functions that never retrace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.contracts import preset
from kernel_contracts.kernels.model.decode import TRACES, generate, sample, teacher_force
from kernel_contracts.kernels.model.tinylm import ModelConfig, TinyLM, with_ops
from kernel_contracts.kernels.ops import (
    Ops,
    PlainAttention,
    PlainMatmul,
    inference_ops,
    plain_ops,
    train_ops,
)

ROOT = Path(__file__).resolve().parents[2]
SMALL = ModelConfig(d_model=32, layers=2, heads=2, d_ff=64, context=24)


@pytest.fixture(scope="module")
def model():
    return TinyLM(SMALL, seed=1)


def test_importing_kernels_and_emulate_does_not_import_jax():
    code = (
        "import sys; from kernel_contracts import kernels; assert 'jax' not in sys.modules;"
        "from kernel_contracts.kernels.emulation import emulate, TABLE_COLUMNS;"
        "assert 'jax' not in sys.modules, 'jax imported by kernels.emulation'; print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-1500:]


def test_lazy_exports_resolve():
    from kernel_contracts import kernels

    assert kernels.with_ops is with_ops
    assert kernels.Ops is Ops
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = kernels.nope


def test_ops_records_compare_by_value():
    spec = preset("h100-fp8")
    assert inference_ops(spec, 8) == inference_ops(spec, 8)
    assert hash(inference_ops(spec, 8)) == hash(inference_ops(spec, 8))
    assert inference_ops(spec, 8) != inference_ops(spec, 4)
    assert train_ops(preset("fp32")) != inference_ops(preset("fp32"), 1)
    assert plain_ops() == plain_ops()
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        inference_ops(spec, 0)


def test_with_ops_returns_a_new_model_sharing_weights(model):
    other = Ops("custom", PlainMatmul(), PlainAttention(), plain_ops().cache)
    switched = with_ops(model, other)
    assert switched is not model
    assert switched.ops == other and model.ops == plain_ops()  # the original is untouched
    assert switched.embed[...] is model.embed[...]  # same array, not a copy
    tokens = jnp.arange(10, dtype=jnp.int32)[None]
    np.testing.assert_array_equal(np.asarray(switched(tokens)), np.asarray(model(tokens)))


def test_every_matmul_goes_through_the_injected_ops(model):
    calls = []

    class Counting(PlainMatmul):
        def __call__(self, x, w):
            calls.append(tuple(w.shape))
            return super().__call__(x, w)

    m = with_ops(model, Ops("count", Counting(), PlainAttention(), plain_ops().cache))
    m(jnp.zeros((1, 5), jnp.int32))
    d, f = SMALL.d_model, SMALL.d_ff
    per_layer = [(d, 3 * d), (d, d), (d, f), (f, d)]
    # the blocks run as one lax.scan, so the (shared) block body is traced once
    assert calls == [*per_layer, (d, SMALL.vocab)]  # LM head included

    calls.clear()  # incremental decoding: the same matmuls, one row per sequence
    m.step(jnp.zeros((2,), jnp.int32), jnp.int32(0), m.init_cache(2, 4))
    assert calls == [*per_layer, (d, SMALL.vocab)]


def test_incremental_decoding_matches_whole_sequence_pass(model):
    prompts = jnp.asarray(np.random.default_rng(0).integers(0, 256, (3, 6)), jnp.int32)
    tokens, z_inf = generate(model, prompts, jax.random.key(0), jnp.float32(1.0), new_tokens=10)
    assert tokens.shape == (3, 16) and z_inf.shape == (3, 10, 256)
    np.testing.assert_array_equal(np.asarray(tokens[:, :6]), np.asarray(prompts))
    z_train = teacher_force(model, tokens, prompt_len=6)
    np.testing.assert_allclose(np.asarray(z_inf), np.asarray(z_train), atol=2e-5, rtol=1e-5)


def test_generation_is_seeded(model):
    prompts = jnp.zeros((2, 4), jnp.int32)
    a, _ = generate(model, prompts, jax.random.key(5), jnp.float32(1.0), new_tokens=6)
    b, _ = generate(model, prompts, jax.random.key(5), jnp.float32(1.0), new_tokens=6)
    c, _ = generate(model, prompts, jax.random.key(6), jnp.float32(1.0), new_tokens=6)
    assert np.array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(a), np.asarray(c))


def test_no_retrace_in_generation_and_teacher_forcing(model):
    prompts = jnp.ones((2, 5), jnp.int32)
    toks, _ = generate(model, prompts, jax.random.key(0), jnp.float32(1.0), new_tokens=7)
    teacher_force(model, toks, prompt_len=5)
    before = dict(TRACES)
    for seed, temperature in [(1, 0.7), (2, 1.3), (3, 1.0)]:
        # new weights (same structure), new prompts, keys and temperatures: no new trace
        other = TinyLM(SMALL, seed=seed)
        toks, _ = generate(
            other, prompts + seed, jax.random.key(seed), jnp.float32(temperature), new_tokens=7
        )
        teacher_force(other, toks, prompt_len=5)
    assert before == TRACES


def test_sample_respects_top_k_and_top_p():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]] * 4000))
    keys = jax.random.key(0)
    full = np.asarray(sample(keys, logits, 1.0))
    assert set(full) == {0, 1, 2, 3}
    top2 = np.asarray(sample(keys, logits, 1.0, top_k=2))
    assert set(top2) == {0, 1}
    nucleus = np.asarray(sample(keys, logits, 1.0, top_p=0.8))  # 0.5 + 0.3 reaches 0.8
    assert set(nucleus) == {0, 1}
    assert abs((nucleus == 0).mean() - 0.5 / 0.8) < 0.03
    cold = np.asarray(sample(keys, logits, 0.05))
    assert (cold == 0).mean() > 0.99


def test_context_limits_are_errors(model):
    with pytest.raises(ValueError, match="exceeds the context 24"):
        model(jnp.zeros((1, 25), jnp.int32))
    with pytest.raises(ValueError, match="exceeds the context 24"):
        model.init_cache(1, 30)
    with pytest.raises(ValueError, match="not a multiple of heads"):
        ModelConfig(d_model=30, heads=4)


def test_dynamic_batching_changes_a_row_and_fixed_does_not():
    """K_inf's reduction splits follow the serving batch: the same row, served in batches of 1
    and of 64, differs under dynamic batching and is identical under fixed batching."""
    import dataclasses

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(1, 512)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(512, 64)) * 0.05, jnp.float32)
    # (with h100-fp8 the parts are whole promotion chunks, so splitting changes nothing)
    dynamic = preset("h100-fp8-fast-accum")
    fixed = dataclasses.replace(dynamic, batching="fixed")
    alone, crowded = (inference_ops(dynamic, b).matmul(x, w) for b in (1, 1024))
    assert not np.array_equal(np.asarray(alone), np.asarray(crowded))
    alone, crowded = (inference_ops(fixed, b).matmul(x, w) for b in (1, 1024))
    np.testing.assert_array_equal(np.asarray(alone), np.asarray(crowded))


def test_keys_of_their_own_draw_as_in_their_own_batches():
    """A 1-D array of keys, one for every ``rows_per_key`` rows, draws for each key's rows what
    that key draws alone for a batch of that many rows; rows past the batch are cut."""
    logits = jnp.asarray(np.random.default_rng(3).normal(size=(5, 64)), jnp.float32)
    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(9), s))(jnp.arange(3))
    together = np.asarray(sample(keys, logits, 1.0, rows_per_key=2))
    alone = [np.asarray(sample(keys[g], logits[2 * g : 2 * g + 2], 1.0)) for g in range(3)]
    np.testing.assert_array_equal(together, np.concatenate(alone)[:5])
    assert not np.array_equal(together[:2], together[2:4])  # each key its own draws
    with pytest.raises(ValueError, match="3 keys of 1 rows cannot draw 5 rows"):
        sample(keys, logits, 1.0, rows_per_key=1)


def test_batches_generated_in_one_call_keep_their_tokens(model):
    prompts = jnp.asarray(np.random.default_rng(4).integers(0, 256, (4, 3)), jnp.int32)
    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(2), s))(jnp.arange(2))
    t = jnp.float32(1.0)
    tokens, z = generate(model, prompts, keys, t, new_tokens=5, rows_per_key=2)
    for g in range(2):
        rows = slice(2 * g, 2 * g + 2)
        alone, z_alone = generate(model, prompts[rows], keys[g], t, new_tokens=5)
        np.testing.assert_array_equal(np.asarray(tokens[rows]), np.asarray(alone))
        # the model's plain float32 matmuls may round otherwise in a taller batch
        np.testing.assert_allclose(np.asarray(z[rows]), np.asarray(z_alone), rtol=1e-5, atol=1e-6)


def test_one_key_a_row_draws_that_row_of_its_batch():
    """With ``row_in_key`` each row has a key of its own and draws what that key draws for
    its place in a batch, whatever the batch's size (a padded program's rows)."""
    logits = jnp.asarray(np.random.default_rng(5).normal(size=(6, 64)), jnp.float32)
    k0, k1 = jax.random.key(11), jax.random.key(12)
    keys = jnp.stack([jax.random.key_data(k) for k in (k0, k0, k0, k0, k1, k1)])
    keys = jax.random.wrap_key_data(keys)
    row_in_key = jnp.asarray([0, 1, 2, 3, 0, 1], jnp.int32)
    together = np.asarray(sample(keys, logits, 1.0, rows_per_key=8, row_in_key=row_in_key))
    alone = [np.asarray(sample(k0, logits[:4], 1.0)), np.asarray(sample(k1, logits[4:], 1.0))]
    np.testing.assert_array_equal(together, np.concatenate(alone))
    with pytest.raises(ValueError, match="5 keys for 6 rows: one key a row"):
        sample(keys[:5], logits, 1.0, rows_per_key=8, row_in_key=row_in_key)
