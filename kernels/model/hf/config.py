"""The architecture of a Hugging Face decoder checkpoint, read from its ``config.json``.

Three families are supported, each named by ``architectures`` (or, without it, ``model_type``):

=================  ==========  ==========================================================
architecture       model_type  switches
=================  ==========  ==========================================================
LlamaForCausalLM   llama       ``attention_bias`` (q/k/v/o), ``mlp_bias``
Qwen2ForCausalLM   qwen2       q/k/v biases always, no o bias
Qwen3ForCausalLM   qwen3       q/k RMSNorm over each head, ``attention_bias`` (q/k/v/o)
=================  ==========  ==========================================================

Keys a file leaves out take the defaults of the reference implementation's configuration
classes (``rms_norm_eps`` 1e-6, ``rope_theta`` 10000, ``tie_word_embeddings`` false,
``num_key_value_heads`` = ``num_attention_heads`` for Llama, ``head_dim`` =
``hidden_size // num_attention_heads`` for Llama and Qwen2 and 128 for Qwen3, ...). Rotary
parameters are read in both spellings: the hub's ``rope_theta`` with ``rope_scaling``, and the
newer ``rope_parameters`` record (``rope_type``, ``rope_theta``, scaling keys). Supported rope
types: ``default`` (no scaling) and ``llama3``; any other is refused.

Nothing here imports the model code of a checkpoint: an ``auto_map`` entry is never followed,
and an architecture not listed above is an error.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from kernel_contracts.kernels.model.hf.errors import CheckpointError, CheckpointProblem
from kernel_contracts.kernels.model.hf.files import read_json

__all__ = [
    "ARCHITECTURES",
    "ROPE_TYPES",
    "DecoderConfig",
    "RopeConfig",
    "parse_config",
    "read_config",
]

# architecture -> family (model_type)
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
ROPE_TYPES = ("default", "llama3")
_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor")

# family -> defaults of the keys a config.json may leave out (head_dim None: hidden // heads)
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=None, head_dim=None,
        max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False,
    ),
    "qwen2": dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, head_dim=None,
        max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
    ),
    "qwen3": dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, head_dim=128,
        max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
        attention_bias=False,
    ),
}  # fmt: skip


@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding parameters: ``kind`` is ``"default"`` or ``"llama3"``; the scaling
    fields matter for ``"llama3"`` only."""

    kind: str = "default"
    theta: float = 10000.0
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class DecoderConfig:
    """One decoder's architecture: sizes, the family's switches and its rotary parameters."""

    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    rope: RopeConfig = RopeConfig()

    def __post_init__(self):
        problems = _shape_problems(self.__dict__)
        if problems:
            raise ValueError("; ".join(f"{k}: {m}" for k, m in problems))


def _shape_problems(c: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for each size of the record ``c`` that cannot make a decoder."""
    out = []
    if c["family"] not in _DEFAULTS:
        out.append(("model_type", f"unsupported family {c['family']!r}"))
    for key in (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
    ):  # fmt: skip
        value = c[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            out.append((key, f"must be a positive integer, got {value!r}"))
    heads, kv, head_dim = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    if not out and heads % kv:
        out.append(("num_key_value_heads", f"{kv} does not divide num_attention_heads {heads}"))
    if not out and head_dim % 2:
        out.append(("head_dim", f"must be even for rotary embeddings, got {head_dim}"))
    eps = c["rms_norm_eps"]
    if not (isinstance(eps, float) and math.isfinite(eps) and eps > 0):
        out.append(("rms_norm_eps", f"must be a positive number, got {eps!r}"))
    return out


def read_config(folder: str) -> DecoderConfig:
    """The architecture in ``folder/config.json``; every problem in one ``CheckpointError``.

    The file is read only as a regular file inside ``folder`` of at most ``LIMITS["config"]``
    bytes (``contracts.bounded``)."""
    raw = read_json(folder, "config.json", "config")
    return parse_config(raw, os.path.join(folder, "config.json"))


def parse_config(raw: Any, path: str = "config.json") -> DecoderConfig:
    """The architecture ``raw`` (a parsed ``config.json``) describes; ``path`` names it in
    errors."""
    problems: list[CheckpointProblem] = []

    def report(key: str, message: str) -> None:
        problems.append(CheckpointProblem(path, key, message))

    if not isinstance(raw, dict):
        raise CheckpointError([CheckpointProblem(path, "", "must hold a JSON object")])
    family = _family(raw, report)
    if family is None:
        raise CheckpointError(problems)
    values = dict(_DEFAULTS[family])
    for key in values:
        if key in raw and raw[key] is not None:
            values[key] = raw[key]
    for key in ("rms_norm_eps",):
        if isinstance(values[key], int) and not isinstance(values[key], bool):
            values[key] = float(values[key])
    for key in ("tie_word_embeddings", "attention_bias", "mlp_bias"):
        if key in values and not isinstance(values[key], bool):
            report(key, f"must be true or false, got {values[key]!r}")
    heads = values["num_attention_heads"]
    if values["num_key_value_heads"] is None:
        values["num_key_value_heads"] = heads
    if values["head_dim"] is None:
        hidden = values["hidden_size"]
        if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
            if family == "llama" and hidden % heads:
                report("hidden_size", f"{hidden} is not a multiple of num_attention_heads {heads}")
            values["head_dim"] = hidden // heads
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        report("hidden_act", f"only silu is supported, got {act!r}")
    if raw.get("use_sliding_window"):
        report("use_sliding_window", "sliding-window attention is not supported")
    rope = _rope(raw, values["max_position_embeddings"], report)
    bias = values.pop("attention_bias", False)
    mlp_bias = values.pop("mlp_bias", False)
    record = dict(
        family=family,
        qkv_bias=True if family == "qwen2" else bias,
        o_bias=False if family == "qwen2" else bias,
        mlp_bias=mlp_bias,
        qk_norm=family == "qwen3",
        rope=rope,
        **values,
    )
    for key, message in _shape_problems(record):
        report(key, message)
    if problems:
        raise CheckpointError(problems)
    return DecoderConfig(**record)


def _family(raw: dict, report) -> str | None:
    archs = raw.get("architectures")
    model_type = raw.get("model_type")
    if archs is not None:
        if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str):
            report("architectures", f"must list exactly one architecture, got {archs!r}")
            return None
        if archs[0] not in ARCHITECTURES:
            report(
                "architectures",
                f"unsupported architecture {archs[0]!r} (supported: "
                f"{', '.join(ARCHITECTURES)}); checkpoint code is never run",
            )
            return None
        family = ARCHITECTURES[archs[0]]
        if model_type is not None and model_type != family:
            report("model_type", f"{model_type!r} does not match architecture {archs[0]!r}")
            return None
        return family
    if model_type in _DEFAULTS:
        return model_type
    report(
        "model_type",
        f"unsupported model type {model_type!r} (supported: {', '.join(_DEFAULTS)})",
    )
    return None


def _rope(raw: dict, max_positions: Any, report) -> RopeConfig:
    """The rotary parameters, from ``rope_parameters`` or the hub's ``rope_scaling`` with
    ``rope_theta`` (an entry of the record wins over the top-level key)."""
    key = "rope_parameters" if raw.get("rope_parameters") is not None else "rope_scaling"
    params = raw.get(key)
    if params is None:
        params = {}
    if not isinstance(params, dict):
        report(key, f"must be an object, got {params!r}")
        return RopeConfig()
    kind = params.get("rope_type", params.get("type", "default"))
    theta = params.get("rope_theta", raw.get("rope_theta", 10000.0))
    if not _positive(theta):
        report("rope_theta", f"must be a positive number, got {theta!r}")
        theta = 10000.0
    factor = params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
    if factor != 1.0:
        report(f"{key}.partial_rotary_factor", f"only 1.0 is supported, got {factor!r}")
    if kind not in ROPE_TYPES:
        report(
            f"{key}.rope_type",
            f"unsupported rope type {kind!r} (supported: {', '.join(ROPE_TYPES)})",
        )
        return RopeConfig(theta=float(theta))
    if kind == "default":
        return RopeConfig(theta=float(theta))
    got = {}
    for name in _LLAMA3_KEYS:
        if name not in params:
            report(f"{key}.{name}", "missing (llama3 rotary scaling needs it)")
        elif not _positive(params[name]):
            report(f"{key}.{name}", f"must be a positive number, got {params[name]!r}")
        else:
            got[name] = float(params[name])
    original = params.get(
        "original_max_position_embeddings",
        raw.get("original_max_position_embeddings", max_positions),
    )
    if not isinstance(original, int) or isinstance(original, bool) or original < 1:
        report(
            f"{key}.original_max_position_embeddings",
            f"must be a positive integer, got {original!r}",
        )
        original = 1
    if len(got) == 3 and got["high_freq_factor"] <= got["low_freq_factor"]:
        report(f"{key}.high_freq_factor", "must exceed low_freq_factor")
    if len(got) < 3:
        return RopeConfig(theta=float(theta))
    return RopeConfig("llama3", float(theta), original_max_position_embeddings=original, **got)


def _positive(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )
