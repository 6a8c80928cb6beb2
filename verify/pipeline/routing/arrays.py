"""The array side of routing: a batch checked once, and the per-token functions of the actions.

``log_ratio``, ``exceeds``, ``capped_weights`` and ``rows_with`` are pure functions of their
arrays: given JAX arrays they run under ``jax.jit`` (tracers included), given numpy arrays they
run in numpy, each in the arrays' own dtype. ``check_batch`` is the host-side gate in front of
them: it refuses a batch it cannot decide (shapes, dtypes, non-finite or positive log-probs on
response tokens) with one ``RoutingError`` naming every offending argument, and gives the
batch back as float64 numpy arrays, the precision the offline evaluation of a log uses.

Nothing here imports JAX: a JAX array is recognised through ``sys.modules``, since a caller
holding one has imported JAX already.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
from jaxtyping import Bool, Float, Int

from kernel_contracts.contracts import KernelContractsError

if TYPE_CHECKING:
    from jaxtyping import Array

__all__ = [
    "Batch",
    "RoutingError",
    "cap_below",
    "capped_weights",
    "check_batch",
    "exceeds",
    "is_jax",
    "log_ratio",
    "rows_with",
]

_LISTED = 3  # offending positions shown per problem


class RoutingError(KernelContractsError, ValueError):
    """A routing input that cannot be used; ``problems`` names each offending argument, and
    ``str`` is one line with all of them."""

    def __init__(self, problems: Sequence[str]):
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


def _jax():
    return sys.modules.get("jax")


def is_jax(x) -> bool:
    """True for a JAX array or tracer (without importing JAX)."""
    jax = _jax()
    return jax is not None and isinstance(x, jax.Array)


def _is_tracer(x) -> bool:
    jax = _jax()
    return jax is not None and isinstance(x, jax.core.Tracer)


def _xp(x):
    if is_jax(x):
        import jax.numpy as jnp

        return jnp
    return np


def log_ratio(
    train_logprobs: Float[Array, "batch tokens"], inference_logprobs: Float[Array, "batch tokens"]
) -> Float[Array, "batch tokens"]:
    """log w = log π_train(y) − log π_inf(y) of each token."""
    return train_logprobs - inference_logprobs


def exceeds(
    values: Float[Array, "batch tokens"], limit: float, where: Bool[Array, "batch tokens"]
) -> Bool[Array, "batch tokens"]:
    """Tokens of ``where`` whose value is above ``limit``; a NaN value counts as above."""
    return where & ~(values <= limit)


def cap_below(cap: Fraction | float, dtype) -> float:
    """The largest value of ``dtype`` that is ≤ ``cap`` (``float32(1.1)`` is above 1.1)."""
    cap = Fraction(cap)
    dtype = np.dtype(dtype)
    c = np.asarray(float(cap), dtype)
    if Fraction(float(c)) > cap:
        c = np.nextafter(c, np.asarray(0, dtype))
    return float(c)


def capped_weights(
    log_w: Float[Array, "batch tokens"], where: Bool[Array, "batch tokens"], cap: Fraction | float
) -> Float[Array, "batch tokens"]:
    """Truncated importance weights min(w, c) on ``where`` and 0 elsewhere; every weight is at
    most ``cap`` in the arrays' dtype (the cap is rounded down to it)."""
    xp = _xp(log_w)
    c = cap_below(cap, log_w.dtype)
    w = xp.minimum(xp.exp(log_w), xp.asarray(c, dtype=log_w.dtype))
    return xp.where(where, w, xp.zeros_like(w))


def rows_with(flags: Bool[Array, "batch tokens"]) -> Bool[Array, " batch"]:
    """Sequences with at least one flagged token."""
    return flags.any(axis=1)


@dataclass(frozen=True)
class Batch:
    """A checked batch, on the host in float64; ``jax`` says whether to answer in JAX arrays."""

    train: Float[np.ndarray, "batch tokens"]
    inference: Float[np.ndarray, "batch tokens"]
    mask: Bool[np.ndarray, "batch tokens"]
    positions: Int[np.ndarray, "batch tokens"]
    prompts: tuple[str, ...] | None
    jax: bool
    dtype: np.dtype  # the weights' dtype: the log-probs' (float32 for bfloat16 and narrower)

    @property
    def shape(self) -> tuple[int, int]:
        return self.mask.shape


def _where(bad: np.ndarray) -> str:
    idx = np.argwhere(bad)[:_LISTED]
    shown = ", ".join(str(list(map(int, i))) for i in idx)
    more = int(bad.sum()) - len(idx)
    return shown + (f" and {more} more" if more > 0 else "")


def _array(name: str, x, problems: list[str]):
    if _is_tracer(x):
        problems.append(
            f"{name}: a traced array: route decides on concrete values, so call it outside "
            "jax.jit (the array functions of verify.pipeline.routing run inside it)"
        )
        return None
    if not (isinstance(x, np.ndarray) or is_jax(x)):
        problems.append(f"{name}: expected a numpy or JAX array, got {type(x).__name__}")
        return None
    return np.asarray(x)


def _floating(dtype: np.dtype) -> bool:
    """numpy's floats and ml_dtypes' (bfloat16, float8_*), which JAX arrays may hold."""
    return dtype.kind == "f" or dtype.name.startswith(("bfloat", "float"))


def _logprobs(name: str, x, mask, problems: list[str]) -> np.ndarray | None:
    if x is None:
        return None
    if not _floating(x.dtype):
        problems.append(f"{name}: log-probs must be a floating-point array, got dtype {x.dtype}")
        return None
    x = x.astype(np.float64)
    if mask is None:
        return x
    nan = mask & np.isnan(x)
    inf = mask & np.isinf(x)
    pos = mask & (x > 0)
    if nan.any():
        problems.append(f"{name}: NaN log-prob at response token [batch, token] {_where(nan)}")
    if inf.any():
        problems.append(f"{name}: infinite log-prob at response token [batch, token] {_where(inf)}")
    if pos.any():
        first = tuple(np.argwhere(pos)[0])
        problems.append(
            f"{name}: positive log-prob {float(x[first])!r} > 0 at response token "
            f"[batch, token] {_where(pos)}: log-probs must be ≤ 0"
        )
    return x


def check_batch(
    train_logprobs,
    inference_logprobs,
    response_mask,
    *,
    positions=None,
    prompts: Sequence[str] | None = None,
) -> Batch:
    """The batch as float64 host arrays, or ``RoutingError`` naming every bad argument.

    ``train_logprobs`` and ``inference_logprobs``: floating-point [batch, tokens]; every token
    where ``response_mask`` (boolean, same shape) is True must hold a finite log-prob ≤ 0
    (padding may hold anything). ``positions`` (integers ≥ 0, same shape; default the token
    index) place tokens for position slices; ``prompts`` (one string per sequence) name them
    for prompt slices.
    """
    problems: list[str] = []
    arrays = {
        "train_logprobs": train_logprobs,
        "inference_logprobs": inference_logprobs,
        "response_mask": response_mask,
    }
    if positions is not None:
        arrays["positions"] = positions
    host = {k: _array(k, v, problems) for k, v in arrays.items()}
    use_jax = any(is_jax(v) for v in arrays.values())
    shape = None
    for name, x in host.items():
        if x is None:
            continue
        if x.ndim != 2:
            problems.append(f"{name}: expected shape [batch, tokens], got shape {x.shape}")
            host[name] = None
        elif shape is None:
            shape = x.shape
        elif x.shape != shape:
            first = next(k for k, v in host.items() if v is not None and v.ndim == 2)
            problems.append(f"{name}: shape {x.shape} does not match {first} {shape}")
            host[name] = None
    mask = host["response_mask"]
    if mask is not None and mask.dtype != np.bool_:
        problems.append(
            f"response_mask: must be boolean, got dtype {mask.dtype} (pass mask.astype(bool) "
            "if nonzero means a response token)"
        )
        mask = None
    train = _logprobs("train_logprobs", host["train_logprobs"], mask, problems)
    inference = _logprobs("inference_logprobs", host["inference_logprobs"], mask, problems)
    pos = host.get("positions")
    if pos is not None:
        if pos.dtype.kind not in "iu":
            problems.append(f"positions: must be integers, got dtype {pos.dtype}")
        elif (pos < 0).any():
            problems.append(f"positions: negative position at [batch, token] {_where(pos < 0)}")
    names = None
    if prompts is not None:
        names = tuple(prompts) if not isinstance(prompts, str) else None
        if names is None or not all(isinstance(p, str) for p in names):
            problems.append("prompts: expected a sequence of strings, one per sequence")
            names = None
        elif shape is not None and len(names) != shape[0]:
            problems.append(f"prompts: {len(names)} names for a batch of {shape[0]} sequences")
    if problems:
        raise RoutingError(problems)
    if positions is None:
        pos = np.broadcast_to(np.arange(shape[1], dtype=np.int64), shape)
    dtypes = (host["train_logprobs"].dtype, host["inference_logprobs"].dtype)
    # the weights keep a numpy float dtype; narrower formats (bfloat16) get float32 weights
    dtype = np.result_type(*dtypes) if all(d.kind == "f" for d in dtypes) else np.dtype(np.float32)
    return Batch(train, inference, mask, np.asarray(pos, np.int64), names, use_jax, dtype)
