"""Rotary position embeddings: the inverse frequencies of a ``RopeConfig`` and their rotation.

Inverse frequencies, for ``i = 0, 2, ..., head_dim - 2``: ``f_i = 1 / theta^(i / head_dim)``,
computed in float32 as the reference implementation does. ``llama3`` scaling (the Llama 3.1
recipe) rescales them by wavelength ``w = 2π / f`` against the pre-training context ``L``:
``f / factor`` where ``w > L / low_freq_factor``; ``f`` unchanged where
``w < L / high_freq_factor``; in between the blend ``(1 - s) f / factor + s f`` with
``s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor)``.

A vector ``x`` of ``head_dim`` entries at position ``p`` becomes ``x cos(θ) + rot(x) sin(θ)``
with ``θ = p · [f, f]`` (the frequencies repeated for both halves) and
``rot([a, b]) = [-b, a]`` on the halves, all in float32: the angles ``p · f`` rounded to
float32 as the reference implementation rounds them, their cosines and sines, and the rotation
computed by the ``Layers`` given (``kernels.ops.Layers``): plain ``jnp`` by default, or
:mod:`kernels.numerics.portable` arithmetic, the same bits on every backend (its ``cos_sin`` takes
angles up to ``2**24``, beyond every position float32 holds exactly, as ``f <= 1``).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Shaped

from kernel_contracts.kernels.model.hf.config import RopeConfig
from kernel_contracts.kernels.ops import Layers

__all__ = ["cos_sin", "inverse_frequencies", "rotate"]

_PLAIN = Layers()  # plain jnp arithmetic, the default


def inverse_frequencies(rope: RopeConfig, head_dim: int) -> np.ndarray:
    """The ``head_dim // 2`` float32 inverse frequencies of ``rope``."""
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv = np.float32(1.0) / np.power(np.float32(rope.theta), exponents, dtype=np.float32)
    if rope.kind == "default":
        return inv.astype(np.float32)
    if rope.kind != "llama3":
        raise ValueError(f"unsupported rope type {rope.kind!r}")
    factor = np.float32(rope.factor)
    old = rope.original_max_position_embeddings
    low_wavelen = old / rope.low_freq_factor
    high_wavelen = old / rope.high_freq_factor
    wavelen = np.float32(2 * math.pi) / inv
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv).astype(np.float32)
    smooth = (
        (np.float32(old) / wavelen - np.float32(rope.low_freq_factor))
        / np.float32(rope.high_freq_factor - rope.low_freq_factor)
    ).astype(np.float32)
    smoothed = ((1 - smooth) * scaled / factor + smooth * scaled).astype(np.float32)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def cos_sin(
    positions: Shaped[ArrayLike, "*pos"],
    inv_freq: Float[ArrayLike, " half"],
    layers: Layers = _PLAIN,
) -> tuple[Float[Array, "*pos dim"], Float[Array, "*pos dim"]]:
    """``cos θ`` and ``sin θ`` at every position (float32), ``θ = p · [f, f]``, from
    ``layers.cos_sin``; ``positions`` is a scalar (one decoding step) or a vector (a whole
    sequence)."""
    positions = jnp.asarray(positions, jnp.float32)
    freqs = positions[..., None] * jnp.reshape(inv_freq, (1,) * positions.ndim + (-1,))
    if layers.portable:  # each angle's cosine and sine once, then repeated for both halves
        cos, sin = layers.cos_sin(freqs)
        return tuple(jnp.concatenate([t, t], axis=-1) for t in (cos, sin))
    return layers.cos_sin(jnp.concatenate([freqs, freqs], axis=-1))


def rotate(
    x: Float[ArrayLike, "... heads dim"],
    cos: Float[ArrayLike, "... dim"],
    sin: Float[ArrayLike, "... dim"],
    layers: Layers = _PLAIN,
) -> Float[Array, "... heads dim"]:
    """``x`` rotated by the angles whose cosines and sines are given (broadcast over heads):
    ``layers.rotate(x, rot(x), cos, sin)``."""
    half = x.shape[-1] // 2
    turned = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    # cos, sin: [*pos, dim] -> [1.., *pos, 1, dim], lined up with x's axes (no rank promotion)
    lead = (1,) * (x.ndim - cos.ndim - 1)
    cos = jnp.reshape(cos, (*lead, *cos.shape[:-1], 1, cos.shape[-1]))
    sin = jnp.reshape(sin, (*lead, *sin.shape[:-1], 1, sin.shape[-1]))
    return layers.rotate(x, turned, cos, sin)
