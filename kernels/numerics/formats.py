"""Number formats: their constants, saturating input casts and output casts.

Five formats are supported: ``float32``, ``bfloat16``, ``float16``, ``float8_e4m3fn`` and
``float8_e5m2`` (the last three through ``ml_dtypes``, which JAX shares). Every value the
emulated kernels hand around is a ``float32`` array whose entries are representable in the
format named next to it. The formats' constants (fraction bits, largest finite value,
exponent range) are ``contracts.formats``'s table; this module pairs each with its dtype.

Behaviour at the edges (the same in the NumPy and the JAX versions; tests compare them):

* **Binary32 subnormals are flushed.** Any binary32 value of magnitude below ``2**-126``
  (a float32 or bfloat16 subnormal) is read as ``+0`` and any binary32 result below
  ``2**-126`` becomes ``+0``. XLA's CPU backend computes this way (flush-to-zero and
  denormals-are-zero), and the GPU kernels flush explicitly, so every backend agrees. The
  *narrow* formats' own subnormals (float16 down to ``2**-24``, e4m3 down to ``2**-9``, e5m2
  down to ``2**-16``) are normal binary32 numbers and are kept.
* **Input casts saturate** (the ``satfinite`` convention of FP8 hardware): finite values beyond
  the format's largest finite value ``max`` become ``±max``, ``±inf`` becomes ``±max`` and NaN
  stays NaN; everything else rounds to nearest, ties to even.
* **Output casts do not saturate**: they round to nearest even as an IEEE conversion does, so an
  overflow becomes ``±inf`` (bfloat16, float16, e5m2) or NaN (e4m3fn, which has no infinity).
* NaN payloads and NaN signs are unspecified.

The JAX versions round with integer operations on the float32 bit pattern
(:mod:`kernels.numerics.bitround`), so the rounding survives every compiler: XLA's GPU compiler
erases a pair of float conversions such as ``x.astype(narrow).astype(float32)``. The NumPy versions
use ``ml_dtypes`` conversions; tests compare the two on every value of each format, the
midpoints between them and random float32 patterns.

One integer format, ``int8``, for the int8 matmul (``kernels._matmul``): **symmetric**, values
in [-127, 127]. -128 is never produced: a scale maps the largest magnitude to 127, and the
saturating cast clamps anything that rounds beyond ±127 (the inputs of a float16 scale that
saturated at 65504, say) to ±127. The symmetric range makes negation exact and is what the
exactness obligations of ``verify`` assume (|x·w| ≤ 127² = 16129). Int8 values are handed
around as float32 arrays of integers, like the other formats.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from kernel_contracts.contracts.formats import FLOAT_FORMATS, IntFormat
from kernel_contracts.contracts.formats import INT_FORMATS as CONTRACT_INT_FORMATS
from kernel_contracts.kernels.numerics.bitround import round_float32

__all__ = [
    "FORMATS",
    "INT_FORMATS",
    "TINY",
    "FormatInfo",
    "IntFormatInfo",
    "cast_output",
    "cast_output_np",
    "flush",
    "flush_np",
    "format_info",
    "int_format_info",
    "min_normal_exponent",
    "saturating_cast",
    "saturating_cast_np",
    "saturating_round_int",
    "saturating_round_int_np",
]

# The smallest positive normal binary32 number; anything smaller is flushed to +0.
TINY = float(np.finfo(np.float32).tiny)


class FormatInfo(NamedTuple):
    """Constants of one number format."""

    name: str
    dtype: np.dtype  # the NumPy / ml_dtypes dtype (JAX accepts the same object)
    mantissa_bits: int  # explicit fraction bits
    max: float  # largest finite value
    emax: int  # exponent of the largest binade: max = (2 - 2**-k) * 2**emax for some k
    has_inf: bool
    is_fp8: bool


def _info(name: str, dtype) -> FormatInfo:
    facts = FLOAT_FORMATS[name]  # contracts.formats owns the constants; this adds the dtype
    return FormatInfo(
        name=name,
        dtype=np.dtype(dtype),
        mantissa_bits=facts.mantissa_bits,
        max=facts.max,
        emax=facts.emax,
        has_inf=facts.has_inf,
        is_fp8=facts.is_fp8,
    )


FORMATS: dict[str, FormatInfo] = {
    "float32": _info("float32", np.float32),
    "bfloat16": _info("bfloat16", ml_dtypes.bfloat16),
    "float16": _info("float16", np.float16),
    "float8_e4m3fn": _info("float8_e4m3fn", ml_dtypes.float8_e4m3fn),
    "float8_e5m2": _info("float8_e5m2", ml_dtypes.float8_e5m2),
}


IntFormatInfo = IntFormat  # a symmetric integer format: values in [-qmax, qmax]
INT_FORMATS: dict[str, IntFormatInfo] = dict(CONTRACT_INT_FORMATS)


def int_format_info(name: str) -> IntFormatInfo:
    """The constants of integer format ``name``; a ``ValueError`` naming the choices otherwise."""
    try:
        return INT_FORMATS[name]
    except KeyError:
        raise ValueError(
            f"unknown integer format {name!r}; expected one of {', '.join(INT_FORMATS)}"
        ) from None


def min_normal_exponent(name: str) -> int:
    """e with 2**e the smallest positive normal number of float format ``name``."""
    return FLOAT_FORMATS[format_info(name).name].emin


def format_info(name: str) -> FormatInfo:
    """The constants of format ``name``; a ``ValueError`` naming the choices otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(
            f"unknown number format {name!r}; expected one of {', '.join(FORMATS)}"
        ) from None


# ---------------------------------------------------------------------------------------------
# JAX versions


def flush(x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """``x`` with every entry of magnitude below ``2**-126`` (including ``-0``) set to ``+0``."""
    return jnp.where(jnp.abs(x) < TINY, jnp.zeros_like(x), x)


def _round(x, fmt: str, saturate: bool):
    info = format_info(fmt)
    x = flush(x.astype(jnp.float32))
    if fmt == "float32":
        return x
    y = round_float32(
        x,
        info.mantissa_bits,
        min_normal_exponent(fmt),
        info.max,
        saturate=saturate,
        has_inf=info.has_inf,
    )
    return flush(y)


def saturating_cast(x: Float[ArrayLike, "*shape"], fmt: str) -> Float[Array, "*shape"]:
    """Round float32 ``x`` into ``fmt`` with saturation; returns float32 values.

    The rounding is integer arithmetic on the bit pattern
    (:func:`kernels.numerics.bitround.round_float32`), never a pair of float conversions, which a
    compiler may erase."""
    return _round(x, fmt, True)


def cast_output(x: Float[ArrayLike, "*shape"], fmt: str) -> Float[Array, "*shape"]:
    """IEEE round-to-nearest-even conversion of float32 ``x`` to ``fmt``, as float32 (integer
    arithmetic on the bit pattern, as :func:`saturating_cast`)."""
    return _round(x, fmt, False)


def saturating_round_int(x: Float[ArrayLike, "*shape"], fmt: str) -> Float[Array, "*shape"]:
    """Round float32 ``x`` to the nearest integer (ties to even) and clamp it into integer
    format ``fmt``; NaN stays NaN. Returns float32 values."""
    q = int_format_info(fmt).qmax
    return jnp.clip(jnp.rint(x.astype(jnp.float32)), -q, q)


# ---------------------------------------------------------------------------------------------
# NumPy versions (used by the reference implementation)


def flush_np(x: ArrayLike) -> np.ndarray:
    """NumPy twin of :func:`flush`."""
    x = np.asarray(x, dtype=np.float32)
    return np.where(np.abs(x) < np.float32(TINY), np.float32(0), x).astype(np.float32)


def saturating_cast_np(x: ArrayLike, fmt: str) -> np.ndarray:
    """NumPy twin of :func:`saturating_cast`."""
    info = format_info(fmt)
    x = flush_np(x)
    if fmt == "float32":
        return x
    y = np.clip(x, np.float32(-info.max), np.float32(info.max))
    with np.errstate(over="ignore", invalid="ignore"):
        return flush_np(y.astype(info.dtype).astype(np.float32))


def cast_output_np(x: ArrayLike, fmt: str) -> np.ndarray:
    """NumPy twin of :func:`cast_output`."""
    info = format_info(fmt)
    x = flush_np(x)
    if fmt == "float32":
        return x
    with np.errstate(over="ignore", invalid="ignore"):
        return flush_np(x.astype(info.dtype).astype(np.float32))


def saturating_round_int_np(x: np.ndarray, fmt: str) -> np.ndarray:
    """NumPy twin of :func:`saturating_round_int`."""
    q = np.float32(int_format_info(fmt).qmax)
    return np.clip(np.rint(np.asarray(x, np.float32)), -q, q).astype(np.float32)
