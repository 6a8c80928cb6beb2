"""Evidence sources: a log or an emulation turned into per-slice mergeable summaries.

``log_source`` reads logs (``evidence.logs``: JSONL, Parquet, Arrow) as shards of one log;
``emulate_sources`` runs the contract's emulation (``evidence.emulate``, which loads the kernels
and JAX on first use, as a log's weight diagnostics do when the contract names an estimator:
``evidence.weights``), once per setting of the runtime sweep (``evidence.emulate.sweep``), one
source per setting. All summarise every (slice, metric) a contract's clauses need
(``evidence.summary``), say which metrics and slices they cannot give, and why, and describe
the runtime envelope their sequences were gathered in (``info["runtime"]``,
``evidence.envelope.observe``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.contracts.sections import emulate_relative
from kernel_contracts.evidence.envelope import observe
from kernel_contracts.evidence.table import (
    FULL_VOCAB,
    LOWER_BOUNDED,
    SAMPLED_ONLY,
    clause_column,
    from_logprobs,
    from_measured,
    unmeasurable,
    worst,
)

__all__ = [
    "EvidenceError",
    "Progress",
    "Source",
    "clamped_logprobs",
    "emulate_sources",
    "log_notes",
    "log_source",
    "tables_source",
]


# the logged columns a value above 0 is impossible in
_LOGPROBS = ("train_logprob", "rollout_logprob", "log_kept_mass")


class EvidenceError(KernelContractsError):
    """Unusable evidence (missing or unreadable file, bad format); ``str(err)`` is user-ready."""


@dataclass(frozen=True)
class Source:
    kind: str  # emulate | logprobs
    label: str  # emulate:<model>/<preset>, or the log path(s)
    fingerprint: str
    summaries: Mapping  # (slice, column) -> Summary
    nonfinite: Mapping  # (slice, column) -> count of tokens whose value was not finite
    slice_skip: Mapping  # slice -> reason it cannot be formed on this source
    metric_skip: Mapping  # column -> reason this source cannot give it
    metric_caveat: Mapping  # column -> reason its verdicts must stay inconclusive
    info: dict = field(default_factory=dict)


def _needs(contract) -> tuple[dict, dict]:
    """Per column: thresholds to track; per slice name: the slice record."""
    thresholds: dict[str, set] = {}
    slices = {}
    for c in contract.numerical:
        col = clause_column("numerical", c.metric)
        thresholds.setdefault(col, set()).add(float(c.max))
        slices[c.slice] = contract.slice(c.slice)
    for c in contract.statistical:
        col = clause_column("statistical", c.metric)
        t = thresholds.setdefault(col, set())
        if c.threshold is not None:
            t.add(float(c.threshold))
        for s in c.slices:
            slices[s] = contract.slice(s)
    return thresholds, slices


def _summarize(columns, prompt_names, thresholds, slices, metric_skip, cap=None):
    """Summaries of every needed (slice, column) of one token table (one shard)."""
    from kernel_contracts.evidence.summary import DEFAULT_CAP, MissingColumn, select, summarize

    out, nonfinite, slice_skip = {}, {}, {}
    for name, sl in slices.items():
        try:
            keep = select(columns, sl, prompt_names=prompt_names)
        except MissingColumn as missing:
            slice_skip[name] = (
                f"slice {name} selects on {missing}, which this evidence does not record"
            )
            continue
        for col, ts in thresholds.items():
            if col in metric_skip:
                continue
            values, bad = worst(col, np.asarray(columns[col], dtype=np.float64)[keep])
            out[(name, col)] = summarize(values, thresholds=ts, cap=cap or DEFAULT_CAP)
            nonfinite[(name, col)] = bad
    return out, nonfinite, slice_skip


class Progress:
    """A one-line progress bar on a text stream (the CLI's stderr), drawn only when that stream
    is a terminal: into a file or a pipe, carriage-return updates would pile up as text, so
    there it is silent, as it is when off (``stream`` None)."""

    def __init__(self, stream, label: str) -> None:
        tty = stream is not None and callable(getattr(stream, "isatty", None)) and stream.isatty()
        self.stream, self.label, self.shown = stream if tty else None, label, -1

    def __call__(self, done, total=None, *_) -> None:
        if self.stream is None or not total:
            return
        pct = int(100 * min(max(done / total, 0.0), 1.0))
        if pct == self.shown:
            return
        self.shown = pct
        bar = "#" * (pct // 4) + "." * (25 - pct // 4)
        self.stream.write(f"\r{self.label} [{bar}] {pct:3d}%")
        if pct == 100:
            self.stream.write("\n")
        self.stream.flush()


def log_source(
    contract, paths: tuple[tuple[str, str | None, str, str | None], ...], stream
) -> Source:
    """The evidence of the logs ``(path, format, where, file_format)``, read as shards of one
    log (``file_format`` ``None``: by the file name's ending)."""
    from kernel_contracts.evidence.logs import LogError, read_log

    tables = []
    for path, fmt, where, stored in paths:
        try:
            table = read_log(
                path,
                fmt,
                vocab_size=contract.policy.vocab_size,
                progress=Progress(stream, f"reading {path}"),
                file_format=stored,
            )
        except LogError as err:
            raise EvidenceError(f"{where}{err}") from None
        tables.append(table)
    return tables_source(contract, tables)


def tables_source(contract, tables) -> Source:
    """The evidence of token tables (``evidence.logs.LogTable``, shards of one log): the
    summaries every clause needs, merged, and what the tables cannot give."""
    from kernel_contracts.evidence.logs import (
        framework_metrics,
        shift_corrected,
        shift_declared,
        support_shift,
    )
    from kernel_contracts.evidence.summary import merge_all
    from kernel_contracts.evidence.weights import estimators_of, weight_diagnostics

    thresholds, slices = _needs(contract)
    policy = contract.policy
    declared = shift_declared(policy)
    metric_skip = {m: why for m in FULL_VOCAB if (why := unmeasurable("logprobs", m))}
    files = []
    train = np.concatenate([t.columns["train_logprob"] for t in tables])
    rollout = np.concatenate([t.columns["rollout_logprob"] for t in tables])
    kept = np.concatenate([t.columns["log_kept_mass"] for t in tables])
    offsets = np.cumsum([0] + [t.sequences for t in tables])
    sequence = np.concatenate(
        [t.columns["sequence"] + o for t, o in zip(tables, offsets[:-1], strict=True)]
    )
    shift = support_shift(train, rollout, kept)
    corrected = shift_corrected(declared, int(train.size), shift.kept_mass_logged)
    caveat = {}
    if declared and not corrected:
        reason = (
            "the contract declares processed log-probs under truncated sampling and the log "
            "does not give log_kept_mass for every token: the kernel gap cannot be separated "
            "from the support shift log S"
        )
        caveat = dict.fromkeys((*SAMPLED_ONLY, *LOWER_BOUNDED), reason)
    elif not declared and shift.detected:
        reason = (
            "a truncated-support shift is detected in the log (median rollout − train "
            f"log-prob {shift.median_shift:.3g}) but the contract declares full-vocabulary "
            "log-probs: the kernel gap cannot be separated from it"
        )
        caveat = dict.fromkeys((*SAMPLED_ONLY, *LOWER_BOUNDED), reason)
    parts, nonfinite, slice_skip, log_ratios = [], {}, {}, []
    envelope = [_log_envelope(t) for t in tables]
    for t in tables:
        lt, processed = t.columns["train_logprob"], t.columns["rollout_logprob"]
        kept_mass = t.columns["log_kept_mass"] if corrected else None
        lr = processed if kept_mass is None else processed + kept_mass
        log_ratios.append(lt - lr)
        columns = from_logprobs(
            lt - lr,
            lt,
            t.columns["position"],
            t.columns["prompt"],
            rollout_logprob=processed,
            log_kept_mass=kept_mass,
            temperature=policy.temperature,
        )
        part, bad, skip = _summarize(columns, t.prompt_names, thresholds, slices, metric_skip)
        parts.append(part)
        slice_skip.update(skip)
        for k, v in bad.items():
            nonfinite[k] = nonfinite.get(k, 0) + v
        files.append(_file_info(t))
    summaries = merge_all(parts)
    weights, not_weighed = weight_diagnostics(
        estimators_of(contract),
        np.concatenate(log_ratios),
        rollout,
        sequence,
        sequences=int(offsets[-1]),
    )
    if len(tables) == 1:
        fingerprint = tables[0].sha256
    else:
        joined = "\n".join(sorted(t.sha256 for t in tables))
        fingerprint = hashlib.sha256(joined.encode()).hexdigest()
    shift_info = shift.as_dict() | {
        "declared": declared,
        "corrected_with_log_kept_mass": corrected,
    }
    info = {
        "kind": "logprobs",
        "fingerprint": f"sha256:{fingerprint}",
        "tokens": int(train.size),
        "sequences": int(offsets[-1]),
        "files": files,
        "malformed_lines": sum(t.malformed_count for t in tables),
        "token_id_mismatches": sum(t.mismatch_count for t in tables),
        "unpaired_records": sum(t.unpaired_count for t in tables),
        "notes": log_notes(contract, tables),
        "clamped_logprobs": clamped_logprobs(tables)["count"],
        "framework_metrics": framework_metrics(
            train, rollout, sequence, sequences=int(offsets[-1])
        ),
        "weight_diagnostics": weights,
        "weight_diagnostics_skipped": not_weighed,
        "truncated_support_shift": shift_info,
        "runtime": observe(contract, *(np.concatenate(p) for p in zip(*envelope, strict=True))),
    }
    label = ", ".join(_shown(t.path) for t in tables)
    return Source(
        "logprobs",
        label,
        fingerprint,
        summaries,
        nonfinite,
        slice_skip,
        metric_skip,
        caveat,
        info,
    )


def clamped_logprobs(tables) -> dict:
    """How many logged log-probabilities (train, rollout and log kept mass) lie above 0, within
    the reader's tolerance, and so are read as 0 by the lower bounds (``evidence.lower``): their
    ``count``, the ``tokens`` they belong to, and the ``largest`` (``None`` when there is none)."""
    count = tokens = 0
    largest = None
    for t in tables:
        cells = np.stack([np.asarray(t.columns[k], np.float64) for k in _LOGPROBS])
        above = cells > 0.0  # a NaN (no log kept mass) is not above 0
        count += int(above.sum())
        tokens += int(above.any(axis=0).sum())
        if above.any():
            top = float(cells[above].max())
            largest = top if largest is None else max(largest, top)
    return {"count": count, "tokens": tokens, "largest": largest}


def log_notes(contract, tables) -> list[str]:
    """What a reader of the summary must know about how the logs were read: an undeclared
    vocabulary (ids checked to be ≥ 0 only, and the largest one seen), and log-probabilities a
    hair above 0 read as 0 (``clamped_logprobs``)."""
    from kernel_contracts.evidence.logs.reader import LOGPROB_TOLERANCE

    notes = []
    if contract.policy.vocab_size is None:
        largest = max((int(t.columns["token"].max()) for t in tables if t.tokens), default=None)
        seen = "" if largest is None else (
            f"; the largest id in the log is {largest}, so the vocabulary has at least "
            f"{largest + 1} tokens"
        )  # fmt: skip
        notes.append(
            "policy.vocab_size is not declared: token ids were checked to be ≥ 0 only" + seen
            + " (declare policy.vocab_size to check every id against it)"
        )  # fmt: skip
    above = clamped_logprobs(tables)
    if above["count"]:
        n, tokens, largest = above["count"], above["tokens"], above["largest"]
        within = f"within the tolerance of +{LOGPROB_TOLERANCE:g} taken as rounding"
        what = (
            f"1 log-probability above 0 ({largest:+.3g}, {within})"
            if n == 1
            else f"{n} log-probabilities of {tokens} token{'s' * (tokens > 1)} above 0 (the "
            f"largest {largest:+.3g}, {within})"
        )
        notes.append(f"{what} read as 0 for the lower bounds of the full-vocabulary metrics")
    dropped = sum(t.malformed_tokens for t in tables)
    if dropped:
        kept = sum(t.tokens for t in tables)
        notes.append(
            f"malformed lines held {dropped} tokens, left out of the {kept + dropped} the log "
            f"holds ({dropped / (kept + dropped):.1%})"
        )
    return notes


def _log_envelope(t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sequence with at least one token: its batch size (0: not recorded), its length (the
    last token's position + 1) and whether that length counts the prompt (exact)."""
    columns = t.columns
    seq = np.asarray(columns["sequence"], np.int64)
    n = t.sequences
    length = np.zeros(n, np.int64)
    np.maximum.at(length, seq, np.asarray(columns["position"], np.int64) + 1)
    batch = np.zeros(n, np.int64)
    exact = np.zeros(n, bool)
    if "batch_size" in columns:
        batch[seq] = columns["batch_size"]
    if "offset_known" in columns:
        exact[seq] = columns["offset_known"]
    seen = np.zeros(n, bool)
    seen[seq] = True
    return batch[seen], length[seen], exact[seen]


def _shown(path: str) -> str:
    """``path`` relative to the working directory when it lies below it (reports travel)."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if rel.startswith("..") else rel


def _file_info(t) -> dict:
    def listed(problems):
        return [{"line": p.line, "reason": p.reason} for p in problems]

    return {
        "path": _shown(t.path),
        "format": t.format,
        "sha256": t.sha256,
        "lines": t.lines,
        "blank_lines": t.blank_lines,
        "sequences": t.sequences,
        "tokens": t.tokens,
        "padding_tokens": t.padding_tokens,
        "malformed": {"count": t.malformed_count, "first": listed(t.malformed)},
        "token_id_mismatches": {"count": t.mismatch_count, "first": listed(t.mismatches)},
        "unpaired": {"count": t.unpaired_count, "first": listed(t.unpaired)},
    }


def _table_sha256(table: Mapping[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(table):
        a = np.asarray(table[name])
        if a.dtype.kind in "OU":
            a = np.asarray([str(v) for v in a.ravel()])
            blob = "\x1f".join(a.tolist()).encode()
        else:
            blob = np.ascontiguousarray(a).tobytes()
        h.update(f"{name}:{a.dtype.str}:{a.shape}\n".encode())
        h.update(blob)
    return h.hexdigest()


def emulate_sources(contract, stream, *, trust_code: bool = False) -> list[Source]:
    """One source per setting of the runtime sweep (``evidence.emulate.sweep``); ``trust_code``
    is the consent a user model's import needs (``evidence.emulate.emulate_contract``)."""
    try:
        from kernel_contracts.evidence import (
            emulate as emulated,  # loaded on first use: logs need no kernels
        )
    except ImportError as err:
        raise EvidenceError(f"evidence.emulate: the emulator is not available ({err})") from None
    prefix = contract.source.prefix("evidence.emulate")
    try:
        grid = emulated.sweep(contract)
    except KeyError as err:  # an unknown model
        raise EvidenceError(f"{prefix}evidence.emulate: {err.args[0]}") from None
    except ValueError as err:  # an unusable user model (its error names its key)
        raise EvidenceError(_at_key(contract, err, prefix)) from None
    return [
        _emulate_source(contract, emulated, stream, prefix, (batch, length, len(grid)), trust_code)
        for batch, length in grid
    ]


def _at_key(contract, err: Exception, prefix: str) -> str:
    """``err``'s message, at the contract key it names (``err.key``, as a user model's errors
    give it) or at ``prefix`` (evidence.emulate's position)."""
    message = err.args[0] if err.args else type(err).__name__
    if not str(message).startswith("evidence.emulate"):
        message = f"evidence.emulate: {message}"
    key = getattr(err, "key", None)
    at = contract.source.prefix(key) if isinstance(key, str) else ""
    return f"{at or prefix}{message}"


def _emulate_source(contract, emulated, stream, prefix, setting, trust_code) -> Source:
    ev = contract.evidence.emulate
    batch, length, settings = setting  # the setting, and how many settings the sweep has
    swept = batch is not None or length is not None
    kwargs = {"batch_size": batch, "sequence_length": length} if swept else {}
    shown = f" at batch {batch or 'default'}, length {length or 'default'}" if swept else ""
    try:
        table = emulated.emulate_contract(
            contract,
            progress=Progress(stream, f"emulating{shown}"),
            trust_code=trust_code,
            **kwargs,
        )
    except (KeyError, ValueError) as err:  # unknown model, a setting the model cannot run
        raise EvidenceError(_at_key(contract, err, prefix)) from None
    thresholds, slices = _needs(contract)
    columns = from_measured(table)
    # an emulated table is in memory whole: keep every value exact (means need them)
    n = int(columns["abs_log_ratio"].shape[0])
    summaries, nonfinite, slice_skip = _summarize(columns, None, thresholds, slices, {}, cap=n)
    data_sha = _table_sha256(table)
    served = (
        batch if batch is not None else emulated.serving_batch(contract, emulated.prompt_count(ev))
    )
    ids, seq = np.unique(np.asarray(table["prompt"]), return_inverse=True)
    ends = np.zeros(ids.shape[0], np.int64)  # each sequence's length: its last position + 1
    np.maximum.at(ends, seq, np.asarray(table["position"], np.int64) + 1)
    # the model's paths as the canonical form records them, relative to the contract's folder
    # (the checkpoint's digest identifies the model)
    shown_ev = emulate_relative(ev, emulated.model_directory(contract))
    config = {
        "emulate": dataclasses.asdict(shown_ev),
        "policy": dataclasses.asdict(contract.policy),
        "kernels": dataclasses.asdict(contract.kernels),
        "checkpoint_sha256": emulated.checkpoint_sha256(ev),
        "setting": {"batch_size": batch, "sequence_length": length},
    }
    config_sha = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    label = f"emulate:{shown_ev.model}/{contract.kernels.inference.preset}"
    if swept:
        label += f"@batch{served},length{int(ends.max()) if ends.size else length}"
    info = {
        "kind": "emulate",
        "fingerprint": f"sha256:{data_sha}",
        "config_sha256": config_sha,
        "checkpoint_sha256": config["checkpoint_sha256"],
        "model": shown_ev.model,
        "prompts": shown_ev.prompts,
        "max_new_tokens": ev.max_new_tokens,
        "seed": ev.seed,
        "train": contract.kernels.train.preset,
        "inference": contract.kernels.inference.preset,
        "tokens": int(np.asarray(table["log_ratio"]).shape[0]),
        "batch_size": int(served),
        "sequence_length": int(ends.max()) if ends.size else None,
        "sweep": {"settings": settings, "swept": swept},
        "runtime": observe(contract, np.full(ends.shape, served), ends, np.ones(ends.shape, bool)),
    }
    return Source("emulate", label, data_sha, summaries, nonfinite, slice_skip, {}, {}, info)
