"""Reading the policy, the clause families N/S/R/O, slices, escalation, promotion, evidence."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import NamedTuple

from kernel_contracts.contracts.checks import Checker, did_you_mean, show, sub
from kernel_contracts.contracts.fields import (
    ACTIONS,
    CLAUSE_STATUSES,
    EVIDENCE_FORMATS,
    FORMATS,
    GUARANTEE_STATUSES,
    LOG_FILE_FORMATS,
    LOGPROBS,
    NUMERICAL_METRICS,
    OBJECTS,
    OBSERVABLE,
    SEVERITIES,
    STAGES,
    STATISTICAL_METRICS,
    STATISTICS,
)
from kernel_contracts.contracts.model import (
    EmulateEvidence,
    EscalationRule,
    Evidence,
    LogprobsEvidence,
    NumericalClause,
    ObservabilityClause,
    Policy,
    PromotionStage,
    RuntimeClause,
    Slice,
    StatisticalClause,
)

__all__ = [
    "Names",
    "emulate_relative",
    "read_escalation",
    "read_evidence",
    "read_numerical",
    "read_observability",
    "read_policy",
    "read_promotion",
    "read_runtime",
    "read_slice",
    "read_statistical",
]


class Names(NamedTuple):
    """The names a contract defines, gathered before its parts are read."""

    clauses: Mapping[str, str]  # clause id -> family
    guarantees: frozenset[str]
    slices: frozenset[str]


def _fields(ck: Checker, value, key, obj: str) -> dict | None:
    f = OBJECTS[obj]
    return ck.mapping(value, key, f.known, f.required)


def _ok(ck: Checker, mark: int) -> bool:
    return ck.failures == mark


def read_policy(ck: Checker, value, key: str) -> Policy | None:
    mark = ck.failures
    m = _fields(ck, value, key, "policy")
    if m is None:
        return None
    got = {}
    if "temperature" in m:
        got["temperature"] = ck.number(m["temperature"], sub(key, "temperature"), 0, lo_open=True)
    if "top_p" in m:
        got["top_p"] = ck.number(m["top_p"], sub(key, "top_p"), 0, 1, lo_open=True)
    if "top_k" in m:
        got["top_k"] = ck.integer(m["top_k"], sub(key, "top_k"), lo=0)
    if "logprobs" in m:
        got["logprobs"] = ck.choice(m["logprobs"], sub(key, "logprobs"), LOGPROBS)
    if "vocab_size" in m:
        got["vocab_size"] = ck.integer(m["vocab_size"], sub(key, "vocab_size"), lo=2)
    if "max_new_tokens" in m:
        got["max_new_tokens"] = ck.integer(m["max_new_tokens"], sub(key, "max_new_tokens"), lo=1)
    default = Policy()
    top_p, top_k = got.get("top_p", default.top_p), got.get("top_k", default.top_k)
    vocab = got.get("vocab_size", default.vocab_size)
    if top_k is not None and vocab is not None and top_k > vocab:
        ck.report(sub(key, "top_k"), f"must be <= vocab_size ({vocab}), got {top_k}")
    nucleus = top_p is not None and top_p < 1
    if "logprobs" not in m and (nucleus or (top_k is not None and top_k > 0)):
        cause = "top_p < 1" if nucleus else "top_k > 0"
        ck.report(
            sub(key, "logprobs"),
            f"missing required key: with {cause}, say whether logged log-probs are "
            "full_vocab or processed",
        )
    return Policy(**got) if _ok(ck, mark) else None


def _slice_ref(ck: Checker, value, key, names: Names) -> str | None:
    name = ck.string(value, key)
    if name is not None and name != "all" and name not in names.slices:
        ck.report(key, f"unknown slice {show(name)} (define it under slices, or use all)")
        return None
    return name


def read_numerical(ck: Checker, value, key: str, names: Names) -> NumericalClause | None:
    mark = ck.failures
    m = _fields(ck, value, key, "numerical")
    if m is None:
        return None
    got = {
        "id": ck.ident(m.get("id"), sub(key, "id")) if "id" in m else None,
        "metric": ck.choice(m["metric"], sub(key, "metric"), NUMERICAL_METRICS)
        if "metric" in m
        else None,
        "max": ck.number(m["max"], sub(key, "max"), lo=0) if "max" in m else None,
    }
    if "slice" in m:
        got["slice"] = _slice_ref(ck, m["slice"], sub(key, "slice"), names)
    return NumericalClause(**got) if _ok(ck, mark) else None


def read_statistical(ck: Checker, value, key: str, names: Names) -> StatisticalClause | None:
    mark = ck.failures
    m = _fields(ck, value, key, "statistical")
    if m is None:
        return None
    got: dict = {}
    if "id" in m:
        got["id"] = ck.ident(m["id"], sub(key, "id"))
    if "metric" in m:
        got["metric"] = ck.choice(m["metric"], sub(key, "metric"), STATISTICAL_METRICS)
    statistic = None
    if "statistic" in m:
        statistic = got["statistic"] = ck.choice(m["statistic"], sub(key, "statistic"), STATISTICS)
    if "max" in m:
        hi = 1 if statistic == "exceed_rate" else None
        got["max"] = ck.number(m["max"], sub(key, "max"), 0, hi)
    if "confidence" in m:
        got["confidence"] = ck.number(
            m["confidence"], sub(key, "confidence"), 0, 1, lo_open=True, hi_open=True
        )
    if "min_samples" in m:
        got["min_samples"] = ck.integer(m["min_samples"], sub(key, "min_samples"), lo=1)
    for field, needs, read in (
        ("q", "quantile", lambda v, k: ck.number(v, k, 0, 1, lo_open=True, hi_open=True)),
        ("threshold", "exceed_rate", lambda v, k: ck.number(v, k, lo=0)),
    ):
        if field in m:
            if statistic is not None and statistic != needs:
                ck.report(sub(key, field), f"applies only to statistic: {needs}")
            got[field] = read(m[field], sub(key, field))
        elif statistic == needs:
            ck.report(sub(key, field), f"missing required key: statistic {needs} needs {field}")
    if "slices" in m:
        got["slices"] = _names_list(
            ck, m["slices"], sub(key, "slices"), lambda v, k: _slice_ref(ck, v, k, names), "slice"
        )
    return StatisticalClause(**got) if _ok(ck, mark) else None


def _names_list(ck: Checker, value, key, read, what: str) -> tuple[str, ...] | None:
    items = ck.each(value, key, read, nonempty=True)
    if items is None:
        return None
    seen: set[str] = set()
    for i, name in enumerate(items):
        if name in seen:
            ck.report(sub(key, i), f"duplicate {what} {show(name)}")
        seen.add(name)
    return items


def read_runtime(ck: Checker, value, key: str) -> RuntimeClause | None:
    mark = ck.failures
    m = _fields(ck, value, key, "runtime")
    if m is None:
        return None
    got: dict = {}
    if "id" in m:
        got["id"] = ck.ident(m["id"], sub(key, "id"))
    for field in ("batch_size", "sequence_length"):
        if field in m:
            got[field] = ck.pair(
                m[field], sub(key, field), lambda v, k: ck.integer(v, k, lo=1), open_ends=False
            )
    if "batch_invariant" in m:
        got["batch_invariant"] = ck.boolean(m["batch_invariant"], sub(key, "batch_invariant"))
    if "kv_cache" in m:
        got["kv_cache"] = ck.choice(m["kv_cache"], sub(key, "kv_cache"), FORMATS)
    if "hardware" in m:
        got["hardware"] = ck.string(m["hardware"], sub(key, "hardware"))
    if _ok(ck, mark) and set(m) <= {"id"}:
        conditions = ", ".join(OBJECTS["runtime"].known[1:])
        ck.report(key, f"a runtime clause needs at least one of {conditions}")
    return RuntimeClause(**got) if _ok(ck, mark) else None


def read_observability(ck: Checker, value, key: str) -> ObservabilityClause | None:
    mark = ck.failures
    m = _fields(ck, value, key, "observability")
    if m is None:
        return None
    got: dict = {}
    if "id" in m:
        got["id"] = ck.ident(m["id"], sub(key, "id"))
    if "log" in m:
        got["log"] = _names_list(
            ck, m["log"], sub(key, "log"), lambda v, k: ck.choice(v, k, OBSERVABLE), "metric"
        )
    if "sample_rate" in m:
        got["sample_rate"] = ck.number(
            m["sample_rate"], sub(key, "sample_rate"), 0, 1, lo_open=True
        )
    if "window_tokens" in m:
        got["window_tokens"] = ck.integer(m["window_tokens"], sub(key, "window_tokens"), lo=1)
    return ObservabilityClause(**got) if _ok(ck, mark) else None


def read_slice(ck: Checker, name: str, value, key: str) -> Slice | None:
    mark = ck.failures
    m = _fields(ck, value, key, "slice")
    if m is None:
        return None
    if name == "all":
        ck.report(key, "the slice all is built in and cannot be redefined")
    else:
        ck.ident(name, key)
    if not m and _ok(ck, mark):
        ck.report(key, f"a slice needs at least one of {', '.join(OBJECTS['slice'].known)}")
    got: dict = {}
    ranges = {
        "token_prob": lambda v, k: ck.number(v, k, 0, 1),
        "position": lambda v, k: ck.integer(v, k, lo=0),
        "entropy": lambda v, k: ck.number(v, k, lo=0),
        "margin": lambda v, k: ck.number(v, k, lo=0),
    }
    for field, read in ranges.items():
        if field in m:
            got[field] = ck.pair(m[field], sub(key, field), read, open_ends=True)
    if "prompt" in m:
        got["prompt"] = _regex(ck, m["prompt"], sub(key, "prompt"))
    return Slice(name=name, **got) if _ok(ck, mark) else None


def _regex(ck: Checker, value, key) -> str | None:
    text = ck.string(value, key)
    if text is None:
        return None
    try:
        re.compile(text)
    except (re.error, OverflowError, RecursionError, ValueError) as e:
        reason = getattr(e, "msg", None) or type(e).__name__
        ck.report(key, f"not a valid regular expression: {reason}")
        return None
    return text


def read_escalation(ck: Checker, value, key: str, names: Names) -> EscalationRule | None:
    mark = ck.failures
    m = _fields(ck, value, key, "escalation")
    if m is None:
        return None
    got: dict = {}
    if "severity" in m:
        got["severity"] = ck.choice(m["severity"], sub(key, "severity"), SEVERITIES)
    if "action" in m:
        got["action"] = ck.choice(m["action"], sub(key, "action"), ACTIONS)
    if "when" in m:
        wkey = sub(key, "when")
        when = _fields(ck, m["when"], wkey, "when")
        target = None
        if when is not None and "clause" in when:
            ckey = sub(wkey, "clause")
            target = got["clause"] = ck.ident(when["clause"], ckey)
            if (
                target is not None
                and target not in names.clauses
                and target not in names.guarantees
            ):
                hint = did_you_mean(target, [*names.clauses, *names.guarantees])
                ck.report(ckey, f"unknown clause {show(target)}{hint}")
                target = None
        statuses = GUARANTEE_STATUSES if target in names.guarantees else CLAUSE_STATUSES
        if when is not None and "status" in when:
            got["status"] = _names_list(
                ck, when["status"], sub(wkey, "status"),
                lambda v, k: ck.choice(v, k, statuses), "status",
            )  # fmt: skip
        elif target in names.guarantees:
            got["status"] = ("refuted",)
    return EscalationRule(**got) if _ok(ck, mark) else None


def read_promotion(ck: Checker, value, key: str) -> tuple[PromotionStage, ...] | None:
    mark = ck.failures
    m = _fields(ck, value, key, "promotion")
    if m is None:
        return None
    stages = []
    last = -1
    for name, body in m.items():
        skey = sub(key, name)
        if STAGES.index(name) < last:
            ck.report(skey, f"stages must come in the order {', '.join(STAGES)}")
        last = max(last, STAGES.index(name))
        fields = _fields(ck, {} if body is None else body, skey, "stage")
        if fields is None:
            continue
        got: dict = {}
        if "min_tokens" in fields:
            got["min_tokens"] = ck.integer(fields["min_tokens"], sub(skey, "min_tokens"), lo=0)
        if "traffic" in fields:
            if name in ("offline_ci", "full"):
                ck.report(sub(skey, "traffic"), "applies only to the shadow and canary stages")
            got["traffic"] = ck.number(fields["traffic"], sub(skey, "traffic"), 0, 1, lo_open=True)
        stages.append(PromotionStage(name=name, **got))
    return tuple(stages) if _ok(ck, mark) else None


# a Hugging Face checkpoint folder as a model: hf:PATH (kernels.model.hf reads it; it runs no code)
HF_PREFIX = "hf:"
# a GGUF file as a model: gguf:PATH (kernels.model.gguf reads it; it runs no code)
GGUF_PREFIX = "gguf:"
# the checkpoint prefixes: a model spec that starts with one names files, read as data
CHECKPOINT_PREFIXES = (HF_PREFIX, GGUF_PREFIX)
# a GGUF file an installed Python package ships: gguf:package:DIST/PATH, PATH as the
# distribution's installed file list spells it (kernels.model.gguf.package finds it)
PACKAGE_PREFIX = "package:"
# a user model's entry point: package.module:function (kernels.model.user_model defines the call)
ENTRY_POINT = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


def packaged_spec(path: str) -> tuple[str, str] | str:
    """``(distribution, file)`` of ``PATH`` in ``gguf:package:PATH``, or why it names none: a
    distribution name, then a relative path inside it without ``..`` or ``.`` parts."""
    dist, _, name = path.partition("/")
    form = "gguf:package:DIST/FILE (FILE as the package's installed file list spells it)"
    if not dist or not name:
        return f"expected {form}, got {show(GGUF_PREFIX + PACKAGE_PREFIX + path)}"
    if re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?", dist) is None:
        return f"{show(dist)} is not a distribution name; expected {form}"
    parts = name.split("/")
    if "\\" in name or any(p in ("", ".", "..") for p in parts):
        return f"{show(name)} must be a path inside the package, without '..', '.' or '//'"
    return dist, name


def emulate_relative(ev: EmulateEvidence, base_dir: str) -> EmulateEvidence:
    """``ev`` with its paths (an ``hf:`` folder or ``gguf:`` file, a prompt file, a params file)
    relative to ``base_dir``, the contract's folder: how the canonical form and a report record
    them, so that neither depends on where that folder lies (the checkpoint's digest identifies
    it)."""

    def rel(path: str) -> str:
        return os.path.relpath(os.path.join(base_dir, path), base_dir)

    model = ev.model
    prefix = next((p for p in CHECKPOINT_PREFIXES if model.startswith(p)), None)
    packaged = model.startswith(GGUF_PREFIX + PACKAGE_PREFIX)  # no path: kept as written
    if prefix is not None and not packaged:
        model = prefix + rel(model[len(prefix) :])
    prompts = rel(ev.prompts) if isinstance(ev.prompts, str) else ev.prompts
    params = rel(ev.params) if ev.params is not None else None
    return dataclasses.replace(ev, model=model, prompts=prompts, params=params)


def _user_model(ck: Checker, e: Mapping, ekey: str, base_dir: str, got: dict) -> None:
    """``params`` (a path, resolved against ``base_dir``; null is absent, as in the canonical
    form) and the rules tying it to ``model``: an entry point needs it, a shipped name has none."""
    if e.get("params") is not None:
        path = ck.string(e["params"], sub(ekey, "params"))
        if path is not None:
            got["params"] = os.path.normpath(os.path.join(base_dir, path))
    model = got.get("model")
    prefix = next((p for p in CHECKPOINT_PREFIXES if str(model).startswith(p)), None)
    hf = isinstance(model, str) and prefix is not None
    packaged = hf and prefix == GGUF_PREFIX and model[len(prefix) :].startswith(PACKAGE_PREFIX)
    if packaged:  # found among the installed packages, not in the contract's folder
        spec = packaged_spec(model[len(prefix) + len(PACKAGE_PREFIX) :])
        if isinstance(spec, str):
            ck.report(sub(ekey, "model"), spec)
    elif hf:
        path = model[len(prefix) :]
        if not path.strip():
            what = "checkpoint folder" if prefix == HF_PREFIX else "GGUF file"
            ck.report(sub(ekey, "model"), f"{prefix} needs a {what}, {prefix}PATH")
        else:
            got["model"] = prefix + os.path.normpath(os.path.join(base_dir, path))
    entry = isinstance(model, str) and ":" in model and not hf
    if isinstance(got.get("prompts"), str) and not hf:
        ck.report(
            sub(ekey, "prompts"),
            "a prompt file needs an hf: or gguf: model (its tokenizer reads it)",
        )
    if entry and ENTRY_POINT.match(model) is None:
        ck.report(
            sub(ekey, "model"),
            f"expected a shipped model name or an entry point package.module:function; "
            f"got {show(model)}",
        )
    elif entry and "params" not in got and e.get("params") is None:
        ck.report(sub(ekey, "model"), "an entry point model needs params: PATH (an .npz file)")
    unreadable = "model" in e and model is None  # already reported
    if e.get("params") is not None and not entry and not unreadable:
        ck.report(
            sub(ekey, "params"), "applies only to an entry point model (package.module:function)"
        )


def _chat(ck: Checker, e: Mapping, key: str, got: dict) -> None:
    """``chat_template``: a flag (false is absent, as in the canonical form) that needs a
    prompt file and a GGUF model, whose file holds the template."""
    on = ck.boolean(e["chat_template"], key)
    if not on:
        return
    got["chat_template"] = True
    if not isinstance(e.get("prompts"), str):
        ck.report(key, "needs a prompt file, prompts: PATH (one user message a line)")
    if isinstance(got.get("model"), str) and not got["model"].startswith(GGUF_PREFIX):
        ck.report(key, "needs a gguf: model (the chat template is read from the GGUF file)")


def read_evidence(ck: Checker, value, key: str, base_dir: str) -> Evidence | None:
    mark = ck.failures
    m = _fields(ck, value, key, "evidence")
    if m is None:
        return None
    if not m:
        ck.report(key, "give emulate, logprobs or both")
        return None
    emulate = logprobs = None
    if "emulate" in m:
        ekey = sub(key, "emulate")
        e = _fields(ck, {} if m["emulate"] is None else m["emulate"], ekey, "emulate")
        if e is not None:
            got: dict = {}
            if "model" in e:
                got["model"] = ck.string(e["model"], sub(ekey, "model"))
            for field, lo in (("prompts", 1), ("max_new_tokens", 1), ("seed", 0)):
                if field == "prompts" and isinstance(e.get(field), str):  # a prompt file
                    path = ck.string(e[field], sub(ekey, field))
                    if path is not None:
                        got[field] = os.path.normpath(os.path.join(base_dir, path))
                elif field in e:
                    got[field] = ck.integer(e[field], sub(ekey, field), lo, 2**32 - 1)
            _user_model(ck, e, ekey, base_dir, got)
            if "chat_template" in e:
                _chat(ck, e, sub(ekey, "chat_template"), got)
            emulate = EmulateEvidence(**got)
    if "logprobs" in m:
        lkey = sub(key, "logprobs")
        lp = _fields(ck, m["logprobs"], lkey, "logprobs")
        if lp is not None:
            path = ck.string(lp["path"], sub(lkey, "path")) if "path" in lp else None
            fmt = "generic"
            if "format" in lp:
                fmt = ck.choice(lp["format"], sub(lkey, "format"), EVIDENCE_FORMATS)
            stored = None
            if "file_format" in lp:
                stored = ck.choice(lp["file_format"], sub(lkey, "file_format"), LOG_FILE_FORMATS)
            if path is not None and fmt is not None:
                resolved = os.path.normpath(os.path.join(base_dir, path))
                logprobs = LogprobsEvidence(path=resolved, format=fmt, file_format=stored)
    return Evidence(emulate=emulate, logprobs=logprobs) if _ok(ck, mark) else None
