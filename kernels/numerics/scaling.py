"""Scaling: how a float32 operand becomes low-precision values times float32 scales.

A scaling mode is a ``contracts.Scaling`` record, written as in the contract DSL:

* ``per_tensor``: one scale for the whole operand;
* ``per_row``: one scale per row of the left operand (per token) and per column of the
  right operand (per output channel), i.e. per run along the reduction axis K;
* ``block:N``: one scale per 1×N block along K, of each row (left) or column (right);
* ``mx:N``: as ``block:N`` but the scale is a power of two (OCP Microscaling, E8M0 scales;
  ``mx:32`` is the standard and the only MX block a contract may name; the emulation takes
  any block).

Only the FP8 formats are scaled. Wider formats (float32, bfloat16, float16) are cast directly,
with every scale equal to 1, whatever the mode says.

Scale of one run ``a`` of finite values (``amax`` = the largest ``|a|``, after binary32
subnormals are flushed):

* ``per_tensor``, ``per_row``, ``block:N``: ``s = flush(fl32(amax · fl32(1 / max_format)))``
  (binary32, round to nearest even); ``s = 1`` when that is 0.
* ``mx:N``: ``s = 2**clip(floor(log2 amax) - emax_format, -126, 127)``, ``s = 1`` when
  ``amax = 0``. (E8M0 reaches ``2**-127``; that one value is a binary32 subnormal and is not
  used.) The quantized values may exceed ``max_format`` before the cast; the cast saturates.

A run holding a non-finite value (±inf or NaN) gets the scale NaN, so every value of the run
quantizes to NaN, as a hardware quantizer propagates it: an MX block's E8M0 scale takes its NaN
encoding, and an amax of inf gives an fp32 scale whose reciprocal turns the run into NaN. (A
quantizer that skipped the non-finite value would turn inf into a finite number: 3.5 in the MX
block [inf, 1, −3].)

Quantized value: ``q = saturating_cast(fl32(a · fl32(1 / s)), format)``: multiplication by the
binary32 reciprocal of the scale, as quantizers do; the JAX versions compute it by integer
long division (:func:`kernels.numerics.bitround.reciprocal`), because a float32 division is not
correctly rounded on every backend. (Written with multiplications on purpose:
XLA rewrites a division by a constant into a multiplication by its reciprocal, so a definition
with ``a / s`` would not be reproducible once ``s`` is constant-folded.) For a finite run
``1 / s`` is finite because ``s ≥ 2**-126``, and exact for MX scales.

Int8 (``quantize_rows_int8``): symmetric, with ``per_row`` (one scale per token of ``x``, per
output channel of ``w``) or ``per_tensor`` scales, stored in a scale dtype ``D`` (float32,
bfloat16 or float16). For a run with largest magnitude ``amax``:
``s = flush(fl32(amax · fl32(1 / 127)))`` (1 when that is 0), then the stored scale
``ŝ = saturating_cast(s, D)`` (1 when that is 0: a run below ``D``'s range quantizes to zeros),
and ``q = clip(rint(fl32(a · fl32(1 / ŝ))), -127, 127)``, ties to even. The stored scale is the
one quantized with, so ``q · ŝ`` is the value the kernel multiplies. A non-finite value spoils
its run as above: ``ŝ`` is NaN and so is every ``q`` of the run.

References:
    Open Compute Project, "OCP Microscaling Formats (MX) Specification", v1.0, 2023 (shared
    exponent ``floor(log2 amax) - emax_elem``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from kernel_contracts.contracts import Scaling
from kernel_contracts.kernels.numerics.bitround import reciprocal
from kernel_contracts.kernels.numerics.formats import (
    TINY,
    flush,
    flush_np,
    format_info,
    int_format_info,
    saturating_cast,
    saturating_cast_np,
    saturating_round_int,
    saturating_round_int_np,
)

__all__ = [
    "Scaling",
    "parse_scaling",
    "quantize_cols",
    "quantize_rows",
    "quantize_rows_int8",
    "quantize_rows_int8_np",
    "quantize_rows_np",
]


def parse_scaling(scaling: str | Scaling, fmt: str) -> Scaling:
    """The scaling that quantizing to ``fmt`` applies: ``scaling`` (a record, or its DSL
    spelling parsed by ``contracts.Scaling.parse``), or ``per_tensor`` for the wider-than-FP8
    formats, which are always unscaled.

    Raises ``ValueError`` with the offending text for anything malformed.
    """
    parsed = scaling if isinstance(scaling, Scaling) else Scaling.parse(scaling)
    if not format_info(fmt).is_fp8:
        return Scaling("per_tensor")
    return parsed


def _recip_max(fmax: float) -> np.float32:
    """fl32(1 / fmax), correctly rounded."""
    return np.float32(1) / np.float32(fmax)


def _runs_shape(k: int, scaling: Scaling) -> tuple[int, int]:
    """(number of scale runs along K, run length) for an operand with K columns."""
    if not scaling.varies_along_k:
        return 1, k
    nb = -(-k // scaling.block)
    return nb, scaling.block


# ---------------------------------------------------------------------------------------------
# JAX


def _pow2_f32(e: Array) -> Array:
    """2**e as float32 for integer ``e`` in [-126, 127], built from its bits (exact)."""
    return lax.bitcast_convert_type(((e + 127) << 23).astype(jnp.int32), jnp.float32)


def quantize_rows(
    a: Float[ArrayLike, "rows k"], fmt: str, scaling: Scaling
) -> tuple[Float[Array, "rows k"], Float[Array, "rows runs"]]:
    """Quantize each row of ``a`` (runs along the last axis) to ``fmt``.

    Returns ``(q, s)``: ``q`` float32 values representable in ``fmt`` and ``s`` the float32
    scales, ``s[:, j]`` applying to columns ``[j * run, (j + 1) * run)``; ``a ≈ q * s``.
    For ``per_tensor`` one scale is shared by all rows.
    """
    return _quantize_runs(a, fmt, scaling, 1)


def quantize_cols(
    a: Float[ArrayLike, "k cols"], fmt: str, scaling: Scaling
) -> tuple[Float[Array, "k cols"], Float[Array, "runs cols"]]:
    """Quantize each column of ``a`` (runs along the first axis) to ``fmt``: the transpose of
    ``quantize_rows(a.T, fmt, scaling)``, bit for bit, without transposing ``a``.

    Returns ``(q, s)``, ``q`` shaped as ``a`` and ``s[j, :]`` the scales of rows
    ``[j * run, (j + 1) * run)``. The right operand ``w`` (K, N) is quantized this way.
    """
    return _quantize_runs(a, fmt, scaling, 0)


def _quantize_runs(a, fmt: str, scaling: Scaling, axis: int):
    """:func:`quantize_rows` (``axis = 1``) or :func:`quantize_cols` (``axis = 0``): the same
    elementwise operations and exact maxima, with the runs along ``axis``."""
    info = format_info(fmt)
    a = flush(a.astype(jnp.float32))
    k, other = a.shape[axis], a.shape[1 - axis]

    def scale_shape(runs):
        return (other, runs) if axis == 1 else (runs, other)

    if not info.is_fp8:
        return saturating_cast(a, fmt), jnp.ones(scale_shape(1), jnp.float32)
    nb, run = _runs_shape(k, scaling)
    pad = ((0, 0), (0, nb * run - k)) if axis == 1 else ((0, nb * run - k), (0, 0))
    split = (other, nb, run) if axis == 1 else (nb, run, other)
    within = 2 if axis == 1 else 1  # the axis of a run's elements in ``split``
    finite = jnp.isfinite(a)
    mag = jnp.where(finite, jnp.abs(a), 0.0)
    if scaling.kind == "per_tensor":
        amax = jnp.broadcast_to(jnp.max(mag, initial=0.0), scale_shape(1))
        spoilt = jnp.broadcast_to(~jnp.all(finite), scale_shape(1))
    else:
        amax = jnp.max(jnp.pad(mag, pad).reshape(split), axis=within, initial=0.0)
        spoilt = jnp.any(jnp.pad(~finite, pad).reshape(split), axis=within)
    if scaling.kind == "mx":
        bits = lax.bitcast_convert_type(amax, jnp.int32)
        e = ((bits >> 23) & 0xFF) - 127
        s = _pow2_f32(jnp.clip(e - info.emax, -126, 127))
        s = jnp.where(amax == 0, jnp.float32(1), s)
    else:
        s = flush(amax * _recip_max(info.max))
        s = jnp.where(s == 0, jnp.float32(1), s)
    s = jnp.where(spoilt, jnp.float32(jnp.nan), s)
    inv = reciprocal(s)
    if nb == 1:  # one run per row (column): a plain broadcast
        return saturating_cast(a * inv, fmt), s
    scaled = jnp.pad(a, pad).reshape(split) * jnp.expand_dims(inv, within)
    scaled = scaled.reshape(other, nb * run)[:, :k] if axis == 1 else scaled.reshape(-1, other)[:k]
    return saturating_cast(scaled, fmt), s


_SCALE_DTYPES = ("float32", "bfloat16", "float16")


def quantize_rows_int8(
    a: Float[ArrayLike, "rows k"],
    per_tensor: bool | Bool[ArrayLike, ""],
    scale_dtype: str | Int[ArrayLike, ""],
) -> tuple[Float[Array, "rows k"], Float[Array, "rows 1"]]:
    """Quantize each row of ``a`` to int8 (module docstring); returns ``(q, ŝ)``, ``q`` float32
    integers in [-127, 127] and ``ŝ`` the stored scales (one per row, or one shared).

    ``per_tensor`` and ``scale_dtype`` (a name, or its index in float32, bfloat16, float16) may
    be traced values, so one compiled quantizer serves every int8 spec."""
    qmax = int_format_info("int8").qmax
    a = flush(a.astype(jnp.float32))
    rows = a.shape[0]
    finite = jnp.isfinite(a)
    mag = jnp.where(finite, jnp.abs(a), 0.0)
    whole = jnp.broadcast_to(jnp.max(mag, initial=0.0), (rows, 1))
    each = jnp.max(mag, axis=1, keepdims=True, initial=0.0)
    whole_bad = jnp.broadcast_to(~jnp.all(finite), (rows, 1))
    each_bad = ~jnp.all(finite, axis=1, keepdims=True)
    if isinstance(per_tensor, bool):
        amax, spoilt = (whole, whole_bad) if per_tensor else (each, each_bad)
    else:
        amax = jnp.where(per_tensor, whole, each)
        spoilt = jnp.where(per_tensor, whole_bad, each_bad)
    s = flush(amax * _recip_max(qmax))
    s = jnp.where(s == 0, jnp.float32(1), s)
    if isinstance(scale_dtype, str):
        stored = saturating_cast(s, scale_dtype)
    else:
        stored = saturating_cast(s, _SCALE_DTYPES[0])
        for i, name in enumerate(_SCALE_DTYPES[1:], 1):  # (jnp.select lowers to an argmax)
            stored = jnp.where(scale_dtype == i, saturating_cast(s, name), stored)
    stored = jnp.where(stored == 0, jnp.float32(1), stored)
    stored = jnp.where(spoilt, jnp.float32(jnp.nan), stored)
    inv = reciprocal(stored)
    return saturating_round_int(a * inv, "int8"), stored


# ---------------------------------------------------------------------------------------------
# NumPy


def quantize_rows_int8_np(
    a: np.ndarray, per_tensor: bool, scale_dtype: str
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :func:`quantize_rows_int8`, one run at a time."""
    qmax = int_format_info("int8").qmax
    a = flush_np(np.asarray(a, np.float32))
    rows = a.shape[0]
    stored = np.ones((rows, 1), np.float32)
    for r in range(rows):
        run = a if per_tensor else a[r]
        if not np.isfinite(run).all():
            stored[r, 0] = np.float32(np.nan)
            continue
        amax = np.float32(np.abs(run).max()) if run.size else np.float32(0)
        s = flush_np(np.float32(amax * _recip_max(qmax)))
        s = np.float32(1) if s == 0 else s
        cast = saturating_cast_np(np.asarray([s], np.float32), scale_dtype)[0]
        stored[r, 0] = np.float32(1) if cast == 0 else cast
    inv = (np.float32(1) / stored).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return saturating_round_int_np(a * inv, "int8"), stored


def quantize_rows_np(a: np.ndarray, fmt: str, scaling: Scaling) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :func:`quantize_rows`, written separately for the reference."""
    info = format_info(fmt)
    a = flush_np(np.asarray(a, np.float32))
    rows, k = a.shape
    if not info.is_fp8:
        return saturating_cast_np(a, fmt), np.ones((rows, 1), np.float32)
    nb, run = _runs_shape(k, scaling)
    s = np.ones((rows, nb), np.float32)
    for r in range(rows):
        for j in range(nb):
            seg = a if scaling.kind == "per_tensor" else a[r, j * run : (j + 1) * run]
            if not np.isfinite(seg).all():  # a non-finite value spoils its whole run
                s[r, j] = np.float32(np.nan)
                continue
            vals = np.abs(seg)
            amax = np.float32(vals.max()) if vals.size else np.float32(0)
            if amax == 0:
                continue
            if scaling.kind == "mx":
                e = int(np.frexp(np.float64(amax))[1]) - 1  # floor(log2 amax); amax is normal
                s[r, j] = np.float32(2.0 ** min(max(e - info.emax, -126), 127))
            else:
                v = np.float32(amax * _recip_max(info.max))
                if abs(v) >= np.float32(TINY):
                    s[r, j] = v
    col = np.minimum(np.arange(k) // run, nb - 1)
    inv = (np.float32(1) / s).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        q = saturating_cast_np(a * inv[:, col], fmt)
    return q, s
