"""How many independent partial reductions a kernel uses, as a function of the batch size.

Split-K matmuls and split-KV ("flash-decoding") attention kernels cut a long reduction into
parts that run on different cores and are joined at the end. Serving kernels choose the number
of parts from the batch size: a small batch leaves most cores idle, so the reduction is split
further. Because the parts are rounded separately, one row's result then depends on the batch
it was served in. With ``batching: fixed`` the split never changes (batch-invariant kernels).

The dynamic heuristic here is ours, shaped like the ones in CUTLASS/cuBLAS split-K and
flash-decoding: one output tile covers 16 rows; ``64 // tiles`` parts keep about 64 cores busy;
each part keeps at least 128 elements of the reduction; the count is a power of two.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["reduction_splits", "split_class"]

_ROWS_PER_TILE = 16
_TARGET_PARTS = 64
_MIN_PART = 128


def reduction_splits(batch_size: int, k: int, batching: Literal["dynamic", "fixed"]) -> int:
    """Number of contiguous parts a reduction of length ``k`` is split into for ``batch_size``.

    ``fixed`` always gives 1. ``dynamic`` gives a power of two that does not grow with the
    batch size (up to 64 for batches of at most 16 rows, 1 from 1024 rows up), capped so
    every part keeps at least 128 elements. Raises ``ValueError`` on bad arguments.
    """
    _check(batching, batch_size=batch_size, k=k)
    if batching == "fixed":
        return 1
    tiles = -(-batch_size // _ROWS_PER_TILE)
    want = max(1, _TARGET_PARTS // tiles)
    cap = max(1, k // _MIN_PART)
    n = min(want, cap)
    return 1 << (n.bit_length() - 1)


def split_class(batch_size: int, batching: Literal["dynamic", "fixed"]) -> int:
    """The batch size that stands for ``batch_size`` in every reduction: the largest one with
    the same :func:`reduction_splits` as ``batch_size`` for every reduction length ``k``.

    ``dynamic`` splits depend on the batch only through its number of 16-row output tiles,
    so a batch stands for the batch of the same number of whole tiles (1 to 16 rows: 16);
    ``fixed`` splits never change (1). Kernels built for ``split_class(b)`` compute each row
    of a batch of ``b`` as kernels built for ``b`` do, so batches of one class can share one
    compiled program. Raises ``ValueError`` on bad arguments."""
    _check(batching, batch_size=batch_size)
    if batching == "fixed":
        return 1
    return _ROWS_PER_TILE * -(-batch_size // _ROWS_PER_TILE)


def _check(batching: str, **values: int) -> None:
    if batching not in ("dynamic", "fixed"):
        raise ValueError(f"batching must be 'dynamic' or 'fixed', got {batching!r}")
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
