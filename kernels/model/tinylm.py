"""A small byte-level decoder LM (Flax NNX) whose matmuls and attention are injected.

Pre-norm transformer: learned token and position embeddings, ``layers`` blocks of causal
multi-head attention and a GELU MLP, RMS norms, an untied LM head. Every matmul, including
the LM head, is ``self.ops.matmul``; attention over whole sequences is ``self.ops.attention``;
incremental decoding reads and writes ``self.ops.cache``. Norms, residual adds and the
embedding lookup are float32 in both kernels.

``with_ops(model, ops)`` is the train/inference switch: it returns a new model that shares the
weights and runs on other kernels, and leaves ``model`` untouched.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, ArrayLike, Float, Int

from kernel_contracts.kernels.ops import Ops, plain_ops, prepared

__all__ = [
    "CHECKPOINTS",
    "ModelConfig",
    "TinyLM",
    "load_checkpoint",
    "load_pretrained",
    "pretrained_extra",
    "pretrained_log",
    "save_checkpoint",
    "with_ops",
]

# a model whose kernels are its ``ops`` attribute (TinyLM, kernels.model.hf.Decoder)
M = TypeVar("M", bound=nnx.Module)

# shipped checkpoints: name -> (weights file, training log) inside kernels/checkpoints/
CHECKPOINTS = {"tiny-lm": ("tiny-lm.npz", "tiny-lm.json")}


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 256
    d_model: int = 128
    layers: int = 4
    heads: int = 4
    d_ff: int = 512
    context: int = 128

    def __post_init__(self):
        if self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} is not a multiple of heads={self.heads}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


def _normal(rng: np.random.Generator, shape, std):
    # numpy, not jax.random: no per-shape compilation when a model is built
    return jnp.asarray((std * rng.standard_normal(shape)).astype(np.float32))


_BLOCK_PARAMS = ("attn_norm", "wqkv", "wo", "mlp_norm", "w_in", "w_out")
_MATMUL_WEIGHTS = ("wqkv", "wo", "w_in", "w_out")


class Block(nnx.Module):
    """The parameters of one pre-norm transformer block (its computation is ``_block_*``)."""

    def __init__(self, cfg: ModelConfig, *, rng: np.random.Generator):
        d, std = cfg.d_model, 0.02
        out_std = std / np.sqrt(2 * cfg.layers)
        self.attn_norm = nnx.Param(jnp.ones((d,), jnp.float32))
        self.wqkv = nnx.Param(_normal(rng, (d, 3 * d), std))
        self.wo = nnx.Param(_normal(rng, (d, d), out_std))
        self.mlp_norm = nnx.Param(jnp.ones((d,), jnp.float32))
        self.w_in = nnx.Param(_normal(rng, (d, cfg.d_ff), std))
        self.w_out = nnx.Param(_normal(rng, (cfg.d_ff, d), out_std))


def _qkv(p, x, ops: Ops, heads: int):
    qkv = ops.matmul(ops.layers.rms_norm(x, p["attn_norm"]), p["wqkv"])
    q, k, v = jnp.split(qkv, 3, axis=-1)
    shape = (*x.shape[:-1], heads, x.shape[-1] // heads)
    return q.reshape(shape), k.reshape(shape), v.reshape(shape)


def _mlp(p, x, ops: Ops):
    h = ops.matmul(ops.layers.rms_norm(x, p["mlp_norm"]), p["w_in"])
    return x + ops.matmul(ops.layers.gelu(h), p["w_out"])


def _block_forward(p, x, ops: Ops, heads: int):
    q, k, v = _qkv(p, x, ops, heads)
    x = x + ops.matmul(ops.attention(q, k, v).reshape(x.shape), p["wo"])
    return _mlp(p, x, ops)


def _block_step(p, x, cache, ops: Ops, heads: int):
    q, k, v = _qkv(p, x, ops, heads)
    cache = ops.cache.append(cache, k, v)
    x = x + ops.matmul(ops.cache.attend(q, cache).reshape(x.shape), p["wo"])
    return _mlp(p, x, ops), cache


class TinyLM(nnx.Module):
    """The policy π_θ: a byte-level decoder LM running on the kernels in ``self.ops``.

    The blocks run as one ``lax.scan`` over their stacked parameters, so each kernel is traced
    once per model, not once per layer.
    """

    def __init__(self, config: ModelConfig, *, seed: int = 0, ops: Ops | None = None):
        rng = np.random.default_rng(seed)
        self.config = config
        self.ops = ops if ops is not None else plain_ops()
        d = config.d_model
        self.embed = nnx.Param(_normal(rng, (config.vocab, d), 0.02))
        self.pos = nnx.Param(_normal(rng, (config.context, d), 0.01))
        self.blocks = nnx.List([Block(config, rng=rng) for _ in range(config.layers)])
        self.final_norm = nnx.Param(jnp.ones((d,), jnp.float32))
        self.head = nnx.Param(_normal(rng, (d, config.vocab), 0.02))

    def _stacked(self) -> dict[str, Any]:
        """The blocks' parameters stacked on a leading axis, the matmul weights in the form the
        matmul reads (:func:`~kernels.ops.prepared`: quantized once, not once per layer call
        or decode step)."""
        stacked = {n: jnp.stack([getattr(b, n)[...] for b in self.blocks]) for n in _BLOCK_PARAMS}
        for n in _MATMUL_WEIGHTS:
            stacked[n] = prepared(self.ops.matmul, stacked[n])
        return stacked

    def head_weight(self) -> Any:
        """The LM head in the form the matmul reads (quantized once: a decoding loop prepares
        it outside the steps that use it)."""
        return prepared(self.ops.matmul, self.head[...])

    def head_logits(self, x: Float[ArrayLike, "*rows d"], head: Any) -> Float[Array, "*rows vocab"]:
        """The logits of the last layer's output ``x`` through ``head`` (``head_weight()``)."""
        return self.ops.matmul(self.ops.layers.rms_norm(x, self.final_norm[...]), head)

    def _logits(self, x):
        return self.head_logits(x, self.head_weight())

    def __call__(self, tokens: Int[ArrayLike, "batch seq"]) -> Float[Array, "batch seq vocab"]:
        """Teacher-forced logits of every position of whole sequences."""
        seq = tokens.shape[-1]
        if seq > self.config.context:
            raise ValueError(f"sequence length {seq} exceeds the context {self.config.context}")
        pos = self.pos[...][:seq]
        x = self.embed[...][tokens] + pos.reshape((1,) * (tokens.ndim - 1) + pos.shape)

        def layer(x, p):
            return _block_forward(p, x, self.ops, self.config.heads), None

        x, _ = jax.lax.scan(layer, x, self._stacked())
        return self._logits(x)

    def init_cache(self, num_seqs: int, max_len: int) -> Any:
        """Empty caches from ``self.ops.cache``, one per layer, stacked on a leading axis."""
        if max_len > self.config.context:
            raise ValueError(f"max_len {max_len} exceeds the context {self.config.context}")
        cfg = self.config
        one = self.ops.cache.create(num_seqs, max_len, cfg.heads, cfg.head_dim)
        return jax.tree.map(lambda a: jnp.stack([a] * cfg.layers), one)

    def step(
        self, tokens: Int[ArrayLike, " seqs"], position: Int[ArrayLike, ""], caches: Any
    ) -> tuple[Float[Array, "seqs vocab"], Any]:
        """Logits after one more token per sequence (all at ``position``), and the new caches."""
        x, caches = self.hidden_step(tokens, position, caches)
        return self._logits(x), caches

    def hidden_step(
        self, tokens: Int[ArrayLike, " seqs"], position: Int[ArrayLike, ""], caches: Any
    ) -> tuple[Float[Array, "seqs d"], Any]:
        """``step`` up to the last layer's output (the input of ``head_logits``)."""
        x = self.embed[...][tokens] + self.pos[...][position][None, :]

        def layer(x, p_and_cache):
            p, cache = p_and_cache
            x, cache = _block_step(p, x, cache, self.ops, self.config.heads)
            return x, cache

        return jax.lax.scan(layer, x, (self._stacked(), caches))


def with_ops(model: M, ops: Ops) -> M:
    """A new model with ``model``'s weights (shared, not copied) running on ``ops`` (a TinyLM or
    any other module whose kernels are its ``ops``, such as ``kernels.model.hf.Decoder``)."""
    graphdef, state = nnx.split(model)
    new = nnx.merge(graphdef, state)
    new.ops = ops
    return new


# ----------------------------------------------------------------------- checkpoints


def _flat_params(model: TinyLM) -> dict[str, np.ndarray]:
    pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    return {k: np.asarray(v) for k, v in _flatten(pure).items()}


def save_checkpoint(model: TinyLM, path, extra: dict[str, np.ndarray] | None = None) -> None:
    """Write the model's parameters (and ``extra`` arrays under ``extra/``) as an npz file."""
    arrays = {f"params/{k}": v for k, v in _flat_params(model).items()}
    arrays["config"] = np.frombuffer(json.dumps(asdict(model.config)).encode(), np.uint8)
    for key, value in (extra or {}).items():
        arrays[f"extra/{key}"] = np.asarray(value)
    np.savez_compressed(path, **arrays)


def _flatten(tree, prefix="") -> dict:
    flat = {}
    for key, value in tree.items():
        path = f"{prefix}/{key}" if prefix else str(key)
        flat.update(_flatten(value, path) if isinstance(value, dict) else {path: value})
    return flat


def _nest(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split("/")
        for p in parents:
            node = node.setdefault(int(p) if p.isdigit() else p, {})
        node[int(leaf) if leaf.isdigit() else leaf] = jnp.asarray(value)
    return out


def _arrays(file) -> dict[str, np.ndarray]:
    with np.load(file) as data:
        return {k: data[k] for k in data.files}


def _read(file) -> tuple[TinyLM, dict[str, np.ndarray]]:
    arrays = _arrays(file)
    try:
        config = ModelConfig(**json.loads(arrays.pop("config").tobytes().decode()))
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"checkpoint has no valid model config: {err}") from None
    abstract = nnx.eval_shape(lambda: TinyLM(config))
    graphdef, params, rest = nnx.split(abstract, nnx.Param, ...)
    expected = _flatten(nnx.to_pure_dict(params))
    got = {k[len("params/") :]: v for k, v in arrays.items() if k.startswith("params/")}
    missing = sorted(set(expected) - set(got))
    unknown = sorted(set(got) - set(expected))
    bad = [k for k in expected if k in got and got[k].shape != tuple(expected[k].shape)]
    if missing or unknown or bad:
        raise ValueError(
            f"checkpoint does not match {config}: missing {missing}, unknown {unknown}, "
            f"wrong shape {bad}"
        )
    nnx.replace_by_pure_dict(params, _nest(got))
    model = nnx.merge(graphdef, params, rest)
    extra = {k[len("extra/") :]: v for k, v in arrays.items() if k.startswith("extra/")}
    return model, extra


def load_checkpoint(path) -> tuple[TinyLM, dict[str, np.ndarray]]:
    """The model stored at ``path`` (on plain float32 ops) and its extra arrays."""
    with open(path, "rb") as f:
        return _read(io.BytesIO(f.read()))


def _package_file(name: str):
    return resources.files("kernel_contracts.kernels").joinpath("checkpoints", name)


def pretrained_log(name: str = "tiny-lm") -> dict:
    """The JSON training log shipped with checkpoint ``name``."""
    if name not in CHECKPOINTS:
        raise KeyError(f"unknown pretrained model {name!r}; known: {sorted(CHECKPOINTS)}")
    return json.loads(_package_file(CHECKPOINTS[name][1]).read_text())


def load_pretrained(name: str = "tiny-lm", ops: Ops | None = None) -> TinyLM:
    """The shipped trained model ``name`` from package data (no network), on ``ops``."""
    if name not in CHECKPOINTS:
        raise KeyError(f"unknown pretrained model {name!r}; known: {sorted(CHECKPOINTS)}")
    file = _package_file(CHECKPOINTS[name][0])
    if not file.is_file():
        raise FileNotFoundError(
            f"checkpoint {CHECKPOINTS[name][0]} is missing from kernels/checkpoints; "
            "train it with `python -m kernel_contracts.kernels.model.train`"
        )
    model, _ = _read(io.BytesIO(file.read_bytes()))
    return model if ops is None else with_ops(model, ops)


def pretrained_extra(name: str = "tiny-lm") -> dict[str, np.ndarray]:
    """The extra arrays (the held-out evaluation windows) stored with checkpoint ``name``."""
    if name not in CHECKPOINTS:
        raise KeyError(f"unknown pretrained model {name!r}; known: {sorted(CHECKPOINTS)}")
    arrays = _arrays(io.BytesIO(_package_file(CHECKPOINTS[name][0]).read_bytes()))
    return {k[len("extra/") :]: v for k, v in arrays.items() if k.startswith("extra/")}
