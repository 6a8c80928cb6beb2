"""``kernels.on_kernel``: any JAX function with its dots on an emulated kernel.

Models here are written as their libraries' users write them (Flax Linen, Flax NNX, Equinox,
plain ``jnp`` with ``einsum`` and ``lax.scan``). Checked: (a) the fp32 spec gives the function
itself to float tolerance; (b) with an fp8 spec every dot is ``emulated_dot_general`` of the
same operands, bit for bit (against the emulated matmul applied by hand), and no
``dot_general`` is left in the transformed program; (c) ``jit`` gives the same bits, ``grad``
works (straight-through); (d) input and output pytrees are kept; (e) the shipped TinyLM on
plain ops through the transform is TinyLM on the inference kernel's matmuls, bit for bit.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax import lax

from kernel_contracts.contracts import PRESETS
from kernel_contracts.kernels import on_kernel
from kernel_contracts.kernels._matmul import emulated_dot_general
from kernel_contracts.kernels.model.tinylm import load_pretrained, with_ops
from kernel_contracts.kernels.ops import PlainAttention, inference_ops

FP8 = PRESETS["h100-fp8"]
MM = (((1,), (0,)), ((), ()))  # x[m, k] @ w[k, n]


def emu(x, w, spec=FP8, dims=None):
    dims = dims or (((x.ndim - 1,), (0,)), ((), ()))
    return emulated_dot_general(x, w, dims, spec.matmul)


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    np.testing.assert_array_equal(a, b)


def dots_left(fn, *args) -> int:
    """``dot_general`` equations in the program ``fn`` traces to, sub-jaxprs included."""

    def count(jaxpr) -> int:
        n = 0
        for eqn in jaxpr.eqns:
            n += eqn.primitive.name == "dot_general"
            for value in eqn.params.values():
                for sub in value if isinstance(value, tuple | list) else (value,):
                    if isinstance(sub, jax.extend.core.ClosedJaxpr):
                        n += count(sub.jaxpr)
                    elif isinstance(sub, jax.extend.core.Jaxpr):
                        n += count(sub)
        return n

    return count(jax.make_jaxpr(fn)(*args).jaxpr)


def rand(seed, *shape, scale=1.0):
    return jnp.asarray(np.random.default_rng(seed).normal(0, scale, shape), jnp.float32)


# --------------------------------------------------------------------------- models


class LinenBlock(nn.Module):
    """An MLP and a causal self-attention block, as Flax Linen users write them."""

    @nn.compact
    def __call__(self, x):
        x = x + nn.Dense(8)(nn.relu(nn.Dense(8)(x)))
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
        return x + nn.MultiHeadDotProductAttention(num_heads=2)(x, mask=mask)


class LinenMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(8)(x))
        return nn.Dense(8)(h)


class NNXModel(nnx.Module):
    def __init__(self, rngs):
        self.a = nnx.Linear(8, 8, rngs=rngs)
        self.b = nnx.Linear(8, 8, rngs=rngs)

    def __call__(self, x):
        h = nnx.gelu(self.a(x))
        return {"out": self.b(h), "hidden": (h,)}


class EqxModel(eqx.Module):
    a: eqx.nn.Linear
    b: eqx.nn.Linear
    scale: float = eqx.field(static=True, default=0.5)

    def __init__(self, key):
        ka, kb = jax.random.split(key)
        self.a = eqx.nn.Linear(8, 8, key=ka)
        self.b = eqx.nn.Linear(8, 8, key=kb)

    def __call__(self, x):  # one example, as Equinox layers take them; vmapped by the caller
        return self.b(jax.nn.tanh(self.a(x))) * self.scale


def plain(params, xs):
    """An RNN as a ``lax.scan`` with an ``einsum`` and a ``@`` in its body."""

    def step(h, x):
        h = jnp.tanh(jnp.einsum("bd,de->be", h, params["w"]) + x @ params["u"])
        return h, h.sum(-1)

    h, ys = lax.scan(step, jnp.zeros((xs.shape[1], 8), jnp.float32), xs)
    return {"h": h, "ys": ys}


def plain_by_hand(params, xs):
    h = jnp.zeros((xs.shape[1], 8), jnp.float32)
    ys = []
    for x in xs:
        h = jnp.tanh(emu(h, params["w"]) + emu(x, params["u"]))
        ys.append(h.sum(-1))
    return {"h": h, "ys": jnp.stack(ys)}


# every matmul below is 8 x 8 by 8 x 8, so each spec compiles the emulated matmul once
X = rand(0, 8, 8)
XS = rand(1, 3, 8, 8)
P_PLAIN = {"w": rand(2, 8, 8, scale=0.3), "u": rand(3, 8, 8, scale=0.3)}


@pytest.fixture(scope="module")
def linen_mlp():
    model = LinenMLP()
    return model, model.init(jax.random.key(0), X)


def linen_mlp_by_hand(v, x):
    p = v["params"]
    h = jax.nn.relu(emu(x, p["Dense_0"]["kernel"]) + p["Dense_0"]["bias"][None, :])
    return emu(h, p["Dense_1"]["kernel"]) + p["Dense_1"]["bias"][None, :]


# ---------------------------------------------------------------- (a) fp32 is identity


@pytest.mark.slow
def test_fp32_spec_is_the_function_itself():
    block = LinenBlock()
    x = rand(4, 2, 4, 8)
    v = block.init(jax.random.key(1), x)
    nnx_model = NNXModel(nnx.Rngs(0))
    eqx_model = EqxModel(jax.random.key(2))
    cases = [
        (block.apply, (v, x)),
        (lambda m, x: m(x), (nnx_model, X)),
        (lambda m, x: jax.vmap(m)(x), (eqx_model, X)),
        (plain, (P_PLAIN, XS)),
    ]
    for fn, args in cases:
        want = jax.tree.leaves(fn(*args))
        got = jax.tree.leaves(on_kernel(fn, "fp32")(*args))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6, atol=2e-6)


# --------------------------------------------- (b) every dot is the emulated matmul


def test_fp8_linen_mlp_equals_emulated_matmuls_by_hand(linen_mlp):
    model, v = linen_mlp
    same(on_kernel(model.apply, FP8)(v, X), linen_mlp_by_hand(v, X))


def test_fp8_nnx_model_equals_emulated_matmuls_by_hand():
    m = NNXModel(nnx.Rngs(0))
    got = on_kernel(lambda m, x: m(x), "h100-fp8")(m, X)
    h = nnx.gelu(emu(X, m.a.kernel[...]) + m.a.bias[...][None, :])
    same(got["hidden"][0], h)
    same(got["out"], emu(h, m.b.kernel[...]) + m.b.bias[...][None, :])


def test_fp8_equinox_model_equals_emulated_matmuls_by_hand():
    m = EqxModel(jax.random.key(2))
    got = on_kernel(lambda m, x: jax.vmap(m)(x), FP8)(m, X)
    # vmap turns W @ x into one batched dot: rows of X times columns of W^T
    h = jax.nn.tanh(emu(X, m.a.weight.T) + m.a.bias[None, :])
    same(got, (emu(h, m.b.weight.T) + m.b.bias[None, :]) * 0.5)


def test_int8_linen_mlp_equals_int8_matmuls_by_hand(linen_mlp):
    """An int8 spec (exact int32 accumulation, no reduction splits) is emulated too."""
    model, v = linen_mlp
    int8 = PRESETS["a100-int8"]
    p = v["params"]
    h = jax.nn.relu(emu(X, p["Dense_0"]["kernel"], int8) + p["Dense_0"]["bias"][None, :])
    want = emu(h, p["Dense_1"]["kernel"], int8) + p["Dense_1"]["bias"][None, :]
    got = on_kernel(model.apply, int8, batch_size=3)(v, X)
    same(got, want)
    assert not np.array_equal(np.asarray(got), np.asarray(model.apply(v, X)))
    with pytest.raises(ValueError, match="no Pallas kernel"):
        on_kernel(model.apply, int8, impl="pallas")


def test_fp8_scan_and_einsum_equal_emulated_matmuls_by_hand():
    got = on_kernel(plain, FP8)(P_PLAIN, XS)
    want = plain_by_hand(P_PLAIN, XS)
    same(got["h"], want["h"])
    same(got["ys"], want["ys"])


def test_no_dot_is_left_and_attention_dots_are_the_recognised_ones():
    block = LinenBlock()
    x = rand(4, 2, 4, 8)
    v = block.init(jax.random.key(1), x)
    assert dots_left(block.apply, v, x) == 8  # 2 MLP, 4 projections, 2 attention products
    assert dots_left(on_kernel(block.apply, FP8), v, x) == 0
    assert dots_left(on_kernel(block.apply, FP8, attention="float32"), v, x) == 2
    q = rand(5, 2, 6, 2, 4)
    sdpa = lambda q: jax.nn.dot_product_attention(q, q, q, is_causal=True)  # noqa: E731
    assert dots_left(on_kernel(sdpa, FP8, attention="float32"), q) == 2
    assert dots_left(on_kernel(plain, FP8, attention="float32"), P_PLAIN, XS) == 0


def test_every_control_flow_primitive_is_rewritten():
    w = rand(6, 8, 8, scale=0.3)

    @jax.custom_vjp
    def cv(x):
        return x @ w

    cv.defvjp(lambda x: (x @ w, None), lambda _, g: (g @ w.T,))

    @jax.custom_jvp
    def cj(x):
        return x @ w

    cj.defjvp(lambda p, t: (cj(p[0]), t[0] @ w))

    def f(x):
        y = jax.checkpoint(lambda a: a @ w)(x)
        y = lax.cond(x.sum() > 0, lambda a: a @ w, lambda a: -a, y)
        y = lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1] @ w), (0, y))[1]
        return jax.jit(lambda a: cj(cv(a)))(y)

    def by_hand(x):
        y = emu(x, w)
        y = emu(y, w) if float(x.sum()) > 0 else -y
        for _ in range(2):
            y = emu(y, w)
        return emu(emu(y, w), w)

    got = on_kernel(f, FP8)(X)
    assert dots_left(on_kernel(f, FP8), X) == 0
    same(got, by_hand(X))


def test_unsupported_primitive_with_a_dot_is_refused():
    w = rand(6, 8, 8)
    solve = lambda b: lax.custom_linear_solve(lambda x: x @ w, b, lambda mv, b: b)  # noqa: E731
    with pytest.raises(NotImplementedError, match="custom_linear_solve"):
        on_kernel(solve, FP8)(X)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        on_kernel(plain, "nope")
    with pytest.raises(ValueError, match="batch_size"):
        on_kernel(plain, FP8, batch_size=0)
    with pytest.raises(ValueError, match="attention"):
        on_kernel(plain, FP8, attention="paged")
    with pytest.raises(TypeError, match="KernelSpec"):
        on_kernel(plain, FP8.matmul)


# ------------------------------------------------------------------- (c) jit and grad


def test_jit_gives_the_same_bits(linen_mlp):
    model, v = linen_mlp
    f = on_kernel(model.apply, FP8)
    same(jax.jit(f)(v, X), f(v, X))


def test_grad_is_straight_through(linen_mlp):
    model, v = linen_mlp
    w = rand(7, 8, 8)
    # one linear layer: the straight-through gradient is exactly the float32 one
    loss = lambda w, x: jnp.sum(jnp.sin(x) @ w)  # noqa: E731
    same(jax.grad(on_kernel(loss, FP8))(w, X), jax.grad(loss)(w, X))

    # two layers: backpropagation by hand through the emulated forward values, with exact
    # float32 products in the backward pass
    p = v["params"]
    hi = lax.Precision.HIGHEST
    pre = emu(X, p["Dense_0"]["kernel"]) + p["Dense_0"]["bias"][None, :]
    h = jax.nn.relu(pre)
    dy = 2 * (emu(h, p["Dense_1"]["kernel"]) + p["Dense_1"]["bias"][None, :])
    dpre = jnp.matmul(dy, p["Dense_1"]["kernel"].T, precision=hi) * (pre > 0).astype(pre.dtype)
    want = {
        "Dense_0": {"kernel": jnp.matmul(X.T, dpre, precision=hi), "bias": dpre.sum(0)},
        "Dense_1": {"kernel": jnp.matmul(h.T, dy, precision=hi), "bias": dy.sum(0)},
    }
    got = jax.grad(on_kernel(lambda v: jnp.sum(model.apply(v, X) ** 2), FP8))(v)["params"]
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(on_kernel(loss, FP8), (w, X), (w, X))


# ----------------------------------------------------------------------- (d) pytrees


def test_pytrees_are_kept():
    def fn(tree, scale, *, name):
        a, (b, none) = tree["pair"]
        return {"name_len": len(name), "out": [a @ b * scale, none], "same": tree["x"]}

    tree = {"pair": (X, (rand(8, 8, 8), None)), "x": jnp.arange(3)}
    got = on_kernel(fn, FP8)(tree, 2.0, name="abc")
    want = fn(tree, 2.0, name="abc")
    assert jax.tree.structure(got) == jax.tree.structure(want)
    assert got["name_len"] == 3 and got["out"][1] is None
    same(got["same"], want["same"])
    same(got["out"][0], emu(X, tree["pair"][1][0]) * 2.0)


# ------------------------------------------------------------ (e) the shipped TinyLM


@pytest.mark.slow
def test_tiny_lm_through_the_transform_is_tiny_lm_on_the_inference_matmuls():
    model = load_pretrained("tiny-lm")  # on plain ops: jnp matmuls, plain float32 attention
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, (2, 12)), jnp.int32)
    # the inference kernel's matmuls (batch 2), attention kept as the plain float32 one
    ops = dataclasses.replace(inference_ops(FP8, batch_size=2), attention=PlainAttention())
    want = nnx.jit(lambda m, t: m(t))(with_ops(model, ops), tokens)
    got = jax.jit(on_kernel(lambda t: model(t), FP8, batch_size=2, attention="float32"))(tokens)
    same(got, want)
