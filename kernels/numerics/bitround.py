"""Roundings written as integer operations on bit patterns, so that no compiler may remove them.

A rounding written as a pair of float conversions (``x.astype(narrow).astype(jnp.float32)``)
is erased by XLA's GPU compiler, which collapses chains of float converts, and a float32
division is compiled there to an instruction that is not correctly rounded. The functions here
compute the same values with integer arithmetic on the IEEE-754 bit patterns (and one exact
integer-to-float conversion), so every backend computes the same bits:

* :func:`round_float32` rounds float32 values to a narrower float format (to nearest, ties to
  even), with the format's subnormals, and either saturates or overflows as an IEEE conversion
  does (to ±inf, or to NaN for a format without infinities such as e4m3fn);
* :func:`round_binary32` rounds binary64 values to binary32 (to nearest, ties to even, IEEE
  overflow) and flushes results below ``2**-126`` to +0, returning binary64;
* :func:`to_float32` is :func:`round_binary32` delivered as float32, its pattern assembled
  from integers (no float conversion at all);
* :func:`reciprocal` is the correctly rounded float32 reciprocal, by integer long division;
* :func:`encode` gives the bit pattern of a float32 value that is exactly representable in a
  narrow format, for storing it in that format's container without a float conversion.

Float32 inputs are read with their subnormals flushed (a binary32 subnormal counts as zero),
as everywhere in ``kernels`` (:mod:`kernels.numerics.formats`). ``tests/kernels/test_bitround.py``
compares every function with ``ml_dtypes`` / NumPy conversions and exact rational arithmetic.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike, Float, UInt

__all__ = ["UNSIGNED", "encode", "reciprocal", "round_binary32", "round_float32", "to_float32"]

# the unsigned integer dtype that holds a bit pattern, by its width in bits
UNSIGNED = {8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32}

_SIGN32 = -(2**31)  # the sign bit of an int32 pattern
_MAG32 = 0x7FFF_FFFF
_INF32 = 0x7F80_0000
_NAN32 = 0x7FC0_0000
_NORMAL32 = 0x0080_0000  # 2**-126, the smallest normal binary32 number
_FRAC32 = 0x007F_FFFF


def _bits32(x):
    return lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32)


def _float32(bits):
    return lax.bitcast_convert_type(bits.astype(jnp.int32), jnp.float32)


def round_float32(
    x: Float[ArrayLike, "*shape"],
    mantissa_bits: int,
    emin: int,
    max_value: float,
    *,
    saturate: bool,
    has_inf: bool,
) -> Float[Array, "*shape"]:
    """Float32 ``x`` rounded to nearest (ties to even) in the format with ``mantissa_bits``
    fraction bits, smallest normal exponent ``emin`` (subnormals below ``2**emin``, spaced
    ``2**(emin - mantissa_bits)``) and largest finite value ``max_value``; as float32.

    ``saturate``: ``±inf`` and finite values beyond ``max_value`` become ``±max_value``.
    Otherwise a result above ``max_value`` (an IEEE overflow, ``±inf`` included) is ``±inf``
    when ``has_inf``, else NaN. NaN stays NaN. A zero result keeps the sign of ``x``.
    """
    x = x.astype(jnp.float32)
    if mantissa_bits >= 23:
        return x
    if saturate:
        top = np.float32(max_value)  # a float32 constant: no conversion in the program
        x = jnp.clip(x, -top, top)  # NaN stays NaN; ±inf becomes ±max
    bits = _bits32(x)
    sign = bits & jnp.int32(_SIGN32)
    mag = bits & jnp.int32(_MAG32)
    drop = 23 - mantissa_bits
    # in the format's normal range: round the pattern itself (a carry out of the fraction
    # increments the exponent, which is the rounding up to the next binade)
    lsb = (mag >> drop) & 1
    out = (mag + jnp.int32((1 << (drop - 1)) - 1) + lsb) & jnp.int32(~((1 << drop) - 1))
    quantum = emin - mantissa_bits  # exponent of the subnormals' spacing
    if quantum >= -126:  # the format has subnormals that are binary32 normal numbers
        e = (mag >> 23) - 127
        sig = (mag & _FRAC32) | _NORMAL32
        d = jnp.clip(quantum - (e - 23), 1, 25)  # fraction bits to drop, >= 1 below 2**emin
        one = jnp.int32(1)
        r = (sig + (one << (d - 1)) - 1 + ((sig >> d) & 1)) >> d  # sig < 2**24: no overflow
        sub = _bits32(r.astype(jnp.float32) * np.float32(2.0**quantum))  # both exact
        out = jnp.where(e < emin, sub, out)
    out = jnp.where(mag < _NORMAL32, 0, out)  # zeros and (flushed) binary32 subnormals
    if not saturate:
        top = int(np.float32(max_value).view(np.int32))
        out = jnp.where(out > top, _INF32 if has_inf else _NAN32, out)
    return jnp.where(jnp.isnan(x), x, _float32(sign | out))


_MAG64 = 0x7FFF_FFFF_FFFF_FFFF
_INF64 = 0x7FF << 52
_OVERFLOW64 = (1023 + 128) << 52  # 2**128
_TINY64 = (1023 - 126) << 52  # 2**-126
_ROUNDS_UP64 = int(np.float64(2.0**-126 - 2.0**-150).view(np.int64))


def round_binary32(v: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """``flush(fl32(v))`` for binary64 ``v``, as binary64: the IEEE conversion to binary32
    (to nearest, ties to even; beyond the largest finite value ±inf; inf and NaN pass), with
    every result below ``2**-126`` (including ``-0``) made +0.

    Below ``2**-126`` the IEEE conversion rounds to binary32's subnormal grid (spacing
    ``2**-149``), so exactly the magnitudes from ``2**-126 - 2**-150`` (a tie, to the even
    ``2**-126``) up round to ``2**-126``; smaller ones give a subnormal, which is flushed.
    Must be traced with 64-bit types enabled (``jax.enable_x64``).
    """
    negative, out = _rounded_magnitude64(v)
    value = lax.bitcast_convert_type(out, jnp.float64)
    return jnp.where(negative & (out != 0), -value, value)


def to_float32(v: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """:func:`round_binary32` of binary64 ``v`` as a float32 array, its pattern assembled from
    the rounded binary64 pattern with integer operations: no float conversion, which a
    compiler could fold into its neighbours (NaNs come out as the quiet NaN with the sign of
    ``v``). Must be traced with 64-bit types enabled."""
    negative, out = _rounded_magnitude64(v)
    exponent = (out >> 52) - (1023 - 127)  # in [1, 254] for a finite non-zero result
    finite = (exponent << 23) | ((out >> (52 - 23)) & _FRAC32)
    bits = jnp.where(out == 0, 0, finite)
    bits = jnp.where(out >= _INF64, _INF32, bits)
    bits = jnp.where(out > _INF64, _NAN32, bits)
    bits = jnp.where(negative & (out != 0), bits | (1 << 31), bits)
    return _float32(bits - jnp.where(bits >= 2**31, 2**32, 0))


def _rounded_magnitude64(v):
    """Whether binary64 ``v`` is negative, and the binary64 pattern of ``|round_binary32(v)|``
    (module docstring of :func:`round_binary32`)."""
    bits = lax.bitcast_convert_type(v.astype(jnp.float64), jnp.int64)
    mag = bits & jnp.int64(_MAG64)
    drop = 52 - 23
    lsb = (mag >> drop) & jnp.int64(1)
    out = (mag + jnp.int64((1 << (drop - 1)) - 1) + lsb) & jnp.int64(~((1 << drop) - 1))
    out = jnp.where(out >= _OVERFLOW64, jnp.int64(_INF64), out)
    small = jnp.where(mag >= _ROUNDS_UP64, jnp.int64(_TINY64), jnp.int64(0))
    out = jnp.where(mag < _TINY64, small, out)
    out = jnp.where(mag >= _INF64, mag, out)  # inf and NaN pass through
    return bits < 0, out


def reciprocal(s: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """``flush(fl32(1 / s))`` for float32 ``s``: the correctly rounded reciprocal (to nearest;
    never a tie), by integer long division of the significands.

    ``s`` of magnitude below ``2**-126`` (zeros and flushed subnormals) gives ``±inf``, NaN
    gives NaN, and results below ``2**-126`` (``|s| > 2**126``, ``±inf``) are +0.
    """
    bits = _bits32(s)
    sign = bits & jnp.int32(_SIGN32)
    mag = bits & jnp.int32(_MAG32)
    biased = mag >> 23
    big = (mag & _FRAC32) | _NORMAL32  # the significand S, 2**23 <= S < 2**24
    # floor(2**48 / S) for S > 2**23: the first quotient bit is 1 (2**24 / S is in (1, 2)),
    # then 24 more; every remainder stays below S < 2**24, so 2 · remainder fits in int32
    rem = jnp.int32(1 << 24) - big
    q = jnp.ones_like(big)
    for _ in range(24):
        rem = rem << 1
        bit = rem >= big
        rem = jnp.where(bit, rem - big, rem)
        q = (q << 1) | bit.astype(jnp.int32)
    # q has 25 bits and a non-zero remainder below it, so the last bit decides (no tie);
    # 1/s = R · 2**(-24 - e), R = round(q / 2) in [2**23, 2**24] (2**24 carries the exponent)
    r = (q >> 1) + (q & 1)
    exponent = 253 - biased
    general = (exponent << 23) + (r - _NORMAL32)
    general = jnp.where(exponent >= 1, general, 0)  # below 2**-126: flushed
    power = jnp.maximum(254 - biased, 0) << 23  # s a power of two: 1/s exactly (or flushed)
    out = jnp.where((mag & _FRAC32) == 0, power, general)
    out = jnp.where(mag < _NORMAL32, _INF32, out)
    out = jnp.where(biased == 255, 0, out)  # inf; NaN is passed below
    return jnp.where(jnp.isnan(s), s, _float32(jnp.where(out == 0, 0, sign | out)))


def encode(
    x: Float[ArrayLike, "*shape"], mantissa_bits: int, emin: int, width: int, *, has_inf: bool
) -> UInt[Array, "*shape"]:
    """The ``width``-bit pattern of float32 ``x`` in the format with ``mantissa_bits`` fraction
    bits and smallest normal exponent ``emin`` (exponent bias ``1 - emin``); every ``x`` must
    be representable in the format (NaN gives its quiet NaN, ±inf its infinity, when it has
    one). Returns ``uint8``, ``uint16`` or ``uint32`` for ``lax.bitcast_convert_type``."""
    dtype = UNSIGNED[width]
    bits = _bits32(x)
    if width == 32:
        return lax.bitcast_convert_type(bits, jnp.uint32)
    p = mantissa_bits
    ebits = width - 1 - p
    mag = bits & jnp.int32(_MAG32)
    e = (mag >> 23) - 127
    frac = mag & _FRAC32
    normal = ((e + (1 - emin)) << p) | (frac >> (23 - p))
    shift = jnp.clip((emin - p) - (e - 23), 0, 31)
    sub = ((frac | _NORMAL32) >> shift) if emin - p >= -126 else jnp.zeros_like(mag)
    code = jnp.where(e < emin, sub, normal)
    code = jnp.where(mag < _NORMAL32, 0, code)
    all_ones = (1 << ebits) - 1
    if has_inf:
        code = jnp.where(mag == _INF32, all_ones << p, code)
        nan = (all_ones << p) | (1 << (p - 1))
    else:
        nan = (1 << (width - 1)) - 1  # e4m3fn: S.1111.111
    code = jnp.where(mag > _INF32, nan, code)
    code = code | jnp.where(bits < 0, 1 << (width - 1), 0)
    return code.astype(dtype)
