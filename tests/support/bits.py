"""Bit-for-bit comparison of float arrays and token tables, shared by the tests."""

from __future__ import annotations

import hashlib

import numpy as np


def same_bits(a, b) -> bool:
    """Whether ``a`` and ``b`` have the same shape and, as float32, the same bit pattern at
    every position (any NaN matches any NaN)."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and bool(
        np.all((a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b)))
    )


def digest(table: dict[str, np.ndarray]) -> str:
    """sha256 over every column's name, dtype, shape and bytes, in name order (16 hex digits)."""
    h = hashlib.sha256()
    for name in sorted(table):
        column = np.ascontiguousarray(table[name])
        h.update(f"{name}\0{column.dtype.str}\0{column.shape}\0".encode())
        h.update(column.tobytes())
    return h.hexdigest()[:16]
