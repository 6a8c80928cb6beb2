"""Hugging Face checkpoint folders: ``config.json`` and safetensors weights, read and written.

A folder holds ``config.json`` and either one ``model.safetensors`` or shards listed by
``model.safetensors.index.json`` (its ``weight_map``: tensor name -> shard file). Every file is
read only as a regular file inside the folder, under the limit of its kind
(``contracts.bounded``); a shard's header is checked against the file before a tensor is
allocated (``kernels.model.hf.shard``), and tensors are read as raw bytes: nothing is ever
unpickled or run, and the folder's Python files, if any, are never imported. Stored
dtypes F32, F16 and BF16 are supported and kept bit for bit (BF16 through ``ml_dtypes``).

Every tensor name of the family is mapped (``model.embed_tokens.weight``,
``model.layers.{i}.self_attn.q_proj.weight`` / ``.bias``, ``...o_proj.weight``,
``...self_attn.q_norm.weight`` (Qwen3), ``...mlp.{gate,up,down}_proj.weight``,
``...input_layernorm.weight``, ``...post_attention_layernorm.weight``, ``model.norm.weight``,
``lm_head.weight`` unless the embeddings are tied). A ``rotary_emb.inv_freq`` buffer, which some
older checkpoints store, is derived data and skipped. With tied embeddings, a stored
``lm_head.weight`` must equal ``model.embed_tokens.weight``.

Every problem (an unreadable config or index, a missing shard, a missing or unexpected tensor, a
wrong shape, an unsupported dtype) is gathered into one :class:`CheckpointError`, each at its
file and key.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from safetensors.numpy import save_file

from kernel_contracts.kernels.model.hf.config import DecoderConfig, read_config
from kernel_contracts.kernels.model.hf.errors import CheckpointError, CheckpointProblem
from kernel_contracts.kernels.model.hf.files import open_in, read_json
from kernel_contracts.kernels.model.hf.shard import Shard, ShardError
from kernel_contracts.kernels.ops import Ops

__all__ = [
    "DTYPES",
    "INDEX",
    "SINGLE",
    "build_decoder",
    "config_json",
    "folder_sha256",
    "hf_tensors",
    "load_decoder",
    "save_decoder",
]

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
DTYPES = ("F32", "F16", "BF16")  # stored dtypes that load exactly
_SKIPPED = ".rotary_emb.inv_freq"


@dataclass(frozen=True)
class _Tensor:
    """Where a stored tensor goes: our parameter path, its stored shape, the layout change."""

    path: tuple[str | int, ...]
    shape: tuple[int, ...]
    to_ours: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]


def _same(a: np.ndarray) -> np.ndarray:
    return a


def _linear(name: str, path: tuple, out: tuple[int, ...], inp: tuple[int, ...], bias: bool):
    """A projection stored ``[out, in]`` (flattened) as our kernel ``[*inp, *out]``."""
    n_out, n_in = int(np.prod(out)), int(np.prod(inp))
    entries = {
        f"{name}.weight": _Tensor(
            (*path, "kernel"),
            (n_out, n_in),
            lambda a: np.ascontiguousarray(a.T).reshape(*inp, *out),
            lambda a: np.ascontiguousarray(a.reshape(n_in, n_out).T),
        )
    }
    if bias:
        entries[f"{name}.bias"] = _Tensor(
            (*path, "bias"), (n_out,), lambda a: a.reshape(out), lambda a: a.reshape(n_out)
        )
    return entries


def _norm(name: str, path: tuple, size: int):
    return {f"{name}.weight": _Tensor((*path, "weight"), (size,), _same, _same)}


def hf_tensors(c: DecoderConfig) -> dict[str, _Tensor]:
    """Every stored tensor name of a checkpoint of ``c``, with where it goes."""
    d, f = c.hidden_size, c.intermediate_size
    h, kv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    out = {"model.embed_tokens.weight": _Tensor(("embed_tokens",), (c.vocab_size, d), _same, _same)}
    for i in range(c.num_hidden_layers):
        pre, path = f"model.layers.{i}", ("layers", i)
        att, mlp = (*path, "self_attn"), (*path, "mlp")
        out |= _norm(f"{pre}.input_layernorm", (*path, "input_layernorm"), d)
        out |= _norm(f"{pre}.post_attention_layernorm", (*path, "post_attention_layernorm"), d)
        out |= _linear(f"{pre}.self_attn.q_proj", (*att, "q_proj"), (h, hd), (d,), c.qkv_bias)
        out |= _linear(f"{pre}.self_attn.k_proj", (*att, "k_proj"), (kv, hd), (d,), c.qkv_bias)
        out |= _linear(f"{pre}.self_attn.v_proj", (*att, "v_proj"), (kv, hd), (d,), c.qkv_bias)
        out |= _linear(f"{pre}.self_attn.o_proj", (*att, "o_proj"), (d,), (h, hd), c.o_bias)
        if c.qk_norm:
            out |= _norm(f"{pre}.self_attn.q_norm", (*att, "q_norm"), hd)
            out |= _norm(f"{pre}.self_attn.k_norm", (*att, "k_norm"), hd)
        out |= _linear(f"{pre}.mlp.gate_proj", (*mlp, "gate_proj"), (f,), (d,), c.mlp_bias)
        out |= _linear(f"{pre}.mlp.up_proj", (*mlp, "up_proj"), (f,), (d,), c.mlp_bias)
        out |= _linear(f"{pre}.mlp.down_proj", (*mlp, "down_proj"), (d,), (f,), c.mlp_bias)
    out |= _norm("model.norm", ("norm",), d)
    if not c.tie_word_embeddings:
        out |= _linear("lm_head", ("lm_head",), (c.vocab_size,), (d,), False)
    return out


# ------------------------------------------------------------------------------ reading


def _shards(folder: str, report) -> tuple[dict[str, list[str]] | None, bool]:
    """Shard file -> the tensor names the folder says it holds (``None``: names read from
    the single file), and whether the folder's weights can be looked for at all; problems are
    reported."""
    index = os.path.join(folder, INDEX)
    if os.path.lexists(index):
        try:
            raw = read_json(folder, INDEX, "index")
        except CheckpointError as err:
            for p in err.problems:
                report(p.file, p.key, p.message)
            return {}, False
        weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
        if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
        ):
            report(index, "weight_map", "must map tensor names to shard file names")
            return {}, False
        shards: dict[str, list[str]] = {}
        for name, shard in weight_map.items():
            shards.setdefault(shard, []).append(name)
        return shards, True
    if os.path.lexists(os.path.join(folder, SINGLE)):
        return None, True
    report(folder, "", f"holds neither {SINGLE} nor {INDEX}")
    return {}, False


def _shard_name_problem(shard: str) -> str | None:
    """Why a ``weight_map`` value is not the name of a file in the folder, or ``None``."""
    if os.path.isabs(shard) or shard.startswith(("/", "\\")):
        return f"shard {shard!r} is an absolute path, not a file name in the folder"
    if ".." in shard.replace("\\", "/").split("/"):
        return f"shard {shard!r} leads out of the folder through '..'"
    if os.path.basename(shard) != shard or shard in ("", ".") or "\0" in shard:
        return f"shard {shard!r} is not a file name in the folder"
    return None


def _read_tensors(folder: str, c: DecoderConfig, report) -> dict[str, np.ndarray]:
    """Every expected tensor that could be read, in our layout, keyed by its stored name."""
    expected = hf_tensors(c)
    shards, usable = _shards(folder, report)
    if not usable:  # no weights, or an unusable index: already reported
        return {}
    index_file = os.path.join(folder, INDEX if shards is not None else SINGLE)
    if shards is None:
        shards = {SINGLE: []}
        listed = False
    else:
        listed = True
    found: dict[str, np.ndarray] = {}
    seen: set[str] = set()
    tied_head: tuple[str, np.ndarray] | None = None
    for shard, names in sorted(shards.items()):
        path = os.path.join(folder, shard)
        why = _shard_name_problem(shard)
        if why is not None:
            report(index_file, names[0], why)
            seen.update(names if listed else expected)
            continue
        try:
            handle = open_in(folder, shard, "weights")
        except CheckpointError as err:
            (problem,) = err.problems
            if problem.message == "no such file":
                count = f"{len(names)} tensors are listed for it in {INDEX}"
                report(path, "", f"missing shard ({count})" if listed else "no such file")
            else:
                report(problem.file, "", problem.message)
            seen.update(names if listed else expected)
            continue
        try:
            with handle:
                f = Shard(handle, os.fstat(handle.fileno()).st_size)
                keys = set(f.entries) | set(f.problems)
                if listed:
                    for name in sorted(set(names) - keys):
                        report(path, name, f"listed in {INDEX} but not in this shard")
                    for name in sorted(keys - set(names)):
                        report(path, name, f"in this shard but not listed for it in {INDEX}")
                for name in sorted(keys & set(names) if listed else keys):
                    seen.add(name)
                    if name in f.problems:
                        report(path, name, f.problems[name])
                        continue
                    if name.endswith(_SKIPPED):
                        continue
                    info = expected.get(name)
                    if info is None and name == "lm_head.weight" and c.tie_word_embeddings:
                        array = _get(f, name, path, None, report)
                        if array is not None:
                            tied_head = (path, array)
                        continue
                    if info is None:
                        report(path, name, f"unexpected tensor for a {c.family} checkpoint")
                        continue
                    array = _get(f, name, path, info.shape, report)
                    if array is not None:
                        found[name] = info.to_ours(array)
        except (ShardError, OSError) as err:
            report(path, "", f"cannot read as safetensors: {err}")
            seen.update(names if listed else expected)  # its tensors are not missing, unread
    for name in sorted(set(expected) - seen):
        report(index_file, name, "missing tensor")
    if tied_head is not None and "model.embed_tokens.weight" in found:
        path, head = tied_head
        embed = found["model.embed_tokens.weight"]
        if (
            head.shape != embed.shape
            or head.dtype != embed.dtype
            or head.tobytes() != embed.tobytes()
        ):
            report(
                path,
                "lm_head.weight",
                "differs from model.embed_tokens.weight, but tie_word_embeddings is true",
            )
    return found


def _get(f: Shard, name: str, path: str, shape, report) -> np.ndarray | None:
    """One stored tensor, checked for dtype and shape before its bytes are read."""
    entry = f.entries[name]
    ok = True
    if entry.dtype not in DTYPES:
        report(path, name, f"unsupported dtype {entry.dtype} (supported: {', '.join(DTYPES)})")
        ok = False
    if shape is not None and entry.shape != shape:
        report(path, name, f"shape {list(entry.shape)}, expected {list(shape)}")
        ok = False
    return f.read(name, _numpy_dtype(entry.dtype)) if ok else None


def _numpy_dtype(dtype: str) -> np.dtype:
    import ml_dtypes

    return np.dtype({"F32": "<f4", "F16": "<f2", "BF16": ml_dtypes.bfloat16}[dtype])


_HASH_KINDS = {"config.json": "config", INDEX: "index"}


def folder_sha256(folder: str) -> str | None:
    """sha256 over a checkpoint folder's ``config.json``, index and weight files (each name
    and its bytes, in name order); ``None`` when one cannot be read or is refused (not a
    regular file inside the folder, or over the limit of its kind)."""
    h = hashlib.sha256()
    try:
        names = sorted(n for n in os.listdir(folder) if n == "config.json" or n.startswith("model"))
        for name in names:
            h.update(f"{name}\n".encode())
            with open_in(folder, name, _HASH_KINDS.get(name, "weights")) as f:
                h.update(hashlib.file_digest(f, "sha256").digest())
    except (OSError, CheckpointError):
        return None
    return h.hexdigest()


def _nest(flat: dict[tuple, np.ndarray]) -> dict:
    out: dict = {}
    for path, value in flat.items():
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def load_decoder(folder: str, ops: Ops | None = None):
    """The decoder stored in ``folder`` (on the decoder's default plain float32 ops, matmuls
    summed in blocks, unless ``ops`` is given).

    Raises ``CheckpointError`` with every problem of the folder."""
    config = read_config(folder)
    problems: list[CheckpointProblem] = []

    def report(file: str, key: str, message: str) -> None:
        problems.append(CheckpointProblem(file, key, message))

    found = _read_tensors(folder, config, report)
    if problems:
        raise CheckpointError(problems)
    return build_decoder(config, found, folder, ops)


def build_decoder(config: DecoderConfig, found: dict[str, np.ndarray], source: str, ops=None):
    """The decoder of ``config`` whose parameters are ``found`` (stored tensor name -> array in
    our layout, as ``hf_tensors`` maps them); ``source`` names the checkpoint in the error a
    missing tensor raises (a model is never built with a hole in it)."""
    import jax.numpy as jnp
    from flax import nnx

    from kernel_contracts.kernels.model.hf.decoder import Decoder

    expected = hf_tensors(config)
    unread = sorted(set(expected) - set(found))
    if unread:
        raise CheckpointError([CheckpointProblem(source, name, "not read") for name in unread])
    params = _nest({expected[name].path: jnp.asarray(a) for name, a in found.items()})
    abstract = nnx.eval_shape(lambda: Decoder(config, seed=None))
    graphdef, state = nnx.split(abstract)
    nnx.replace_by_pure_dict(state, params)
    model = nnx.merge(graphdef, state)
    if ops is not None:
        model.ops = ops
    return model


# ------------------------------------------------------------------------------ writing


def config_json(c: DecoderConfig) -> dict:
    """``config.json`` for ``c``, in the hub's keys (``rope_theta`` with ``rope_scaling``)."""
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
    out = {
        "architectures": [arch[c.family]],
        "model_type": c.family,
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": c.max_position_embeddings,
        "rms_norm_eps": c.rms_norm_eps,
        "tie_word_embeddings": c.tie_word_embeddings,
        "rope_theta": c.rope.theta,
        "rope_scaling": None,
    }
    if c.family != "qwen2":
        out["attention_bias"] = c.qkv_bias
    if c.family == "llama":
        out["mlp_bias"] = c.mlp_bias
    if c.rope.kind == "llama3":
        out["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": c.rope.factor,
            "low_freq_factor": c.rope.low_freq_factor,
            "high_freq_factor": c.rope.high_freq_factor,
            "original_max_position_embeddings": c.rope.original_max_position_embeddings,
        }
    return out


def save_decoder(model, folder: str, *, shards: int = 1, dtype: str = "F32") -> None:
    """Write ``model`` as a checkpoint folder: ``config.json`` and its weights in ``dtype``
    (F32, F16 or BF16), as one ``model.safetensors`` or as ``shards`` files with the index."""
    import ml_dtypes
    from flax import nnx

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    np_dtype = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}[dtype]
    c = model.config
    pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    tensors = {}
    for name, info in hf_tensors(c).items():
        node = pure
        for part in info.path:
            node = node[part]
        tensors[name] = info.to_hf(np.asarray(node)).astype(np_dtype)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config_json(c), f, indent=2, sort_keys=True)
        f.write("\n")
    names = list(tensors)
    if shards == 1:
        save_file(tensors, os.path.join(folder, SINGLE), metadata={"format": "pt"})
        return
    groups = np.array_split(np.arange(len(names)), shards)
    weight_map = {}
    for k, group in enumerate(groups, start=1):
        file = f"model-{k:05d}-of-{shards:05d}.safetensors"
        part = {names[i]: tensors[names[i]] for i in group}
        save_file(part, os.path.join(folder, file), metadata={"format": "pt"})
        weight_map |= {name: file for name in part}
    total = sum(int(t.nbytes) for t in tensors.values())
    with open(os.path.join(folder, INDEX), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")
