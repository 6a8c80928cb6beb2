"""The GPU-shaped Pallas matmul (``kernels._matmul.pallas_gpu``) in interpret mode: the NumPy
reference's bits for every preset and variant, on aligned and ragged shapes, with split-K.

Blocks of 32 × 32 make several programs per grid axis and ragged edges on small shapes; K of
256 and 200 gives several windows per chunk and a padded last one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.contracts import preset
from kernel_contracts.kernels._matmul import make_plan, matmul
from kernel_contracts.kernels._matmul.pallas_gpu import (
    choose_variant,
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
