"""The int8 epilogue in JAX: exact products of integers and float32 scales, rounded once each.

Every value the epilogue handles is ``±m·2**e`` with an integer ``m``: the int32 accumulator
(``e = 0``) or a float32 number (its 24-bit significand). A product of two such values is
formed exactly in int64 (at most 48 bits); the product of three (a fused epilogue, up to 72
bits) is formed in two int64 limbs and folded into one with a sticky bit below the rounding
position. :func:`round_scaled` then rounds ``±m·2**e`` to a float format once, with integer
operations only, so no floating-point rounding of the machine takes part (the NumPy reference
rounds exact rationals instead; tests compare the two).

Rounding to a format with ``p`` fraction bits: to nearest (ties to even) or toward zero at the
last place of the value's binade (float16 keeps its subnormals: the last place is at least
``2**-24``); a result above the format's largest finite value is ±inf to nearest and ±max
toward zero; float32 and bfloat16 results below ``2**-126`` become +0 (the package's flush
rule); every zero is +0. Must be traced with ``jax.enable_x64``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from kernel_contracts.contracts import EpilogueSpec
from kernel_contracts.kernels.numerics.formats import TINY, format_info, min_normal_exponent

__all__ = [
    "EpilogueCode",
    "Target",
    "apply_epilogue",
    "epilogue_code",
    "round_scaled",
    "split_f32",
    "target",
]

_LIMB = 12  # the third factor of a fused product is split into two 12-bit halves


def _pow2(e: Int[ArrayLike, "*s"]) -> Float[Array, "*s"]:
    """2**e as binary64 for integer e in [-1022, 1023], built from its bits (exact)."""
    e = jnp.clip(e, -1022, 1023).astype(jnp.int64)
    return lax.bitcast_convert_type((e + 1023) << 52, jnp.float64)


_FLOATS = ("float32", "bfloat16", "float16")  # the formats an int8 epilogue rounds to
_ORDERS = ("acc_sx_sw", "acc_sw_sx", "acc_sxsw")


class Target(NamedTuple):
    """A float format as traced numbers, so one compiled epilogue serves every spec."""

    bits: Int[Array, ""]  # explicit fraction bits p
    emin: Int[Array, ""]  # smallest normal exponent
    max: Float[Array, ""]  # largest finite value
    subnormals: bool | Bool[Array, ""]  # gradual underflow kept (float16), else flushed


def target(fmt: str | Int[ArrayLike, ""]) -> Target:
    """The ``Target`` of a float format, by name or by its index in (float32, bfloat16,
    float16)."""
    infos = [format_info(f) for f in _FLOATS]
    index = _FLOATS.index(fmt) if isinstance(fmt, str) else fmt
    if isinstance(index, int):  # a constant: no table lookup in the compiled program
        f = _FLOATS[index]
        return Target(
            bits=jnp.int64(infos[index].mantissa_bits),
            emin=jnp.int64(min_normal_exponent(f)),
            max=jnp.float64(infos[index].max),
            subnormals=f == "float16",
        )
    pick = lambda values, dtype: jnp.asarray(values, dtype)[index]  # noqa: E731
    return Target(
        bits=pick([i.mantissa_bits for i in infos], jnp.int64),
        emin=pick([min_normal_exponent(f) for f in _FLOATS], jnp.int64),
        max=pick([i.max for i in infos], jnp.float64),
        subnormals=pick([f == "float16" for f in _FLOATS], jnp.bool_),
    )


class EpilogueCode(NamedTuple):
    """An ``EpilogueSpec`` and output format as integers (indices and flags): Python values
    (static: the program holds only the spec's own epilogue) or traced arrays (data: one
    program serves every spec)."""

    order: int | Int[Array, ""]  # index in (acc_sx_sw, acc_sw_sx, acc_sxsw); unused when fused
    fused: bool | Bool[Array, ""]
    toward_zero: bool | Bool[Array, ""]
    output: int | Int[Array, ""]  # index in (float32, bfloat16, float16)
    scales: int | Int[Array, ""]  # the scales' dtype, same indices


def epilogue_code(epilogue: EpilogueSpec, output: str, *, traced: bool = False) -> EpilogueCode:
    """``epilogue`` with output format ``output`` as an ``EpilogueCode`` (Python values, or
    arrays when ``traced``)."""
    code = EpilogueCode(
        order=_ORDERS.index(epilogue.order) if epilogue.order else 0,
        fused=epilogue.fused,
        toward_zero=epilogue.rounding == "toward_zero",
        output=_FLOATS.index(output),
        scales=_FLOATS.index(epilogue.scales),
    )
    if not traced:
        return code
    kinds = (jnp.int32, jnp.bool_, jnp.bool_, jnp.int32, jnp.int32)
    return EpilogueCode(*(kind(v) for kind, v in zip(kinds, code, strict=True)))


def round_scaled(
    neg: Bool[ArrayLike, "*s"],
    mag: Int[ArrayLike, "*s"],
    exp: Int[ArrayLike, "*s"],
    fmt: str | Target,
    toward_zero: bool | Bool[ArrayLike, ""],
) -> Float[Array, "*s"]:
    """``(-1)**neg · mag · 2**exp`` (``0 <= mag < 2**62``) rounded once to float format ``fmt``;
    returned as float32 (see the module docstring)."""
    t = target(fmt) if isinstance(fmt, str) else fmt
    mag, exp = mag.astype(jnp.int64), exp.astype(jnp.int64)
    top = exp + (63 - lax.clz(mag))  # exponent of the leading bit
    last = jnp.where(t.subnormals, jnp.maximum(top, t.emin), top) - t.bits
    shift = last - exp
    s = jnp.clip(shift, 1, 62)
    kept = mag >> s
    rem = mag & ((jnp.int64(1) << s) - 1)
    half = jnp.int64(1) << (s - 1)
    up = (rem > half) | ((rem == half) & ((kept & 1) == 1))
    kept = kept + (up & ~jnp.asarray(toward_zero)).astype(jnp.int64)
    kept = jnp.where(shift > 62, 0, kept)  # mag < 2**62: below half of the last place
    kept = jnp.where(shift <= 0, mag, kept)  # exact: at most p + 1 significant bits
    value = kept.astype(jnp.float64) * _pow2(jnp.where(shift <= 0, exp, last))
    value = jnp.where(value > t.max, jnp.where(toward_zero, t.max, jnp.inf), value)
    value = jnp.where(jnp.logical_not(t.subnormals) & (value < TINY), 0.0, value)
    value = jnp.where(neg & (value != 0), -value, value)
    return value.astype(jnp.float32)


def split_f32(
    v: Float[ArrayLike, "*s"],
) -> tuple[Bool[Array, "*s"], Int[Array, "*s"], Int[Array, "*s"]]:
    """``(neg, m, e)`` with ``v = (-1)**neg · m · 2**e`` for a finite float32 ``v`` whose
    subnormals are flushed (a flushed value is 0)."""
    bits = lax.bitcast_convert_type(v.astype(jnp.float32), jnp.int32).astype(jnp.int64)
    biased = (bits >> 23) & 0xFF
    m = jnp.where(biased == 0, 0, (bits & 0x7FFFFF) | 0x800000)
    return bits < 0, m, biased - 150


def _times(u, v, fmt: Target, toward_zero):
    """fl_fmt(u · v) for float32 u, v, the product exact before its one rounding."""
    nu, mu, eu = split_f32(u)
    nv, mv, ev = split_f32(v)
    out = round_scaled(nu ^ nv, mu * mv, eu + ev, fmt, toward_zero)
    plain = u * v  # inf or NaN (no conversions: a float32 product is exact for those)
    return jnp.where(jnp.isfinite(u) & jnp.isfinite(v), out, plain)


def _fused(a, sx, sw, fmt: Target, toward_zero):
    """fl_fmt(a · sx · sw) with one rounding of the exact product (up to 72 bits)."""
    na, ma, ea = split_f32(a)
    nx, mx, ex = split_f32(sx)
    nw, mw, ew = split_f32(sw)
    m12 = ma * mx  # < 2**48
    hi, lo = m12 * (mw >> _LIMB), m12 * (mw & ((1 << _LIMB) - 1))  # each < 2**60
    exact = hi < (1 << 49)  # then hi·2**12 + lo < 2**62 fits
    whole = (jnp.where(exact, hi, 0) << _LIMB) + lo
    sticky = ((lo & ((1 << _LIMB) - 1)) != 0).astype(jnp.int64)
    # else: floor(product / 2**12) with a sticky bit below it, at least 2**50: rounding to
    # <= 24 bits drops >= 26 bits, so the sticky bit decides exactly what the dropped ones would
    jammed = ((hi + (lo >> _LIMB)) << 1) | sticky
    mag = jnp.where(exact, whole, jammed)
    exp = ea + ex + ew + jnp.where(exact, 0, _LIMB - 1)
    return round_scaled(na ^ nx ^ nw, mag, exp, fmt, toward_zero)


def apply_epilogue(
    acc: Int[ArrayLike, "m n"],
    sx: Float[ArrayLike, "m 1"],
    sw: Float[ArrayLike, "1 n"],
    code: EpilogueCode,
) -> Float[Array, "m n"]:
    """The epilogue of ``kernels._matmul`` (package docstring, int8 step 4) on the int32
    accumulator values ``acc`` with the stored scales ``sx`` (per row) and ``sw`` (per
    column); returns float32 values representable in the output format.

    With a static ``code`` only the spec's own epilogue is built; with a traced one every
    order and the fused product are computed and the spec's is selected."""
    rz, out, f32 = code.toward_zero, target(code.output), target("float32")
    acc = acc.astype(jnp.int64)
    a = round_scaled(acc < 0, jnp.abs(acc), jnp.zeros_like(acc), f32, False)  # to nearest
    sx = jnp.broadcast_to(sx, a.shape)
    sw = jnp.broadcast_to(sw, a.shape)
    orders = (
        lambda: _times(_times(a, sx, f32, rz), sw, f32, rz),
        lambda: _times(_times(a, sw, f32, rz), sx, f32, rz),
        lambda: _times(a, _times(sx, sw, f32, rz), f32, rz),
    )

    def separate():
        if isinstance(code.order, int):
            y = orders[code.order]()
        else:
            y = orders[0]()
            for i, value in enumerate(orders[1:], 1):
                y = jnp.where(code.order == i, value(), y)
        n, m, e = split_f32(y)
        return jnp.where(jnp.isfinite(y), round_scaled(n, m, e, out, rz), y)

    if isinstance(code.fused, bool):
        y = _fused(a, sx, sw, out, rz) if code.fused else separate()
    else:
        y = jnp.where(code.fused, _fused(a, sx, sw, out, rz), separate())
    return jnp.where(jnp.isnan(sx) | jnp.isnan(sw), jnp.float32(jnp.nan), y)
