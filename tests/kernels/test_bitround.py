"""The integer roundings of ``kernels.numerics.bitround`` against ml_dtypes, NumPy and exact
fractions.

The formats' JAX casts must give the bits of the NumPy casts (``ml_dtypes`` conversions) on
every backend, so they are compared on every value of each format, every midpoint between
neighbours and the floats next to those midpoints, the edges (±0, ±inf, NaN, the largest
finite value and beyond it, the subnormals) and random float32 bit patterns.
"""

from __future__ import annotations

from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts.kernels.numerics.bitround import encode, reciprocal, round_binary32
from kernel_contracts.kernels.numerics.formats import (
    cast_output,
    cast_output_np,
    flush_np,
    format_info,
    min_normal_exponent,
    saturating_cast,
    saturating_cast_np,
)
from tests.support.bits import same_bits
from tests.support.strategies import examples

NARROW = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")


def every_value(fmt: str) -> np.ndarray:
    """Every value of ``fmt`` (NaNs included) as float32."""
    dtype = format_info(fmt).dtype
    codes = np.arange(
        2 ** (8 * dtype.itemsize), dtype=np.uint8 if dtype.itemsize == 1 else np.uint16
    )
    return codes.view(dtype).astype(np.float32)


def probes(fmt: str) -> np.ndarray:
    """The values of ``fmt``, the midpoints between neighbours and the floats beside them,
    the edges, and random bit patterns."""
    info = format_info(fmt)
    values = every_value(fmt)
    grid = np.unique(values[np.isfinite(values)]).astype(np.float64)
    mids = ((grid[:-1] + grid[1:]) / 2).astype(np.float32)  # exact: one bit more than fmt
    with np.errstate(over="ignore"):  # bfloat16's max times 2 is inf, which is wanted
        beyond = np.float32(info.max) * np.float32([1.0, 1.01, 1.5, 2.0, 1e3])
    edges = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, 2.0**-126, 1e-40, -1e-40])
    top = grid[-1] + (grid[-1] - grid[-2]) / 2  # the overflow threshold, a tie
    rng = np.random.default_rng(21)
    random = rng.integers(0, 2**32, 50_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    parts = [
        values,
        mids,
        np.nextafter(mids, np.float32(np.inf)),
        np.nextafter(mids, np.float32(-np.inf)),
    ]
    parts += [beyond, -beyond, edges, np.float32([top, -top]), np.nextafter(np.float32([top]), 0)]
    return np.concatenate([*parts, random]).astype(np.float32)


_sat = jax.jit(saturating_cast, static_argnums=1)
_out = jax.jit(cast_output, static_argnums=1)


@pytest.mark.parametrize("fmt", NARROW)
def test_saturating_cast_is_the_ml_dtypes_cast_on_every_value_and_midpoint(fmt):
    x = probes(fmt)
    with np.errstate(over="ignore", invalid="ignore"):
        assert same_bits(_sat(jnp.asarray(x), fmt), saturating_cast_np(x, fmt))


@pytest.mark.parametrize("fmt", NARROW)
def test_cast_output_is_the_ml_dtypes_cast_on_every_value_and_midpoint(fmt):
    x = probes(fmt)
    with np.errstate(over="ignore", invalid="ignore"):
        assert same_bits(_out(jnp.asarray(x), fmt), cast_output_np(x, fmt))


def test_e4m3fn_overflow_and_saturation_edges():
    x = jnp.float32([448, 464, 464.5, 480, 1e9, np.inf, -464, -464.5, -np.inf])
    assert same_bits(_sat(x, "float8_e4m3fn"), [448, 448, 448, 448, 448, 448, -448, -448, -448])
    got = np.asarray(_out(x, "float8_e4m3fn"))  # no infinity: overflow is NaN
    assert same_bits(got[[0, 1, 6]], [448, 448, -448])
    assert np.isnan(got[[2, 3, 4, 5, 7, 8]]).all()
    assert same_bits(
        _out(jnp.float32([61439, 61440, np.inf]), "float8_e5m2"), [57344, np.inf, np.inf]
    )


@pytest.mark.parametrize("fmt", NARROW)
def test_encode_gives_each_values_own_bit_pattern(fmt):
    info = format_info(fmt)
    dtype = info.dtype
    values = every_value(fmt)
    codes = np.arange(values.size, dtype=np.uint8 if dtype.itemsize == 1 else np.uint16)
    kept = (np.abs(values) >= 2.0**-126) | (values == 0)  # binary32 subnormals are flushed
    kept &= ~np.isnan(values)
    width = 8 * dtype.itemsize
    enc = np.asarray(
        encode(
            jnp.asarray(values[kept]),
            info.mantissa_bits,
            min_normal_exponent(fmt),
            width,
            has_inf=info.has_inf,
        )
    )
    assert np.array_equal(enc, codes[kept])
    nan = np.asarray(
        encode(
            jnp.float32([np.nan]),
            info.mantissa_bits,
            min_normal_exponent(fmt),
            width,
            has_inf=info.has_inf,
        )
    )
    assert np.isnan(nan.view(dtype).astype(np.float32)).all()


def _recip_np(s: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return flush_np(np.float32(1) / s)


_recip = jax.jit(reciprocal)


def test_reciprocal_is_correctly_rounded_for_every_significand():
    # every significand of one binade (the division does not depend on the exponent but
    # through the result's exponent field), both signs
    s = (np.arange(2**23, dtype=np.int64) | (127 << 23)).astype(np.int32).view(np.float32)
    assert same_bits(_recip(jnp.asarray(s)), _recip_np(s))
    assert same_bits(_recip(jnp.asarray(-s[::97])), _recip_np(-s[::97]))


def test_reciprocal_at_the_edges_of_the_range():
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2**31, 200_000).astype(np.int32)
    s = np.concatenate(
        [
            bits.view(np.float32),
            np.float32(
                [0.0, -0.0, np.inf, -np.inf, np.nan, 2.0**-126, 2.0**126, 2.0**127, 3.4e38, 1e-40]
            ),
            np.nextafter(np.float32([2.0**126, 2.0**-126]), np.float32(np.inf)),
        ]
    )
    s = flush_np(s)
    s = np.where(np.isnan(s) | np.isinf(s) | (s != 0), s, np.float32(0))
    assert same_bits(_recip(jnp.asarray(s)), _recip_np(s))


@examples(200)
@given(st.integers(min_value=1, max_value=252), st.integers(min_value=0, max_value=2**23 - 1))
def test_reciprocal_against_exact_fractions(biased, frac):
    # |s| < 2**126: the reciprocal is a normal number
    s = np.int32((biased << 23) | frac).view(np.float32)
    r = float(np.asarray(_recip(jnp.float32(s))))
    exact = 1 / Fraction(float(s))
    below, above = (
        np.nextafter(np.float32(r), np.float32(0)),
        np.nextafter(np.float32(r), np.float32(np.inf)),
    )
    # r is at least as close to 1/s as either neighbour (never a tie for 1/s)
    assert abs(Fraction(r) - exact) < abs(Fraction(float(below)) - exact)
    assert abs(Fraction(r) - exact) < abs(Fraction(float(above)) - exact)


def _round_binary32_np(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return flush_np(np.asarray(v, np.float64).astype(np.float32)).astype(np.float64)


def _round_binary32(v):
    with jax.enable_x64(True):
        return np.asarray(jax.jit(round_binary32)(jnp.asarray(v, jnp.float64)))


def _same64(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return bool(np.all((a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))))


def test_round_binary32_is_the_ieee_conversion_then_the_flush():
    f32 = np.float32([2.0**-126, 1.5, 3.4028235e38, 1e-30, 7.0]).astype(np.float64)
    with np.errstate(over="ignore"):
        ulp = np.spacing(f32.astype(np.float32)).astype(np.float64)
    mids = np.concatenate([f32 + ulp / 2, f32 - ulp / 4, f32 + ulp / 2 + 2.0**-60 * f32])
    edges = np.float64(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            2.0**-126 - 2.0**-150,
            2.0**-126 - 2.0**-150 - 2.0**-170,
            2.0**-126 - 2.0**-151,
            2.0**-127,
            1e-300,
            2.0**128,
            3.4028235677973366e38,
            3.402823669209385e38,
        ]
    )
    rng = np.random.default_rng(7)
    random = rng.integers(0, 2**63, 200_000, dtype=np.int64).view(np.float64)
    near = rng.standard_normal(200_000) * 2.0 ** rng.integers(-130, 130, 200_000)
    v = np.concatenate([mids, -mids, edges, -edges, random, near])
    assert _same64(_round_binary32(v), _round_binary32_np(v))


@examples(300)
@given(st.floats(allow_nan=True, allow_infinity=True, width=64))
def test_round_binary32_on_random_doubles(v):
    assert _same64(_round_binary32(np.float64([v])), _round_binary32_np(np.float64([v])))


@examples(300)
@given(st.floats(width=32), st.sampled_from(NARROW))
def test_casts_on_random_floats(x, fmt):
    a = np.float32([x, -x])
    with np.errstate(over="ignore", invalid="ignore"):
        assert same_bits(_sat(jnp.asarray(a), fmt), saturating_cast_np(a, fmt))
        assert same_bits(_out(jnp.asarray(a), fmt), cast_output_np(a, fmt))


def test_ml_dtypes_is_the_reference_here():
    # the NumPy casts these tests trust are ml_dtypes conversions: check one known rounding
    assert float(np.float32(1 + 2**-8).astype(ml_dtypes.bfloat16)) == 1.0
    assert float(np.float32(1 + 3 * 2**-8).astype(ml_dtypes.bfloat16)) == 1 + 2**-6
