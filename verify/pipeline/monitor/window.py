"""Windows of a rollout stream: lines read with the log reader's own checks, tokens sampled,
and every numerical and statistical clause decided with the offline evaluation's functions.

A line goes through the same steps as in ``evidence.logs.read_log`` (UTF-8, JSON, the format's
fields, token ids in the vocabulary, train and rollout records joined), so a line the offline
reader counts as malformed is counted here too, with its file, line and byte offset; a line
that is not UTF-8 is one more counted bad line (a stream keeps going). Each window becomes a
token table and then a ``Source`` through ``evidence.sources.tables_source``, and each
clause is decided by ``numerical_result`` / ``statistical_result``: a window covering a whole
log gives the verdicts, values and bounds of ``python -m verify`` on that log. The window's
summary line carries the source's weight diagnostics (``evidence.weights``: per estimator of
the contract, over the window's sampled tokens).

Sampling keeps a token when a hash of its record (token ids, positions and train log-probs)
and its position falls below ``sample_rate``: the same tokens are kept however the stream is
cut, restarted or sharded. A window closes at the end of the record that brings it to
``window_tokens`` sampled tokens (sequences are never split), or after ``window_tokens /
sample_rate`` lines, so a stream of empty or bad lines is still reported.

Hook batches (``evidence.logs.batches``) are checked with the offline reader's own ``Frames``:
a record of a framed batch becomes data only when its whole batch has arrived in order, in the
window of the batch's last line. A batch cut short by another batch, a record without a frame,
an unusable frame or the end of a finished file (``Line.last``, ``Line.follows_end``) is left
out, each of its lines a counted bad line with the offline reader's reason, in the window where
it is found cut short. A batch still held at the end of what was read from a followed file
waits for its next records; a checkpoint keeps the held lines (``Reader.state``), so a restart
ends with the decisions of an uninterrupted run. A record without ``hook_batch`` is read as it
always was.
"""

from __future__ import annotations

import hashlib
import json
import math
from types import MappingProxyType

import numpy as np

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.evidence.logs.batches import Frames
from kernel_contracts.evidence.logs.reader import (
    MAX_LISTED,
    BadRecord,
    LogTable,
    Problem,
    TableBuilder,
    add_joined,
    add_split,
    parse_line,
    prompt_key,
    unknown_fields,
)
from kernel_contracts.evidence.logs.schema import FORMATS, detect_format
from kernel_contracts.verify.common.escalation import decide
from kernel_contracts.verify.common.status import Status, worst
from kernel_contracts.verify.pipeline.monitor.lines import Line

__all__ = ["MAX_PENDING", "MonitorError", "Reader", "Window", "sample_mask"]

# split train/rollout records waiting for their other half; past this the oldest is unpaired
MAX_PENDING = 4096
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


class MonitorError(KernelContractsError):
    """Input the monitor cannot use; ``str`` is the one-line message (exit 2)."""


def sample_mask(key: int, positions: np.ndarray, rate: float) -> np.ndarray:
    """Which tokens of a record (hash ``key``) at ``positions`` a ``rate`` sample keeps:
    splitmix64 of key and position, as a uniform in [0, 1), below ``rate``."""
    with np.errstate(over="ignore"):
        z = np.asarray(positions, dtype=np.uint64) * _GOLDEN + np.uint64(key)
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53 < rate


def _where(line) -> dict:
    out = {"file": line.file} if line.file else {}
    return out | {"line": line.number, "offset": line.offset}


class Problems:
    """Bad lines of one kind in one window: all counted, the first ``MAX_LISTED`` listed."""

    def __init__(self) -> None:
        self.count = 0
        self.listed: list[dict] = []
        self.here: dict = {}

    def add(self, line: int, reason: str) -> None:  # the log reader's interface
        self.note(self.here, reason)

    def note(self, where: dict, reason: str) -> None:
        self.count += 1
        if len(self.listed) < MAX_LISTED:
            self.listed.append(where | {"reason": reason})

    def as_json(self) -> dict:
        return {"count": self.count, "first": self.listed}

    def problems(self) -> tuple[Problem, ...]:
        return tuple(Problem(p["line"], p["reason"]) for p in self.listed)


class Window:
    """The lines of one window and the sequences they gave."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.builder = TableBuilder()
        self.keep: list[np.ndarray] = []
        self.sampled = 0
        self.lines = self.blank = 0
        self.malformed, self.mismatches, self.unpaired = Problems(), Problems(), Problems()
        self.digest = hashlib.sha256()
        self.first: dict | None = None
        self.last: dict | None = None

    @property
    def empty(self) -> bool:  # a batch cut short at a file's end is counted with no line read
        return self.lines == 0 and self.unpaired.count == 0 and self.malformed.count == 0


class Reader:
    """Reads lines into windows; what outlives a window (the format, split records waiting
    for their other half) is the state a checkpoint keeps."""

    def __init__(self, contract, *, format: str | None, rate: float, label: str) -> None:
        self.vocab = contract.policy.vocab_size
        self.fmt = FORMATS[format] if format is not None else None
        self.rate, self.label = rate, label
        self.pending: dict = {}
        self.pending_where: dict = {}
        self.frames = Frames()  # the hook batch being read, held until it is whole

    def feed(self, window: Window, line) -> None:
        """Read one line into ``window``; raises ``MonitorError`` when the stream's first
        record has no known field set (no format declared)."""
        if line.follows_end:
            self.end_file(window)
        self._read(window, line)
        if line.last:
            self.end_file(window)

    def end_file(self, window: Window) -> None:
        """The file read is finished: the hook batch still held is cut short."""
        self._dropped(window, self.frames.end())

    def _dropped(self, window: Window, dropped) -> None:
        for _, line, reason in dropped:
            window.malformed.note(_where(line), reason)

    def _read(self, window: Window, line) -> None:
        window.lines += 1
        window.digest.update(line.raw)
        here = _where(line)
        window.first = window.first or here
        window.last = here
        if line.reason is not None:
            window.malformed.note(here, line.reason)
            return
        try:
            text = line.raw.decode("utf-8")
        except UnicodeDecodeError as err:
            window.malformed.note(
                here,
                f"not UTF-8 text (byte 0x{line.raw[err.start]:02x} at column {err.start + 1})",
            )
            return
        if not text.strip():
            window.blank += 1
            return
        try:
            record = parse_line(text)
        except json.JSONDecodeError as err:
            why = "truncated record at end of input" if line.cut else "invalid JSON"
            window.malformed.note(here, f"{why}: {err.msg} (column {err.colno})")
            return
        except BadRecord as bad:
            window.malformed.note(here, str(bad))
            return
        kept, dropped = self.frames.take(record, line)
        self._dropped(window, dropped)
        for whole, at in kept:
            self._take(window, whole, at)

    def _take(self, window: Window, record, line) -> None:
        """One record whose hook batch (if any) is whole: its sequence, or why not."""
        here = _where(line)
        if not isinstance(record, dict):
            window.malformed.note(here, f"not a JSON object (got {type(record).__name__})")
            return
        if self.fmt is None:
            name = detect_format(record)
            if name is None:
                raise MonitorError(f"{self._shown(line)}: {unknown_fields(record)}")
            self.fmt = FORMATS[name]
        builder = window.builder
        before = builder.sequences
        window.mismatches.here = here
        try:
            if self.fmt.side is not None and self.fmt.side in record:
                self._split(window, record, line, here)
            else:
                missing = [k for k in self.fmt.required if k not in record]
                if missing:
                    raise BadRecord(f"missing key '{missing[0]}' ({self.fmt.name} format)")
                add_joined(record, self.fmt, builder, line.number, window.mismatches, self.vocab)
        except BadRecord as bad:
            window.malformed.note(here, str(bad))
            return
        if builder.sequences > before:
            self._sample(window)

    def _shown(self, line) -> str:
        name = f"{self.label}/{line.file}" if line.file else self.label
        return f"{name}:{line.number}"

    def _split(self, window: Window, record: dict, line, here: dict) -> None:
        fmt = self.fmt
        key = None
        if fmt.prompt[0] in record and fmt.sample in record:
            try:
                key = (prompt_key(record, fmt), str(record[fmt.sample]))
            except BadRecord:
                key = None
        before = self.pending.get(key)
        b, problems = window.builder, window.mismatches
        add_split(record, fmt, self.pending, b, line.number, problems, self.vocab)
        after = self.pending.get(key)
        if after is None:
            self.pending_where.pop(key, None)
        elif after is not before:
            self.pending_where[key] = here
            if len(self.pending) > MAX_PENDING:
                self._unpair(window, next(iter(self.pending)))

    def _unpair(self, window: Window, key) -> None:
        entry = self.pending.pop(key)
        where = self.pending_where.pop(key, {"line": entry[6]})
        missing = "train" if entry[0] == "rollout" else "rollout"
        window.unpaired.note(
            where,
            f"{entry[0]} record for prompt {key[0]!r} sample {entry[7]!r} has no {missing} record",
        )

    def unpair_all(self, window: Window) -> None:
        """At the end of the stream: every split record still waiting is unpaired."""
        for key in sorted(self.pending, key=lambda k: self.pending[k][6]):
            self._unpair(window, key)

    def _sample(self, window: Window) -> None:
        c = window.builder.chunks
        n = c["token"][-1].shape[0]
        if self.rate >= 1.0:
            window.sampled += n
            return
        h = hashlib.blake2b(digest_size=8)
        for name in ("token", "position", "train_logprob"):
            h.update(np.ascontiguousarray(c[name][-1]).tobytes())
        keep = sample_mask(int.from_bytes(h.digest(), "little"), c["position"][-1], self.rate)
        window.keep.append(keep)
        window.sampled += int(keep.sum())

    def table(self, window: Window) -> LogTable:
        """The window's token table: its sampled tokens, fingerprinted by its lines' sha256."""
        b = window.builder
        columns = b.columns()
        if window.keep:
            mask = np.concatenate(window.keep)
            columns = {k: v[mask] for k, v in columns.items()}
        return LogTable(
            path=self.label,
            format=self.fmt.name if self.fmt else "generic",
            sha256=window.digest.hexdigest(),
            columns=MappingProxyType(columns),
            prompt_names=tuple(b.prompts),
            lines=window.lines,
            blank_lines=window.blank,
            sequences=b.sequences,
            padding_tokens=b.padding,
            malformed=window.malformed.problems(),
            malformed_count=window.malformed.count,
            mismatches=window.mismatches.problems(),
            mismatch_count=window.mismatches.count,
            unpaired=window.unpaired.problems(),
            unpaired_count=window.unpaired.count,
            has_kept_mass=b.kept_mass_seen,
        )

    # -- checkpoint state ------------------------------------------------------------------

    def state(self) -> dict:
        """What a checkpoint keeps: the format, the split records waiting for their other
        half, and the lines of the hook batch held (``held``, left out when none is)."""
        out = {
            "format": self.fmt.name if self.fmt else None,
            "pending": [
                _entry_json(k, e, self.pending_where.get(k)) for k, e in self.pending.items()
            ],
        }
        if self.frames.held:
            out["held"] = [_held_json(line) for _, line in self.frames.held]
        return out

    def restore(self, state: dict) -> None:
        """Take back ``state``; ``ValueError`` (or ``KeyError``, ``TypeError``) when it cannot
        be used. The held lines are read again into ``Frames``: they must be held again."""
        if state["format"] is not None:
            self.fmt = FORMATS[state["format"]]
        for item in state["pending"]:
            key = (item["key"][0], item["key"][1])
            self.pending[key] = _entry(item)
            if item["where"] is not None:
                self.pending_where[key] = item["where"]
        for item in state.get("held", []):
            line = _held(item)
            try:
                record = parse_line(line.raw.decode("utf-8"))
            except BadRecord as bad:
                raise ValueError(str(bad)) from None
            if self.frames.take(record, line) != ([], []):
                raise ValueError("the held lines are not the start of one hook batch")


def _entry_json(key, e, where) -> dict:
    side, ids, lp, kept, mask, offset, line, sample = e
    return {
        "key": list(key),
        "side": side,
        "ids": ids.tolist(),
        "logprobs": lp.tolist(),
        "kept": None if kept is None else kept.tolist(),
        "mask": None if mask is None else mask.astype(int).tolist(),
        "offset": offset,
        "line": line,
        "sample": sample,
        "where": where,
    }


def _held_json(line) -> dict:
    return {
        "file": line.file,
        "line": line.number,
        "offset": line.offset,
        "end": line.end,
        "text": line.raw.decode("utf-8"),
    }


def _held(item: dict) -> Line:
    """The line a checkpoint's ``held`` item keeps (its text, where it lies)."""
    file, text = item["file"], item["text"]
    number, offset, end = item["line"], item["offset"], item["end"]
    if not (isinstance(file, str) and isinstance(text, str)):
        raise TypeError("a held line's file and text are strings")
    if not all(type(n) is int and n >= 0 for n in (number, offset, end)):
        raise TypeError("a held line's line, offset and end are integers")
    return Line(text.encode("utf-8"), file, number, offset, end)


def _entry(item: dict) -> tuple:
    kept, mask = item["kept"], item["mask"]
    return (
        item["side"],
        np.asarray(item["ids"], dtype=np.int64),
        np.asarray(item["logprobs"], dtype=np.float64),
        None if kept is None else np.asarray(kept, dtype=np.float64),
        None if mask is None else np.asarray(mask, dtype=bool),
        item["offset"],
        item["line"],
        item["sample"],
    )


def _number(x) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _first_fired(rules, clause_id: str, status: Status):
    """(index, rule decision) of the first rule of Π, in order, that this verdict fires."""
    for i, d in enumerate(decide(rules, [(clause_id, status)])):
        if d.fired and d.clause == clause_id:
            return i, d
    return None, None


def decide_window(contract, reader: Reader, window: Window, end: dict, closed: str):
    """The JSON lines of a closed window (its summary line, then one line per clause and
    slice, in contract order) and the worst verdict among them."""
    from kernel_contracts.evidence.sources import tables_source
    from kernel_contracts.verify.decide.verdicts import numerical_result, statistical_result

    table = reader.table(window)
    source = tables_source(contract, [table])
    results = [numerical_result(c, source) for c in contract.numerical]
    results += [statistical_result(c, s, source) for c in contract.statistical for s in c.slices]
    status = worst(r.status for r in results)
    head = {
        "kind": "window",
        "window": window.index,
        "stream": reader.label,
        "from": window.first,
        "to": end,
        "closed": closed,
        "lines": window.lines,
        "blank_lines": window.blank,
        "sequences": table.sequences,
        "tokens": table.tokens if not window.keep else int(sum(k.size for k in window.keep)),
        "sampled_tokens": table.tokens,
        "sample_rate": reader.rate,
        "padding_tokens": table.padding_tokens,
        "malformed": window.malformed.as_json(),
        "token_id_mismatches": window.mismatches.as_json(),
        "unpaired": window.unpaired.as_json(),
        "fingerprint": f"sha256:{table.sha256}",
        "verdict": status.label,
        "weight_diagnostics": source.info["weight_diagnostics"],
        "weight_diagnostics_skipped": source.info["weight_diagnostics_skipped"],
    }
    lines = [head]
    evidence = {
        "tokens": table.tokens,
        "sequences": table.sequences,
        "malformed_lines": window.malformed.count,
    }
    for r in results:
        rule, d = _first_fired(contract.escalation, r.id, r.status)
        lines.append(
            {
                "kind": "decision",
                "window": window.index,
                "clause": r.id,
                "family": r.family,
                "slice": r.slice,
                "metric": r.metric,
                "statistic": r.statistic,
                "verdict": r.status.label,
                "severity": d.severity if d else None,
                "action": d.action if d else None,
                "rule": rule,
                "value": _number(r.value),
                "bound": _number(r.bound),
                "threshold": _number(r.threshold),
                "confidence": r.confidence,
                "evidence": evidence | {"samples": r.samples},
                "reason": r.reason,
            }
        )
    text = "".join(json.dumps(x, ensure_ascii=False, allow_nan=False) + "\n" for x in lines)
    return text, status
