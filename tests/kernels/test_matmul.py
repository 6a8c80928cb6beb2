"""The three matmul implementations agree bit for bit; edge cases; errors."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kernel_contracts.contracts import AccumulatorSpec, MatmulSpec, preset
from kernel_contracts.kernels._matmul import (
    emulated_dot_general,
    make_plan,
    matmul,
    round_accumulator,
    round_accumulator_np,
)
from tests.support.bits import same_bits
from tests.support.strategies import examples

_round = jax.jit(round_accumulator, static_argnums=(1, 2))


def round_jax(s, m, rz):
    with jax.enable_x64(True):
        return np.asarray(_round(jnp.asarray(s, jnp.float64), m, rz))


# ---------------------------------------------------------------------------------------------
# rounding


def test_rounding_named_cases():
    one = 1.0
    ulp13 = 2.0**-13
    s = np.array([one + ulp13 / 2, one + 3 * ulp13 / 2, -(one + ulp13 / 2), one + ulp13 * 0.75])
    assert list(round_accumulator_np(s, 13, False)) == [1.0, 1 + 2 * ulp13, -1.0, 1 + ulp13]
    assert list(round_accumulator_np(s, 13, True)) == [1.0, 1 + ulp13, -1.0, 1.0]
    big = np.array([2.0**128, -(2.0**129), 2.0**127 * (2 - 2.0**-14)])
    assert list(round_accumulator_np(big, 13, False)) == [np.inf, -np.inf, np.inf]
    mx = (2 - 2.0**-13) * 2.0**127
    assert list(round_accumulator_np(big, 13, True)) == [mx, -mx, mx]
    tiny = np.array([2.0**-127, -(2.0**-127), -0.0, 2.0**-126])
    out = round_accumulator_np(tiny, 10, False)
    assert list(out) == [0.0, 0.0, 0.0, 2.0**-126] and not np.signbit(out).any()
    for rz in (False, True):
        assert same_bits(round_jax(s, 13, rz), round_accumulator_np(s, 13, rz))
        assert same_bits(round_jax(big, 13, rz), round_accumulator_np(big, 13, rz))
        assert same_bits(round_jax(tiny, 10, rz), round_accumulator_np(tiny, 10, rz))


@examples(60)
@given(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=32, max_size=32),
    # one fraction bit at least: with none, ties-to-even has no even digit to choose
    st.sampled_from([1, 3, 7, 10, 13, 20, 23]),
    st.booleans(),
    st.sampled_from([0, 1, 2, 120, 126, 127, -126, -127, -149]),
)
def test_rounding_twins_agree(values, m, rz, shift):
    s = np.array(values, np.float64)
    # np.where computes both branches: the non-finite entries overflow in the unused one
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.where(np.isfinite(s), s * 2.0 ** (shift - np.floor(np.log2(np.abs(s) + 1e-300))), s)
        # half of the entries become exact ties / grid points of the m-bit grid
        e = np.frexp(s[:16])[1]
        grid = np.ldexp(np.rint(np.ldexp(s[:16], m + 1 - e)), e)
        s[:16] = np.where(np.isfinite(grid), grid / 2.0 ** (m + 1) * 2.0 ** (m + 1), s[:16])
    a, b = round_jax(s, m, rz), round_accumulator_np(s, m, rz)
    assert np.array_equal(a.view(np.uint64), b.view(np.uint64)) or (
        same_bits(np.isnan(a), np.isnan(b)) and np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)])
    )


# ---------------------------------------------------------------------------------------------
# the three implementations


def spec_of(inputs, scaling, m, rounding, group, promote, output="float32"):
    return MatmulSpec(
        inputs=inputs,
        scaling=scaling,
        accumulator=AccumulatorSpec(mantissa_bits=m, rounding=rounding),
        group=group,
        promote_every=promote,
        output=output,
    )


def operands(seed, m, k, n, exp_spread=4, specials=()):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)) * 2.0 ** rng.integers(-exp_spread, exp_spread + 1, (m, k))
    w = rng.standard_normal((k, n)) * 2.0 ** rng.integers(-exp_spread, exp_spread + 1, (k, n))
    x, w = x.astype(np.float32), w.astype(np.float32)
    for i, v in enumerate(specials):
        (x if i % 2 == 0 else w).flat[(i * 5) % (x.size if i % 2 == 0 else w.size)] = v
    return x, w


def check_agree(x, w, spec, splits, impls=("jax",), more=()):
    """Compare the implementations on (x, w) and on each extra pair of the same shapes."""
    ref = None
    for impl in impls:
        f = jax.jit(lambda a, b, impl=impl: matmul(a, b, spec, impl=impl, splits=splits))
        for a, b in ((x, w), *more):
            want = matmul(a, b, spec, impl="numpy", splits=splits)
            got = np.asarray(f(a, b))
            assert same_bits(got, want), (impl, spec, splits, np.argwhere(got != want)[:5])
            ref = want if ref is None else ref
    return ref


specials = st.lists(st.sampled_from([np.nan, np.inf, -np.inf, 1e30, -1e30, 1e-40, 0.0]), max_size=3)


@pytest.mark.slow
@examples(16)
@given(
    seed=st.integers(0, 2**31),
    shape=st.tuples(st.integers(1, 4), st.integers(1, 70), st.integers(1, 5)),
    inputs=st.sampled_from(["float8_e4m3fn", "float8_e5m2"]),
    scaling=st.sampled_from(["per_tensor", "per_row", "block:8", "block:32", "mx:8", "mx:32"]),
    m=st.sampled_from([2, 7, 10, 13, 23]),
    rounding=st.sampled_from(["nearest_even", "toward_zero"]),
    group=st.sampled_from([1, 2, 3, 4, 8]),
    promote=st.sampled_from([None, 4, 8, 16, 32]),
    splits=st.sampled_from([1, 2, 3, 5]),
    output=st.sampled_from(["float32", "bfloat16"]),
    sp=specials,
)
def test_fp8_jax_equals_reference(
    seed, shape, inputs, scaling, m, rounding, group, promote, splits, output, sp
):
    block = int(scaling.split(":")[1]) if ":" in scaling else None
    assume(promote is None or block is None or max(promote, block) % min(promote, block) == 0)
    x, w = operands(seed, *shape, specials=sp)
    more = [operands(seed + i, *shape, exp_spread=i) for i in (1, 2, 3, 5, 8)]
    spec = spec_of(inputs, scaling, m, rounding, group, promote, output)
    check_agree(x, w, spec, splits, more=more)


@examples(10)
@given(
    seed=st.integers(0, 2**31),
    shape=st.tuples(st.integers(1, 4), st.integers(1, 50), st.integers(1, 5)),
    inputs=st.sampled_from(["bfloat16", "float16", "float32"]),
    m=st.sampled_from([7, 13, 23]),
    rounding=st.sampled_from(["nearest_even", "toward_zero"]),
    group=st.sampled_from([1, 2, 4]),
    promote=st.sampled_from([None, 8, 16]),
    splits=st.sampled_from([1, 3]),
    sp=specials,
)
def test_wide_formats_jax_equals_reference(
    seed, shape, inputs, m, rounding, group, promote, splits, sp
):
    x, w = operands(seed, *shape, exp_spread=2, specials=sp)
    more = [operands(seed + i, *shape, exp_spread=s) for i, s in enumerate((6, 20, 40))]
    spec = spec_of(inputs, "per_tensor", m, rounding, group, promote, "float32")
    check_agree(x, w, spec, splits, more=more)


@pytest.mark.parametrize(
    ("name", "splits"),
    [("bf16", 2), ("h100-fp8", 3)],
)
def test_pallas_interpret_presets(name, splits):
    x, w = operands(1, 3, 300, 5)
    check_agree(x, w, preset(name).matmul, splits, impls=("jax", "pallas"))


@examples(2)
@given(
    seed=st.integers(0, 2**31),
    k=st.integers(1, 40),
    group=st.sampled_from([1, 3, 4]),
    promote=st.sampled_from([None, 8]),
    rounding=st.sampled_from(["nearest_even", "toward_zero"]),
    splits=st.sampled_from([1, 2]),
    sp=specials,
)
def test_pallas_interpret_agrees(seed, k, group, promote, rounding, splits, sp):
    x, w = operands(seed, 2, k, 3, specials=sp)
    spec = spec_of("float8_e4m3fn", "block:8", 9, rounding, group, promote, "bfloat16")
    check_agree(x, w, spec, splits, impls=("pallas",))


def test_without_user_jit():
    # check_agree wraps the call in jax.jit; here the entry point is called directly
    x, w = operands(3, 2, 7, 3, specials=[np.nan])
    spec = spec_of("float8_e4m3fn", "block:4", 5, "toward_zero", 3, 4, "bfloat16")
    ref = matmul(x, w, spec, impl="numpy", splits=2)
    assert same_bits(matmul(x, w, spec, splits=2), ref)
    assert same_bits(matmul(x, w, spec, impl="pallas", splits=2), ref)


# ---------------------------------------------------------------------------------------------
# named edge cases

FP8_H100 = preset("h100-fp8").matmul
FAST = dataclasses.replace(preset("h100-fp8-fast-accum").matmul, output="float32")


def test_saturation_at_format_max():
    # per-row scaling maps amax to 448; an unscaled e4m3 operand above 448 saturates
    x = np.array([[1000.0, 2.0, -1e38]], np.float32)
    w = np.ones((3, 1), np.float32)
    spec = dataclasses.replace(FAST, scaling="per_row")
    # amax = 1e38 -> scale; inputs are finite, so the result is finite and exact to format
    out = check_agree(x, w, spec, 1)
    assert np.isfinite(out).all()
    wide = spec_of("float16", "per_tensor", 23, "nearest_even", 1, None)
    out = check_agree(np.array([[1e6, 1.0]], np.float32), np.ones((2, 1), np.float32), wide, 1)
    assert out[0, 0] == np.float32(65504.0 + 1.0)  # 1e6 saturates to float16's max


def test_nan_and_inf_inputs():
    x = np.ones((3, 8), np.float32)
    x[0, 2] = np.nan
    x[1, 3] = np.inf
    w = np.ones((8, 2), np.float32)
    out = check_agree(x, w, FP8_H100, 1)
    assert np.isnan(out[0]).all()  # NaN poisons its row only
    assert np.isnan(out[1]).all()  # so does inf: its scale run quantizes to NaN
    assert np.isfinite(out[2]).all()
    fp32 = preset("fp32").matmul
    out = check_agree(x, w, fp32, 1)
    assert np.isnan(out[0]).all() and np.isposinf(out[1]).all() and (out[2] == 8).all()
    x[2, 0], x[2, 1] = np.inf, -np.inf
    out = check_agree(x, w, fp32, 2)
    assert np.isnan(out[2]).all()  # inf - inf


def test_subnormal_inputs_are_zero():
    x = np.full((2, 4), 1e-40, np.float32)
    x[1, 0] = 1.0
    w = np.ones((4, 1), np.float32)
    for spec in (preset("fp32").matmul, preset("bf16").matmul, FP8_H100):
        out = check_agree(x, w, spec, 1)
        assert out[0, 0] == 0.0 and not np.signbit(out[0, 0])
        assert out[1, 0] == 1.0


def test_all_zero_rows_and_k_not_multiple():
    x, w = operands(5, 3, 131, 4)
    x[1] = 0.0
    for spec in (FP8_H100, preset("mxfp8").matmul, FAST):
        out = check_agree(x, w, spec, 1)
        assert (out[1] == 0).all() and not np.signbit(out[1]).any()
    for impl in ("numpy", "jax"):
        empty = np.asarray(matmul(np.ones((2, 0)), np.ones((0, 3)), FP8_H100, impl=impl))
        assert empty.shape == (2, 3) and not empty.any()
    plan = make_plan(FP8_H100, 131, 1)
    assert (plan.chunks, plan.chunk_len, plan.groups) == (2, 128, 32)


def test_chunk_boundaries_change_results():
    # toward-zero truncation: promotion every 4 keeps the small terms that a long chunk drops
    x = np.array([[2.0**10] + [1.0] * 7], np.float32)
    w = np.ones((8, 1), np.float32)
    long_chunk = spec_of("float32", "per_tensor", 3, "toward_zero", 1, None)
    short = dataclasses.replace(long_chunk, promote_every=4)
    assert check_agree(x, w, long_chunk, 1)[0, 0] == 2.0**10
    # chunks [1024, 1, 1, 1] -> 1024 and [1, 1, 1, 1] -> 4, joined in float32
    assert check_agree(x, w, short, 1)[0, 0] == 2.0**10 + 4
    assert check_agree(x, w, long_chunk, 2)[0, 0] == 2.0**10 + 4  # split-K: the same parts


@pytest.mark.no_shape_checks
def test_bad_specs_are_reported_together():
    bad = MatmulSpec(
        inputs="float4",
        scaling="per_tensor",
        accumulator=AccumulatorSpec(mantissa_bits=30, rounding="up"),
        group=0,
        promote_every=-1,
    )
    with pytest.raises(ValueError) as e:
        matmul(np.ones((1, 2)), np.ones((2, 1)), bad)
    msg = str(e.value)
    for part in (
        "matmul.inputs: unknown number format 'float4'",
        "matmul.accumulator.mantissa_bits: 30 is not an integer in [1, 23]",
        "matmul.accumulator.rounding: 'up' is not nearest_even or toward_zero",
        "matmul.group: 0 is not a positive integer",
        "matmul.promote_every: -1 is not a positive integer or null",
    ):
        assert part in msg
    clash = dataclasses.replace(FP8_H100, promote_every=96)
    with pytest.raises(ValueError, match=r"96 and the scale block 128 .* must divide one another"):
        matmul(np.ones((1, 2)), np.ones((2, 1)), clash)
    with pytest.raises(ValueError, match="shapes do not fit"):
        matmul(np.ones((1, 3)), np.ones((2, 1)), FP8_H100)
    with pytest.raises(ValueError, match="impl must be"):
        matmul(np.ones((1, 2)), np.ones((2, 1)), FP8_H100, impl="cuda")


# ---------------------------------------------------------------------------------------------
# entry points


def test_leading_axes_and_dot_general():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 16)).astype(np.float32)
    w = rng.standard_normal((16, 5)).astype(np.float32)
    spec = FP8_H100
    full = np.asarray(matmul(x, w, spec))
    assert full.shape == (2, 3, 5)
    assert same_bits(full.reshape(6, 5), matmul(x.reshape(6, 16), w, spec))
    # dot_general with the contraction on axis 0 of rhs transposed: same numbers
    dn = (((2,), (1,)), ((), ()))
    got = emulated_dot_general(x, w.T, dn, spec)
    assert same_bits(got, full)
    # batched: each batch element is its own matmul
    lhs = rng.standard_normal((4, 3, 8)).astype(np.float32)
    rhs = rng.standard_normal((4, 8, 2)).astype(np.float32)
    dn = (((2,), (1,)), ((0,), (0,)))
    got = np.asarray(jax.jit(lambda a, b: emulated_dot_general(a, b, dn, spec))(lhs, rhs))
    want = np.stack([np.asarray(matmul(lhs[i], rhs[i], spec)) for i in range(4)])
    assert same_bits(got, want)
    np_got = emulated_dot_general(lhs, rhs, dn, spec, impl="numpy")
    assert same_bits(np_got, want)
    # fp32 arithmetic is close to XLA's own dot_general
    fp32 = preset("fp32").matmul
    close = emulated_dot_general(lhs, rhs, dn, fp32, preferred_element_type=jnp.float32)
    np.testing.assert_allclose(
        close, jax.lax.dot_general(lhs, rhs, dn, precision="highest"), rtol=1e-5, atol=1e-5
    )
