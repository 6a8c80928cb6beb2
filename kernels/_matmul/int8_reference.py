"""The NumPy reference of the int8 matmul: the package docstring's definition, literally.

Quantization by the NumPy quantizer, one run at a time; the sums in int64 integers; the
epilogue in exact rationals (``fractions.Fraction``), each rounding found by comparing the
exact value with powers of two. Shares nothing with the JAX path but the spec and the result
record, ``Int8Product``, defined here and returned by both. Slow; for small shapes and for
checking :mod:`kernels._matmul.int8`.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np
from jaxtyping import Array, Bool, Float, Int

from kernel_contracts.contracts import EpilogueSpec, MatmulSpec
from kernel_contracts.kernels.numerics.formats import format_info, min_normal_exponent
from kernel_contracts.kernels.numerics.scaling import quantize_rows_int8_np

__all__ = ["Int8Product", "epilogue_np", "int8_matmul_reference", "round_fraction"]


class Int8Product(NamedTuple):
    """One int8 matmul: the output and what its accumulator went through."""

    y: Float[Array, "m n"]  # float32 values representable in spec.output
    exact: Int[Array, "m n"]  # the exact integer sums Σ q_x·q_w (int64; 0 where NaN)
    acc: Int[Array, "m n"]  # the int32 accumulator: ``exact`` wrapped to 32 bits
    overflow: Bool[Array, "m n"]  # the accumulator wrapped (exact != acc)


def round_fraction(v: Fraction | float, fmt: str, toward_zero: bool) -> float:
    """The exact value ``v`` rounded once to float format ``fmt`` (``kernels._matmul.epilogue``
    states the rule); ``v`` may be ±inf, which passes through."""
    if isinstance(v, float) and not math.isfinite(v):
        return v
    v = Fraction(v)
    if v == 0:
        return 0.0
    info = format_info(fmt)
    mag = abs(v)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()  # floor(log2 mag) or one more
    if Fraction(2) ** e > mag:
        e -= 1
    if fmt == "float16":
        e = max(e, min_normal_exponent(fmt))
    unit = Fraction(2) ** (e - info.mantissa_bits)  # the last place
    steps = mag / unit
    n = math.floor(steps) if toward_zero else round(steps)  # round(): ties to even
    out = n * unit
    if out > Fraction(info.max):
        result = info.max if toward_zero else math.inf
    elif fmt != "float16" and out < Fraction(2) ** -126:
        result = 0.0
    else:
        result = float(out)  # exact: at most 24 significant bits
    return -result if v < 0 and result != 0 else result


def _times(u: float, v: float, fmt: str, toward_zero: bool) -> float:
    if math.isfinite(u) and math.isfinite(v):
        return round_fraction(Fraction(u) * Fraction(v), fmt, toward_zero)
    return u * v  # inf times a positive scale


def epilogue_np(acc: int, sx: float, sw: float, ep: EpilogueSpec, output: str) -> float:
    """One output of the epilogue: int32 ``acc``, stored scales ``sx`` (its row) and ``sw``
    (its column)."""
    if math.isnan(sx) or math.isnan(sw):
        return math.nan
    rz = ep.rounding == "toward_zero"
    a = round_fraction(Fraction(acc), "float32", False)  # the conversion rounds to nearest
    if ep.fused:
        return round_fraction(Fraction(a) * Fraction(sx) * Fraction(sw), output, rz)
    if ep.order == "acc_sx_sw":
        y = _times(_times(a, sx, "float32", rz), sw, "float32", rz)
    elif ep.order == "acc_sw_sx":
        y = _times(_times(a, sw, "float32", rz), sx, "float32", rz)
    else:
        y = _times(a, _times(sx, sw, "float32", rz), "float32", rz)
    return y if output == "float32" else round_fraction(y, output, rz)


def int8_matmul_reference(x: np.ndarray, w: np.ndarray, spec: MatmulSpec) -> Int8Product:
    """The definition on NumPy arrays ``x`` (M, K) and ``w`` (K, N)."""
    x, w = np.asarray(x, np.float32), np.asarray(w, np.float32)
    per_tensor = spec.scaling.kind == "per_tensor"
    xq, sx = quantize_rows_int8_np(x, per_tensor, spec.epilogue.scales)
    wq_t, sw = quantize_rows_int8_np(w.T, per_tensor, spec.epilogue.scales)
    m, n = x.shape[0], w.shape[1]
    # int64 products and sums are exact integers: |sum| <= K·127² < 2**63 for K < 5·10**14
    xi = np.where(np.isnan(xq), 0, xq).astype(np.int64)  # a NaN run: its scale is NaN
    wi = np.where(np.isnan(wq_t), 0, wq_t).astype(np.int64)
    exact = np.zeros((m, n), np.int64)
    acc = np.zeros((m, n), np.int64)
    y = np.zeros((m, n), np.float32)
    for i in range(m):
        for j in range(n):
            total = int(np.dot(xi[i], wi[j]))
            wrapped = (total + 2**31) % 2**32 - 2**31  # the int32 accumulator
            exact[i, j], acc[i, j] = total, wrapped
            y[i, j] = epilogue_np(
                wrapped, float(sx[i, 0]), float(sw[j, 0]), spec.epilogue, spec.output
            )
    return Int8Product(y, exact, acc, exact != acc)
