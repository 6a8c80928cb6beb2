"""Facts about the number formats a contract names: one table that kernels and bounds read.

Each binary floating-point format has ``mantissa_bits`` explicit fraction bits and
``exponent_bits`` exponent bits. Its largest finite value is ``max = (2 - 2**-r)·2**emax``,
where ``r`` is ``mantissa_bits`` for the IEEE-style formats and ``mantissa_bits - 1`` for
float8_e4m3fn (which keeps only the all-ones pattern of its top binade for NaN, so its
exponent range reaches one binade further and it has no infinity). The smallest positive normal
value is ``2**emin``.

``kernels.numerics.formats`` adds the array side (the ml_dtypes dtype of each format, casts) and a
test checks this table against ml_dtypes; ``bounds`` reads the unit roundoffs from it.
Importing this module imports nothing outside the standard library.

References:
    IEEE Std 754-2019 (binary32, binary16).
    Micikevicius et al., "FP8 Formats for Deep Learning", arXiv:2209.05433 (2022)
        (E4M3 without infinities, E5M2).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple

__all__ = ["FLOAT_FORMATS", "INT_FORMATS", "FloatFormat", "IntFormat", "float_format"]


class FloatFormat(NamedTuple):
    """The constants of one binary floating-point format."""

    name: str
    mantissa_bits: int  # explicit fraction bits
    exponent_bits: int
    emax: int  # exponent of the largest binade
    emin: int  # 2**emin is the smallest positive normal value
    max: float  # largest finite value
    has_inf: bool

    @property
    def bits(self) -> int:
        """Storage width: sign, exponent and fraction bits."""
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def is_fp8(self) -> bool:
        return self.bits == 8


def _ieee(name: str, mantissa_bits: int, exponent_bits: int) -> FloatFormat:
    bias = 2 ** (exponent_bits - 1) - 1
    top = (2 - 2.0**-mantissa_bits) * 2.0**bias
    return FloatFormat(name, mantissa_bits, exponent_bits, bias, 1 - bias, top, True)


def _e4m3fn() -> FloatFormat:
    # bias 7; the top binade (exponent field 15) holds finite values except S.1111.111 (NaN)
    return FloatFormat("float8_e4m3fn", 3, 4, 8, -6, (2 - 2.0**-2) * 2.0**8, False)


FLOAT_FORMATS: MappingProxyType[str, FloatFormat] = MappingProxyType(
    {
        "float32": _ieee("float32", 23, 8),
        "bfloat16": _ieee("bfloat16", 7, 8),
        "float16": _ieee("float16", 10, 5),
        "float8_e4m3fn": _e4m3fn(),
        "float8_e5m2": _ieee("float8_e5m2", 2, 5),
    }
)


class IntFormat(NamedTuple):
    """A symmetric integer format: values in [-qmax, qmax] (int8 never uses -128)."""

    name: str
    qmax: int


INT_FORMATS: MappingProxyType[str, IntFormat] = MappingProxyType({"int8": IntFormat("int8", 127)})


def float_format(name: str) -> FloatFormat:
    """The constants of float format ``name``; a ``ValueError`` naming the choices otherwise."""
    try:
        return FLOAT_FORMATS[name]
    except KeyError:
        raise ValueError(
            f"unknown number format {name!r}; expected one of {', '.join(FLOAT_FORMATS)}"
        ) from None
