"""Bit-for-bit comparison of float arrays, shared by the tests."""

from __future__ import annotations

import numpy as np


def same_bits(a, b) -> bool:
    """Whether ``a`` and ``b`` have the same shape and, as float32, the same bit pattern at
    every position (any NaN matches any NaN)."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and bool(
        np.all((a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b)))
    )
