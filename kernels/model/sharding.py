"""A policy model over every local device: a device mesh and parameter-path sharding rules.

The mesh has two axes: ``"data"`` splits the batch (each device serves some sequences) and
``"model"`` splits weights (tensor parallelism over attention heads and the MLP). Parameters
are placed by rules that map a parameter's path in an NNX model's state (``blocks/0/wqkv``) to a
``PartitionSpec``; the first rule whose regular expression matches the path wins, and a
parameter no rule names is replicated. The computation itself is left to JAX's partitioner:
the jitted functions of ``kernels.model.decode`` run unchanged on a sharded model and a sharded
batch.

Bit identity with the one-device run. The emulated matmuls round with integer bit operations
and reduce every output element in a fixed order of parts, chunks and groups
(``kernels._matmul``); the partitioner preserves a program's semantics, and the one freedom it
has is the order of a floating-point reduction over an axis it has split. So the rules never
split an axis that is reduced over:

- a weight ``[in, out]`` is split along ``out`` only, never along the contracted ``in``;
- only the projections *into* heads and hidden units are split (query, key, value, gate, up,
  and the LM head over the vocabulary): attention reduces within a head and the activation
  function is elementwise, so nothing reduces over the split axis before the next matmul;
- the projections *back* to the residual stream (attention out, MLP down) are replicated, not
  split along their contracted input as a Megatron layout would be: the partitioner gathers
  their input, every partial sum is formed on one device in the one-device order, and the
  residual stream stays whole, so the RMS norms (float32 means over the hidden units) reduce
  whole rows. Splitting them along ``out`` instead would split the norms' reductions, and a
  float32 kernel's logits then move by one ulp;
- the batch axis is never reduced over; norms, embeddings and position tables are replicated.

A dimension the mesh axis does not divide stays whole (``param_specs``). The property is
checked, not proved: ``tests/kernels/test_sharding.py`` compares the sampled tokens and both
kernels' logits (K_inf h100-fp8 decoding, K_train fp32 teacher-forcing) of a sharded and a
one-device run bit for bit on four forced host devices, for a TinyLM and a tiny ``kernels.model.hf``
Qwen3 checkpoint; by hand, the five float presets and a Qwen2 decoder gave the same bits too.

Rules for the shipped ``TinyLM`` (``TINY_LM_RULES``) and for decoders with Hugging Face's
parameter names (``HF_DECODER_RULES``: ``q_proj``, ``k_proj``, ``v_proj``, ``gate_proj``,
``up_proj``, ``lm_head`` split; ``o_proj``, ``down_proj``, ``embed_tokens`` and the norms
replicated; weights stored input-first as ``kernels.model.hf.decoder`` stores them, query, key and
value kernels ``[hidden, heads, head_dim]`` split over heads).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypeVar

import jax
import numpy as np
from flax import nnx
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array

__all__ = [
    "DATA",
    "HF_DECODER_RULES",
    "MODEL",
    "TINY_LM_RULES",
    "Rule",
    "make_mesh",
    "param_specs",
    "rules_for",
    "shard_batch",
    "shard_model",
]

DATA, MODEL = "data", "model"

# (regular expression searched in the parameter path, the spec of that parameter)
Rule = tuple[str, PartitionSpec]

_OUT = PartitionSpec(None, MODEL)  # a [in, out] weight split along out

TINY_LM_RULES: tuple[Rule, ...] = (
    (r"(^|/)wqkv$", _OUT),
    (r"(^|/)w_in$", _OUT),
    (r"(^|/)head$", _OUT),
)

_HEADS = PartitionSpec(None, MODEL, None)  # a [in, heads, head_dim] weight split over heads

HF_DECODER_RULES: tuple[Rule, ...] = (
    (r"(^|/)(q_proj|k_proj|v_proj)/kernel$", _HEADS),
    (r"(^|/)(gate_proj|up_proj)/kernel$", _OUT),
    (r"(^|/)lm_head/kernel$", _OUT),
)

M = TypeVar("M", bound=nnx.Module)


def make_mesh(devices: Sequence | None = None, *, model: int | None = None) -> Mesh:
    """A ``("data", "model")`` mesh over ``devices`` (default: every local device).

    ``model`` devices split the weights (default: 2 when the device count is even and above 2,
    else 1); the rest split the batch. Raises ``ValueError`` when ``model`` does not divide the
    device count.
    """
    devs = list(jax.local_devices() if devices is None else devices)
    n = len(devs)
    if n == 0:
        raise ValueError("a mesh needs at least one device")
    if model is None:
        model = 2 if n > 2 and n % 2 == 0 else 1
    if model < 1 or n % model:
        raise ValueError(f"model={model} must be a positive divisor of the {n} devices")
    auto = (AxisType.Auto, AxisType.Auto)  # the partitioner places intermediates
    return jax.make_mesh((n // model, model), (DATA, MODEL), axis_types=auto, devices=devs)


def _path(keys) -> str:
    parts = []
    for k in keys:
        name = getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))
        if name != "value":  # the Variable's own attribute, not part of the parameter's name
            parts.append(str(name))
    return "/".join(parts)


def _fit(spec: PartitionSpec, shape: tuple[int, ...], mesh: Mesh | AbstractMesh) -> PartitionSpec:
    """``spec`` for an array of ``shape`` (missing trailing entries: whole); an axis the mesh
    does not divide stays whole."""
    entries = (list(spec) + [None] * len(shape))[: len(shape)]
    out = []
    for size, axis in zip(shape, entries, strict=True):
        ways = 1 if axis is None else mesh.shape[axis]
        out.append(axis if axis is not None and size % ways == 0 else None)
    return PartitionSpec(*out)


def param_specs(
    state: Any, rules: Sequence[Rule], mesh: Mesh | AbstractMesh
) -> dict[str, PartitionSpec]:
    """Each array's path in ``state`` (an NNX state, or any pytree of arrays or shapes) -> its
    ``PartitionSpec`` under ``rules`` on ``mesh`` (a mesh of devices, or only its shape)."""
    compiled = [(re.compile(pattern), spec) for pattern, spec in rules]
    specs = {}
    for keys, leaf in jax.tree_util.tree_leaves_with_path(state):
        path = _path(keys)
        spec = next((s for pattern, s in compiled if pattern.search(path)), PartitionSpec())
        extra = np.ndim(leaf) - len(spec)
        if spec and extra > 0:  # layers stacked on leading axes: the rule names the last ones
            spec = PartitionSpec(*([None] * extra), *spec)
        specs[path] = _fit(spec, tuple(np.shape(leaf)), mesh)
    return specs


def rules_for(model: nnx.Module) -> tuple[Rule, ...]:
    """The shipped rules for ``model``: ``HF_DECODER_RULES`` for a ``kernels.model.hf`` decoder,
    ``TINY_LM_RULES`` otherwise."""
    from kernel_contracts.kernels.model.hf.decoder import Decoder

    return HF_DECODER_RULES if isinstance(model, Decoder) else TINY_LM_RULES


def shard_model(model: M, mesh: Mesh, rules: Sequence[Rule] | None = None) -> M:
    """A new model with ``model``'s weights placed on ``mesh`` by ``rules`` (default
    ``rules_for(model)``); ``model`` is untouched. Jitted functions of the new model run on
    every device of the mesh."""
    rules = rules_for(model) if rules is None else rules
    graphdef, state = nnx.split(model)
    specs = param_specs(state, rules, mesh)

    def place(keys, leaf):
        return jax.device_put(leaf, NamedSharding(mesh, specs[_path(keys)]))

    return nnx.merge(graphdef, jax.tree_util.tree_map_with_path(place, state))


def shard_batch(x: Array, mesh: Mesh) -> Array:
    """``x`` placed with its leading (batch) axis split over the mesh's ``"data"`` axis (whole
    on every device when the axis does not divide it)."""
    spec = _fit(PartitionSpec(DATA), tuple(np.shape(x)), mesh)
    return jax.device_put(x, NamedSharding(mesh, spec))
