"""Formats and scaling: edge behaviour, and the JAX and NumPy twins agree bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts.contracts import FLOAT_FORMATS
from kernel_contracts.kernels.numerics.formats import (
    FORMATS,
    TINY,
    cast_output,
    cast_output_np,
    format_info,
    saturating_cast,
    saturating_cast_np,
)
from kernel_contracts.kernels.numerics.scaling import (
    Scaling,
    parse_scaling,
    quantize_rows,
    quantize_rows_np,
)
from tests.support.bits import same_bits
from tests.support.strategies import examples

FMTS = list(FORMATS)
FP8 = ["float8_e4m3fn", "float8_e5m2"]


floats32 = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)


def test_format_constants():
    assert format_info("float8_e4m3fn").max == 448.0
    assert format_info("float8_e5m2").max == 57344.0
    assert format_info("float16").max == 65504.0
    assert format_info("bfloat16").mantissa_bits == 7
    assert [format_info(f).emax for f in FP8] == [8, 15]
    with pytest.raises(ValueError, match="unknown number format 'float4'"):
        format_info("float4")


@pytest.mark.parametrize("fmt", FMTS)
def test_contract_format_table_matches_ml_dtypes(fmt):
    """contracts.formats (the one table kernels and bounds read) against ml_dtypes' facts."""
    facts, fi = FLOAT_FORMATS[fmt], ml_dtypes.finfo(FORMATS[fmt].dtype)
    assert facts.mantissa_bits == int(fi.nmant)
    assert facts.exponent_bits == int(fi.nexp)
    assert facts.bits == int(fi.bits)
    assert facts.max == float(fi.max)
    assert facts.emax == int(np.floor(np.log2(float(fi.max))))
    assert 2.0**facts.emin == float(fi.smallest_normal)
    with np.errstate(over="ignore"):
        as_inf = np.array(np.inf, np.float32).astype(FORMATS[fmt].dtype).astype(np.float32)
    assert facts.has_inf == bool(np.isinf(as_inf))


def test_scaling_record_round_trips():
    for text in ("per_tensor", "per_row", "block:1", "block:128", "mx:32", "mx:8"):
        assert str(Scaling.parse(text)) == text
    assert Scaling.parse("block:128") == Scaling("block", 128)
    for bad in ("block:08", "per_row\n", " mx:32", "block:\u0663", "mx:", 32, None):
        with pytest.raises(ValueError, match="scaling"):
            Scaling.parse(bad)


@pytest.mark.parametrize("fmt", FMTS)
def test_saturating_cast_edges(fmt):
    info = format_info(fmt)
    big = np.float32(3.4e38)
    x = np.array([np.inf, -np.inf, np.nan, big, -big, info.max, 0.0, -0.0, 1e-40], np.float32)
    y = saturating_cast_np(x, fmt)
    if fmt == "float32":
        assert y[0] == np.inf and y[1] == -np.inf
    else:
        assert y[0] == info.max and y[1] == -info.max  # inf saturates
        assert y[3] == info.max and y[4] == -info.max  # overflow saturates
    assert np.isnan(y[2])
    assert y[5] == np.float32(info.max)
    assert same_bits(y[6:], np.zeros(3, np.float32))  # zeros and subnormals become +0
    assert same_bits(saturating_cast(jnp.asarray(x), fmt), y)


def test_narrow_subnormals_are_kept():
    # the formats' own subnormals are normal binary32 numbers
    assert saturating_cast_np(np.float32(2.0**-9), "float8_e4m3fn") == 2.0**-9
    assert saturating_cast_np(np.float32(2.0**-16), "float8_e5m2") == 2.0**-16
    assert saturating_cast_np(np.float32(2.0**-24), "float16") == 2.0**-24
    # below half the smallest subnormal: rounds to zero
    assert saturating_cast_np(np.float32(2.0**-11), "float8_e4m3fn") == 0.0


def test_output_cast_overflows_instead_of_saturating():
    x = np.array([1e6, -1e6, 3.0e38], np.float32)
    assert np.all(np.isinf(cast_output_np(x[:2], "float16")))
    assert np.isnan(cast_output_np(x[:1], "float8_e4m3fn"))[0]
    assert np.isinf(cast_output_np(np.float32(3.4e38), "bfloat16"))
    assert same_bits(cast_output(jnp.asarray(x), "bfloat16"), cast_output_np(x, "bfloat16"))


_sat = jax.jit(saturating_cast, static_argnums=1)
_out = jax.jit(cast_output, static_argnums=1)
_quant = jax.jit(quantize_rows, static_argnums=(1, 2))


@examples(60)
@given(st.lists(floats32, min_size=64, max_size=64), st.sampled_from(FMTS))
def test_casts_jax_equals_numpy(values, fmt):
    x = np.array(values, np.float32)
    assert same_bits(_sat(jnp.asarray(x), fmt), saturating_cast_np(x, fmt))
    assert same_bits(_out(jnp.asarray(x), fmt), cast_output_np(x, fmt))
    y = saturating_cast_np(x, fmt)
    finite = np.isfinite(y)
    assert np.all(np.abs(y[finite]) <= format_info(fmt).max)
    assert np.all(np.isfinite(y) | np.isnan(x) | (fmt == "float32"))
    # representable: casting again changes nothing
    dt = FORMATS[fmt].dtype
    with np.errstate(over="ignore"):
        assert same_bits(y[finite].astype(dt).astype(np.float32), y[finite])


def test_parse_scaling():
    assert parse_scaling("per_tensor", "float8_e4m3fn") == Scaling("per_tensor")
    assert parse_scaling("block:128", "float8_e4m3fn") == Scaling("block", 128)
    assert parse_scaling("mx:32", "float8_e5m2") == Scaling("mx", 32)
    assert parse_scaling("block:128", "bfloat16") == Scaling("per_tensor")  # wide: unscaled
    for bad in ("block", "block:0", "mx:x", "tile:4", "per-row"):
        with pytest.raises(ValueError, match="is not one of per_tensor, per_row"):
            parse_scaling(bad, "float8_e4m3fn")


SCALINGS = ["per_tensor", "per_row", "block:4", "block:16", "mx:32", "mx:8"]


@examples(60)
@given(
    st.sampled_from([1, 3]),
    st.sampled_from([1, 33]),
    st.sampled_from(SCALINGS),
    st.sampled_from(FMTS),
    st.integers(-40, 40),
    st.data(),
)
def test_quantize_jax_equals_numpy(rows, k, scaling, fmt, exp, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    x = (rng.standard_normal((rows, k)) * 2.0**exp).astype(np.float32)
    specials = data.draw(st.lists(floats32, max_size=4))
    for i, v in enumerate(specials):
        x.flat[(i * 7) % x.size] = v
    sc = parse_scaling(scaling, fmt)
    q, s = _quant(jnp.asarray(x), fmt, sc)
    q_np, s_np = quantize_rows_np(x, fmt, sc)
    assert same_bits(q, q_np) and same_bits(s, s_np)
    spoilt = np.isnan(s_np)  # exactly the runs that hold a non-finite value, all NaN
    assert np.all(np.asarray(s_np)[~spoilt] > 0)
    run = k if sc.block is None else sc.block
    for r, j in zip(*np.nonzero(spoilt), strict=True):
        rows_ = slice(None) if sc.kind == "per_tensor" else r
        cols = slice(j * run, (j + 1) * run)
        assert not np.isfinite(x[rows_, cols]).all()
        assert np.isnan(np.asarray(q_np)[r, cols]).all()
    if sc.kind == "mx":
        mant, _ = np.frexp(s_np[~spoilt])
        assert np.all(mant == 0.5)  # powers of two


def test_quantize_scales_and_zero_rows():
    x = np.zeros((2, 8), np.float32)
    x[1] = np.arange(8) - 3.5
    q, s = quantize_rows_np(x, "float8_e4m3fn", Scaling("per_row"))
    assert s[0, 0] == 1.0 and np.all(q[0] == 0)  # all-zero row: scale 1
    assert s[1, 0] == np.float32(3.5) * (np.float32(1) / np.float32(448))
    assert np.max(np.abs(q[1])) == 448.0  # amax maps to the format's max
    # a non-finite value spoils its run: scale NaN, every value of the run NaN
    x[1, 0] = np.inf
    q, s = quantize_rows_np(x, "float8_e4m3fn", Scaling("per_row"))
    assert np.isnan(s[1, 0]) and np.isnan(q[1]).all() and s[0, 0] == 1.0
    # the MX block [inf, 1, −3] (it read 3.5, 1, −3 when amax skipped the inf)
    xb = np.zeros((1, 64), np.float32)
    xb[0, :3] = [np.inf, 1.0, -3.0]
    xb[0, 32:35] = [2.0, 1.0, -3.0]
    for impl in (quantize_rows_np, _quant):
        q, s = impl(xb, "float8_e4m3fn", Scaling("mx", 32))
        q, s = np.asarray(q), np.asarray(s)
        assert np.isnan(s[0, 0]) and np.isnan(q[0, :32]).all()
        assert s[0, 1] == 2.0 ** (1 - 8) and np.isfinite(q[0, 32:]).all()
    # MX: shared exponent floor(log2 amax) - emax_elem
    xm = np.full((1, 32), 3.0, np.float32)
    q, s = quantize_rows_np(xm, "float8_e4m3fn", Scaling("mx", 32))
    assert s[0, 0] == 2.0 ** (1 - 8) and q[0, 0] == 3.0 * 2**7


def test_flush_matches_xla_cpu():
    # XLA's CPU backend flushes binary32 subnormals; the definition makes that explicit
    if jax.default_backend() != "cpu":
        pytest.skip("checks the CPU backend's flush-to-zero")
    tiny = jnp.float32(TINY)
    assert float(jax.jit(lambda a: a * jnp.float32(0.25))(tiny)) == 0.0
    assert ml_dtypes.finfo(np.float32).tiny == TINY
