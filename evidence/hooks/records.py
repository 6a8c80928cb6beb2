"""From a framework's padded batch arrays to log records of one of our formats.

Frameworks hold a rollout batch as padded 2-D tensors (one row per sequence, the response
tokens along the columns). ``to_numpy`` turns a torch tensor (or anything with
``detach().cpu().numpy()``), a numpy array or a nested list into a numpy array without
importing torch: half-precision floats are widened to float32 first, as numpy has no bfloat16.
``sequence_records`` cuts each row to its span and writes the record under the key names of a
log format (``evidence.logs.schema``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
from jaxtyping import Bool, Float, Int, Shaped

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.evidence.logs.schema import FORMATS

__all__ = ["HookError", "sequence_records", "setting", "to_numpy"]

_HALF = ("torch.bfloat16", "torch.float16")


class HookError(KernelContractsError):
    """A framework batch that cannot be logged; the message lists every problem with its key."""


def to_numpy(value: object) -> np.ndarray:
    """``value`` as a numpy array: torch tensors through ``detach().cpu().numpy()``."""
    if isinstance(value, np.ndarray):
        return value
    detach = getattr(value, "detach", None)
    if callable(detach):
        tensor = detach()
        if str(getattr(tensor, "dtype", "")) in _HALF:
            tensor = tensor.float()
        return np.asarray(tensor.cpu().numpy())
    return np.asarray(value)


def setting(config: object, dotted: str, default: object = None) -> object:
    """The value at ``dotted`` (``"a.b.c"``) of a framework's config, read by attribute or by key
    (an OmegaConf ``DictConfig``, a dataclass, nested dicts); ``default`` where a part is absent
    or null."""
    value = config
    for part in dotted.split("."):
        if value is None:
            return default
        value = value.get(part) if isinstance(value, Mapping) else getattr(value, part, None)
    return default if value is None else value


def require(batch: Collection, keys: Sequence[str], where: str) -> None:
    """``HookError`` naming every key of ``keys`` that ``batch`` (its keys) lacks."""
    missing = [k for k in keys if k not in batch]
    if missing:
        have = ", ".join(sorted(map(str, batch))[:12]) or "none"
        raise HookError(
            "; ".join(f"{where}[{k!r}]: missing" for k in missing) + f" (the batch has: {have})"
        )


def check_shapes(arrays: Mapping[str, np.ndarray], rows: int, cols: int, where: str) -> None:
    """``HookError`` naming every array that is not ``rows × cols``."""
    bad = [
        f"{where}[{k!r}]: shape {tuple(a.shape)}, expected ({rows}, {cols})"
        for k, a in arrays.items()
        if a.shape != (rows, cols)
    ]
    if bad:
        raise HookError("; ".join(bad))


def sequence_records(
    format: str,
    *,
    ids: Int[np.ndarray, "batch response"],
    train: Float[np.ndarray, "batch response"],
    rollout: Float[np.ndarray, "batch response"],
    mask: Bool[np.ndarray, "batch response"],
    start: Int[np.ndarray, " batch"],
    stop: Int[np.ndarray, " batch"],
    offset: Int[np.ndarray, " batch"],
    prompt: Shaped[np.ndarray, " batch"],
    extra: Mapping[str, object] | None = None,
) -> list[dict]:
    """One record per row in ``format``'s key names: the columns ``[start, stop)`` of the row,
    its 0/1 mask, the prompt id, ``sample_id`` (the row), ``position_offset`` (the position of
    column ``start`` in the whole sequence) and the ``extra`` keys (the reader ignores them)."""
    fmt = FORMATS[format]
    ids = ids.astype(np.int64, copy=False)
    train = train.astype(np.float64, copy=False)
    rollout = rollout.astype(np.float64, copy=False)
    mask = mask.astype(np.int64, copy=False)
    out = []
    for row in range(ids.shape[0]):
        a, b = int(start[row]), int(stop[row])
        record = {fmt.prompt[0]: str(prompt[row]), fmt.sample: row}
        record |= {
            fmt.ids: ids[row, a:b].tolist(),
            fmt.train: train[row, a:b].tolist(),
            fmt.rollout: rollout[row, a:b].tolist(),
            fmt.mask: mask[row, a:b].tolist(),
            fmt.position_offset: int(offset[row]),
        }
        out.append(record | dict(extra or {}))
    return out
