"""One safetensors file, its header checked against the file before any tensor is allocated.

The format: 8 bytes, the header's length ``N`` as a little-endian unsigned integer; ``N``
bytes of JSON, an object mapping each tensor name to ``{"dtype", "shape", "data_offsets":
[begin, end]}`` (and an optional ``"__metadata__"`` of strings); then the data, where each
tensor's bytes lie at ``[begin, end)``, little-endian, row-major.

Before a byte of data is read, ``Shard`` checks that ``N`` is at most
``LIMITS["safetensors_header"]`` and within the file, that the header is a JSON object, and,
for each tensor, that its dtype is known, its shape a list of non-negative integers, and
``end - begin`` exactly the bytes its shape and dtype take (products in exact integers, so no
dimension can overflow them), with ``end`` within the file. A header that cannot be used makes
the file unreadable (``ShardError``); a tensor entry that fails is a problem at its name, and
that tensor alone is not read. Tensors are read with ``readinto`` into an array allocated at
the checked size, from the file opened once, so what is checked is what is read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import BinaryIO

import numpy as np

from kernel_contracts.contracts.bounded import LIMITS, size_text
from kernel_contracts.contracts.errors import KernelContractsError

__all__ = ["DTYPE_BITS", "Entry", "Shard", "ShardError"]

# every dtype the format defines -> bits per element
DTYPE_BITS = MappingProxyType(
    {
        "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "E8M0": 8,
        "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
        "I64": 64, "U64": 64, "F64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    }
)  # fmt: skip
_METADATA = "__metadata__"


class ShardError(KernelContractsError, ValueError):
    """A safetensors file whose header cannot be used; the message says why."""


@dataclass(frozen=True)
class Entry:
    """A tensor's header entry, checked: dtype, shape, and its bytes' place in the data."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _entry(value: object, data_size: int) -> Entry | str:
    """The checked ``Entry`` of one header value, or why it cannot be read."""
    if not isinstance(value, dict):
        return "the header entry is not a JSON object"
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in value]
    if missing:
        return f"the header entry has no {', '.join(missing)}"
    dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        return f"unknown dtype {dtype!r} in the header"
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        return f"shape {json.dumps(shape)[:80]} is not a list of non-negative integers"
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        return f"data_offsets {json.dumps(offsets)[:80]} are not two integers 0 <= begin <= end"
    begin, end = offsets
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != end - begin:
        need = f"{bits / 8:g}" if bits % 8 else str(bits // 8)
        return (
            f"shape {shape} of {dtype} takes {need} bytes, but data_offsets [{begin}, {end}] "
            f"hold {end - begin}"
        )
    if end > data_size:
        return (
            f"data_offsets [{begin}, {end}] reach beyond the end of the file (its data holds "
            f"{data_size} bytes)"
        )
    return Entry(dtype, tuple(shape), begin, end)


class Shard:
    """An open safetensors file with its checked header: ``entries`` (name -> ``Entry``) and
    ``problems`` (name -> why that tensor cannot be read)."""

    entries: Mapping[str, Entry]
    problems: Mapping[str, str]

    def __init__(self, handle: BinaryIO, size: int):
        self._handle = handle
        head = handle.read(8)
        if len(head) < 8:
            raise ShardError(f"the file holds {size} bytes, too few for a safetensors header")
        n = int.from_bytes(head, "little")
        limit = LIMITS["safetensors_header"]
        if n > limit:
            raise ShardError(f"the header length {n} is above the limit of {size_text(limit)}")
        if 8 + n > size:
            raise ShardError(
                f"the header length {n} reaches beyond the end of the file ({size} bytes)"
            )
        raw = handle.read(n)
        if len(raw) != n:
            raise ShardError(f"the file ends inside its {n}-byte header")
        try:
            header = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as err:  # bad UTF-8 or JSON, nesting, long ints
            why = "nested too deeply" if isinstance(err, RecursionError) else str(err)
            raise ShardError(f"the header is not JSON: {why}") from None
        if not isinstance(header, dict):
            raise ShardError("the header is not a JSON object")
        self._start = 8 + n
        entries, problems = {}, {}
        for name, value in header.items():
            if name == _METADATA:
                continue
            checked = _entry(value, size - self._start)
            if isinstance(checked, Entry):
                entries[name] = checked
            else:
                problems[name] = checked
        self.entries = MappingProxyType(entries)
        self.problems = MappingProxyType(problems)

    def read(self, name: str, dtype: np.dtype) -> np.ndarray:
        """The tensor ``name`` as an array of ``dtype`` (which must be its stored dtype's
        layout), read into an array allocated at the size its checked entry gives."""
        entry = self.entries[name]
        out = np.empty(entry.shape, dtype)
        if out.nbytes != entry.end - entry.begin:
            raise ShardError(f"{name}: {dtype} does not match the stored dtype {entry.dtype}")
        view = memoryview(out.reshape(-1).view(np.uint8))
        self._handle.seek(self._start + entry.begin)
        done = 0
        while done < len(view):
            got = self._handle.readinto(view[done:])
            if not got:
                raise ShardError(f"{name}: the file ends inside the tensor's data")
            done += got
        return out
