"""The tensor types of a GGUF file that load, and their dequantization (the only importer of
the ``gguf`` package, llama.cpp's Python reader and writer).

A quantized tensor is stored in blocks along its rows (the first GGUF dimension): a block of
``block`` values takes ``nbytes`` bytes, scales and quantized integers packed as llama.cpp's
``ggml-common.h`` lays them out. ``dequantize`` turns the raw bytes of whole rows into float32
values with the package's own block decoders (``gguf.quants``), which follow those layouts
operation for operation in float32: a half-precision scale widened to float32, multiplied by the
integer, the offset added. Each supported type is tested on blocks of known values.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize as _dequantize
from jaxtyping import Float32, UInt8

__all__ = ["SUPPORTED", "TYPE_NAMES", "TypeInfo", "dequantize", "row_bytes"]

_LOADED = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K")

# every type id the format defines -> its name
TYPE_NAMES = MappingProxyType({int(t): t.name for t in GGMLQuantizationType})


class TypeInfo(NamedTuple):
    """A tensor type: its name, the values a block holds and the bytes a block takes."""

    name: str
    block: int
    nbytes: int


# type id -> TypeInfo, for the types that load
SUPPORTED = MappingProxyType(
    {
        int(GGMLQuantizationType[name]): TypeInfo(
            name, *GGML_QUANT_SIZES[GGMLQuantizationType[name]]
        )
        for name in _LOADED
    }
)


def row_bytes(type_id: int, width: int) -> int:
    """The bytes one row of ``width`` values of the supported type ``type_id`` takes (``width``
    a multiple of its block)."""
    info = SUPPORTED[type_id]
    return width // info.block * info.nbytes


def dequantize(
    raw: UInt8[np.ndarray, " nbytes"], type_id: int, width: int
) -> Float32[np.ndarray, "rows width"]:
    """The float32 values ``[rows, width]`` of ``raw``, the uint8 bytes of whole rows of the
    supported type ``type_id``."""
    rows = raw.reshape(-1, row_bytes(type_id, width))
    out = _dequantize(rows, GGMLQuantizationType(type_id))
    return np.ascontiguousarray(out, dtype=np.float32).reshape(rows.shape[0], width)
