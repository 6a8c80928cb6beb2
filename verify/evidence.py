"""Evidence clauses: measure the contract's numerical and statistical clauses and decide them.

Sources of evidence (DESIGN §4 ``evidence``): ``emulate`` runs the shipped model through both
kernels (``kernels.emulate``), ``logprobs`` reads users' JSONL logs (``kernels.logs``). Each
source becomes per-slice, per-metric mergeable summaries (``kernels.summary``), and every
(clause, slice, source) gets one ``ClauseResult``:

- numerical: the maximum over every token of the slice ≤ ``max`` → held, else violated;
- statistical: the upper confidence bound (at ``confidence``) of the statistic ≤ ``max`` →
  held; its lower confidence bound > ``max`` → violated; fewer than ``min_samples`` tokens or
  an infinite bound → inconclusive, never held; otherwise inconclusive. ``max`` as a statistic
  is the sample maximum, decided empirically and said so;
- a metric the source cannot give (full-vocabulary metrics from sampled-token logs) → skipped
  with the reason.

Soundness rules: a non-finite measured value counts as the worst value of its metric; the mean
has a confidence bound only for metrics with a known range (``tv`` in [0, 1], ``top1_flip``
in {0, 1}); log-ratio clauses on processed log-probs under truncated sampling are inconclusive
unless the log carries log S per token (DESIGN §5). Tokens are treated as independent draws
(stated in the report); no correction is made for testing several clauses and slices.

JAX is imported only by the emulate source; logs-only and proofs-only runs never import it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from verify.clauses import ClauseResult
from verify.status import Status

__all__ = ["ASSUMPTIONS", "EvidenceError", "evaluate"]

ASSUMPTIONS = (
    "tokens are treated as independent draws from the measured distribution",
    "each clause and slice is bounded at its own confidence (no multiple-testing correction)",
)
# metric ranges known a priori: the bounded-mean bound needs them
_RANGE = {"tv": (0.0, 1.0), "top1_flip": (0.0, 1.0)}
_BINARY = frozenset({"top1_flip"})
_FULL_VOCAB = ("logit_drift", "logit_oscillation", "tv", "kl", "top1_flip")
_SLICE_COLUMNS = ("token_prob", "position", "entropy", "margin")


class EvidenceError(Exception):
    """Unusable evidence (missing or unreadable file, bad format); ``str(err)`` is user-ready."""


@dataclass(frozen=True)
class _Source:
    kind: str  # emulate | logprobs
    label: str  # emulate:<model>/<preset>, or the log path(s)
    fingerprint: str
    summaries: Mapping  # (slice, column) -> Summary
    nonfinite: Mapping  # (slice, column) -> count of tokens whose value was not finite
    slice_skip: Mapping  # slice -> reason it cannot be formed on this source
    metric_skip: Mapping  # column -> reason this source cannot give it
    metric_caveat: Mapping  # column -> reason its verdicts must stay inconclusive
    info: dict = field(default_factory=dict)


def _column(family: str, metric: str) -> str:
    """The table column a clause reads: a numerical log-ratio limit bounds its magnitude."""
    return "abs_log_ratio" if family == "numerical" and metric == "log_ratio" else metric


def _needs(contract) -> tuple[dict, dict]:
    """Per column: thresholds to track; per slice name: the slice record."""
    thresholds: dict[str, set] = {}
    slices = {}
    for c in contract.numerical:
        col = _column("numerical", c.metric)
        thresholds.setdefault(col, set()).add(float(c.max))
        slices[c.slice] = contract.slice(c.slice)
    for c in contract.statistical:
        col = _column("statistical", c.metric)
        t = thresholds.setdefault(col, set())
        if c.threshold is not None:
            t.add(float(c.threshold))
        for s in c.slices:
            slices[s] = contract.slice(s)
    return thresholds, slices


def _worst(col: str, values: np.ndarray) -> tuple[np.ndarray, int]:
    """Replace non-finite values by the metric's worst value; return them and their count."""
    bad = ~np.isfinite(values)
    n = int(bad.sum())
    if n:
        values = np.where(bad, _RANGE.get(col, (0.0, np.finfo(np.float64).max))[1], values)
    return values, n


def _summarize(columns, prompt_names, thresholds, slices, metric_skip, cap=None):
    """Summaries of every needed (slice, column) of one token table (one shard)."""
    from kernels.summary import DEFAULT_CAP, MissingColumn, select, summarize

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
            values, bad = _worst(col, np.asarray(columns[col], dtype=np.float64)[keep])
            out[(name, col)] = summarize(values, thresholds=ts, cap=cap or DEFAULT_CAP)
            nonfinite[(name, col)] = bad
    return out, nonfinite, slice_skip


class _Bar:
    """A one-line progress bar on a text stream (the CLI's stderr); silent when off."""

    def __init__(self, stream, label: str) -> None:
        self.stream, self.label, self.shown = stream, label, -1

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


# ---------------------------------------------------------------- sources


def _log_source(contract, paths: tuple[tuple[str, str | None, str], ...], stream) -> _Source:
    from kernels.logs import LogError, framework_metrics, read_log, support_shift
    from kernels.summary import merge_all

    thresholds, slices = _needs(contract)
    policy = contract.policy
    declared = policy.logprobs == "processed" and policy.truncated
    metric_skip = {
        m: f"{m} needs full-vocabulary logits; sampled-token logs give only log-probs of the "
        "sampled token"
        for m in _FULL_VOCAB
    }
    tables, files = [], []
    for path, fmt, where in paths:
        try:
            table = read_log(path, fmt, progress=_Bar(stream, f"reading {path}"))
        except LogError as err:
            raise EvidenceError(f"{where}{err}") from None
        tables.append(table)
    train = np.concatenate([t.columns["train_logprob"] for t in tables])
    rollout = np.concatenate([t.columns["rollout_logprob"] for t in tables])
    kept = np.concatenate([t.columns["log_kept_mass"] for t in tables])
    offsets = np.cumsum([0] + [t.sequences for t in tables])
    sequence = np.concatenate(
        [t.columns["sequence"] + o for t, o in zip(tables, offsets[:-1], strict=True)]
    )
    shift = support_shift(train, rollout, kept)
    corrected = declared and kept.size > 0 and bool(np.isfinite(kept).all())
    caveat = {}
    if declared and not corrected:
        reason = (
            "the contract declares processed log-probs under truncated sampling and the log "
            "does not give log_kept_mass for every token: the kernel gap cannot be separated "
            "from the support shift log S"
        )
        caveat = {"log_ratio": reason, "abs_log_ratio": reason}
    elif not declared and shift.detected:
        reason = (
            "a truncated-support shift is detected in the log (median rollout − train "
            f"log-prob {shift.median_shift:.3g}) but the contract declares full-vocabulary "
            "log-probs: the kernel gap cannot be separated from it"
        )
        caveat = {"log_ratio": reason, "abs_log_ratio": reason}
    parts, nonfinite, slice_skip = [], {}, {}
    for t in tables:
        lt = t.columns["train_logprob"]
        lr = t.columns["rollout_logprob"] + (t.columns["log_kept_mass"] if corrected else 0.0)
        log_w = lt - lr
        columns = {
            "log_ratio": log_w,
            "abs_log_ratio": np.abs(log_w),
            "token_prob": np.exp(lt),
            "position": t.columns["position"],
            "prompt": t.columns["prompt"],
        }
        part, bad, skip = _summarize(columns, t.prompt_names, thresholds, slices, metric_skip)
        parts.append(part)
        slice_skip.update(skip)
        for k, v in bad.items():
            nonfinite[k] = nonfinite.get(k, 0) + v
        files.append(_file_info(t))
    summaries = merge_all(parts)
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
        "framework_metrics": framework_metrics(train, rollout, sequence),
        "truncated_support_shift": shift_info,
    }
    label = ", ".join(t.path for t in tables)
    return _Source(
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


def _file_info(t) -> dict:
    def listed(problems):
        return [{"line": p.line, "reason": p.reason} for p in problems]

    return {
        "path": t.path,
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


def _emulate_source(contract, stream) -> _Source:
    try:
        emulate_module = importlib.import_module("kernels.emulate")
    except ImportError as err:
        raise EvidenceError(f"evidence.emulate: the emulator is not available ({err})") from None
    ev = contract.evidence.emulate
    table = emulate_module.emulate(contract, progress=_Bar(stream, "emulating"))
    thresholds, slices = _needs(contract)
    columns = dict(table)
    columns["log_ratio"] = np.asarray(table["log_ratio"], dtype=np.float64)
    columns["abs_log_ratio"] = np.abs(columns["log_ratio"])
    columns["kl"] = np.maximum(table["kl_train_inf"], table["kl_inf_train"])
    # an emulated table is in memory whole: keep every value exact (means need them)
    n = int(columns["abs_log_ratio"].shape[0])
    summaries, nonfinite, slice_skip = _summarize(columns, None, thresholds, slices, {}, cap=n)
    data_sha = _table_sha256(table)
    config = {
        "emulate": dataclasses.asdict(ev),
        "policy": dataclasses.asdict(contract.policy),
        "kernels": dataclasses.asdict(contract.kernels),
        "checkpoint_sha256": getattr(emulate_module, "checkpoint_sha256", lambda _: None)(ev.model),
    }
    config_sha = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    label = f"emulate:{ev.model}/{contract.kernels.inference.preset}"
    info = {
        "kind": "emulate",
        "fingerprint": f"sha256:{data_sha}",
        "config_sha256": config_sha,
        "checkpoint_sha256": config["checkpoint_sha256"],
        "model": ev.model,
        "prompts": ev.prompts,
        "max_new_tokens": ev.max_new_tokens,
        "seed": ev.seed,
        "train": contract.kernels.train.preset,
        "inference": contract.kernels.inference.preset,
        "tokens": int(np.asarray(table["log_ratio"]).shape[0]),
    }
    return _Source("emulate", label, data_sha, summaries, nonfinite, slice_skip, {}, {}, info)


# ---------------------------------------------------------------- verdicts


def _result(clause, family, slice_name, source, **kw) -> ClauseResult:
    return ClauseResult(
        id=clause.id,
        family=family,
        slice=slice_name,
        metric=clause.metric,
        threshold=float(clause.max),
        fingerprint=f"sha256:{source.fingerprint}",
        source=source.label,
        **kw,
    )


def _unmeasured(clause, family, col, slice_name, source, statistic) -> ClauseResult | None:
    if col in source.metric_skip:
        reason = source.metric_skip[col]
    elif slice_name in source.slice_skip:
        reason = source.slice_skip[slice_name]
    else:
        return None
    return _result(
        clause,
        family,
        slice_name,
        source,
        status=Status.SKIPPED,
        statistic=statistic,
        reason=reason,
    )


def _numerical(clause, source) -> ClauseResult:
    col = _column("numerical", clause.metric)
    skipped = _unmeasured(clause, "numerical", col, clause.slice, source, "max")
    if skipped is not None:
        return skipped
    s = source.summaries[(clause.slice, col)]
    what = "|log ratio|" if col == "abs_log_ratio" else col
    common = {"statistic": "max", "samples": s.count}
    if s.count == 0:
        return _result(
            clause,
            "numerical",
            clause.slice,
            source,
            status=Status.INCONCLUSIVE,
            reason="no tokens in this slice",
            **common,
        )
    bad = source.nonfinite.get((clause.slice, col), 0)
    status = Status.HELD if s.maximum <= clause.max else Status.VIOLATED
    reason = f"max {what} over {s.count} tokens is {s.maximum:.6g} (limit {clause.max:g})"
    if bad:
        reason += f"; {bad} tokens had a non-finite value, counted as the worst"
    if col in source.metric_caveat:
        status, reason = Status.INCONCLUSIVE, source.metric_caveat[col]
    return _result(
        clause,
        "numerical",
        clause.slice,
        source,
        status=status,
        value=s.maximum,
        bound=s.maximum,
        reason=reason,
        **common,
    )


def _quantile_lcb(s, q: float, confidence: float) -> float:
    """X_(k) for the largest k with P(Binom(n, q) ≥ k) ≥ confidence; −inf when there is none.

    X_(k) > ξ_q needs at most k − 1 samples ≤ ξ_q, and P(X ≤ ξ_q) ≥ q, so
    P(X_(k) > ξ_q) ≤ P(Binom(n, q) ≤ k − 1) ≤ 1 − confidence: X_(k) is a lower bound.
    """
    from bounds.stats import binomial_cdf

    need = confidence + 1e-9  # rounding slack against a violated verdict
    lo, hi = 0, s.count  # the largest k in [1, n] that qualifies; 0 when none does
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if 1.0 - binomial_cdf(mid - 1, s.count, q) >= need:
            lo = mid
        else:
            hi = mid - 1
    return -math.inf if lo == 0 else s.order_statistic(lo)[0]


def _rate_bounds(k: int, n: int, c: float):
    from bounds import clopper_pearson_upper

    ucb = float(clopper_pearson_upper(k, n, c))
    return ucb, lambda: 1.0 - float(clopper_pearson_upper(n - k, n, c))


def _statistical_bounds(clause, col, s):
    """(point estimate, upper bound, lower bound thunk, how) of the clause's statistic."""
    from bounds import mean_ucb, quantile_ucb

    c, n = clause.confidence, s.count
    if clause.statistic == "quantile":
        q = clause.q
        value = s.order_statistic(max(1, math.ceil(q * n)))[1]
        ucb = float(quantile_ucb(s.upper_values(), q, c))
        how = f"order-statistic bound of the {q:g}-quantile"
        return value, ucb, lambda: _quantile_lcb(s, q, c), how
    if clause.statistic == "exceed_rate":
        k = s.exceed_count(float(clause.threshold))
        ucb, lcb = _rate_bounds(k, n, c)
        how = f"Clopper–Pearson bound of P({col} > {clause.threshold:g}) ({k} of {n} tokens)"
        return k / n, ucb, lcb, how
    none = lambda: -math.inf  # noqa: E731
    if col not in _RANGE:
        how = (
            f"the mean of {col} has no distribution-free confidence bound (its range is "
            "unbounded); use a quantile or exceed_rate clause"
        )
        return s.mean, math.inf, none, how
    if col in _BINARY and s.total == round(s.total):
        k = round(s.total)
        ucb, lcb = _rate_bounds(k, n, c)
        return k / n, ucb, lcb, f"Clopper–Pearson bound of the rate ({k} of {n} tokens)"
    if not s.is_exact:
        how = "the bounded-mean bound needs exact values and this summary is a histogram"
        return s.mean, math.inf, none, how
    lo, hi = _RANGE[col]
    ucb = float(mean_ucb(s.values, lo, hi, c))
    lcb = lambda: -float(mean_ucb(-s.values, -hi, -lo, c))  # noqa: E731
    return s.mean, ucb, lcb, f"bounded-mean bound on [{lo:g}, {hi:g}]"


def _statistical(clause, slice_name: str, source) -> ClauseResult:
    col = _column("statistical", clause.metric)
    skipped = _unmeasured(clause, "statistical", col, slice_name, source, clause.statistic)
    if skipped is not None:
        return skipped
    s = source.summaries[(slice_name, col)]
    common = {"statistic": clause.statistic, "samples": s.count, "confidence": clause.confidence}

    def done(status, reason, value=None, bound=None):
        return _result(
            clause,
            "statistical",
            slice_name,
            source,
            status=status,
            reason=reason,
            value=value,
            bound=bound,
            **common,
        )

    if s.count == 0:
        return done(Status.INCONCLUSIVE, "no tokens in this slice")
    if s.count < clause.min_samples:
        return done(Status.INCONCLUSIVE, f"{s.count} tokens < min_samples {clause.min_samples}")
    if col in source.metric_caveat:
        return done(Status.INCONCLUSIVE, source.metric_caveat[col])
    bad = source.nonfinite.get((slice_name, col), 0)
    extra = f"; {bad} non-finite values counted as the worst" if bad else ""
    if clause.statistic == "max":
        status = Status.HELD if s.maximum <= clause.max else Status.VIOLATED
        reason = (
            f"empirical: the maximum over {s.count} measured tokens is {s.maximum:.6g} (limit "
            f"{clause.max:g}); no confidence bound covers unseen tokens{extra}"
        )
        return done(status, reason, s.maximum, s.maximum)
    value, ucb, lcb_of, how = _statistical_bounds(clause, col, s)
    if ucb <= clause.max:
        return done(Status.HELD, f"{how}: {ucb:.6g} ≤ {clause.max:g}{extra}", value, ucb)
    lcb = lcb_of()
    if lcb > clause.max:
        reason = (
            f"{how}: lower bound {lcb:.6g} > {clause.max:g} at confidence "
            f"{clause.confidence:g}{extra}"
        )
        return done(Status.VIOLATED, reason, value, ucb)
    if not math.isfinite(ucb):
        if clause.statistic == "quantile":
            how = (
                f"too few tokens ({s.count}) for a finite {how} at confidence {clause.confidence:g}"
            )
        return done(Status.INCONCLUSIVE, how + extra, value)
    reason = (
        f"{how}: upper bound {ucb:.6g} > {clause.max:g} but lower bound {lcb:.6g} ≤ "
        f"{clause.max:g}: more tokens are needed to decide{extra}"
    )
    return done(Status.INCONCLUSIVE, reason, value, ucb)


# ---------------------------------------------------------------- entry point


def _log_paths(contract, paths) -> tuple[tuple[str, str | None, str], ...]:
    declared = contract.evidence.logprobs
    if paths:
        fmt = declared.format if declared is not None else None
        return tuple((os.fspath(p), fmt, "--evidence ") for p in paths)
    if declared is None:
        return ()
    where = contract.source.where("evidence.logprobs.path")
    prefix = f"{contract.source.path}:{where[0]}:{where[1]}: " if where else ""
    return ((declared.path, declared.format, f"{prefix}evidence.logprobs.path: "),)


def evaluate(
    contract, *, paths: tuple[str, ...] = (), quiet: bool = True, stderr=None
) -> tuple[tuple[ClauseResult, ...], dict]:
    """Measure the contract's evidence and decide every numerical and statistical clause.

    ``paths`` (``--evidence``) replace the contract's ``evidence.logprobs`` path and are read
    as shards of one log (their format: the contract's, else detected). Returns one
    ``ClauseResult`` per (clause, slice, source) and the JSON-ready ``report["evidence"]``.
    Raises ``EvidenceError`` for unusable evidence.
    """
    stream = None if quiet else (stderr if stderr is not None else sys.stderr)
    sources = []
    log_paths = _log_paths(contract, tuple(paths))
    if log_paths:
        sources.append(_log_source(contract, log_paths, stream))
    if contract.evidence.emulate is not None:
        sources.append(_emulate_source(contract, stream))
    results = []
    for source in sources:
        for clause in contract.numerical:
            results.append(_numerical(clause, source))
        for clause in contract.statistical:
            for slice_name in clause.slices:
                results.append(_statistical(clause, slice_name, source))
    report = {
        "sources": [s.info | {"label": s.label} for s in sources],
        "assumptions": list(ASSUMPTIONS) if sources else [],
    }
    return tuple(results), report
