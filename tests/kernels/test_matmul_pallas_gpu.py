"""The GPU-shaped Pallas matmul (``kernels._matmul.pallas_gpu``) in interpret mode: the NumPy
reference's bits for every preset and variant, on aligned and ragged shapes, with split-K.

Blocks of 32 × 32 make several programs per grid axis and ragged edges on small shapes; K of
256 and 200 gives several windows per chunk and a padded last one.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.contracts import preset
from kernel_contracts.kernels._matmul import make_plan, matmul
from kernel_contracts.kernels._matmul.pallas_gpu import (
    choose_variant,
    dot_waste,
    fused_exact,
    reduce_quantized_pallas_gpu,
)
from kernel_contracts.kernels._matmul.shared import binary32_exact
from kernel_contracts.kernels.numerics.formats import cast_output
from kernel_contracts.kernels.numerics.scaling import quantize_rows
from tests.kernels.test_matmul import operands, spec_of
from tests.support.bits import same_bits

PRESETS = ("fp32", "bf16", "h100-fp8", "h100-fp8-fast-accum", "mxfp8")
ALIGNED, RAGGED = (64, 256, 64), (50, 200, 40)


def emulate(x, w, spec, splits, variant=None, *, use_jit=True):
    """``matmul``'s steps with the GPU kernel at 32 × 32 blocks, interpreted."""

    def f(a, b):
        plan = make_plan(spec, a.shape[1], splits)
        xq, sx = quantize_rows(a, plan.inputs, plan.scaling)
        wq, sw = quantize_rows(b.T, plan.inputs, plan.scaling)
        total = reduce_quantized_pallas_gpu(
            xq, sx, wq, sw, plan, variant=variant, block_m=32, block_n=32, interpret=True
        )
        return cast_output(total, plan.output)

    with jax.enable_x64(True):
        return np.asarray((jax.jit(f) if use_jit else f)(jnp.asarray(x), jnp.asarray(w)))


def assert_reference_bits(got, x, w, spec, splits):
    want = matmul(x, w, spec, impl="numpy", splits=splits)
    assert same_bits(got, want), np.argwhere(got.view(np.uint32) != want.view(np.uint32))[:5]


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.parametrize(
    ("shape", "splits"), [(ALIGNED, 1), (RAGGED, 3)], ids=["aligned", "ragged"]
)
def test_presets_give_the_reference_bits(name, shape, splits):
    x, w = operands(11, *shape)
    assert_reference_bits(
        emulate(x, w, preset(name).matmul, splits), x, w, preset(name).matmul, splits
    )


def test_without_jit_and_through_matmul():
    x, w = operands(5, 10, 70, 12, specials=[np.nan, 1e30])
    spec = preset("h100-fp8").matmul
    assert_reference_bits(emulate(x, w, spec, 3, use_jit=False), x, w, spec, 3)
    x, w = operands(5, *RAGGED, specials=[np.nan, 1e30])
    got = np.asarray(matmul(x, w, spec, impl="pallas_gpu", splits=1))  # interpreted off the GPU
    assert_reference_bits(got, x, w, spec, 1)


@pytest.mark.parametrize(
    ("name", "variant"),
    [
        ("h100-fp8", "fma64"),
        ("h100-fp8-fast-accum", "fma64"),
        ("mxfp8", "fma64"),
        ("bf16", "fma64"),
    ],
)
def test_every_variant_a_plan_allows_gives_the_same_bits(name, variant):
    x, w = operands(2, *RAGGED, exp_spread=8)
    spec = preset(name).matmul
    assert_reference_bits(emulate(x, w, spec, 3, variant), x, w, spec, 3)


def test_bfloat16_data_outside_the_binary32_chain_take_the_binary64_branch():
    # products below 2**-126 (binary32 subnormals) fail the data check, so lax.cond runs the
    # binary64 kernel; it gives the reference's bits (XLA's CPU flushes subnormals, so here
    # the binary32 chain would too: this checks the branch, not that the chain differs)
    x, w = operands(4, *RAGGED)
    x[:5, :] = np.float32(2.0**-65)
    w[:, :5] = np.float32(2.0**-65)
    spec = preset("bf16").matmul
    plan = make_plan(spec, RAGGED[1])
    assert choose_variant(plan) == "fma32"
    with jax.enable_x64(True):
        xq = quantize_rows(jnp.asarray(x), plan.inputs, plan.scaling)[0]
        wq = quantize_rows(jnp.asarray(w).T, plan.inputs, plan.scaling)[0]
        assert not binary32_exact(xq, wq, plan.inputs)
    assert_reference_bits(emulate(x, w, spec, 1), x, w, spec, 1)


def test_odd_groups_and_rounding_to_nearest():
    # group 3 padded to 4 slots in the dot variant; rounding to nearest; block scales of 8
    x, w = operands(9, *RAGGED, specials=[np.nan])
    spec = spec_of("float8_e4m3fn", "block:8", 9, "nearest_even", 3, 8, "bfloat16")
    for variant in ("dot", "fma64"):
        assert_reference_bits(emulate(x, w, spec, 3, variant), x, w, spec, 3)


def test_fused_sums_only_where_they_are_exact():
    assert fused_exact(make_plan(preset("h100-fp8").matmul, 8192))
    fast = preset("h100-fp8-fast-accum").matmul
    assert fused_exact(make_plan(fast, 2**16))
    # one chunk of 2**18 products: partial sums can reach 2**18 · 448**2 > 2**35
    assert not fused_exact(make_plan(fast, 2**18))
    assert not fused_exact(make_plan(preset("bf16").matmul, 64))  # not exact sums at all


def test_a_variant_the_plan_does_not_allow_is_refused():
    plan = make_plan(preset("bf16").matmul, 8)
    z = jnp.zeros((4, 8), jnp.float32)
    s = jnp.ones((4, 1), jnp.float32)
    with jax.enable_x64(True):
        with pytest.raises(ValueError, match=r"variant 'dot' does not compute this plan's bits"):
            reduce_quantized_pallas_gpu(z, s, z, s, plan, variant="dot", interpret=True)
        with pytest.raises(ValueError, match="block_m must be a power of two, got 48"):
            reduce_quantized_pallas_gpu(z, s, z, s, plan, block_m=48, interpret=True)


def test_small_e4m3_groups_take_per_lane_sums_and_large_ones_the_dot():
    # the masked binary64 dots multiply max(16, pow2(g)) / g products per useful one; below
    # twice (the FP64 tensor-core to CUDA-core rate ratio) the dot, else per-lane sums
    fp8 = make_plan(preset("h100-fp8").matmul, 8192)
    assert (dot_waste(fp8), choose_variant(fp8), fused_exact(fp8)) == (4.0, "fma64", True)
    assert choose_variant(make_plan(preset("h100-fp8-fast-accum").matmul, 8192)) == "fma64"
    mx = make_plan(preset("mxfp8").matmul, 8192)
    assert (dot_waste(mx), choose_variant(mx)) == (1.0, "dot")
    e4m3 = partial(spec_of, "float8_e4m3fn", "per_tensor", 13, "toward_zero")
    wastes = {g: dot_waste(make_plan(e4m3(g, 64), 256)) for g in (1, 3, 8, 9, 16, 17, 33)}
    assert wastes == {1: 16.0, 3: 16 / 3, 8: 2.0, 9: 16 / 9, 16: 1.0, 17: 32 / 17, 33: 64 / 33}
    chosen = {g: choose_variant(make_plan(e4m3(g, 64), 256)) for g in wastes}
    assert chosen == {1: "fma64", 3: "fma64", 8: "fma64", 9: "dot", 16: "dot", 17: "dot", 33: "dot"}


@pytest.mark.parametrize(
    ("name", "m", "k", "n", "splits"),
    [
        ("h100-fp8", 1, 1, 1, 1),
        ("h100-fp8-fast-accum", 1, 3, 2, 1),
        ("h100-fp8", 3, 7, 1, 2),
        ("h100-fp8-fast-accum", 2, 130, 3, 2),
        ("h100-fp8", 33, 131, 5, 2),
    ],
    ids=["1x1x1", "k-below-a-group", "k-ragged", "k-past-a-window", "k-past-a-chunk"],
)
def test_per_lane_group_sums_on_ragged_edges(name, m, k, n, splits):
    # K not a multiple of the group (nor of the 16-slot window or the 128 chunk), M and N far
    # below a block, split-K; the small-group presets by their default variant
    x, w = operands(17, m, k, n, exp_spread=6, specials=[np.nan] if m * k > 4 else [])
    spec = preset(name).matmul
    assert choose_variant(make_plan(spec, k, splits)) == "fma64"
    assert_reference_bits(emulate(x, w, spec, splits), x, w, spec, splits)


def test_per_lane_sums_with_an_odd_group_rounded_to_nearest():
    # group 3 (the sums fused where exact), rounding to nearest, block scales of 8, K = 29
    x, w = operands(23, 9, 29, 6, exp_spread=8)
    spec = spec_of("float8_e4m3fn", "block:8", 9, "nearest_even", 3, 8, "bfloat16")
    assert choose_variant(make_plan(spec, 29)) == "fma64"
    assert_reference_bits(emulate(x, w, spec, 2), x, w, spec, 2)
