"""The kernels a policy model runs on, injected as one immutable ``Ops`` record.

The model never multiplies or attends by itself: every matmul (projections, MLP, LM head)
goes through ``ops.matmul``, whole-sequence attention through ``ops.attention``, and
incremental decoding through ``ops.cache``. K_train and K_inf are two ``Ops`` values built
from the contract's two ``KernelSpec``\\ s, so the two kernels differ only in what is injected.

Every field is a frozen dataclass compared by value: two ``Ops`` built from the same spec are
equal and hash alike, so jitted functions that close over them compile once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from kernel_contracts.contracts.model import AttentionSpec, KernelSpec, MatmulSpec
from kernel_contracts.kernels._matmul.api import QuantizedWeight, matmul, quantize_weight
from kernel_contracts.kernels.attention import (
    PagedKVCache,
    decode_attention,
    masked_attention,
    reference_attention,
    widen_heads,
)
from kernel_contracts.kernels.batching import reduction_splits
from kernel_contracts.kernels.numerics import portable
from kernel_contracts.kernels.numerics.blocked import blocked_matmul

__all__ = [
    "AttentionFn",
    "CacheOps",
    "ContiguousCache",
    "EmulatedMatmul",
    "Layers",
    "MatmulFn",
    "Ops",
    "PagedAttention",
    "PlainAttention",
    "PlainMatmul",
    "ReferenceAttention",
    "inference_ops",
    "plain_ops",
    "prepared",
    "train_ops",
]


@runtime_checkable
class MatmulFn(Protocol):
    """``x @ w`` under some arithmetic. A matmul may also have ``prepare(w)``: the form of a
    weight it reads many times (stacked ``[..., k, n]`` weights allowed), computed once and
    passed as ``w`` in place of the weight itself (:func:`prepared`)."""

    def __call__(
        self, x: Float[ArrayLike, "... k"], w: Float[ArrayLike, "k n"]
    ) -> Float[Array, "... n"]:
        """``x @ w`` under some arithmetic; the result is float32."""
        ...


def prepared(matmul: MatmulFn, w: Float[ArrayLike, "*lead k n"]) -> Any:
    """``matmul.prepare(w)`` where the matmul has it, else ``w``: what a model passes to the
    matmul for a weight. A model prepares its weights where it stacks them, outside its loop
    over layers, so a decode loop finds them loop-invariant and a compiler computes them once
    (XLA moves loop-invariant code out of a while loop)."""
    prepare = getattr(matmul, "prepare", None)
    return w if prepare is None else prepare(w)


@runtime_checkable
class AttentionFn(Protocol):
    def __call__(
        self,
        q: Float[ArrayLike, "batch seq heads dim"],
        k: Float[ArrayLike, "batch seq heads dim"],
        v: Float[ArrayLike, "batch seq heads dim"],
    ) -> Float[Array, "batch seq heads dim"]:
        """Causal scaled dot-product attention over whole sequences."""
        ...


@runtime_checkable
class CacheOps(Protocol):
    def create(self, num_seqs: int, max_len: int, heads: int, dim: int) -> Any:
        """An empty key/value cache for ``num_seqs`` sequences (a pytree)."""
        ...

    def append(
        self,
        cache: Any,
        k: Float[ArrayLike, "seqs heads dim"],
        v: Float[ArrayLike, "seqs heads dim"],
    ) -> Any:
        """The cache with one more position per sequence; the input cache is unchanged."""
        ...

    def attend(
        self, q: Float[ArrayLike, "seqs heads dim"], cache: Any
    ) -> Float[Array, "seqs heads dim"]:
        """Attention of one new query per sequence over everything cached so far.

        ``q`` may have a whole multiple of the cache's heads (grouped-query attention): query
        head ``h`` then attends with cache head ``h // groups``, as if each cached head were
        repeated for its ``groups`` query heads."""
        ...


# --------------------------------------------------------------------------- matmul


@dataclass(frozen=True)
class PlainMatmul:
    """IEEE float32 matmul (differentiable; used for training): the backend's float32 dot, or
    with ``block > 0`` that dot over blocks of ``block`` products with the block sums added in
    order (:func:`kernels.numerics.blocked.blocked_matmul`: 2.5 to 3 times closer to the
    exact product than XLA's CPU dot alone; the Hugging Face decoder's default).

    A model traced for :func:`kernels.diagnose.transform.on_kernel` must use ``block=0``: the
    transform emulates each ``dot_general`` as one kernel matmul, and a blocked product holds
    one per block."""

    block: int = 0

    def __call__(
        self, x: Float[ArrayLike, "... k"], w: Float[ArrayLike, "k n"]
    ) -> Float[Array, "... n"]:
        return blocked_matmul(x, w, self.block)


@dataclass(frozen=True)
class EmulatedMatmul:
    """The emulated matmul of ``spec``, with reduction splits chosen from the batch size.

    ``batch_size`` is the number of sequences the kernel serves at once; with dynamic batching
    the number of splits of the K reduction depends on it, as in split-K GEMM heuristics.
    """

    spec: MatmulSpec
    batch_size: int = 1
    batching: str = "fixed"
    impl: str = "jax"

    def __call__(
        self, x: Float[ArrayLike, "... k"], w: Float[ArrayLike, "k n"] | QuantizedWeight
    ) -> Float[Array, "... n"]:

        k = int(x.shape[-1])
        splits = reduction_splits(self.batch_size, k, self.batching)
        return matmul(x, w, self.spec, impl=self.impl, splits=splits)

    def prepare(self, w: Float[ArrayLike, "*lead k n"]) -> Array | QuantizedWeight:
        """``w`` quantized once for this spec (:class:`~kernels._matmul.QuantizedWeight`: the
        same bits as quantizing it in every call); an int8 spec's weight as it is."""
        if self.spec.is_int8:
            return jnp.asarray(w)
        return quantize_weight(w, self.spec)


# ------------------------------------------------------------------------ attention


def _causal_softmax_attention(q, k, v):
    scale = 1.0 / jnp.sqrt(jnp.float32(q.shape[-1]))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=jax.lax.Precision.HIGHEST) * scale
    seq = q.shape[1]
    mask = jnp.tril(jnp.ones((seq, seq), dtype=bool))
    scores = jnp.where(mask, scores, -jnp.inf)
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v, precision=jax.lax.Precision.HIGHEST)


@dataclass(frozen=True)
class PlainAttention:
    """Causal softmax attention in float32 with plain ``jnp`` (differentiable)."""

    def __call__(self, q, k, v):
        return _causal_softmax_attention(q, k, v)


@dataclass(frozen=True)
class ReferenceAttention:
    """The emulation package's float32 reference attention, per sequence (the K_train one)."""

    def __call__(self, q, k, v):

        def one(qs, ks, vs):  # [seq, heads, dim] -> [heads, seq, dim] and back
            out = reference_attention(
                qs.transpose(1, 0, 2), ks.transpose(1, 0, 2), vs.transpose(1, 0, 2), causal=True
            )
            return out.transpose(1, 0, 2)

        return jax.vmap(one)(q, k, v)


# --------------------------------------------------------------------------- caches


@dataclass(frozen=True)
class ContiguousCache:
    """A float32 cache held as dense ``[seqs, max_len, heads, dim]`` arrays.

    ``portable``: attend with :mod:`kernels.numerics.portable` arithmetic (the same bits on every
    backend, not differentiable; K_train's cache), else with plain ``jnp`` (plain ops)."""

    portable: bool = False

    def create(self, num_seqs, max_len, heads, dim):
        zeros = jnp.zeros((num_seqs, max_len, heads, dim), jnp.float32)
        return {"k": zeros, "v": zeros, "length": jnp.zeros((), jnp.int32)}

    def append(self, cache, k, v):
        n = cache["length"]
        return {
            "k": jax.lax.dynamic_update_slice_in_dim(cache["k"], k[:, None], n, axis=1),
            "v": jax.lax.dynamic_update_slice_in_dim(cache["v"], v[:, None], n, axis=1),
            "length": n + 1,
        }

    def attend(self, q, cache):
        keys, values = (widen_heads(cache[n], q.shape[-2]) for n in ("k", "v"))
        valid = jnp.arange(keys.shape[1]) < cache["length"]
        if self.portable:

            def one(qs, ks, vs):  # q [heads, dim], cached [max_len, heads, dim]
                heads_first = (a.transpose(1, 0, 2) for a in (ks, vs))
                return masked_attention(qs[:, None, :], *heads_first, valid[None, :])[:, 0]

            return jax.vmap(one)(q, keys, values)
        scale = 1.0 / jnp.sqrt(jnp.float32(q.shape[-1]))
        scores = jnp.einsum("shd,sthd->sht", q, keys, precision=jax.lax.Precision.HIGHEST)
        scores = jnp.where(valid, scores * scale, -jnp.inf)
        weights = jax.nn.softmax(scores, axis=-1)
        return jnp.einsum("sht,sthd->shd", weights, values, precision=jax.lax.Precision.HIGHEST)


@dataclass(frozen=True)
class PagedAttention:
    """Decode attention through the paged low-precision KV cache of ``spec``.

    ``batch_size`` is what the serving kernel sees; with ``batching="dynamic"`` it sets the
    number of KV splits (flash-decoding), so a row's result depends on its batch.
    """

    spec: AttentionSpec
    batch_size: int = 1
    batching: str = "fixed"

    def create(self, num_seqs, max_len, heads, dim):

        return PagedKVCache.create(num_seqs, max_len, heads, dim, self.spec)

    def append(self, cache, k, v):
        return cache.append(k, v)

    def attend(self, q, cache):

        return decode_attention(
            q, cache, self.spec, batch_size=self.batch_size, batching=self.batching
        )


# ------------------------------------------------------------------------------ ops


@dataclass(frozen=True)
class Layers:
    """The arithmetic between the kernels: the RMS norm, the GELU and SiLU activations and the
    rotary embeddings of the models' blocks.

    ``portable=False``: plain ``jnp`` (differentiable; each backend's own ``rsqrt``, ``tanh``,
    ``cos``, ``sin`` and summation order, and a GPU fuses ``x·cos + y·sin`` into one
    multiply-add). ``portable=True``: :mod:`kernels.numerics.portable`, the same bits on every
    backend (not differentiable), as the emulated kernels need."""

    portable: bool = False

    def rms_norm(
        self, x: Float[ArrayLike, "*lead d"], scale: Float[ArrayLike, " d"], eps: float = 1e-6
    ) -> Float[Array, "*lead d"]:
        x = jnp.asarray(x, jnp.float32)
        scale = jnp.reshape(scale, (1,) * (x.ndim - 1) + (-1,))  # over the leading axes
        if not self.portable:
            return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * scale
        # mean square: exact squares summed in binary64 by the tree, times 1/d, rounded once
        mean_square = portable.sum_products(x, x, 1.0 / x.shape[-1])[..., None]
        return x * portable.rsqrt(mean_square + jnp.float32(eps)) * scale

    def gelu(self, x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
        """GELU with the tanh approximation (``jax.nn.gelu``'s default)."""
        return portable.gelu_tanh(x) if self.portable else jax.nn.gelu(x)

    def silu(self, x: Float[ArrayLike, "*shape"]) -> Float[Array, "*shape"]:
        """SiLU, ``x·σ(x)`` (``jax.nn.silu``)."""
        return portable.silu(x) if self.portable else jax.nn.silu(x)

    def cos_sin(
        self, angles: Float[ArrayLike, "*shape"]
    ) -> tuple[Float[Array, "*shape"], Float[Array, "*shape"]]:
        """``(cos, sin)`` of float32 ``angles`` (portable: for ``|angle| <= 2**24``, NaN
        beyond; :func:`kernels.numerics.portable.cos_sin`)."""
        if self.portable:
            return portable.cos_sin(angles)
        return jnp.cos(angles), jnp.sin(angles)

    def rotate(
        self,
        x: Float[ArrayLike, "*a"],
        turned: Float[ArrayLike, "*a"],
        cos: Float[ArrayLike, "*b"],
        sin: Float[ArrayLike, "*b"],
    ) -> Float[Array, "*shape"]:
        """``x·cos + turned·sin`` elementwise (broadcast, equal ranks), a rotary embedding's
        rotation of ``x`` given its partner ``turned``. Portable: both products exact in
        binary64 and added there (:func:`kernels.numerics.portable.sum_products`), the sum rounded
        to float32 by integer operations: no product is left for a compiler to fuse."""
        if not self.portable:
            return x * cos + turned * sin
        values = jnp.stack(jnp.broadcast_arrays(x, turned), axis=-1)
        factors = jnp.stack(jnp.broadcast_arrays(cos, sin), axis=-1)
        return portable.sum_products(values, factors)


@dataclass(frozen=True)
class Ops:
    """The kernels a model runs on: one matmul, one whole-sequence attention, one cache, and
    the arithmetic of the layers between them."""

    name: str
    matmul: MatmulFn
    attention: AttentionFn
    cache: CacheOps
    layers: Layers = Layers()


def plain_ops(block: int = 0) -> Ops:
    """Float32 ``jnp`` kernels: differentiable, used to train the model; with ``block > 0`` the
    matmul sums its products in blocks of ``block`` (:class:`PlainMatmul`)."""
    return Ops("plain-fp32", PlainMatmul(block), PlainAttention(), ContiguousCache())


def train_ops(spec: KernelSpec) -> Ops:
    """K_train: the spec's matmul (no reduction splits) and float32 reference attention.

    The cache is a float32 contiguous one, so K_train can also decode incrementally.
    """
    return Ops(
        f"train:{spec.preset}",
        EmulatedMatmul(spec.matmul, batch_size=1, batching="fixed"),
        ReferenceAttention(),
        ContiguousCache(portable=True),
        Layers(portable=True),
    )


def inference_ops(spec: KernelSpec, batch_size: int) -> Ops:
    """K_inf for a batch of ``batch_size`` sequences: every matmul under the spec's arithmetic
    with batch-dependent reduction splits, decode attention through the paged KV cache."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    return Ops(
        f"inference:{spec.preset}@{batch_size}",
        EmulatedMatmul(spec.matmul, batch_size=batch_size, batching=spec.batching),
        ReferenceAttention(),
        PagedAttention(spec.attention, batch_size=batch_size, batching=spec.batching),
        Layers(portable=True),
    )
