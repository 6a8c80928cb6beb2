"""Float32 elementary functions that give the same bits on every XLA backend.

XLA's backends do not compute float arithmetic alike. The GPU backend evaluates ``exp``,
``log``, ``tanh``, ``rsqrt`` and the other transcendental operations with its own
approximations (libdevice, approximate instructions), compiles a float32 division to an
instruction that is not correctly rounded, fuses a float multiply followed by an add into one
fused multiply-add (the CPU backend does not) and sums a reduction in its own order. A function
written with ``jnp.exp``, ``jnp.tanh``, ``lax.rsqrt``, a float32 ``/``, ``jnp.sum`` or
``a * b + c`` therefore gives different bits on a GPU than on the CPU.

The functions here are built only from operations that every backend computes identically:

* integer arithmetic, comparisons and selects, and ``lax.bitcast_convert_type``;
* exact conversions: float32 to float64, and integers to float (below ``2**53``);
* float64 add, subtract, multiply, divide and square root, each correctly rounded, arranged so
  that **no inexact float64 product ever feeds an add or subtract**: a GPU compiler may fuse
  the two into one FMA, which rounds once instead of twice. A product is either exact (two
  float32 values, or anything times a power of two: then the FMA and the separate operations
  give the same value) or *sealed* first (``_seal``: its float64 pattern has its last bit
  cleared by an integer AND, which no compiler can fuse through or remove; it costs at most
  one float64 ulp);
* the integer roundings of :mod:`kernels.numerics.bitround`: every result is
  :func:`~kernels.numerics.bitround.round_binary32` of a float64 value (to nearest even, results
  below ``2**-126`` flushed to +0), so no float64-to-float32 conversion of an inexact value is left
  to a backend;
* sums by a fixed pairwise tree of elementwise adds (:func:`ordered_sum`), never a float
  reduction, and ``jnp.max`` (whose value does not depend on the order).

How the functions compute (the errors are those of the float64 value before its final rounding
to float32; the sweeps of ``tests/kernels/test_portable.py`` measure the rest):

* :func:`exp` reduces ``x = k·ln2 + r`` in 55-bit fixed point (``|r| <= ln2/2``), evaluates the
  Taylor polynomial of ``e**r`` to degree 13 in float64 (Horner, every product sealed), and
  scales by ``2**k`` built from bits: relative error about ``2**-50``;
* :func:`log` splits ``x = m·2**e`` with ``m`` in ``[√½, √2)`` from the bits, computes
  ``log m = 2·atanh(s)``, ``s = (m − 1)/(m + 1)`` (one correctly rounded division of exact
  integers) by its series to ``s**19``, and adds ``e·ln2`` with ``ln2`` split in two (the high
  part times ``e`` is exact): relative error about ``2**-50`` (``log 1`` is exactly 0);
* :func:`rsqrt` is ``sqrt(1/x)`` in float64 (the seal in between keeps a compiler from
  rewriting it into its approximate ``rsqrt``): about ``2**-52``;
* :func:`divide` is the float64 quotient, which rounds to the correctly rounded float32
  quotient (float64 has more than twice float32's precision, so the double rounding is
  innocuous);
* :func:`tanh` is ``(1 − E)/(1 + E)`` with ``E = e**(−2|x|)`` from :func:`exp`'s parts
  (``1 − E`` is exact where it cancels), and ``x·(1 − x²/3 + 2x⁴/15)`` below ``2**-10``;
* :func:`gelu_tanh` is ``x/(1 + e**(−t))``, ``t = 2·√(2/π)·(x + 0.044715·x³)``, the same
  function as ``x/2·(1 + tanh(t/2))`` without the cancellation of ``1 + tanh`` for ``x < 0``;
* :func:`sin` and :func:`cos` (:func:`cos_sin`: both) reduce ``|x| = k·π/2 + r`` (``|r| <= π/4``)
  in fixed point: ``|x|·2**24`` is an integer (for ``k >= 1``), ``π/2`` is held to 137 fraction
  bits in four int64 parts whose products with ``k < 2**24`` are exact, and ``r`` is formed in
  int64 with 61 fraction bits less a float64 correction below ``2**-37`` (``r`` within about
  one float64 ulp, however close ``x`` lies to a multiple of ``π/2``: the float32 values up to
  ``2**24`` come no closer than about ``2**-28``); then the Taylor polynomials of ``sin r`` and
  ``cos r`` to ``r**19`` and ``r**18`` (Horner in ``r²``, every product sealed), chosen and
  signed by ``k mod 4``: relative error about ``2**-50``. The domain is ``|x| <= 2**24``
  (every float32 rotary angle ``p·f`` of a position ``p`` that float32 holds exactly and a
  frequency ``f <= 1``); beyond it, and for ±inf and NaN, the result is NaN;
* :func:`silu` is ``x/(1 + e**(−x))`` from :func:`exp`'s parts, as :func:`gelu_tanh`;
* :func:`softmax` is ``exp(x − max)`` divided by its :func:`ordered_sum`;
* :func:`dot` forms the products exactly in float64, sums them in float64 by the pairwise tree
  and rounds once.

Float32 inputs are read with their subnormals flushed (a binary32 subnormal counts as +0, and
so does −0), as everywhere in ``kernels`` (:mod:`kernels.numerics.formats`); results below
``2**-126`` are +0. The functions take float32 (anything else is converted to float32 first) and
return float32; they enable 64-bit types themselves (callers need not), inside ``jax.jit`` too.

A computation that keeps its intermediate values in binary64 (the portable measurement of
:mod:`kernels.measurement.measure_portable`) builds on the same parts, exposed for float64 arrays
traced with 64-bit types enabled: :func:`widen` (float32 to float64 by bits), :func:`seal`,
:func:`sum64` (the pairwise tree, unrounded), :func:`exp64`, :func:`expm1_64`, :func:`phi64`,
:func:`log64` and :func:`log1p64` (each within a few float64 ulps), and :func:`to_float32`.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Float

from kernel_contracts.kernels.numerics.bitround import round_binary32, to_float32

__all__ = [
    "cos",
    "cos_sin",
    "divide",
    "dot",
    "exp",
    "exp64",
    "expm1_64",
    "gelu_tanh",
    "log",
    "log1p64",
    "log64",
    "ordered_mean",
    "ordered_sum",
    "phi64",
    "rsqrt",
    "seal",
    "silu",
    "sin",
    "softmax",
    "sum64",
    "sum_products",
    "tanh",
    "to_float32",
    "widen",
]

_MAG32 = 0x7FFF_FFFF
_MAG64 = 0x7FFF_FFFF_FFFF_FFFF
_SEALED_MIN = (1023 - 969) << 52  # the pattern of 2**-969
_FRAC32 = 0x007F_FFFF
_NORMAL32 = 0x0080_0000  # 2**-126, the smallest normal binary32 number
_NAN = float("nan")
_INF = float("inf")

# ln 2 to 40 digits, far beyond the 2**-64 the constants below need
_LN2 = Fraction("0.6931471805599453094172321214581765680755")
# ln 2 in fixed point with 63 fraction bits (< 2**63), split into its top part with 55
# fraction bits and the 8 bits below
_LN2_Q63 = round(_LN2 * 2**63)
_LN2_HI55 = _LN2_Q63 >> 8
_LN2_LO8 = _LN2_Q63 & 0xFF
# ln 2 as float64 high part with 44 significant bits (times an exponent |e| < 256, exact) and
# the float64 nearest the rest
_LN2_HI = float(Fraction(math.floor(_LN2 * 2**44), 2**44))
_LN2_LO = float(_LN2 - Fraction(_LN2_HI))
_INV_LN2 = float(1 / _LN2)  # only picks k in exp: any value near 1/ln 2 would do
_FIXED = 55  # fraction bits of exp's reduction: |x| <= 128 fits int64
_EXP_TAYLOR = [1.0 / math.factorial(j) for j in range(14)]  # e**r, |r| <= ln2/2: < 2**-56
_ATANH_SERIES = [1.0 / (2 * i + 1) for i in range(10)]  # Σ u**i/(2i+1), u = s² <= 0.0295
_SQRT_HALF_SIG = 11_863_283  # floor(√2·2**23): a significand above it is at least √2
_EXP_MAX = 89.0  # e**89 > 2**128: overflow (from 88.7228..., the computation gives inf)
_EXP_MIN = -104.0  # e**-104 < 2**-149: +0 (below -87.34, the computation flushes)
_TANH_ONE = 9.1  # tanh(x) rounds to 1 from x = 9.01 on
_TANH_SMALL = 2.0**-10  # x·(1 − x²/3 + 2x⁴/15) is within 2**-63 relative below this
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_GELU_A = 2 * _SQRT_2_OVER_PI  # t = x·(A + B·x²)
_GELU_B = 2 * _SQRT_2_OVER_PI * 0.044715
_GELU_T = 120.0  # beyond ±120, gelu is x (σ = 1 within 2**-173) or below 2**-126
# binary64 functions: exp64's domain (|v|·2**55 and k·_LN2_HI55 stay below 2**63)
_EXP64_MIN = -250.0  # e**-250 < 3e-109: +0 below
_EXP64_MAX = 250.0  # +inf above (e**250 ≈ 3.7e108; the callers stay far below)
# ln 2 as a float64 high part with 42 significant bits (times |e| < 2**11, exact) and the rest
_LN2_HI42 = float(Fraction(math.floor(_LN2 * 2**42), 2**42))
_LN2_LO42 = float(_LN2 - Fraction(_LN2_HI42))
_SQRT2_SIG64 = math.isqrt(2 << 104)  # floor(√2·2**52): a significand above it is at least √2
_ATANH_SERIES64 = [1.0 / (2 * i + 1) for i in range(14)]  # s² <= 0.0295: 0.0295**14 < 2**-71
_SERIES64_BELOW = 0.5  # |x| below which expm1 and φ are their Taylor series
# 1/(k+1)! and 1/(k+2)! for k = 0..17: the series of expm1(x)/x and φ(x)/x² on |x| < ½, to
# 2**-60 relative (last term ½**17/18!)
_EXPM1_SERIES = [1.0 / math.factorial(k + 1) for k in range(18)]
_PHI_SERIES = [1.0 / math.factorial(k + 2) for k in range(18)]
# sin and cos: x = k·π/2 + r in fixed point. π/2·2**24 = A0 + (A1 + (A2 + A3·2**-38)·2**-38)·
# 2**-37 (25, 37, 38 and 38 bits; 137 fraction bits in all); for k < 2**24 every k·Ai fits int64
_PI = Fraction("3.14159265358979323846264338327950288419716939937510582097494459")  # to 1e-62
_HALF_PI_Q137 = math.floor(_PI / 2 * 2**137)
_HALF_PI_A0 = _HALF_PI_Q137 >> 113
_HALF_PI_A1 = (_HALF_PI_Q137 >> 76) & (2**37 - 1)
_HALF_PI_A2 = (_HALF_PI_Q137 >> 38) & (2**38 - 1)
_HALF_PI_A3 = _HALF_PI_Q137 & (2**38 - 1)
_TWO_OVER_PI = float(2 / _PI)  # only picks k: any value near 2/π would do
_TRIG_MAX = 2.0**24  # the reduction's domain: |x| <= 2**24 (k < 2**24)
# Taylor series of sin(r)/r and cos(r) in u = r², |r| <= π/4 (a little more, from k's choice):
# the first terms left out are below 2**-62 and 2**-58 relative
_SIN_TAYLOR = [(-1) ** i / math.factorial(2 * i + 1) for i in range(10)]
_COS_TAYLOR = [(-1) ** i / math.factorial(2 * i) for i in range(10)]
_SILU_T = 120.0  # beyond ±120, silu is x (σ = 1 within 2**-173) or below 2**-126


def _read(x):
    """Float32 ``x`` as float64, with binary32 subnormals and −0 read as +0 (exact), the
    pattern widened with integer operations (no float conversion, so none can be folded with
    a conversion that produced ``x``)."""
    bits = lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), jnp.int32).astype(jnp.int64)
    mag = bits & _MAG32
    exponent = mag >> 23
    wide = ((exponent + (1023 - 127)) << 52) | ((mag & _FRAC32) << 29)
    wide = jnp.where(exponent == 255, (jnp.int64(0x7FF) << 52) | ((mag & _FRAC32) << 29), wide)
    wide = jnp.where(bits < 0, wide | (jnp.int64(1) << 63), wide)
    wide = jnp.where(mag < _NORMAL32, 0, wide)
    return lax.bitcast_convert_type(wide, jnp.float64)


def _once(x):
    """``x`` itself, read through a gather with the identity indices. The values are the
    same on every backend (a gather copies bits); it only keeps a compiler from fusing the
    long integer and binary64 chain that computed ``x`` into a consumer that reads each
    element many times (a product broadcast over a head dimension, say), which would compute
    the chain again for every read. XLA's CPU fusion does that with every elementwise chain
    and keeps a gather apart (an optimization barrier does not survive its pipeline)."""
    if jnp.ndim(x) == 0:
        return x
    identity = lax.broadcasted_iota(jnp.int32, jnp.shape(x), jnp.ndim(x) - 1)
    return jnp.take_along_axis(x, identity, axis=-1)


def _result(v):
    """Float64 ``v`` rounded to float32 (:func:`~kernels.numerics.bitround.to_float32`: by integer
    operations, with no float conversion that a compiler could fold into a later one)."""
    return to_float32(v)


def _seal(v):
    """Float64 ``v`` with the last bit of its pattern cleared (toward zero by at most one
    float64 ulp; infinities and quiet NaNs unchanged), and magnitudes below ``2**-969`` set to
    +0. Integer operations: a product sealed before it is added cannot be fused into an FMA,
    and no backend's handling of subnormals (the CPU flushes them, a GPU keeps float64 ones)
    can reach the sums: a sum or difference of values that are 0 or at least ``2**-969`` in
    magnitude is 0 or normal."""
    bits = lax.bitcast_convert_type(v, jnp.int64)
    tiny = (bits & jnp.int64(_MAG64)) < jnp.int64(_SEALED_MIN)
    return lax.bitcast_convert_type(jnp.where(tiny, 0, bits & jnp.int64(-2)), jnp.float64)


def _to_float64(n):
    """Int64 ``n`` as the nearest float64, from two exact halves and one correctly rounded
    add (the product with ``2**32`` is exact)."""
    hi = (n >> 32).astype(jnp.float64)
    lo = (n & 0xFFFF_FFFF).astype(jnp.float64)
    return hi * 2.0**32 + lo


def _pow2(k):
    """``2.0**k`` for int64 ``k`` in ``[-1022, 1023]``, from its bits."""
    return lax.bitcast_convert_type((k + 1023) << 52, jnp.float64)


def _horner(coefficients, u):
    """``Σ c_i·u**i`` in float64, every product sealed before its add."""
    p = jnp.full_like(u, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        p = c + _seal(p * u)
    return p


def _exp_parts(v):
    """``(k, p)`` with ``e**v ≈ p·2**k`` (relative error about ``2**-50``), ``p`` in
    ``[0.7, 1.42]``, for float64 ``|v| <= 128``."""
    k = jnp.round(v * _INV_LN2).astype(jnp.int64)  # a rounded product: nothing to fuse
    fixed = jnp.round(v * 2.0**_FIXED).astype(jnp.int64)  # exact scaling, then to nearest
    reduced = fixed - k * _LN2_HI55 - ((k * _LN2_LO8 + 128) >> 8)  # r·2**55, |r| <= ln2/2
    r = _to_float64(reduced) * 2.0**-_FIXED
    return k, _horner(_EXP_TAYLOR, r)


def _exp(x):
    v = _read(x)
    inside = jnp.where(jnp.isnan(v), 0.0, jnp.clip(v, _EXP_MIN, _EXP_MAX))
    k, p = _exp_parts(inside)
    y = round_binary32(p * _pow2(k))  # an exact product
    y = jnp.where(v >= _EXP_MAX, _INF, y)
    y = jnp.where(v <= _EXP_MIN, 0.0, y)
    return to_float32(jnp.where(jnp.isnan(v), _NAN, y))


def _log(x):
    x = jnp.asarray(x, jnp.float32)
    bits = lax.bitcast_convert_type(x, jnp.int32)
    mag = bits & _MAG32
    sig = (mag & _FRAC32) | _NORMAL32  # x = sig·2**(e − 23)
    e = (mag >> 23) - 127
    high = sig > _SQRT_HALF_SIG
    e = jnp.where(high, e + 1, e)
    scaled = jnp.where(high, sig, sig << 1)  # m = scaled·2**-24, in [√½, √2)
    s = (scaled - (1 << 24)).astype(jnp.float64) / (scaled + (1 << 24)).astype(jnp.float64)
    series = _horner(_ATANH_SERIES, s * s)  # atanh(s)/s
    log_m = _seal(s * series) * 2.0
    ef = e.astype(jnp.float64)
    y = ef * _LN2_HI + (_seal(ef * _LN2_LO) + log_m)  # e·_LN2_HI is exact; e = 0 gives log_m
    y = round_binary32(y)
    y = jnp.where(bits < 0, _NAN, y)  # negative (−0 and subnormals are zeros, below)
    y = jnp.where(mag < _NORMAL32, -_INF, y)
    y = jnp.where(bits == 0x7F80_0000, _INF, y)
    return to_float32(jnp.where(mag > 0x7F80_0000, _NAN, y))


def _rsqrt(x):
    v = _read(x)
    y = jnp.sqrt(_seal(1.0 / v))  # +0 gives inf, +inf gives 0, NaN stays
    return to_float32(jnp.where(v < 0, _NAN, y))


def _divide(a, b):
    a, b = jnp.broadcast_arrays(_read(a), _read(b))
    return _result(a / b)


def _tanh(x):
    v = _read(x)
    a = jnp.clip(jnp.abs(v), 0.0, _TANH_ONE)  # NaN stays NaN
    a2 = a * a  # exact
    small = a * (1.0 - _seal(a2 * (1.0 / 3.0 - _seal(a2 * (2.0 / 15.0)))))
    k, p = _exp_parts(jnp.where(jnp.isnan(a), 0.0, -2.0 * a))
    e = p * _pow2(k)  # e**(−2a), an exact product; 1 − e is exact where it cancels
    t = jnp.where(a < _TANH_SMALL, small, (1.0 - e) / (1.0 + e))
    t = jnp.where(jnp.abs(v) > _TANH_ONE, 1.0, t)
    t = jnp.where(v < 0, -t, t)
    return to_float32(jnp.where(jnp.isnan(v), _NAN, t))


def _gelu_tanh(x):
    v = _read(x)
    t = v * (_GELU_A + _seal(_GELU_B * (v * v)))  # v·v is exact
    return _times_sigmoid(v, t, _GELU_T)


def _times_sigmoid(v, t, limit):
    """``v·σ(t) = v/(1 + e**(−t))`` rounded to float32, for float64 ``v`` and ``t``: ``v``
    where ``t > limit`` (+inf stays +inf), 0 where ``t < −limit``, NaN for NaN and −inf ``v``
    (as JAX: ``−inf·0``)."""
    k, p = _exp_parts(jnp.where(jnp.isnan(t), 0.0, -jnp.clip(t, -limit, limit)))
    y = v / (1.0 + p * _pow2(k))  # an exact product
    y = jnp.where(t > limit, v, y)
    y = jnp.where(t < -limit, 0.0, y)
    y = jnp.where(jnp.isnan(v) | (v == -_INF), _NAN, y)
    return _result(y)


def _tree(v, each_level):
    """The sum along the last axis of float64 ``v`` by the pairwise tree: padded with +0 to a
    power of two, then the first half added to the second until one column is left; each
    level's sums pass through ``each_level``."""
    n = v.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()
    v = jnp.pad(v, [(0, 0)] * (v.ndim - 1) + [(0, width - n)])
    while width > 1:
        width //= 2
        v = each_level(v[..., :width] + v[..., width:])
    return v[..., 0]


def _ordered_sum(x, axis):
    return _result(_tree(jnp.moveaxis(_read(x), axis, -1), round_binary32))


def _ordered_mean(x, axis):
    n = jnp.shape(x)[axis]
    return _divide(_ordered_sum(x, axis), jnp.float32(n))


def _softmax(x, axis):
    v = _read(x)
    shifted = _result(v - jnp.max(v, axis=axis, keepdims=True))  # jnp.max: order-free
    e = _once(_exp(shifted))
    total = _once(jnp.expand_dims(_ordered_sum(e, axis), axis))
    return _divide(e, total)


def _sum_products(a, b, scale):
    a, b = _once(_read(a)), _once(_read(b))  # each widened once, however often broadcast
    rank = max(a.ndim, b.ndim)
    a, b = (v.reshape((1,) * (rank - v.ndim) + v.shape) for v in (a, b))
    products = a * b  # broadcast; each product exact
    return _result(_tree(products, lambda s: s) * scale)  # the one inexact product is rounded


def _dot(x, y):
    return _sum_products(jnp.asarray(x)[..., None, :], jnp.swapaxes(y, 0, 1), 1.0)


def _quarter_turns(a):
    """``(k, r)`` with ``a = k·π/2 + r`` (``|r| <= π/4``, within about one float64 ulp of ``r``)
    for float64 ``a`` read from a float32 value in ``[0, 2**24]``: ``a·2**24`` is an integer
    where ``k >= 1`` (``a >= 0.5``), and ``a − k·π/2`` is formed exactly in int64 fixed point
    with 61 fraction bits, less ``k`` times π/2's bits below ``2**-61`` (a correction below
    ``2**-37``, formed in float64); ``k = 0`` gives ``r = a``."""
    k = jnp.round(a * _TWO_OVER_PI).astype(jnp.int64)  # a rounded product: nothing to fuse
    fixed = (a * 2.0**24).astype(jnp.int64)  # exact scaling; an integer where k >= 1
    high = (fixed - k * _HALF_PI_A0) * (1 << 37) - k * _HALF_PI_A1  # |·| < 2**61
    low = _to_float64(k * _HALF_PI_A2) * 2.0**-38 + _to_float64(k * _HALF_PI_A3) * 2.0**-76
    r = (_to_float64(high) - low) * 2.0**-61  # exact products by powers of two
    return k, jnp.where(k == 0, a, r)


def _cos_sin(x):
    v = _read(x)
    a = jnp.abs(v)
    inside = a <= _TRIG_MAX  # false for ±inf and NaN
    k, r = _quarter_turns(jnp.where(inside, a, 0.0))
    u = _seal(r * r)
    s = r * _horner(_SIN_TAYLOR, u)  # sin r: a product that no add uses
    c = _horner(_COS_TAYLOR, u)  # cos r
    quadrant = k & 3  # a = k·π/2 + r
    sin_a = jnp.where(quadrant % 2 == 1, c, s)
    sin_a = jnp.where(quadrant >= 2, -sin_a, sin_a)
    cos_a = jnp.where(quadrant % 2 == 1, s, c)
    cos_a = jnp.where((quadrant == 1) | (quadrant == 2), -cos_a, cos_a)
    sin_x = jnp.where(v < 0, -sin_a, sin_a)  # sin is odd, cos even
    cos_x, sin_x = (jnp.where(inside, y, _NAN) for y in (cos_a, sin_x))
    return _result(cos_x), _result(sin_x)


def _cos(x):
    return _cos_sin(x)[0]


def _sin(x):
    return _cos_sin(x)[1]


def _silu(x):
    v = _read(x)
    return _times_sigmoid(v, v, _SILU_T)


_STATIC = {"sum": ("axis",), "mean": ("axis",), "softmax": ("axis",), "sum_products": ("scale",)}
_jitted = {
    name: jax.jit(fn, static_argnames=_STATIC.get(name, ()))
    for name, fn in {
        "exp": _exp,
        "log": _log,
        "rsqrt": _rsqrt,
        "divide": _divide,
        "tanh": _tanh,
        "gelu_tanh": _gelu_tanh,
        "sum": _ordered_sum,
        "mean": _ordered_mean,
        "softmax": _softmax,
        "dot": _dot,
        "sum_products": _sum_products,
        "cos": _cos,
        "sin": _sin,
        "cos_sin": _cos_sin,
        "silu": _silu,
    }.items()
}


# results that cost tens of operations per element: computed once (:func:`_once`)
_COSTLY = frozenset(
    {"exp", "log", "rsqrt", "tanh", "gelu_tanh", "softmax", "cos", "sin", "cos_sin", "silu"}
)


def _call(name: str, *args, **static):
    """The jitted ``name`` on float32 ``args``, traced with 64-bit types enabled; a costly
    result is computed once (:func:`_once`) whatever reads it."""
    args = [jnp.asarray(a, jnp.float32) for a in args]
    with jax.enable_x64(True):
        out = _jitted[name](*args, **static)
        if name in _COSTLY:
            out = jax.tree.map(_once, out)
        return out


def exp(x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """``e**x``. ``x >= 88.72284`` (where ``e**x`` rounds beyond the largest float32) and
    +inf give +inf; results below ``2**-126`` (``x <= -87.33655``, −inf) are +0; ±0 gives 1;
    NaN gives NaN."""
    return _call("exp", x)


def log(x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """The natural logarithm. ±0 (and subnormals, read as +0) give −inf, negative ``x`` and
    −inf NaN, +inf +inf, NaN NaN; 1 gives exactly +0."""
    return _call("log", x)


def rsqrt(x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """``1/√x``. ±0 (and subnormals) give +inf, +inf gives +0, negative ``x`` and −inf NaN,
    NaN NaN."""
    return _call("rsqrt", x)


def divide(a: Float[ArrayLike, "*a"], b: Float[ArrayLike, "*b"]) -> Float[Array, "*shape"]:
    """``a/b`` correctly rounded (to nearest even; results below ``2**-126`` are +0), with
    NumPy broadcasting. As in IEEE arithmetic: a non-zero
    ``a``/±0 is ±inf with ``a``'s sign (a zero divisor is +0 once read), ``0/0``, ``inf/inf``
    and NaN operands give NaN, finite/±inf gives +0."""
    return _call("divide", a, b)


def tanh(x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """The hyperbolic tangent, odd (``tanh(−x)`` is ``−tanh(x)`` for every ``x`` not read as
    zero). ``|x| > 9.1`` (±inf included) gives ±1; ±0 (and
    subnormals) give +0; NaN gives NaN."""
    return _call("tanh", x)


def gelu_tanh(x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """The GELU of ``jax.nn.gelu(x, approximate=True)``:
    ``x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``, with the constants ``√(2/π)`` and
    ``0.044715`` taken as float64 (JAX rounds them to float32), computed as
    ``x/(1 + e**(−t))``, ``t = 2·√(2/π)·(x + 0.044715·x³)``. +inf gives +inf, and −inf NaN
    and NaN NaN as in JAX (``−inf·0``); results below ``2**-126`` (``x <= -10.1`` or so) are
    +0."""
    return _call("gelu_tanh", x)


def ordered_sum(x: Float[ArrayLike, "*shape"], axis: int = -1) -> Float[Array, "*reduced"]:
    """The float32 sum along ``axis`` by a fixed pairwise tree: the values (subnormals read
    as +0) padded with +0 to a power of two, then at each level the first half added
    elementwise to the second half, every sum correctly rounded to float32 (below
    ``2**-126``: +0), until one is left. An empty axis sums to +0."""
    return _call("sum", x, axis=axis)


def ordered_mean(x: Float[ArrayLike, "*shape"], axis: int = -1) -> Float[Array, "*reduced"]:
    """``divide(ordered_sum(x, axis), n)`` for ``n`` values along ``axis`` (an empty axis
    gives NaN)."""
    return _call("mean", x, axis=axis)


def softmax(x: Float[ArrayLike, "*shape"], axis: int = -1) -> Float[Array, "*shape"]:
    """``jax.nn.softmax(x, axis)``: ``e = exp(x − max)`` (the difference rounded to float32,
    as JAX computes it), then ``divide(e, ordered_sum(e))``. As in JAX, a row holding +inf or
    NaN, or only −inf, is all NaN (``inf − inf``)."""
    return _call("softmax", x, axis=axis)


def dot(x: Float[ArrayLike, "*batch k"], y: Float[ArrayLike, "k n"]) -> Float[Array, "*batch n"]:
    """``x @ y`` (float32, contracting ``x``'s last axis with ``y``'s first): every product
    formed exactly in float64 (the operands' subnormals read as +0), the ``k`` products of
    each output summed in float64 by :func:`ordered_sum`'s pairwise tree, the sum rounded
    once to float32 (below ``2**-126``: +0). ``k = 0`` gives +0."""
    return _call("dot", x, y)


def sum_products(
    a: Float[ArrayLike, "*a"], b: Float[ArrayLike, "*b"], scale: float = 1.0
) -> Float[Array, "*reduced"]:
    """``scale · Σ a·b`` over the last axis of ``a`` and ``b`` broadcast together: the products
    exact in float64, summed there by the pairwise tree, multiplied by ``scale`` (a float64
    constant) and rounded once. :func:`dot` is ``sum_products(x[..., None, :], y.T)``; written
    with broadcasting it gives any contraction (attention scores, weighted values)."""
    return _call("sum_products", a, b, scale=float(scale))


def sin(x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """The sine, odd, for ``|x| <= 2**24`` (every float32 angle ``p·f`` of a position ``p``
    that float32 holds exactly and a frequency ``f <= 1``): ``x`` reduced exactly by multiples
    of ``π/2`` (module docstring). Beyond ``2**24``, ±inf and NaN give NaN; ±0 (and
    subnormals) give +0, and so do results below ``2**-126``."""
    return _call("sin", x)


def cos(x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """The cosine, even, for ``|x| <= 2**24`` (as :func:`sin`); beyond, ±inf and NaN give
    NaN; ±0 (and subnormals) give 1."""
    return _call("cos", x)


def cos_sin(
    x: Float[ArrayLike, "*shape"],
) -> tuple[Float[Array, "*shape"], Float[Array, "*shape"]]:
    """``(cos(x), sin(x))`` from one argument reduction: the bits of :func:`cos` and
    :func:`sin`."""
    return _call("cos_sin", x)


def silu(x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """The SiLU of ``jax.nn.silu``: ``x·σ(x) = x/(1 + e**(−x))``. +inf gives +inf, and −inf
    NaN and NaN NaN as in JAX (``−inf·0``); results below ``2**-126`` (``x <= -91.8568``, ±0
    and subnormals) are +0."""
    return _call("silu", x)


# -- binary64 building blocks: for float64 arrays traced with 64-bit types enabled ------------


def widen(x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """Float32 ``x`` as float64 by its bits (subnormals and −0 read as +0): exact, and no float
    conversion that a compiler could fold; widened once, however often a broadcast reads it."""
    return _once(_read(x))


def seal(v: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """Float64 ``v`` with the last bit of its pattern cleared (at most one ulp toward zero;
    infinities and NaN kept). Seal every inexact product before an add or subtract uses it:
    no compiler can then fuse the two into one FMA."""
    return _seal(v)


def sum64(v: Float[ArrayLike, "*shape"], axis: int = -1) -> Float[Array, "*reduced"]:
    """The float64 sum along ``axis`` by :func:`ordered_sum`'s pairwise tree, every level's
    sums correctly rounded in float64 (not rounded to float32)."""
    return _tree(jnp.moveaxis(v, axis, -1), lambda s: s)


def exp64(v: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """``e**v`` for float64 ``v`` (relative error about ``2**-50``): +0 for ``v < -250``
    (``e**-250 < 3e-109``) and −inf, +inf for ``v > 250`` and +inf, NaN for NaN."""
    v = jnp.asarray(v, jnp.float64)
    inside = jnp.where(jnp.isnan(v), 0.0, jnp.clip(v, _EXP64_MIN, _EXP64_MAX))
    k, p = _exp_parts(inside)
    y = p * _pow2(k)  # an exact product
    y = jnp.where(v > _EXP64_MAX, _INF, jnp.where(v < _EXP64_MIN, 0.0, y))
    return jnp.where(jnp.isnan(v), _NAN, y)


def expm1_64(v: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """``e**v − 1`` for float64 ``v``, relatively accurate near 0 (its series below ½): −1
    for ``v < -250``, +inf for ``v > 250``, NaN for NaN."""
    v = jnp.asarray(v, jnp.float64)
    small = jnp.abs(v) < _SERIES64_BELOW
    series = _seal(jnp.where(small, v, 0.0) * _horner(_EXPM1_SERIES, jnp.where(small, v, 0.0)))
    return jnp.where(small, series, exp64(v) - 1.0)  # e**v is an exact product: no FMA issue


def phi64(u: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """``φ(u) = e**u − 1 − u`` (``>= 0``) for float64 ``u``, relatively accurate for every
    ``u`` (its series ``u²·Σ u**k/(k+2)!`` below ½, where ``e**u − 1 − u`` cancels), +0 where
    it is below ``2**-969`` (:func:`seal`): +inf for ``u > 250``, ``−1 − u`` for
    ``u < -250``, NaN for NaN."""
    u = jnp.asarray(u, jnp.float64)
    small = jnp.abs(u) < _SERIES64_BELOW
    s = jnp.where(small, u, 0.0)
    series = _seal(_seal(s * s) * _horner(_PHI_SERIES, s))
    big = jnp.where(u == _INF, _INF, (exp64(u) - 1.0) - u)  # (not inf − inf)
    return jnp.where(small, series, big)


def log64(x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """The natural logarithm of float64 ``x`` (within a few ulps): ±0 give −inf, negative
    ``x`` and −inf NaN, +inf +inf, NaN NaN; 1 gives exactly +0. Subnormals count as zeros
    (read by their bits: the CPU flushes them, a GPU does not).

    ``x = m·2**e`` from the bits, ``m`` in
    ``[√½, √2)``; ``log m = 2·atanh(s)``, ``s = (m − 1)/(m + 1)`` (``m − 1`` exact), by its
    series; ``e·ln2`` with ``ln2`` split so that ``e`` times its high part is exact."""
    x = jnp.asarray(x, jnp.float64)
    bits = lax.bitcast_convert_type(x, jnp.int64)
    zero = (bits & jnp.int64(_MAG64)) < jnp.int64(1 << 52)  # ±0 and subnormals, by bits
    frac = bits & ((1 << 52) - 1)
    e = ((bits >> 52) & 0x7FF) - 1023
    high = (frac | (1 << 52)) > _SQRT2_SIG64
    e = jnp.where(high, e + 1, e)
    top = jnp.where(high, 1022, 1023).astype(jnp.int64) << 52
    m = lax.bitcast_convert_type(top | frac, jnp.float64)
    s = (m - 1.0) / (m + 1.0)  # m − 1 is exact (m within a factor 2 of 1)
    log_m = _seal(s * _horner(_ATANH_SERIES64, _seal(s * s))) * 2.0
    ef = e.astype(jnp.float64)  # |e| <= 1024: exact
    y = ef * _LN2_HI42 + (_seal(ef * _LN2_LO42) + log_m)  # e·_LN2_HI42 is exact
    y = jnp.where(zero, -_INF, y)
    y = jnp.where(bits == jnp.int64(0x7FF0 << 48), _INF, y)
    return jnp.where((bits < 0) & ~zero | jnp.isnan(x), _NAN, y)


def log1p64(x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
    """``log(1 + x)`` for float64 ``x``, relatively accurate near 0: with ``y = 1 + x``
    rounded, ``log(y)·x/(y − 1)`` (``y − 1`` exact), and ``x`` itself where ``y`` rounds to 1.
    −1 gives −inf, ``x < -1`` NaN, +inf +inf, NaN NaN."""
    x = jnp.asarray(x, jnp.float64)
    y = 1.0 + x
    safe = jnp.where((y == 1.0) | (x == _INF), 2.0, y)
    out = _seal(log64(safe) * x) / (safe - 1.0)
    out = jnp.where(y == 1.0, x, jnp.where(x == _INF, _INF, out))
    return jnp.where(x == -1.0, -_INF, out)
