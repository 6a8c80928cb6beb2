"""No emulation entry point lowers to a float conversion that a compiler may erase.

XLA's GPU compiler collapses chains of float converts (``SimplifyFPConversions``), so a rounding
written as ``x.astype(narrow).astype(jnp.float32)`` does nothing there. Each entry point below
is lowered to StableHLO on the CPU (lowering, not running: small shapes, a few seconds) and
linted with :func:`kernels.castlint.erasable_casts`. The first tests show that the lint finds
such chains, also when a move, a call, a loop or a branch separates the two converts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from contracts import AttentionSpec, Scaling, preset
from contracts.presets import PRESETS
from kernels._matmul import emulated_dot_general, int8_matmul, matmul
from kernels.attention import PagedKVCache, decode_attention
from kernels.castlint import erasable_casts
from kernels.formats import cast_output, saturating_cast
from kernels.model import ModelConfig, TinyLM
from kernels.ops import inference_ops
from kernels.rescale import TRANSFORMS, rescaled_matmul
from kernels.scaling import quantize_cols, quantize_rows, quantize_rows_int8
from kernels.transform import on_kernel


def lint(fn, *args, x64=False):
    """The chains in ``fn``'s program. The entry points enable 64-bit types where they need
    them, so they are lowered as callers run them: without ``x64``."""
    with jax.enable_x64(x64):
        text = jax.jit(fn).lower(*args).as_text()
    return erasable_casts(text)


def assert_clean(fn, *args):
    chains = lint(fn, *args)
    assert chains == (), "\n".join(str(c) for c in chains[:5]) + f"\n({len(chains)} in all)"


X = jnp.zeros((4, 200), jnp.float32)  # K = 200: ragged for every block, group and chunk
W = jnp.zeros((200, 8), jnp.float32)


# ---------------------------------------------------------------------------------------------
# the lint finds what it should


def _bf16_round_trip(x):
    return x.astype(jnp.bfloat16).astype(jnp.float32)


@pytest.mark.parametrize(
    "fn, types",
    [
        (_bf16_round_trip, ("f32", "bf16", "f32")),
        (lambda x: x.astype(jnp.float8_e4m3fn).astype(jnp.float32), ("f32", "f8E4M3FN", "f32")),
        (  # through moves: a reshape, a transpose and a select
            lambda x: jnp.where(x > 0, x.astype(jnp.float16).T.reshape(-1), 0).astype(jnp.float32),
            ("f32", "f16", "f32"),
        ),
        (  # through a call: the narrowing in a nested jit, the widening in the caller
            lambda x: jax.jit(lambda y: y.astype(jnp.bfloat16))(x).astype(jnp.float32),
            ("f32", "bf16", "f32"),
        ),
        (  # two roundings collapse into one: f64 -> f32 -> bf16 becomes f64 -> bf16
            lambda x: x.astype(jnp.float64).sum().astype(jnp.float32).astype(jnp.bfloat16),
            ("f64", "f32", "bf16"),
        ),
        (  # through a while loop's carry
            lambda x: lax.fori_loop(
                0, 3, lambda i, c: c.astype(jnp.bfloat16).astype(jnp.float32) + 1.0, x
            ),
            ("f32", "bf16", "f32"),
        ),
        (  # out of a branch of lax.cond
            lambda x: lax.cond(
                x[0] > 0, lambda y: y.astype(jnp.bfloat16), lambda y: -y.astype(jnp.bfloat16), x
            ).astype(jnp.float32),
            ("f32", "bf16", "f32"),
        ),
    ],
)
def test_the_lint_finds_erasable_chains(fn, types):
    chains = lint(fn, jnp.ones((3,), jnp.float32), x64=True)
    assert chains, "the lint missed a chain"
    assert {c.types for c in chains} == {types}


def test_the_lint_leaves_exact_conversions_alone():
    def fn(x, h):
        wide = x.astype(jnp.bfloat16).astype(jnp.float32)  # the one chain
        up = h.astype(jnp.float32).astype(jnp.float64)  # widening only
        bits = lax.bitcast_convert_type(x, jnp.int32)
        return wide, up, bits.astype(jnp.float32), x.astype(jnp.int32).astype(jnp.float32)

    chains = lint(fn, jnp.ones((3,), jnp.float32), jnp.ones((3,), jnp.float16), x64=True)
    assert [c.types for c in chains] == [("f32", "bf16", "f32")]


def test_sibling_regions_reuse_names_without_confusing_the_lint():
    # the printed names of the two branches repeat; only the second branch narrows
    def fn(x):
        y = lax.cond(
            x[0] > 0, lambda y: y * 2.0, lambda y: y.astype(jnp.bfloat16).astype(y.dtype), x
        )
        return y.astype(jnp.float64)

    chains = lint(fn, jnp.ones((3,), jnp.float32), x64=True)
    assert [c.types for c in chains] == [("f32", "bf16", "f32")]


# ---------------------------------------------------------------------------------------------
# every emulation entry point is clean


def _matmul_cases():
    for name, kernel in PRESETS.items():
        impls = ("jax",) if kernel.matmul.is_int8 else ("jax", "pallas", "pallas_gpu")
        for impl in impls:
            for splits in (1, 3):
                yield pytest.param(name, impl, splits, id=f"{name}-{impl}-splits{splits}")


@pytest.mark.parametrize("name, impl, splits", list(_matmul_cases()))
def test_matmul_lowers_without_erasable_casts(name, impl, splits):
    spec = preset(name).matmul
    assert_clean(lambda x, w: matmul(x, w, spec, impl=impl, splits=splits, interpret=True), X, W)


def test_the_formats_and_scalings_lower_without_erasable_casts():
    def fn(x):
        out = []
        for fmt in ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"):
            out += [saturating_cast(x, fmt), cast_output(x, fmt)]
            for scaling in ("per_tensor", "per_row", "block:32", "mx:32"):
                spec = Scaling.parse(scaling)
                out += [*quantize_rows(x, fmt, spec), *quantize_cols(x.T, fmt, spec)]
        return out

    assert_clean(fn, X)


def test_emulated_dot_general_and_on_kernel_lower_without_erasable_casts():
    spec = preset("h100-fp8").matmul
    lhs = jnp.zeros((2, 4, 200), jnp.float32)
    rhs = jnp.zeros((2, 200, 8), jnp.float32)
    dims = (((2,), (1,)), ((0,), (0,)))
    assert_clean(lambda a, b: emulated_dot_general(a, b, dims, spec, splits=2), lhs, rhs)

    def mlp(params, x):
        return jnp.tanh(x @ params["w1"]) @ params["w2"]

    params = {"w1": jnp.zeros((200, 16), jnp.float32), "w2": jnp.zeros((16, 8), jnp.float32)}
    assert_clean(on_kernel(mlp, "h100-fp8", batch_size=8), params, X)


@pytest.mark.parametrize("name", ["h100-fp8", "a100-int8"])
def test_tiny_lm_forward_and_decode_step_lower_without_erasable_casts(name):
    cfg = ModelConfig(vocab=32, d_model=16, layers=1, heads=2, d_ff=32, context=8)
    model = TinyLM(cfg, seed=0, ops=inference_ops(preset(name), batch_size=2))
    tokens = jnp.zeros((2, 8), jnp.int32)
    assert_clean(lambda t: model(t), tokens)
    caches = model.init_cache(2, 8)
    assert_clean(lambda t, c: model.step(t, jnp.int32(0), c), tokens[:, 0], caches)


@pytest.mark.parametrize("kv", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"])
def test_attention_with_a_low_precision_cache_lowers_without_erasable_casts(kv):
    spec = AttentionSpec(kv_cache=kv, page_size=4, tiles="adaptive")
    cache = PagedKVCache.create(2, 16, 2, 8, spec)
    kv_new = jnp.ones((2, 2, 8), jnp.float32)

    def step(cache, q, k, v):
        cache = cache.append(k, v).append(2 * k, -v)
        return decode_attention(q, cache, spec, batch_size=2), cache

    assert_clean(step, cache, kv_new, kv_new, kv_new)


def test_int8_quantizer_and_traced_epilogue_lower_without_erasable_casts():
    spec = preset("a100-int8").matmul
    assert_clean(lambda x, w: int8_matmul(x, w, spec, specialize=False), X, W)
    assert_clean(lambda x, p, d: quantize_rows_int8(x, p, d), X, jnp.bool_(False), jnp.int32(2))


@pytest.mark.parametrize("name", ["h100-fp8", "mxfp8", "a100-int8"])
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_rescaled_matmul_lowers_without_erasable_casts(name, transform):
    spec = preset(name).matmul
    assert_clean(lambda x, w: rescaled_matmul(x, w, spec, transform, splits=2), X, W)
