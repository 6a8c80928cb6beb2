"""The JSON Schema (draft 2020-12) of contract DSL version 1, for editors and other tools.

It is strict (``additionalProperties: false`` everywhere) and says what each key means. Some
rules are beyond JSON Schema (references between clauses, stage order, finiteness of YAML
``.inf``) and are checked by the validator only; a test keeps the keys of both in agreement.
"""

from __future__ import annotations

import copy

from kernel_contracts.contracts import fields as F
from kernel_contracts.contracts.checks import ID_PATTERN
from kernel_contracts.contracts.presets import PRESETS

__all__ = ["json_schema"]

_ID = {"type": "string", "pattern": ID_PATTERN.pattern, "description": "A stable id."}


def _obj(description: str, properties: dict, required=(), **extra) -> dict:
    out = {"type": "object", "description": description, "properties": properties}
    out["additionalProperties"] = False
    if required:
        out["required"] = list(required)
    return out | extra


def _num(description: str, **bounds) -> dict:
    return {"type": "number", "description": description, **bounds}


def _int(description: str, **bounds) -> dict:
    return {"type": "integer", "description": description, **bounds}


def _enum(description: str, values) -> dict:
    return {"type": "string", "enum": list(values), "description": description}


def _pair(description: str, item: dict, nullable: bool) -> dict:
    end = dict(item, type=[item["type"], "null"]) if nullable else item
    return {
        "type": "array", "description": description, "prefixItems": [end, end],
        "minItems": 2, "maxItems": 2,
    }  # fmt: skip


def _list(description: str, item: dict, min_items: int = 0) -> dict:
    out = {"type": "array", "description": description, "items": item, "uniqueItems": True}
    return out | ({"minItems": min_items} if min_items else {})


_POLICY = _obj(
    "How logits become tokens.",
    {
        "temperature": _num("Sampling temperature T > 0.", exclusiveMinimum=0),
        "top_p": _num("Nucleus mass in (0, 1]; < 1 requires logprobs.", exclusiveMinimum=0,
                      maximum=1),
        "top_k": _int("Keep the k most likely tokens; 0 = off; > 0 requires logprobs.",
                      minimum=0),
        "logprobs": _enum("What logged log-probs are: over the full vocabulary, or "
                          "renormalised over the kept support.", F.LOGPROBS),
        "vocab_size": _int(
            "Vocabulary size; no default (a log's token ids are then checked to be >= 0 only).",
            minimum=2,
        ),
        "max_new_tokens": _int("Horizon L of sequence-level guarantees.", minimum=1),
    },
    allOf=[
        {"if": {"properties": {"top_p": {"exclusiveMaximum": 1}}, "required": ["top_p"]},
         "then": {"required": ["logprobs"]}},
        {"if": {"properties": {"top_k": {"minimum": 1}}, "required": ["top_k"]},
         "then": {"required": ["logprobs"]}},
    ],
)  # fmt: skip

_SCALING = r"^(?:per_tensor|per_row|block:[1-9][0-9]*|mx:32)$"
_MATMUL = _obj(
    "The arithmetic of the kernel's matmuls; fields given replace the preset's.",
    {
        "inputs": _enum("Input format; int8 is symmetric, values in [-127, 127].",
                        F.INPUT_FORMATS),
        "scaling": {"type": "string", "pattern": _SCALING,
                    "description": "Scale granularity: per_tensor, per_row, block:N or mx:32."},
        "accumulator": _obj(
            "The accumulator: a dtype, or mantissa_bits with a rounding mode.",
            {
                "dtype": _enum("float32 = 23 bits, float16 = 10, bfloat16 = 7, nearest even; "
                               "int32 = exact integer sums (int8 inputs).",
                               (*F.ACCUMULATOR_DTYPES, *F.INT_ACCUMULATORS)),
                "mantissa_bits": _int("Explicit mantissa bits.", minimum=1, maximum=23),
                "rounding": _enum("Rounding of each accumulation.", F.ROUNDINGS),
            },
            minProperties=1,
            **{"not": {"required": ["dtype", "mantissa_bits"]}},
        ),
        "group": _int("Products summed before each accumulator rounding.", minimum=1),
        "promote_every": {"type": ["integer", "null"], "minimum": 1, "description":
                          "K elements after which the partial sum joins an fp32 sum; "
                          "null = never."},
        "output": _enum("Output format.", F.FORMATS),
        "k_max": _int("The longest reduction K one accumulator sees (int8: the exactness "
                      "obligations cover it).", minimum=1, maximum=2**53 - 1),
        "epilogue": _obj(
            "int8 only: how the int32 accumulator becomes the output.",
            {
                "scales": _enum("dtype of the per-token and per-channel scales.",
                                F.SCALE_FORMATS),
                "order": _enum("acc_sx_sw = (acc*s_x)*s_w, acc_sw_sx = (acc*s_w)*s_x, "
                               "acc_sxsw = acc*(s_x*s_w); not with fused.", F.EPILOGUE_ORDERS),
                "fused": {"type": "boolean", "description":
                          "true: the exact product rounded once; false: a rounding after each "
                          "multiply and at the output."},
                "rounding": _enum("Rounding of the multiplications and the output.",
                                  F.ROUNDINGS),
            },
        ),
    },
)  # fmt: skip
_ATTENTION = _obj(
    "How attention reads its keys and values.",
    {
        "kv_cache": _enum("KV-cache storage format.", F.FORMATS),
        "page_size": _int("Tokens per KV-cache page.", minimum=1),
        "tiles": {"description": "full, adaptive, or a fixed tile size.",
                  "anyOf": [{"enum": ["full", "adaptive"]}, {"type": "integer", "minimum": 1}]},
    },
)  # fmt: skip
_KERNEL = _obj(
    "A kernel: a named preset with optional field overrides.",
    {
        "preset": _enum("The preset the kernel starts from.", PRESETS),
        "matmul": _MATMUL,
        "attention": _ATTENTION,
        "batching": _enum("dynamic: reduction splits depend on the batch.", ("dynamic", "fixed")),
    },
    ("preset",),
)
_KERNELS = _obj(
    "The kernel pair.", {"train": _KERNEL, "inference": _KERNEL}, ("train", "inference")
)

_SLICE_NAME = {"type": "string", "description": "A slice name, or all."}
_NUMERICAL = _obj(
    "A per-token limit: metric <= max on every token of the slice.",
    {
        "id": _ID,
        "metric": _enum("The per-token metric.", F.NUMERICAL_METRICS),
        "max": _num("The limit.", minimum=0),
        "slice": _SLICE_NAME,
    },
    ("id", "metric", "max"),
)
_STATISTICAL = _obj(
    "A limit on a statistic of a per-token metric over each slice, at a confidence.",
    {
        "id": _ID,
        "metric": _enum("The per-token metric.", F.STATISTICAL_METRICS),
        "statistic": _enum("The statistic limited.", F.STATISTICS),
        "max": _num("The limit on the statistic.", minimum=0),
        "confidence": _num("Confidence level in (0, 1).", exclusiveMinimum=0, exclusiveMaximum=1),
        "min_samples": _int("Fewer samples give inconclusive.", minimum=1),
        "q": _num("Quantile level in (0, 1), for statistic quantile.", exclusiveMinimum=0,
                  exclusiveMaximum=1),
        "threshold": _num("For statistic exceed_rate: the rate of metric > threshold.",
                          minimum=0),
        "slices": _list("Slices the clause applies to.", _SLICE_NAME, 1),
    },
    ("id", "metric", "statistic", "max"),
    allOf=[
        {"if": {"properties": {"statistic": {"const": "quantile"}}},
         "then": {"required": ["q"]}, "else": {"not": {"required": ["q"]}}},
        {"if": {"properties": {"statistic": {"const": "exceed_rate"}}},
         "then": {"required": ["threshold"], "properties": {"max": {"maximum": 1}}},
         "else": {"not": {"required": ["threshold"]}}},
    ],
)  # fmt: skip
_RANGE_INT = {"type": "integer", "minimum": 1}
_RUNTIME = _obj(
    "Conditions under which the numerical and statistical clauses are claimed.",
    {
        "id": _ID,
        "batch_size": _pair("Batch sizes [lo, hi].", _RANGE_INT, False),
        "sequence_length": _pair("Sequence lengths [lo, hi].", _RANGE_INT, False),
        "batch_invariant": {
            "type": "boolean",
            "description": (
                "Each sequence's result does not depend on the batch it is served in (the "
                "inference kernel's reduction splits do not follow the batch size): true "
                "needs kernels.inference.batching: fixed, and a dynamically batching kernel "
                "violates the clause."
            ),
        },
        "kv_cache": _enum("KV-cache format required.", F.FORMATS),
        "hardware": {"type": "string", "minLength": 1, "description": "Hardware named."},
    },
    ("id",),
    minProperties=2,
)
_OBSERVABILITY = _obj(
    "What must be logged so the contract can be checked online.",
    {
        "id": _ID,
        "log": _list("Per-token metrics logged.", {"enum": list(F.OBSERVABLE)}, 1),
        "sample_rate": _num("Share of tokens logged, in (0, 1].", exclusiveMinimum=0, maximum=1),
        "window_tokens": _int("Tokens per monitoring window.", minimum=1),
    },
    ("id", "log"),
)
_SLICE = _obj(
    "A named token subset; ranges [lo, hi] with null for an open end.",
    {
        "token_prob": _pair("Probability range.", {"type": "number", "minimum": 0,
                                                   "maximum": 1}, True),
        "position": _pair("Position range.", {"type": "integer", "minimum": 0}, True),
        "entropy": _pair("Entropy range (nats).", {"type": "number", "minimum": 0}, True),
        "margin": _pair("Top-1 margin range.", {"type": "number", "minimum": 0}, True),
        "prompt": {"type": "string", "format": "regex", "description": "Prompt regex."},
    },
    minProperties=1,
)  # fmt: skip

# every field some quantity takes, in the order of contracts.fields.QUANTITY_FIELDS
_EXTRAS = tuple(dict.fromkeys(f for fields in F.QUANTITY_FIELDS.values() for f in fields))


def _quantity_rule(quantity: str) -> dict:
    required, allowed = F.QUANTITY_REQUIRED.get(quantity, ()), F.QUANTITY_FIELDS[quantity]
    then: dict = {"properties": {f: False for f in _EXTRAS if f not in allowed}}
    if required:
        then["required"] = list(required)
    return {"if": {"properties": {"quantity": {"const": quantity}}}, "then": then}


def _estimator_rule(key: str) -> dict:
    """A pg_bias estimator parameter: required by the estimators that take it, refused by the
    others (``clip_epsilon`` is also clip_budget's own field)."""
    users = [e for e, keys in F.ESTIMATOR_PARAMS.items() if key in keys]
    pg = {"quantity": {"const": "pg_bias"}}
    return {
        "if": {
            "properties": {**pg, "estimator": {"enum": users}},
            "required": ["quantity", "estimator"],
        },
        "then": {"required": [key]},
        "else": {
            "if": {"properties": pg, "required": ["quantity"]},
            "then": {"properties": {key: False}},
        },
    }


_GUARANTEE = _obj(
    "A claim the thresholds must buy; each becomes a proof obligation.",
    {
        "id": _ID,
        "quantity": _enum("The bounded quantity.", F.QUANTITIES),
        "max": _num("The claimed bound.", minimum=0),
        "from": _list("Premise clause ids (at least one numerical or statistical).", _ID, 1),
        "scope": _enum("token, or sequence (horizon L).", ("token", "sequence")),
        "reward_range": _pair("Reward range [a, b], a < b.", {"type": "number"}, False),
        "score_norm": _num("G >= |grad log pi| per token (assumption).", exclusiveMinimum=0),
        "advantage": _num("A_max >= |A| (assumption).", exclusiveMinimum=0),
        "estimator": _enum("Policy-gradient estimator.", F.ESTIMATORS),
        "cap": _num("Importance-ratio cap: c >= 0 for tis, seq_tis and tis_mask, c > 1 for "
                    "mis, dual_clip and tis_norm.", minimum=0),
        "band": dict(_pair("Kept ratio band [lo, hi], 0 <= lo < 1 < hi, for icepop, geo_mask, "
                           "seq_mask, seq_outlier and tis_mask; the clamp range of tis_clip and "
                           "cispo.",
                           {"type": "number"}, False),
                     prefixItems=[{"type": "number", "minimum": 0, "exclusiveMaximum": 1},
                                  {"type": "number", "exclusiveMinimum": 1}]),
        "threshold": _num("Divergence threshold: tv_mask and dppo_tv in (0, 1), kl_mask, "
                          "dppo_kl and opsm > 0.",
                          exclusiveMinimum=0),
        "clip_epsilon": _num("PPO clip range in (0, 1).", exclusiveMinimum=0,
                             exclusiveMaximum=1),
        "reject": {"type": "string", "minLength": 1,
                   "description": "kl_reject: verl's criteria, e.g. token_k1,seq_max_k3."},
        "reject_threshold": {"anyOf": [{"type": "string", "minLength": 1},
                                       {"type": "number", "exclusiveMinimum": 0}],
                             "description": "kl_reject: one threshold, or one per criterion."},
        "temperatures": {"type": "array", "minItems": 2, "maxItems": 2,
                         "items": {"type": "number", "exclusiveMinimum": 0},
                         "description": "sapo: gate temperatures [tau_pos, tau_neg] (A > 0, "
                                        "A <= 0), each > 0."},
        "gamma": {"type": "array", "minItems": 4, "maxItems": 4,
                  "items": {"type": "number", "exclusiveMinimum": 0},
                  "description": "vespo: gamma weights [k_pos, lambda_pos, k_neg, lambda_neg] "
                                 "(A >= 0, A < 0), each > 0."},
        "cov_fraction": _num("clip_cov, kl_cov: the share rho of the batch's real tokens they "
                             "pick, in (0, 1]; max(floor(rho*n), 1) tokens.",
                             exclusiveMinimum=0, maximum=1),
        "cov_band": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "number"},
                     "description": "clip_cov: the covariance band [lb, ub], lb < ub; a token "
                                    "with lb < cov < ub may lose its gradient."},
        "kl_coef": _num("kl_cov: the coefficient kappa >= 0 of |log r| on the picked tokens.",
                        minimum=0),
        "horizon": _int("Sequence length L; default policy.max_new_tokens.", minimum=1),
        "assume": _list(
            "Assumptions taken. support_overlap: every token either kernel can sample has "
            "positive probability under the other, so each ratio w = pi_train/pi_inf is finite; "
            "it holds for an untruncated softmax (top_p 1, top_k 0), and pg_bias guarantees "
            "take it whether listed or not (the report notes it).",
            {"enum": list(F.ASSUMPTIONS)},
        ),
    },
    ("id", "quantity", "max", "from"),
    allOf=[_quantity_rule(q) for q in F.QUANTITIES]
    + [_estimator_rule(k) for k in ("cap", "clip_epsilon", "band", "threshold", "reject",
                                    "reject_threshold", "temperatures", "gamma",
                                    "cov_fraction", "cov_band", "kl_coef")]
    + [{"if": {"properties": {"estimator": {"enum": ["mis", "dual_clip"]}},
               "required": ["estimator"]},
        "then": {"properties": {"cap": {"exclusiveMinimum": 1}}}},
       {"if": {"properties": {"estimator": {"const": "tis_norm"}}, "required": ["estimator"]},
        "then": {"properties": {"cap": {"exclusiveMinimum": 1}}}},
       {"if": {"properties": {"estimator": {"enum": ["tv_mask", "dppo_tv"]}},
               "required": ["estimator"]},
        "then": {"properties": {"threshold": {"exclusiveMaximum": 1}}}}],
)  # fmt: skip
_ESCALATION = _obj(
    "Maps a clause's or guarantee's status to a routing action; rules are checked in order.",
    {
        "when": _obj(
            "The triggering clause (or guarantee) and statuses.",
            {
                "clause": _ID,
                "status": _list("Statuses that trigger (default violated, or refuted).",
                                {"enum": list(F.CLAUSE_STATUSES + F.GUARANTEE_STATUSES)}, 1),
            },
            ("clause",),
        ),
        "severity": _enum("Severity.", F.SEVERITIES),
        "action": _enum("Routing action.", F.ACTIONS),
    },
    ("when", "severity", "action"),
)  # fmt: skip


def _stage(description: str, traffic: bool) -> dict:
    props = {"min_tokens": _int("Tokens to observe before moving on.", minimum=0)}
    if traffic:
        props["traffic"] = _num("Share of traffic in (0, 1].", exclusiveMinimum=0, maximum=1)
    return {"anyOf": [_obj(description, props), {"type": "null"}]}


_PROMOTION = _obj(
    "The promotion pipeline; stages in the order offline_ci, shadow, canary, full.",
    {
        "offline_ci": _stage("Offline CI.", False),
        "shadow": _stage("Shadow traffic.", True),
        "canary": _stage("Canary.", True),
        "full": _stage("Full rollout.", False),
    },
)
_EVIDENCE = _obj(
    "Where measurements come from.",
    {
        "emulate": {"anyOf": [_obj("Emulated kernels on the bundled model.", {
            "model": {"type": "string", "minLength": 1, "description":
                      "A shipped model name, an entry point package.module:function, or "
                      "hf:PATH, a Hugging Face checkpoint folder relative to the contract "
                      "file, gguf:PATH, a GGUF file relative to the contract file, or "
                      "gguf:package:DIST/FILE, a GGUF file the installed Python package DIST "
                      "ships (FILE as its installed file list spells it)."},
            "params": {"type": ["string", "null"], "minLength": 1, "description":
                       "An entry point's parameters (.npz), relative to the contract file."},
            "prompts": {"anyOf": [
                _int("Prompts.", minimum=1, maximum=2**32 - 1),
                {"type": "string", "minLength": 1, "description": "An hf: or gguf: "
                 "model's prompt file (one prompt a line), relative to the contract file."},
            ]},
            "max_new_tokens": _int("Tokens per prompt.", minimum=1, maximum=2**32 - 1),
            "seed": _int("Random seed.", minimum=0, maximum=2**32 - 1),
            "chat_template": {"type": "boolean", "description":
                              "Render each line of the prompt file as one user message "
                              "through the gguf: model's chat template."},
        }), {"type": "null"}]},
        "logprobs": _obj("Logged log-probs (JSONL, Parquet or Arrow).", {
            "path": {"type": "string", "minLength": 1,
                     "description": "Relative to the contract file's directory."},
            "format": _enum("Log format.", F.EVIDENCE_FORMATS),
            "file_format": _enum("How the log is stored; default: by the file name's ending.",
                                 F.LOG_FILE_FORMATS),
        }, ("path",)),
    },
    minProperties=1,
)  # fmt: skip

_SCHEMA = _obj(
    "A training-inference kernel contract, DSL version 1.",
    {
        "contract": {"const": F.VERSION, "description": "DSL version."},
        "name": {"type": "string", "minLength": 1, "description": "Contract name."},
        "description": {"type": "string", "description": "Free text."},
        "policy": _POLICY,
        "kernels": _KERNELS,
        "numerical": {"type": "array", "items": _NUMERICAL, "description": "N clauses."},
        "statistical": {"type": "array", "items": _STATISTICAL, "description": "S clauses."},
        "runtime": {"type": "array", "items": _RUNTIME, "description": "R clauses."},
        "observability": {"type": "array", "items": _OBSERVABILITY, "description": "O clauses."},
        "slices": {
            "type": "object", "description": "Named token subsets.",
            "propertyNames": {"pattern": ID_PATTERN.pattern, "not": {"const": "all"}},
            "additionalProperties": _SLICE,
        },
        "guarantees": {"type": "array", "items": _GUARANTEE, "description": "Guarantees."},
        "escalation": {"type": "array", "items": _ESCALATION, "description": "Policy Pi."},
        "promotion": _PROMOTION,
        "evidence": _EVIDENCE,
    },
    ("contract", "name", "kernels"),
    **{"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "kernel contract"},
)  # fmt: skip


def json_schema() -> dict:
    """The JSON Schema of contract DSL version 1 (a fresh copy the caller may change)."""
    return copy.deepcopy(_SCHEMA)
