"""A GGUF file's header, parsed with every length checked against the file before it is used.

The format (version 2 or 3, little-endian): the magic ``GGUF``; the version (uint32); the
tensor count and the metadata count (uint64 each); the metadata, each entry a key (a string:
uint64 length, UTF-8 bytes), a value type (uint32) and a value (a scalar, a string, or an array:
item type, uint64 count, items); the tensor infos, each a name, the number of dimensions
(uint32), the dimensions (uint64 each, fastest-varying first), the tensor type (uint32) and the
data's offset (uint64) from the start of the data; then padding to ``general.alignment`` (32
unless the metadata says otherwise), and the data.

The package's own reader walks the lengths and counts a file states without checking them
against the file (an array that claims 2^62 items is iterated item by item past the end), so the
header is read here, as ``kernels.model.hf.shard`` reads a safetensors header: every string,
array and dimension list is checked to fit in the bytes the file has left before it is read, the
header as a whole is at most ``LIMITS["gguf_metadata"]`` bytes, and each tensor's data is checked
to lie within the file. A header that cannot be read is a ``GGUFError`` (the offset and what was
being read); a tensor whose entry cannot be used is a problem at its name, and is not read.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, BinaryIO

import numpy as np

from kernel_contracts.contracts.bounded import LIMITS, size_text
from kernel_contracts.contracts.errors import KernelContractsError
from kernel_contracts.kernels.model.gguf.quants import SUPPORTED, TYPE_NAMES

__all__ = ["MAGIC", "VERSIONS", "GGUFError", "Header", "TensorInfo", "read_header", "read_tensor"]

MAGIC = b"GGUF"
VERSIONS = (2, 3)
_ALIGNMENT = 32
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_DEPTH = 4  # arrays of arrays

# value type -> (struct format, numpy dtype) of the scalar types
_SCALARS = {
    0: ("<B", "<u1"), 1: ("<b", "<i1"), 2: ("<H", "<u2"), 3: ("<h", "<i2"), 4: ("<I", "<u4"),
    5: ("<i", "<i4"), 6: ("<f", "<f4"), 7: ("<?", "<u1"), 10: ("<Q", "<u8"), 11: ("<q", "<i8"),
    12: ("<d", "<f8"),
}  # fmt: skip
_STRING, _ARRAY, _BOOL = 8, 9, 7


class GGUFError(KernelContractsError, ValueError):
    """A GGUF header that cannot be read; the message says where and why."""


@dataclass(frozen=True)
class TensorInfo:
    """A tensor's checked entry: its type id, its shape (numpy order, slowest first) and its
    bytes' place in the file."""

    type_id: int
    shape: tuple[int, ...]
    begin: int
    nbytes: int

    @property
    def type_name(self) -> str:
        return TYPE_NAMES[self.type_id]


@dataclass(frozen=True)
class Header:
    """A GGUF file's version, metadata (key -> value: ``int``, ``float``, ``bool``, ``str`` or a
    list of them), checked tensor entries and the problems of the entries that are not."""

    version: int
    metadata: Mapping[str, Any]
    tensors: Mapping[str, TensorInfo]
    problems: Mapping[str, str]


class _Cursor:
    """Reads from the file, refusing any read past its end or the header limit."""

    def __init__(self, handle: BinaryIO, size: int):
        self.handle, self.size, self.pos = handle, size, 0
        self.limit = min(size, LIMITS["gguf_metadata"])

    def take(self, n: int, what: str) -> bytes:
        if n > self.limit - self.pos:
            if self.limit < self.size:
                raise GGUFError(
                    f"{what} at offset {self.pos} ({n} bytes) reaches past the header limit of "
                    f"{size_text(LIMITS['gguf_metadata'])}"
                )
            raise GGUFError(
                f"the file ends inside {what} at offset {self.pos} (it needs {n} bytes, the "
                f"file holds {self.size})"
            )
        data = self.handle.read(n)
        if len(data) != n:
            raise GGUFError(f"the file ends inside {what} at offset {self.pos}")
        self.pos += n
        return data

    def scalar(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.scalar("<Q", f"the length of {what}")
        data = self.take(n, what)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise GGUFError(f"{what} at offset {self.pos - n} is not UTF-8: {err.reason}") from None

    def left(self) -> int:
        return self.limit - self.pos

    def room(self) -> str:
        """The bytes left, in words (the header limit named when it is the bound)."""
        text = f"the {self.left()} bytes left"
        if self.limit < self.size:
            text += f" under the header limit of {size_text(LIMITS['gguf_metadata'])}"
        return text


def _value(cur: _Cursor, vtype: int, what: str, depth: int = 0) -> Any:
    if vtype in _SCALARS:
        value = cur.scalar(_SCALARS[vtype][0], what)
        return bool(value) if vtype == _BOOL else value
    if vtype == _STRING:
        return cur.string(what)
    if vtype != _ARRAY:
        raise GGUFError(f"{what}: unknown value type {vtype}")
    if depth >= _MAX_DEPTH:
        raise GGUFError(f"{what}: arrays nested more than {_MAX_DEPTH} deep")
    itype = cur.scalar("<I", f"the item type of {what}")
    count = cur.scalar("<Q", f"the item count of {what}")
    least = {_STRING: 8, _ARRAY: 12}.get(itype) or struct.calcsize(_SCALARS.get(itype, ("<B",))[0])
    if count > cur.left() // least:
        raise GGUFError(f"{what}: {count} items of type {itype} cannot fit in {cur.room()}")
    if itype in _SCALARS:
        dtype = np.dtype(_SCALARS[itype][1])
        items = np.frombuffer(cur.take(count * dtype.itemsize, what), dtype).tolist()
        return [bool(v) for v in items] if itype == _BOOL else items
    return [_value(cur, itype, f"{what}[{i}]", depth + 1) for i in range(count)]


def _tensor(entry: tuple[int, tuple[int, ...], int], data_start: int, size: int, alignment: int):
    """The checked ``TensorInfo`` of one tensor entry, or why it cannot be read."""
    type_id, dims, offset = entry
    if type_id not in SUPPORTED:
        name = TYPE_NAMES.get(type_id, f"unknown type {type_id}")
        loaded = ", ".join(t.name for t in SUPPORTED.values())
        return f"unsupported tensor type {name} (supported: {loaded})"
    if not dims or any(d < 1 for d in dims):
        return f"dimensions {list(dims)} are not positive"
    info = SUPPORTED[type_id]
    if dims[0] % info.block:
        return f"its rows of {dims[0]} values are not whole blocks of {info.block} ({info.name})"
    if offset % alignment:
        return f"data offset {offset} is not a multiple of the alignment {alignment}"
    nbytes = math.prod(dims) // info.block * info.nbytes
    begin = data_start + offset
    if begin + nbytes > size:
        return (
            f"its data [{begin}, {begin + nbytes}) reaches beyond the end of the file "
            f"({size} bytes)"
        )
    return TensorInfo(type_id, tuple(reversed(dims)), begin, nbytes)


def read_header(handle: BinaryIO, size: int) -> Header:
    """The checked header of the GGUF file open in ``handle`` (``size`` bytes long)."""
    cur = _Cursor(handle, size)
    magic = cur.take(4, "the magic number")
    if magic != MAGIC:
        raise GGUFError(f"not a GGUF file: it starts with {magic!r}, not {MAGIC!r}")
    version = cur.scalar("<I", "the version")
    if version not in VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        if swapped in VERSIONS:
            raise GGUFError(f"a big-endian GGUF file (version {swapped}); only little-endian loads")
        raise GGUFError(f"GGUF version {version} (supported: {', '.join(map(str, VERSIONS))})")
    n_tensors = cur.scalar("<Q", "the tensor count")
    n_kv = cur.scalar("<Q", "the metadata count")
    if n_kv > cur.left() // 12:
        raise GGUFError(f"the metadata count {n_kv} cannot fit in {cur.room()}")
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        key = cur.string(f"metadata key {i}")
        vtype = cur.scalar("<I", f"the value type of {key}")
        if key in metadata:
            raise GGUFError(f"metadata key {key!r} appears twice")
        metadata[key] = _value(cur, vtype, key)
    if n_tensors > cur.left() // 24:
        raise GGUFError(f"the tensor count {n_tensors} cannot fit in {cur.room()}")
    entries: dict[str, tuple[int, tuple[int, ...], int]] = {}
    for i in range(n_tensors):
        name = cur.string(f"the name of tensor {i}")
        n_dims = cur.scalar("<I", f"the dimension count of {name}")
        if n_dims > _MAX_DIMS:
            raise GGUFError(f"tensor {name}: {n_dims} dimensions (at most {_MAX_DIMS})")
        dims = struct.unpack(f"<{n_dims}Q", cur.take(8 * n_dims, f"the dimensions of {name}"))
        type_id = cur.scalar("<I", f"the type of {name}")
        offset = cur.scalar("<Q", f"the data offset of {name}")
        if name in entries:
            raise GGUFError(f"tensor {name!r} appears twice")
        entries[name] = (type_id, dims, offset)
    alignment = metadata.get("general.alignment", _ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1:
        raise GGUFError(f"general.alignment must be a positive integer, got {alignment!r}")
    if alignment & (alignment - 1):
        raise GGUFError(f"general.alignment must be a power of two, got {alignment}")
    data_start = -(-cur.pos // alignment) * alignment
    tensors, problems = {}, {}
    for name, entry in entries.items():
        checked = _tensor(entry, data_start, size, alignment)
        if isinstance(checked, TensorInfo):
            tensors[name] = checked
        else:
            problems[name] = checked
    return Header(
        version, MappingProxyType(metadata), MappingProxyType(tensors), MappingProxyType(problems)
    )


def read_tensor(handle: BinaryIO, info: TensorInfo) -> np.ndarray:
    """The raw bytes of the tensor ``info`` (uint8), read into a buffer of its checked size."""
    out = np.empty(info.nbytes, np.uint8)
    view = memoryview(out)
    handle.seek(info.begin)
    done = 0
    while done < len(view):
        got = handle.readinto(view[done:])
        if not got:
            raise GGUFError("the file ends inside a tensor's data")
        done += got
    return out
