"""The int8 matmul: the JAX path and the NumPy reference agree bit for bit; quantizer edges;
int32 overflow is detected, never silent; the a priori epilogue bound holds."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts.bounds import matmul_error
from kernel_contracts.bounds.intexact import Claim, witness
from kernel_contracts.contracts import EpilogueSpec, preset
from kernel_contracts.kernels._matmul import emulated_dot_general, int8_matmul, matmul
from kernel_contracts.kernels._matmul.epilogue import round_scaled, target
from kernel_contracts.kernels._matmul.int8_reference import round_fraction
from kernel_contracts.kernels.numerics.scaling import quantize_rows_int8_np
from tests.support.bits import same_bits
from tests.support.strategies import examples

INT8 = preset("a100-int8").matmul
FLOATS = ("float32", "bfloat16", "float16")
M, K, N = 3, 24, 5  # one shape: the spec is data, so the JAX path compiles once


def spec_of(scales, order, fused, rounding, output, scaling="per_row", k_max=4096):
    ep = EpilogueSpec(scales, None if fused else order, fused, rounding)
    return dataclasses.replace(INT8, epilogue=ep, output=output, scaling=scaling, k_max=k_max)


specs = st.builds(
    spec_of,
    scales=st.sampled_from(FLOATS),
    order=st.sampled_from(("acc_sx_sw", "acc_sw_sx", "acc_sxsw")),
    fused=st.booleans(),
    rounding=st.sampled_from(("nearest_even", "toward_zero")),
    output=st.sampled_from(FLOATS),
    scaling=st.sampled_from(("per_row", "per_tensor")),
)


def operands(seed: int, spread: float, special: str):
    """Rows and columns of very different magnitudes (scales from 1e-30 to 1e30 when spread is
    large), zeros, and optionally a non-finite value spoiling one run."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(M, K)) * np.exp(np.clip(rng.normal(size=(M, 1)) * spread, -80, 80))
    w = rng.normal(size=(K, N)) * np.exp(np.clip(rng.normal(size=(1, N)) * spread, -80, 80))
    x[rng.random(x.shape) < 0.1] = 0.0
    if special != "none":
        x[1, 5] = {"nan": np.nan, "inf": np.inf, "zero_row": 0.0}[special]
        if special == "zero_row":
            x[1] = 0.0
    return x.astype(np.float32), w.astype(np.float32)


@examples(25)
@given(
    spec=specs,
    seed=st.integers(0, 2**31),
    spread=st.sampled_from([0.0, 3.0, 20.0, 60.0]),
    special=st.sampled_from(["none", "nan", "inf", "zero_row"]),
)
def test_jax_and_reference_agree_bit_for_bit(spec, seed, spread, special):
    x, w = operands(seed, spread, special)
    got = int8_matmul(x, w, spec, specialize=False)  # the spec as data: one compilation
    ref = int8_matmul(x, w, spec, impl="numpy")
    assert same_bits(got.y, ref.y), (spec, np.asarray(got.y), ref.y)
    assert np.array_equal(np.asarray(got.exact), ref.exact)
    assert np.array_equal(np.asarray(got.acc), ref.acc)
    assert not np.asarray(got.overflow).any()
    bad_x, bad_w = ~np.isfinite(x).all(axis=1), ~np.isfinite(w).all(axis=0)
    if spec.scaling == "per_tensor":
        bad_x, bad_w = np.full(M, bad_x.any() or bad_w.any()), np.zeros(N, bool)
    nan, spoilt = np.isnan(np.asarray(got.y)), bad_x[:, None] | bad_w[None, :]
    assert np.all(nan[spoilt])  # a non-finite input makes its run's outputs NaN
    if spread <= 20:  # beyond, a scale product can overflow to inf and 0·inf is NaN (IEEE)
        assert np.array_equal(nan, spoilt)


@pytest.mark.parametrize("fmt", FLOATS)
@pytest.mark.parametrize("rz", [False, True])
def test_rounding_of_exact_values_matches_rational_rounding(fmt, rz):
    """Random ±m·2^e (ties, halfway cases, overflow, float16 subnormals and flushed values)
    rounded by integer operations equal the rounding of the exact rational."""
    rng = np.random.default_rng(7)
    n = 400
    mag = rng.integers(0, 2**61, n) >> rng.integers(0, 61, n)
    mag[:40] = (rng.integers(1, 2**20, 40) * 2 + 1) << 20  # exact ties at 2^20
    exp = rng.integers(-200, 120, n)
    exp[40:80] = -30 - rng.integers(0, 40, 40)  # float16 subnormals, float32 flushes
    neg = rng.random(n) < 0.5
    with jax.enable_x64(True):
        f = jax.jit(round_scaled)  # format and mode traced: one compilation
        got = np.asarray(
            f(
                jnp.asarray(neg),
                jnp.asarray(mag),
                jnp.asarray(exp),
                target(jnp.int32(FLOATS.index(fmt))),
                jnp.bool_(rz),
            )
        )
    want = [
        round_fraction(Fraction(int(m)) * Fraction(2) ** int(e) * (-1 if s else 1), fmt, rz)
        for s, m, e in zip(neg, mag, exp, strict=True)
    ]
    assert same_bits(got, np.asarray(want, np.float32))


def test_quantizer_is_symmetric_and_saturates():
    x = np.array([[-1.0, 0.5, 1.0, -0.25], [3.0, -3.0, 0.0, 1e-3]], np.float32)
    q, s = quantize_rows_int8_np(x, False, "float32")
    assert q.min() == -127 and q.max() == 127  # -128 never appears
    assert list(q[0]) == [-127, 64, 127, -32]  # 63.5 rounds to the even 64
    # a bfloat16 scale rounded down (by at most 2^-8 relative) leaves amax/ŝ below 127.5
    amax = np.float32(127 * 2.0**-7 * (1 + 0.49 * 2.0**-7))
    q, s = quantize_rows_int8_np(np.array([[amax, -amax]], np.float32), False, "bfloat16")
    assert s[0, 0] == 2.0**-7 and 127 < float(amax) / float(s[0, 0]) < 127.5
    assert list(q[0]) == [127, -127]
    # float16 scales: too large saturates at 65504 (inputs clamp), too small becomes 1 (zeros)
    big = np.array([[1e9, -1e6, 2e6]], np.float32)
    q, s = quantize_rows_int8_np(big, True, "float16")
    assert s[0, 0] == 65504 and list(q[0]) == [127, -15, 31]
    q, s = quantize_rows_int8_np(np.array([[1e-7, -5e-8]], np.float32), False, "float16")
    assert s[0, 0] == 1 and not q.any()


def test_splits_and_leading_axes_change_nothing():
    x, w = operands(3, 2.0, "none")
    x3 = x.reshape(1, M, K)  # the rows of the other tests: no new compilation
    one = np.asarray(matmul(x3, w, INT8))
    assert same_bits(one, np.asarray(matmul(x3, w, INT8, splits=3)))
    assert same_bits(one[0], int8_matmul(x, w, INT8, impl="numpy").y)
    assert same_bits(one[0], int8_matmul(x, w, INT8, specialize=False).y)  # static = data
    dot = emulated_dot_general(x3, w, (((2,), (0,)), ((), ())), INT8)
    assert same_bits(dot, one)
    with pytest.raises(ValueError, match="no Pallas kernel"):
        matmul(x, w, INT8, impl="pallas")


def test_k_beyond_k_max_is_refused():
    x, w = operands(0, 0.0, "none")
    with pytest.raises(ValueError, match=r"K = 24 exceeds the declared k_max = 16"):
        matmul(x, w, dataclasses.replace(INT8, k_max=16))


def test_int32_overflow_is_detected_not_wrapped_silently():
    """K = 133145 products 127·127 pass 2^31 − 1: matmul refuses such a K; int8_matmul
    emulates the wrap the hardware does and flags the output."""
    claim = Claim("i", "inference", "int32_range", 133_145, 127, 127, 2**31 - 1)
    wit = witness(claim)
    x = np.concatenate([np.full(n, v, np.float32) for v, n in wit.x])[None, :]
    w = np.concatenate([np.full(n, v, np.float32) for v, n in wit.w])[:, None]
    spec = dataclasses.replace(INT8, k_max=claim.k_max, output="float32")
    with pytest.raises(ValueError, match=r"can wrap; use kernels._matmul.int8_matmul"):
        matmul(x, w, spec)
    for impl in ("jax", "numpy"):
        out = int8_matmul(x, w, spec, impl=impl)
        assert int(np.asarray(out.exact)[0, 0]) == wit.total == 133_145 * 16_129
        assert int(np.asarray(out.acc)[0, 0]) == wit.total - 2**32  # two's complement
        assert bool(np.asarray(out.overflow)[0, 0])
        assert float(np.asarray(out.y)[0, 0]) < 0  # the wrapped value went through the epilogue


def test_conversion_to_float32_is_exact_up_to_k_1040_only():
    """Scales of 127-valued inputs are exactly 1 and the output is float32, so y = fl32(acc):
    exact at K = 1040 (all 127), inexact for the K = 1041 witness (an odd sum above 2^24)."""
    spec = dataclasses.replace(INT8, output="float32")
    for k, exact in ((1040, True), (1041, False)):
        claim = Claim("i", "inference", "fp32_exact", k, 127, 127, 2**24)
        wit = witness(claim)
        assert (wit is None) == exact
        total = k * 16129 if wit is None else wit.total
        x = np.full((1, 1041), 127, np.float32)  # one shape: K = 1040 has a zero at the end
        x[0, k:] = 0
        w = np.full((1041, 1), 127, np.float32)
        out = int8_matmul(x, w, spec, impl="numpy")  # the JAX path agrees (tests above)
        assert int(out.exact[0, 0]) == total
        assert (float(out.y[0, 0]) == total) == exact


@examples(15)
@given(
    spec=specs,
    k=st.sampled_from([7, 512, 1100]),
    signs=st.sampled_from(["positive", "mixed"]),
    seed=st.integers(0, 2**31),
)
def test_apriori_epilogue_bound_holds(spec, k, signs, seed):
    """Against ŝ_x·ŝ_w·S (S the exact sum) the error is the epilogue's alone, within θ; against
    the exact float product, within ``against_norms``·‖x‖₂·‖w‖₂ (quantization included).
    Magnitudes keep scales and outputs in their normal ranges (the stated assumption); at
    K = 1100 the int32 → float32 conversion rounds too."""
    spec = dataclasses.replace(spec, k_max=2048)
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.1, 1.0, (4, k)) * rng.uniform(0.2, 3, (4, 1))
    w = rng.uniform(0.1, 1.0, (k, 6)) * rng.uniform(0.2, 3, (1, 6))
    if signs == "mixed":
        x *= rng.choice([-1.0, 1.0], x.shape)
        w *= rng.choice([-1.0, 1.0], w.shape)
    x, w = x.astype(np.float32), w.astype(np.float32)
    out = int8_matmul(x, w, spec, impl="numpy")
    err = matmul_error(spec, k)
    assert (err.steps[1][1] == 1) == (k * 127**2 > 2**24)
    pt = spec.scaling == "per_tensor"
    qx, sx = quantize_rows_int8_np(x, pt, spec.epilogue.scales)
    qw, sw = quantize_rows_int8_np(w.T, pt, spec.epilogue.scales)
    for i in range(4):
        for j in range(6):
            scale = Fraction(float(sx[i, 0])) * Fraction(float(sw[j, 0]))
            ref = scale * int(out.exact[i, j])
            mass = scale * int(np.abs(qx[i].astype(np.int64) * qw[j].astype(np.int64)).sum())
            assert abs(Fraction(float(out.y[i, j])) - ref) <= Fraction(err.relative) * mass
    exact = x.astype(np.float64) @ w.astype(np.float64)
    xn, wn = np.linalg.norm(x, axis=1), np.linalg.norm(w, axis=0)
    if pt:  # the assumption of a shared scale: the norms also bound the tensor's largest value
        xn, wn = np.maximum(xn, np.abs(x).max()), np.maximum(wn, np.abs(w).max())
    total = np.abs(out.y.astype(np.float64) - exact)
    assert np.all(total <= err.against_norms() * xn[:, None] * wn[None, :])


def test_apriori_has_no_bound_when_the_accumulator_can_wrap():
    assert math.isinf(matmul_error(INT8, 133_145).relative)
    assert math.isfinite(matmul_error(INT8, 133_144).relative)
    assert matmul_error(INT8, 1040).steps[1][1] == 0  # exact conversion: epilogue only
