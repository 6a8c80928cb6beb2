"""``verify.pipeline.routing`` with JAX arrays: the array functions under ``jax.jit`` and without it
give identical arrays, and a batch of JAX arrays gets the decision its numpy twin gets."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

from kernel_contracts.verify.pipeline import routing
from kernel_contracts.verify.pipeline.routing import RoutingError
from tests.verify.test_routing import GUARANTEES, HEAD, INFER, MASK, RULES, TRAIN, _load

ROOT = pathlib.Path(__file__).resolve().parents[2]

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    return routing.prepare(_load(tmp_path_factory.mktemp("jax"), HEAD + GUARANTEES + RULES))


def _pipeline(train, infer, mask, limit, cap):
    log_w = routing.log_ratio(train, infer)
    flags = routing.exceeds(jnp.abs(log_w), limit, mask)
    return flags, routing.capped_weights(log_w, mask, cap), routing.rows_with(flags)


def test_array_functions_are_identical_with_and_without_jit():
    rng = np.random.default_rng(0)
    train = -rng.exponential(2.0, (8, 32)).astype(np.float32)
    infer = (train - rng.normal(0, 0.4, train.shape)).clip(max=0).astype(np.float32)
    mask = rng.random(train.shape) < 0.9
    args = (jnp.asarray(train), jnp.asarray(infer), jnp.asarray(mask))
    eager = _pipeline(*args, 0.5, 2)
    jitted = jax.jit(_pipeline, static_argnums=(3, 4))(*args, 0.5, 2)
    for a, b in zip(eager, jitted, strict=True):
        assert a.dtype == b.dtype
        assert np.array_equal(np.asarray(a), np.asarray(b))
    # numpy in the same dtype: the comparisons agree exactly, the weights to rounding of exp
    log_w = routing.log_ratio(train, infer)
    flags = routing.exceeds(np.abs(log_w), 0.5, mask)
    assert np.array_equal(flags, np.asarray(jitted[0]))
    assert np.array_equal(routing.rows_with(flags), np.asarray(jitted[2]))
    weights = routing.capped_weights(log_w, mask, 2)
    assert weights.dtype == np.float32
    np.testing.assert_allclose(weights, np.asarray(jitted[1]), rtol=2e-7)
    assert float(jitted[1].max()) == 2.0


def test_a_batch_of_jax_arrays_gets_the_decision_of_its_numpy_twin(router):
    train, infer = TRAIN.astype(np.float32), INFER.astype(np.float32)
    host = routing.route(router, train, infer, MASK)
    device = routing.route(router, jnp.asarray(train), jnp.asarray(infer), jnp.asarray(MASK))
    assert routing.routing_json(device) == routing.routing_json(host)
    for x in (device.token_mask, device.weights, device.rescore):
        assert isinstance(x, jax.Array)
    assert device.weights.dtype == jnp.float32
    # and the jitted functions give the same mask, re-scored rows and weights
    flags, weights, rows = jax.jit(_pipeline, static_argnums=(3, 4))(
        jnp.asarray(train), jnp.asarray(infer), jnp.asarray(MASK), 0.5, 2
    )
    assert np.array_equal(np.asarray(flags), np.asarray(device.token_mask))
    np.testing.assert_allclose(np.asarray(weights), np.asarray(device.weights), rtol=2e-7)
    assert np.asarray(rows).tolist() == [True, True, False]  # |log w| > 0.5: rows 0 and 1


def test_route_inside_jit_is_refused_with_the_argument_named(router):
    def step(train, infer, mask):
        routing.route(router, train, infer, mask)
        return train

    with pytest.raises(RoutingError) as err:
        jax.jit(step)(jnp.asarray(TRAIN), jnp.asarray(INFER), jnp.asarray(MASK))
    assert err.value.problems[0].startswith("train_logprobs: a traced array: route decides on")
    assert len(err.value.problems) == 3


def test_bfloat16_log_probs_get_float32_weights(router):
    train = jnp.asarray(TRAIN, jnp.bfloat16)
    infer = jnp.asarray(INFER, jnp.bfloat16)
    d = routing.route(router, train, infer, jnp.asarray(MASK))
    assert d.weights.dtype == jnp.float32
    assert float(d.weights.max()) == 2.0
    assert d.actions == ("mask_tokens", "route_to_train_kernel", "tis_correct", "halt_promotion")


def test_a_loop_that_imported_jax_first_still_gets_its_proved_cap(tmp_path):
    """The solver process of such a loop is a fresh interpreter (no fork beside JAX's threads):
    its start-up must not cost the obligations their verdicts."""
    script = tmp_path / "loop.py"
    script.write_text(
        "import jax.numpy as jnp\n"
        "from kernel_contracts import contracts\n"
        "from kernel_contracts.verify.pipeline import routing\n"
        "if __name__ == '__main__':\n"
        f"    c = contracts.load({str(ROOT / 'examples' / 'routing_loop.yaml')!r})\n"
        "    r = routing.prepare(c)\n"
        "    print(r.cap, r.cap_guarantee)\n"
    )
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "2 G_pg_tis\n"
