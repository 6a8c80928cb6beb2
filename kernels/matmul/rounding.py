"""Rounding a binary64 value to the narrow accumulator format (package docstring, step 4).

Two independent implementations of the same function: :func:`round_accumulator` with integer
operations on the binary64 bit pattern (JAX; runs inside Pallas kernels too, with no
floating-point rounding primitive), and :func:`round_accumulator_np` with ``frexp``/``ldexp``
and ``trunc``/``rint`` (NumPy; used by the reference). Tests check they agree.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float

__all__ = ["round_accumulator", "round_accumulator_np"]

_FRAC = 52  # binary64 fraction bits
_MAG = 0x7FFF_FFFF_FFFF_FFFF
_INF = 0x7FF << _FRAC
_OVERFLOW = (1023 + 128) << _FRAC  # 2**128
_TINY = (1023 - 126) << _FRAC  # 2**-126


def _max_bits(m: int) -> int:
    """Bits of the largest finite accumulator value (2 - 2**-m) * 2**127, as binary64."""
    return ((1023 + 127) << _FRAC) | (((1 << m) - 1) << (_FRAC - m))


def round_accumulator(
    s: Float[Array, "*shape"], mantissa_bits: int, toward_zero: bool
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
