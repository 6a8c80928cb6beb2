"""The static plan of one emulated matmul: how K splits into parts, chunks and groups.

The plan is computed once from the spec and K (both static under ``jax.jit``) and is shared by
the three implementations, so they cannot disagree about the layout. See the package docstring
for the arithmetic the layout serves.
"""

from __future__ import annotations

from math import ceil
from typing import NamedTuple

import numpy as np

from contracts import MatmulSpec
from kernels.formats import format_info
from kernels.scaling import Scaling, parse_scaling

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
            "out in chunks (kernels.matmul.int8)"
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
