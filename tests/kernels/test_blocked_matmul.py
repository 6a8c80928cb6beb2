"""The blocked float32 matmul (``kernels.numerics.blocked``) and the plain matmul built on it.

Against the exact product (float64 of the float32 inputs, exact to well below a float32 ulp):

- every entry is within the worst-case bound of its order of additions, ``γ_m Σ|x_i w_i|``
  with ``m = block + ceil(k / block) - 1`` (the product's rounding and the longest chain of
  additions), far below the ``γ_k`` of one long chain;
- the root-mean-square relative error is under 2e-7 on the decoder shapes where XLA's CPU dot
  alone gives about 3.8e-7 (measured: 1.3e-7 and 1.6e-7);
- ``block`` 0 (the default), or ``k <= block``, is the backend's dot bit for bit; a remainder
  block, leading batch axes and the gradient work;
- the Hugging Face decoder sums in blocks when given no ops, and ``localize``'s traced function
  keeps one dot per matmul.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import TypeCheckError

from kernel_contracts.kernels.model.checkpoints import checkpoint_logits_function
from kernel_contracts.kernels.model.gguf import load_gguf
from kernel_contracts.kernels.model.hf.decoder import FLOAT32_BLOCK, Decoder
from kernel_contracts.kernels.numerics.blocked import blocked_matmul
from kernel_contracts.kernels.ops import PlainMatmul, plain_ops
from tests.kernels.gguf_files import config as gguf_config
from tests.kernels.gguf_files import write_tiny

U = 2.0**-24  # float32's unit roundoff


def _operands(m: int, k: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (0.05 * rng.standard_normal((k, n))).astype(np.float32)
    return x, w


def _exact(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) @ w.astype(np.float64)


@pytest.mark.parametrize(("k", "block"), [(576, 64), (1536, 64), (200, 64), (96, 32)])
def test_within_the_bound_of_its_order_of_additions(k, block):
    x, w = _operands(16, k, 96)
    got = np.asarray(jax.jit(blocked_matmul, static_argnums=2)(x, w, block), np.float64)
    chain = block + -(-k // block) - 1
    gamma = chain * U / (1 - chain * U)
    bound = gamma * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64))
    assert (np.abs(got - _exact(x, w)) <= bound).all()


@pytest.mark.parametrize(("k", "n"), [(576, 1536), (1536, 576)])
def test_closer_to_the_exact_product_than_one_long_dot(k, n):
    x, w = _operands(48, k, n)
    exact = _exact(x, w)

    def rel(y) -> float:
        return float(np.sqrt(((np.asarray(y, np.float64) - exact) ** 2).mean() / (exact**2).mean()))

    # measured on 2 CPU cores: 1.3e-7 and 1.6e-7 blocked; XLA's dot alone 3.8e-7 and 4.0e-7
    assert rel(jax.jit(PlainMatmul(64))(x, w)) < 2e-7


def test_one_block_is_the_backends_dot():
    x, w = _operands(8, 64, 32)
    plain = jnp.matmul(x, w, precision=jax.lax.Precision.HIGHEST)
    assert (blocked_matmul(x, w, 64) == plain).all()
    x, w = _operands(8, 300, 32)
    plain = jnp.matmul(x, w, precision=jax.lax.Precision.HIGHEST)
    assert (PlainMatmul()(x, w) == plain).all()  # block 0 by default
    assert not (PlainMatmul(64)(x, w) == plain).all()  # blocks of 64: another order of adds
    assert plain_ops().matmul == PlainMatmul(block=0)


def test_the_decoder_runs_blocked_and_is_traced_whole(tmp_path):
    """A Hugging Face decoder without ops sums in blocks; the function that ``localize`` traces
    has one ``dot_general`` per matmul (``on_kernel`` emulates each as one kernel matmul)."""
    path = tmp_path / "tiny.gguf"
    wide = dataclasses.replace(gguf_config(), intermediate_size=160)  # down_proj: k = 160 > 64
    model = write_tiny(path, model=Decoder(wide, seed=0))
    assert model.ops.matmul == PlainMatmul(FLOAT32_BLOCK) and FLOAT32_BLOCK == 64
    assert load_gguf(str(path)).ops.matmul == PlainMatmul(64)
    tokens = jnp.zeros((1, 3), jnp.int32)
    blocked = str(jax.make_jaxpr(lambda t: model(t))(tokens))
    assert blocked.count("scan[") == 2  # the layers' scan and down_proj's scan over its blocks
    fn, params, _ = checkpoint_logits_function(f"gguf:{path}")
    whole = str(jax.make_jaxpr(fn)(params, tokens))
    # the layers' scan holds the seven projections and attention's two products, and the LM
    # head is one more: no other scan
    assert whole.count("dot_general") == 7 + 2 + 1 and whole.count("scan[") == 1


def test_remainder_block_batch_axes_and_gradient():
    x, w = _operands(6, 200, 24, seed=1)
    x3 = x.reshape(2, 3, 200)
    got = jax.jit(blocked_matmul, static_argnums=2)(x3, w, 64)
    assert got.shape == (2, 3, 24) and got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got).reshape(6, 24), _exact(x, w), rtol=0, atol=1e-5)

    def loss(x, w, block):
        return jnp.sum(jnp.tanh(blocked_matmul(x, w, block)))

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)
    g_blocked, g_plain = grad(x, w, 64), grad(x, w, 0)
    for a, b in zip(g_blocked, g_plain, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_mismatched_operands_are_refused():
    x, w = _operands(4, 100, 8)
    # refused by the shape annotations where jaxtyping checks them, by the function elsewhere
    with pytest.raises((ValueError, TypeCheckError), match=r"100"):
        blocked_matmul(x, w[:99], 64)
