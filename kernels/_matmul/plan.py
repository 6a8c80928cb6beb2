"""The static plan of one emulated matmul: how K splits into parts, chunks and groups.

The plan is computed once from the spec and K (both static under ``jax.jit``) and is shared by
the three implementations, so they cannot disagree about the layout. See the package docstring
for the arithmetic the layout serves.
"""

from __future__ import annotations

from math import ceil
from typing import NamedTuple

import numpy as np

from kernel_contracts.contracts import MatmulSpec
from kernel_contracts.kernels.numerics.formats import format_info
from kernel_contracts.kernels.numerics.scaling import Scaling, parse_scaling

__all__ = ["Plan", "make_plan"]


class Plan(NamedTuple):
    """Layout of the reduction axis K (all lengths in elements of K)."""

    k: int  # the true K
    inputs: str  # input format name
    scaling: Scaling
    output: str
    mantissa_bits: int
    toward_zero: bool
    group: int  # products per accumulator rounding
    parts: int  # non-empty split-K parts actually used (<= splits)
    part_len: int  # K elements per part (the last part may hold fewer real ones)
    chunks: int  # chunks per part
    chunk_len: int  # K elements per chunk
    groups: int  # groups per chunk = ceil(chunk_len / group)

    @property
    def block_scaled(self) -> bool:
        """True when scales vary along K and are applied at each chunk's promotion."""
        return self.scaling.varies_along_k

    @property
    def steps(self) -> int:
        """Total number of accumulator roundings along K, padding included."""
        return self.parts * self.chunks * self.groups

    @property
    def in_range(self) -> bool:
        """True when no accumulator value can overflow or fall below ``2**-126``, whatever the
        input values: the rounding then needs no range checks (``round_accumulator_in_range``).

        Holds for e4m3, e5m2 and float16 inputs (K below ``2**60``). Their values are multiples
        of ``q = 2**-9``, ``2**-16``, ``2**-24``, so every product is a multiple of ``q**2 >=
        2**-48``, and so is every binary64 sum and every m-bit rounding of such multiples (the
        grid spacing at the result is either a multiple of ``q**2`` or finer than it, and then
        the value is on the grid): a non-zero accumulator is at least ``2**-48``. Above, with
        ``T`` the largest group sum (below ``group · max**2 · 1.01 < group · 2**32``):
        toward zero never increases a magnitude, so ``|a| <= K · 2**32``; to nearest, once
        ``|a| >= 2**(m + 2) · T`` a step moves ``a`` by less than half its spacing, so ``|a|``
        stops growing and stays below ``2**(m + 3) · T < 2**(26 + 32) · group``. Both are far
        below ``2**127``. Quantized inputs are finite or NaN (the casts saturate), never inf.
        """
        return self.inputs in ("float8_e4m3fn", "float8_e5m2", "float16") and self.k < 2**60

    @property
    def exact_group_sums(self) -> bool:
        """True when every binary64 partial sum of a group is the exact real sum, so a group
        may be summed in any order with the same result.

        Holds for e4m3 inputs with ``group <= 2**17``: every product is a multiple of
        ``2**-18`` of magnitude at most ``448**2``, so every partial sum of at most ``2**17``
        of them is a multiple of ``2**-18`` below ``2**17 · 448**2 < 2**35``: 53 bits suffice.
        (For e5m2, float16 and wider inputs the products span more than 53 bits.)
        """
        return self.inputs == "float8_e4m3fn" and self.group <= 2**17

    @property
    def binary32_chain(self) -> bool:
        """True when the definition is a plain binary32 sum of binary32 products, whenever
        every product is exact in binary32 and no partial sum is a binary32 subnormal.

        That is a float32 accumulator (23 fraction bits, to nearest) rounded after every
        product (``group = 1``) with inputs whose products have at most 24 significant bits
        (bfloat16, float16, FP8). Then ``round(a + p)``, computed in binary64 and rounded to
        24 bits, equals the binary32 sum ``a + p``: the binary64 sum of two 24-bit numbers
        rounded again to 24 bits is their correctly rounded sum (53 >= 2 · 24 + 2), binary32
        overflows to ±inf as the definition does, and a subnormal result (flushed by the
        definition) cannot occur when all values are multiples of ``2**-126``. For FP8 and
        float16 that holds always (``in_range``); for bfloat16 the caller checks the data.
        """
        return (
            self.group == 1
            and self.mantissa_bits == 23
            and not self.toward_zero
            and self.inputs in ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
        )

    def positions(self) -> np.ndarray:
        """K index of every slot of the padded layout, shape (steps, group); -1 is padding."""
        p = np.arange(self.parts)[:, None, None, None]
        c = np.arange(self.chunks)[None, :, None, None]
        j = np.arange(self.groups)[None, None, :, None]
        i = np.arange(self.group)[None, None, None, :]
        within = j * self.group + i
        k = p * self.part_len + c * self.chunk_len + within
        valid = (within < self.chunk_len) & (k < self.k)
        return np.where(valid, k, -1).reshape(self.steps, self.group)

    def chunk_runs(self) -> np.ndarray:
        """Scale-run index of every chunk, shape (parts, chunks) (0 when not block-scaled)."""
        p = np.arange(self.parts)[:, None]
        c = np.arange(self.chunks)[None, :]
        start = p * self.part_len + c * self.chunk_len
        if not self.block_scaled:
            return np.zeros_like(start)
        runs = -(-self.k // self.scaling.block)
        return np.minimum(start // self.scaling.block, runs - 1)


def make_plan(spec: MatmulSpec, k: int, splits: int = 1) -> Plan:
    """Validate ``spec`` for a reduction of length ``k`` and lay out K.

    Raises ``ValueError`` listing every problem found.
    """
    if spec.is_int8:
        raise ValueError(
            "invalid matmul spec:\n  matmul.inputs: int8 is accumulated exactly and is not laid "
            "out in chunks (kernels._matmul.int8)"
        )
    problems: list[str] = []

    def check(cond: bool, msg: str) -> None:
        if not cond:
            problems.append(msg)

    scaling = None
    for key in ("inputs", "output"):
        try:
            format_info(getattr(spec, key))
        except ValueError as e:
            problems.append(f"matmul.{key}: {e}")
    if not problems:
        try:
            scaling = parse_scaling(spec.scaling, spec.inputs)
        except ValueError as e:
            problems.append(f"matmul.scaling: {e}")
    acc = spec.accumulator
    m = getattr(acc, "mantissa_bits", None)  # an int32 accumulator has none
    check(
        isinstance(m, int) and not isinstance(m, bool) and 1 <= m <= 23,
        f"matmul.accumulator.mantissa_bits: {m!r} is not an integer in [1, 23]",
    )
    check(
        getattr(acc, "rounding", None) in ("nearest_even", "toward_zero"),
        f"matmul.accumulator.rounding: {getattr(acc, 'rounding', None)!r} is not nearest_even "
        "or toward_zero",
    )
    g = spec.group
    check(
        isinstance(g, int) and not isinstance(g, bool) and g >= 1,
        f"matmul.group: {g!r} is not a positive integer",
    )
    pe = spec.promote_every
    check(
        pe is None or (isinstance(pe, int) and not isinstance(pe, bool) and pe >= 1),
        f"matmul.promote_every: {pe!r} is not a positive integer or null",
    )
    check(isinstance(splits, int) and splits >= 1, f"splits: {splits!r} is not a positive integer")
    check(isinstance(k, int) and k >= 0, f"k: {k!r} is not a non-negative integer")
    if problems:
        raise ValueError("invalid matmul spec:\n  " + "\n  ".join(problems))

    bounded = []
    if pe is not None:
        bounded.append(pe)
    if scaling.varies_along_k:
        bounded.append(scaling.block)
    if len(bounded) == 2 and max(bounded) % min(bounded) != 0:
        raise ValueError(
            f"invalid matmul spec:\n  matmul.promote_every: {pe} and the scale block "
            f"{scaling.block} of {spec.scaling!r} must divide one another"
        )
    kk = max(k, 1)
    unit = min(bounded) if bounded else g
    units = ceil(kk / unit)
    per_part = ceil(units / splits)
    parts = ceil(units / per_part)
    part_len = per_part * unit
    if bounded:
        chunk_len, chunks = unit, per_part
    else:
        chunk_len, chunks = part_len, 1
    return Plan(
        k=k,
        inputs=spec.inputs,
        scaling=scaling,
        output=spec.output,
        mantissa_bits=m,
        toward_zero=acc.rounding == "toward_zero",
        group=g,
        parts=parts,
        part_len=part_len,
        chunks=chunks,
        chunk_len=chunk_len,
        groups=ceil(chunk_len / g),
    )
