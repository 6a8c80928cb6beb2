"""Rounding a binary64 value to the narrow accumulator format (package docstring, step 4).

Two independent implementations of the same function: :func:`round_accumulator` with integer
operations on the binary64 bit pattern (JAX; runs inside Pallas kernels too, with no
floating-point rounding primitive), and :func:`round_accumulator_np` with ``frexp``/``ldexp``
and ``trunc``/``rint`` (NumPy; used by the reference). Tests check they agree.

:func:`round_accumulator_in_range` is the same function restricted to arguments that can neither
overflow nor fall below ``2**-126`` (``Plan.in_range`` says when the inputs guarantee that); it
drops those checks and costs one to six integer operations per rounding instead of about
fifteen, because the rounding is then the whole of the work:

* ``toward_zero``: clearing the low ``52 - m`` fraction bits of the binary64 pattern. The
  pattern is sign | exponent | fraction, so for a normal binary64 ``s`` this keeps the sign and
  the exponent and truncates the significand to ``1 + m`` bits: the m-bit value of largest
  magnitude not above ``|s|``, i.e. rounding toward zero. A NaN stays a NaN: the arithmetic
  produces quiet NaNs, whose top fraction bit (bit 51) is kept for every ``m >= 1``.
* ``nearest_even``: adding ``2**(d - 1) - 1`` plus the lowest kept bit (``d = 52 - m``) to the
  pattern, then clearing the low ``d`` bits. The addition carries into the kept bits exactly
  when the dropped part exceeds half a unit, or equals it and the kept part is odd; a carry out
  of the fraction increments the exponent, which is the rounding up to the next binade. Below
  ``2**128`` no carry reaches the sign bit. NaNs are passed through explicitly (a payload could
  carry).

No rounding is written as a float conversion (``s.astype(float32).astype(float64)``): XLA's GPU
compiler erases such pairs, so the ``m = 23`` rounding is the same integer operations as every
other ``m``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike, Float

__all__ = ["round_accumulator", "round_accumulator_in_range", "round_accumulator_np"]

_FRAC = 52  # binary64 fraction bits
_MAG = 0x7FFF_FFFF_FFFF_FFFF
_INF = 0x7FF << _FRAC
_OVERFLOW = (1023 + 128) << _FRAC  # 2**128
_TINY = (1023 - 126) << _FRAC  # 2**-126


def _max_bits(m: int) -> int:
    """Bits of the largest finite accumulator value (2 - 2**-m) * 2**127, as binary64."""
    return ((1023 + 127) << _FRAC) | (((1 << m) - 1) << (_FRAC - m))


def round_accumulator(
    s: Float[ArrayLike, "*shape"], mantissa_bits: int, toward_zero: bool
) -> Float[Array, "*shape"]:
    """Round binary64 ``s`` to ``mantissa_bits`` fraction bits in binary32's exponent range.

    Must be traced with 64-bit types enabled (``jax.enable_x64``). See the package docstring
    for the exact semantics (flush below ``2**-126``, IEEE overflow, zeros are +0).
    """
    drop = _FRAC - mantissa_bits
    bits = lax.bitcast_convert_type(s, jnp.int64)
    mag = bits & jnp.int64(_MAG)
    keep = jnp.int64(~((1 << drop) - 1))
    if toward_zero:
        rounded = mag & keep
    else:
        lsb = (mag >> drop) & jnp.int64(1)
        rounded = (mag + jnp.int64((1 << (drop - 1)) - 1) + lsb) & keep
    if toward_zero:
        rounded = jnp.where(rounded >= _OVERFLOW, jnp.int64(_max_bits(mantissa_bits)), rounded)
    else:
        rounded = jnp.where(rounded >= _OVERFLOW, jnp.int64(_INF), rounded)
    rounded = jnp.where(rounded < _TINY, jnp.int64(0), rounded)
    rounded = jnp.where(mag >= _INF, mag, rounded)  # inf and NaN pass through
    value = lax.bitcast_convert_type(rounded, jnp.float64)
    return jnp.where((bits < 0) & (rounded != 0), -value, value)


def round_accumulator_in_range(
    s: Float[ArrayLike, "*shape"], mantissa_bits: int, toward_zero: bool
) -> Float[Array, "*shape"]:
    """:func:`round_accumulator` for ``s`` that is NaN, ``+0``, or of magnitude in
    ``[2**-126, 2**127]``: the flush and overflow checks cannot fire there and are left out.

    Must be traced with 64-bit types enabled. The caller guarantees the range (see the module
    docstring for why the bit operations are the rounding).
    """
    drop = _FRAC - mantissa_bits
    bits = lax.bitcast_convert_type(s, jnp.int64)
    keep = jnp.int64(~((1 << drop) - 1))  # keeps the sign, the exponent and m fraction bits
    if toward_zero:
        return lax.bitcast_convert_type(bits & keep, jnp.float64)
    lsb = (bits >> drop) & jnp.int64(1)
    rounded = (bits + jnp.int64((1 << (drop - 1)) - 1) + lsb) & keep
    return jnp.where(jnp.isnan(s), s, lax.bitcast_convert_type(rounded, jnp.float64))


def round_accumulator_np(s: np.ndarray, mantissa_bits: int, toward_zero: bool) -> np.ndarray:
    """NumPy twin of :func:`round_accumulator`, computed with frexp/ldexp arithmetic."""
    s = np.asarray(s, np.float64)
    out = s.copy()
    finite = np.isfinite(s) & (s != 0)
    _, e = np.frexp(np.where(finite, s, 1.0))  # s = mant * 2**e, 0.5 <= |mant| < 1
    q = (e - 1) - mantissa_bits  # exponent of the accumulator's last place
    scaled = np.ldexp(np.where(finite, s, 1.0), -q)  # exact: 2**m <= |scaled| < 2**(m+1)
    r = np.trunc(scaled) if toward_zero else np.rint(scaled)  # rint: ties to even
    v = np.ldexp(r, q)
    big = np.abs(v) >= 2.0**128
    if toward_zero:
        v = np.where(big, np.sign(v) * (2.0 - 2.0**-mantissa_bits) * 2.0**127, v)
    else:
        v = np.where(big, np.sign(v) * np.inf, v)
    v = np.where(np.abs(v) < 2.0**-126, 0.0, v)
    out = np.where(finite, v, out)
    return np.where(out == 0, 0.0, out)  # every zero is +0
