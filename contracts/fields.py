"""The keys and enumerations of DSL version 1, in one table that the validator reads.

``OBJECTS`` maps each DSL object to its known keys and its required keys; the JSON Schema in
``contracts.schema`` is written separately and a test checks that the two agree.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple

from kernel_contracts.contracts.formats import FLOAT_FORMATS

__all__ = [
    "ACCUMULATOR_DTYPES",
    "ACTIONS",
    "ASSUMPTIONS",
    "CLAUSE_STATUSES",
    "EPILOGUE_ORDERS",
    "ESTIMATORS",
    "ESTIMATOR_PARAMS",
    "EVIDENCE_FORMATS",
    "FORMATS",
    "GUARANTEE_STATUSES",
    "INPUT_FORMATS",
    "INT_ACCUMULATORS",
    "LOGPROBS",
    "LOG_FILE_FORMATS",
    "NUMERICAL_METRICS",
    "OBJECTS",
    "OBSERVABLE",
    "QUANTITIES",
    "QUANTITY_FIELDS",
    "QUANTITY_REQUIRED",
    "ROUNDINGS",
    "SCALE_FORMATS",
    "SEVERITIES",
    "STAGES",
    "STATISTICAL_METRICS",
    "STATISTICS",
    "VERSION",
    "Fields",
]

VERSION = 1

FORMATS = ("float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
# accumulator dtype -> its mantissa bits (contracts.formats)
ACCUMULATOR_DTYPES = MappingProxyType(
    {name: FLOAT_FORMATS[name].mantissa_bits for name in ("float32", "float16", "bfloat16")}
)
# int8: symmetric values in [-127, 127], accumulated exactly in int32 (kernels._matmul)
INPUT_FORMATS = (*FORMATS, "int8")
INT_ACCUMULATORS = ("int32",)
SCALE_FORMATS = ("float32", "bfloat16", "float16")  # int8 scales, and int8 outputs
EPILOGUE_ORDERS = ("acc_sx_sw", "acc_sw_sx", "acc_sxsw")
ROUNDINGS = ("nearest_even", "toward_zero")
LOGPROBS = ("full_vocab", "processed")
NUMERICAL_METRICS = ("logit_drift", "logit_oscillation", "log_ratio", "tv")
STATISTICAL_METRICS = (
    "logit_drift", "logit_oscillation", "log_ratio", "abs_log_ratio", "tv", "kl", "top1_flip",
)  # fmt: skip
STATISTICS = ("quantile", "mean", "exceed_rate", "max")
OBSERVABLE = (
    "logit_drift", "logit_oscillation", "log_ratio", "abs_log_ratio", "tv", "kl", "reverse_kl",
    "top1_flip", "margin", "entropy",
)  # fmt: skip
QUANTITIES = (
    "token_tv", "token_log_ratio", "token_kl", "sequence_tv", "reward_drift", "pg_bias",
    "clip_budget",
)  # fmt: skip
ESTIMATORS = (
    "plain", "tis", "mis", "ppo_clip", "icepop", "seq_is", "seq_tis", "geo_mask", "tv_mask",
    "kl_mask", "dppo_tv", "dppo_kl", "dual_clip", "seq_mask", "seq_outlier", "tis_mask", "opsm",
    "kl_reject", "tis_clip", "tis_norm", "gspo", "cispo",
    "sapo", "vespo", "clip_cov", "kl_cov",
)  # fmt: skip
# estimator -> the parameter fields of a pg_bias guarantee it requires
ESTIMATOR_PARAMS = MappingProxyType(
    {"tis": ("cap",), "mis": ("cap",), "seq_tis": ("cap",), "ppo_clip": ("clip_epsilon",),
     "icepop": ("band",), "geo_mask": ("band",), "tv_mask": ("threshold",),
     "kl_mask": ("threshold",), "dppo_tv": ("threshold",), "dppo_kl": ("threshold",),
     "dual_clip": ("clip_epsilon", "cap"), "seq_mask": ("band",), "seq_outlier": ("band",),
     "tis_mask": ("cap", "band"), "opsm": ("threshold",),
     "kl_reject": ("reject", "reject_threshold"), "tis_clip": ("band",),
     "tis_norm": ("cap",), "gspo": ("clip_epsilon",), "cispo": ("band",),
     "sapo": ("temperatures",), "vespo": ("gamma",),
     "clip_cov": ("clip_epsilon", "cov_fraction", "cov_band"),
     "kl_cov": ("cov_fraction", "kl_coef")}
)  # fmt: skip
# quantity -> the optional fields a guarantee of it takes beyond id, quantity, max, from, assume
QUANTITY_FIELDS = MappingProxyType(
    {"token_tv": ("scope",), "token_log_ratio": ("scope",), "token_kl": ("scope",),
     "sequence_tv": ("scope", "horizon"),
     "reward_drift": ("scope", "horizon", "reward_range"),
     "pg_bias": ("scope", "score_norm", "advantage", "estimator", "cap", "clip_epsilon", "band",
                 "threshold", "reject", "reject_threshold", "temperatures", "gamma",
                 "cov_fraction", "cov_band", "kl_coef"),
     "clip_budget": ("scope", "clip_epsilon")}
)  # fmt: skip
# quantity -> those of its fields it requires
QUANTITY_REQUIRED = MappingProxyType(
    {"reward_drift": ("reward_range",), "pg_bias": ("score_norm", "advantage"),
     "clip_budget": ("clip_epsilon",)}
)  # fmt: skip
ASSUMPTIONS = ("support_overlap",)
SEVERITIES = ("info", "warn", "critical")
ACTIONS = (
    "log", "alert", "mask_tokens", "tis_correct", "route_to_train_kernel", "halt_promotion",
    "rollback",
)  # fmt: skip
CLAUSE_STATUSES = ("held", "violated", "inconclusive", "skipped")
GUARANTEE_STATUSES = ("proved", "refuted", "unknown")
STAGES = ("offline_ci", "shadow", "canary", "full")
EVIDENCE_FORMATS = ("generic", "verl", "trl")
# how a log is stored (unset: chosen by the file name's ending)
LOG_FILE_FORMATS = ("jsonl", "parquet", "arrow")


class Fields(NamedTuple):
    """The keys a DSL object may have, and those it must have."""

    known: tuple[str, ...]
    required: tuple[str, ...] = ()


OBJECTS: MappingProxyType[str, Fields] = MappingProxyType(
    {
        "contract": Fields(
            (
                "contract",
                "name",
                "description",
                "policy",
                "kernels",
                "numerical",
                "statistical",
                "runtime",
                "observability",
                "slices",
                "guarantees",
                "escalation",
                "promotion",
                "evidence",
            ),
            ("contract", "name", "kernels"),
        ),
        "policy": Fields(
            ("temperature", "top_p", "top_k", "logprobs", "vocab_size", "max_new_tokens")
        ),
        "kernels": Fields(("train", "inference"), ("train", "inference")),
        "kernel": Fields(("preset", "matmul", "attention", "batching"), ("preset",)),
        "matmul": Fields(
            (
                "inputs",
                "scaling",
                "accumulator",
                "group",
                "promote_every",
                "output",
                "k_max",
                "epilogue",
            )
        ),
        "epilogue": Fields(("scales", "order", "fused", "rounding")),
        "accumulator": Fields(("dtype", "mantissa_bits", "rounding")),
        "attention": Fields(("kv_cache", "page_size", "tiles")),
        "numerical": Fields(("id", "metric", "max", "slice"), ("id", "metric", "max")),
        "statistical": Fields(
            (
                "id",
                "metric",
                "statistic",
                "max",
                "confidence",
                "min_samples",
                "q",
                "threshold",
                "slices",
            ),
            ("id", "metric", "statistic", "max"),
        ),
        "runtime": Fields(
            ("id", "batch_size", "sequence_length", "batch_invariant", "kv_cache", "hardware"),
            ("id",),
        ),
        "observability": Fields(("id", "log", "sample_rate", "window_tokens"), ("id", "log")),
        "slice": Fields(("token_prob", "position", "entropy", "margin", "prompt")),
        "guarantee": Fields(
            (
                "id",
                "quantity",
                "max",
                "from",
                "scope",
                "reward_range",
                "score_norm",
                "advantage",
                "estimator",
                "cap",
                "clip_epsilon",
                "horizon",
                "assume",
                "band",
                "threshold",
                "reject",
                "reject_threshold",
                "temperatures",
                "gamma",
                "cov_fraction",
                "cov_band",
                "kl_coef",
            ),
            ("id", "quantity", "max", "from"),
        ),
        "escalation": Fields(("when", "severity", "action"), ("when", "severity", "action")),
        "when": Fields(("clause", "status"), ("clause",)),
        "promotion": Fields(STAGES),
        "stage": Fields(("min_tokens", "traffic")),
        "evidence": Fields(("emulate", "logprobs")),
        "emulate": Fields(
            ("model", "params", "prompts", "max_new_tokens", "seed", "chat_template")
        ),
        "logprobs": Fields(("path", "format", "file_format"), ("path",)),
    }
)
