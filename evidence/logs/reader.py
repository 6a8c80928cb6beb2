"""Read a JSONL log of train and rollout log-probs into a token table, keeping every problem.

Nothing is dropped silently: a line that is not valid JSON (a duplicate key, nesting too deep
to read, an integer of thousands of digits included), is longer than ``LIMITS["log_record"]``
(skipped without being held), is cut off, misses a field, has arrays of
different lengths, holds a log-probability that is not a number (a string, a boolean) or is
NaN/inf, or a token id that is not an integer in ``[0, vocab_size)`` is counted and reported
with its line number and the reason; a sequence whose train and rollout token ids differ is
flagged as a mismatch and left out of the table. Padding (``mask`` 0) is not data. A
log-probability above 0 by at most ``LOGPROB_TOLERANCE`` is rounding: it is kept as logged
(``evidence.lower`` reads it as 0). A file that cannot be a log at all (missing, empty, not
UTF-8, no known field set, no usable record, a log-probability above 0 beyond the tolerance)
raises ``LogError`` with a one-line message naming the file and line.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.contracts.bounded import (
    LIMITS,
    LongLine,
    NotRegularFile,
    bounded_lines,
    open_regular,
    size_text,
)
from kernel_contracts.evidence.logs.batches import Frames
from kernel_contracts.evidence.logs.schema import (
    FORMATS,
    LogFormat,
    detect_format,
    field_hints,
    near_key,
)

# the record-level pieces are public for readers of growing logs (``verify.monitor``)
__all__ = [
    "LOGPROB_TOLERANCE",
    "MAX_LISTED",
    "BadRecord",
    "LogError",
    "LogTable",
    "PositiveLogprob",
    "Problem",
    "Reading",
    "TableBuilder",
    "add_joined",
    "add_split",
    "open_log",
    "parse_line",
    "prompt_key",
    "read_jsonl_log",
    "unknown_fields",
]

# A log-probability (or log kept mass) above 0 by at most this is a rounding artefact, read as
# 0 where it bounds a metric (``evidence.lower``); above it, the log is unusable. A float32
# log-softmax z_y − logsumexp(z) errs by a few ulps of the largest |z|, about 2.4e-7·|z|: +1e-3
# covers logits up to |z| ≈ 4000 (a trained LM's stay below a few hundred), and an e^0.001 that
# is 0.1 % above 1 is no probability a normalised distribution gives.
LOGPROB_TOLERANCE = 1e-3
# How many problem lines of each kind a report lists (all are counted).
MAX_LISTED = 20
# How many bad lines the error for a log without one usable record quotes.
QUOTED = 3
# Positions stay below 2^53, exact as the doubles slice bounds are compared in.
MAX_POSITION = 2**53
_NUMBER = frozenset({float, int})
_INTEGER = frozenset({int})
_MASK = frozenset({int, bool})


class LogError(KernelContractsError):
    """A file that cannot be read as a log; ``str(err)`` is the user-ready message."""


@dataclass(frozen=True)
class Problem:
    """One bad line: its 1-based number and why."""

    line: int
    reason: str


@dataclass(frozen=True)
class LogTable:
    """The tokens of a log, one row per valid token, and what was wrong with the rest.

    ``columns``: ``train_logprob``, ``rollout_logprob`` (float64), ``log_kept_mass`` (float64,
    NaN where the log does not say), ``token``, ``position``, ``sequence``, ``line`` (int64),
    ``prompt`` (int32 codes into ``prompt_names``), ``batch_size`` (int64, the record's serving
    batch size, 0 where it does not say) and ``offset_known`` (bool: the record gave its
    ``position_offset``, so positions count the prompt too).
    """

    path: str
    format: str
    sha256: str
    columns: MappingProxyType
    prompt_names: tuple[str, ...]
    lines: int
    blank_lines: int
    sequences: int
    padding_tokens: int
    malformed: tuple[Problem, ...]
    malformed_count: int
    mismatches: tuple[Problem, ...]
    mismatch_count: int
    unpaired: tuple[Problem, ...]
    unpaired_count: int
    has_kept_mass: bool = False
    # the tokens of the malformed records (each left out whole)
    malformed_tokens: int = 0
    # hook batches cut short (``evidence.logs.batches``): their records are among the malformed
    partial_batches: int = 0
    extra: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    @property
    def tokens(self) -> int:
        return int(self.columns["train_logprob"].shape[0])


class BadRecord(KernelContractsError):
    """A record-level problem; the record is skipped and the problem reported."""


class PositiveLogprob(BadRecord):
    """A record with a log-probability above 0 beyond ``LOGPROB_TOLERANCE``; ``value`` is its
    largest one. A whole log holding one is unusable (``Reading.take`` raises ``LogError``);
    a monitor counts the line as malformed."""

    def __init__(self, message: str, value: float):
        super().__init__(message)
        self.value = value


class _DuplicateKey(KernelContractsError):
    """A JSON object with a key given twice (``args[0]``): which value counts is anyone's guess."""


def _unique_keys(pairs: list) -> dict:
    """``object_pairs_hook`` of ``json.loads``: a JSON object whose keys are all distinct."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def parse_line(text: str) -> object:
    """The JSON value of one line; ``BadRecord`` when it is not one or is ambiguous."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as dup:
        key = dup.args[0] if len(dup.args[0]) <= 40 else dup.args[0][:40] + "…"
        raise BadRecord(f"invalid JSON: duplicate key {key!r} in one object") from None
    except RecursionError:
        raise BadRecord(
            "invalid JSON: nested too deeply to read (a record is one flat object)"
        ) from None
    except json.JSONDecodeError:  # the caller says where and whether the line was cut off
        raise
    except ValueError:  # an integer of more digits than Python converts
        raise BadRecord("invalid JSON: an integer has too many digits") from None


def _kind(value: object) -> str:
    """How a value that is not the expected type reads in a message (a JSON value, or a
    Parquet/Arrow cell: a decimal, a date, bytes)."""
    if type(value) is float:
        return repr(value)
    if value is None:
        return "null"
    return {bool: "a boolean", str: "a string", list: "an array", dict: "an object"}.get(
        type(value), f"a {type(value).__name__}"
    )


class _Problems:
    def __init__(self) -> None:
        self.listed: list[Problem] = []
        self.count = 0

    def add(self, line: int, reason: str) -> None:
        self.count += 1
        if len(self.listed) < MAX_LISTED:
            self.listed.append(Problem(line, reason))


def _first(value: list, ok) -> int:
    """The index of the first item of ``value`` that is not ``ok``."""
    return next(i for i, v in enumerate(value) if not ok(v))


def _is_double(number: int | float) -> bool:
    try:
        float(number)
    except OverflowError:
        return False
    return True


def _floats(record: dict, key: str, what: str) -> np.ndarray:
    value = record[key]
    if not isinstance(value, list):
        raise BadRecord(f"'{key}' must be an array of numbers, got {type(value).__name__}")
    if not _NUMBER.issuperset(map(type, value)):  # bool is not a number, nor is "-0.5"
        i = _first(value, lambda v: type(v) in _NUMBER)
        raise BadRecord(f"'{key}'[{i}] is {_kind(value[i])}: {what} must be numbers")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except OverflowError:  # an integer beyond the doubles
        i = _first(value, _is_double)
        raise BadRecord(
            f"'{key}'[{i}] is beyond the range of a double: {what} must be finite"
        ) from None
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.argmax(bad))
        raise BadRecord(f"'{key}'[{i}] is {float(arr[i])!r}: {what} must be finite")
    high = arr > LOGPROB_TOLERANCE
    if high.any():
        i = int(np.argmax(high))
        raise PositiveLogprob(
            f"'{key}'[{i}] = {float(arr[i])!r} > 0: {what} must be ≤ 0 (up to "
            f"+{LOGPROB_TOLERANCE:g} of rounding); a larger value is not a rounding of a "
            "log-softmax: look for a value written before normalisation or with the wrong sign",
            float(arr.max()),
        )
    return arr


def _ints(record: dict, key: str, vocab_size: int | None) -> np.ndarray:
    value = record[key]
    if not isinstance(value, list):
        raise BadRecord(f"'{key}' must be an array of integer token ids")
    if not _INTEGER.issuperset(map(type, value)):  # bool, 1.0 and "1" are not token ids
        i = _first(value, lambda v: type(v) is int)
        raise BadRecord(f"'{key}'[{i}] is {_kind(value[i])}: token ids must be integers")
    top = 2**63 if vocab_size is None else min(vocab_size, 2**63)
    try:
        arr = np.asarray(value, dtype=np.int64)
    except OverflowError:  # beyond int64, so beyond any vocabulary
        arr = None
    # as unsigned, a negative id is ≥ 2^63 ≥ top: one pass finds both
    if arr is None or (arr.size and int(arr.view(np.uint64).max()) >= top):
        i = _first(value, lambda v: 0 <= v < top)
        if value[i] < 0:
            raise BadRecord(f"'{key}'[{i}] is negative: token ids must be ≥ 0")
        if value[i] >= 2**63:
            raise BadRecord(f"'{key}'[{i}] is too large for a token id")
        raise BadRecord(
            f"'{key}'[{i}] = {value[i]} is not a token id of the vocabulary "
            f"(vocab_size {vocab_size})"
        )
    return arr


def _mask(record: dict, key: str | None, n: int) -> np.ndarray | None:
    if key is None or key not in record:
        return None
    value = record[key]
    arr = None
    if isinstance(value, list) and _MASK.issuperset(map(type, value)):
        try:
            arr = np.asarray(value, dtype=np.int64)
        except OverflowError:
            arr = None
    if arr is None or ((arr != 0) & (arr != 1)).any():
        raise BadRecord(f"'{key}' must be an array of 0/1")
    if arr.shape[0] != n:
        raise BadRecord(f"'{key}' has {arr.shape[0]} entries, the token ids {n}")
    return arr.astype(bool)


def prompt_key(record: dict, fmt: LogFormat) -> str:
    for key in fmt.prompt:
        if key in record:
            value = record[key]
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise BadRecord(f"'{key}' must be a string or an integer")
            return str(value)
    return ""


def _offset(record: dict, fmt: LogFormat, n: int) -> int:
    """The position of the first of ``n`` tokens (0 when the record does not say)."""
    if fmt.position_offset is None or fmt.position_offset not in record:
        return 0
    value = record[fmt.position_offset]
    if type(value) is not int or value < 0:
        raise BadRecord(f"'{fmt.position_offset}' must be a non-negative integer")
    if value > MAX_POSITION - n:
        raise BadRecord(f"'{fmt.position_offset}' is too large (positions must stay below 2^53)")
    return value


def _batch(record: dict, fmt: LogFormat) -> int:
    """The serving batch size the record states (0 when it does not say)."""
    if fmt.batch_size is None or fmt.batch_size not in record:
        return 0
    value = record[fmt.batch_size]
    if type(value) is not int or not 1 <= value < 2**63:
        raise BadRecord(f"'{fmt.batch_size}' must be a positive integer")
    return value


def _first_difference(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape:
        return f"{a.shape[0]} train tokens vs {b.shape[0]} rollout tokens"
    i = int(np.argmax(a != b))
    return f"first at token {i}: train id {int(a[i])}, rollout id {int(b[i])}"


class TableBuilder:
    """Accumulates sequences into column chunks."""

    def __init__(self) -> None:
        self.chunks: dict[str, list[np.ndarray]] = {
            k: []
            for k in (
                "train_logprob",
                "rollout_logprob",
                "log_kept_mass",
                "token",
                "position",
                "sequence",
                "line",
                "prompt",
                "batch_size",
                "offset_known",
            )
        }
        self.prompts: dict[str, int] = {}
        self.sequences = 0
        self.padding = 0
        self.kept_mass_seen = False

    def add(
        self, *, ids, train, rollout, kept, mask, prompt, offset, line, batch=0, offset_known=False
    ) -> None:
        n = ids.shape[0]
        pos = np.arange(offset, offset + n, dtype=np.int64)
        if kept is None:
            kept = np.full(n, np.nan)
        else:
            self.kept_mass_seen = True
        if mask is not None:
            self.padding += int(n - mask.sum())
            ids, train, rollout = ids[mask], train[mask], rollout[mask]
            kept, pos = kept[mask], pos[mask]
            n = ids.shape[0]
        code = self.prompts.setdefault(prompt, len(self.prompts))
        c = self.chunks
        c["train_logprob"].append(train)
        c["rollout_logprob"].append(rollout)
        c["log_kept_mass"].append(kept)
        c["token"].append(ids)
        c["position"].append(pos)
        c["sequence"].append(np.full(n, self.sequences, np.int64))
        c["line"].append(np.full(n, line, np.int64))
        c["prompt"].append(np.full(n, code, np.int32))
        c["batch_size"].append(np.full(n, batch, np.int64))
        c["offset_known"].append(np.full(n, offset_known, bool))
        self.sequences += 1

    def columns(self) -> dict[str, np.ndarray]:
        dtypes = {
            "train_logprob": np.float64,
            "rollout_logprob": np.float64,
            "log_kept_mass": np.float64,
            "prompt": np.int32,
            "offset_known": bool,
        }
        return {
            k: (np.concatenate(v) if v else np.zeros(0, dtypes.get(k, np.int64)))
            for k, v in self.chunks.items()
        }


def add_joined(
    record: dict, fmt: LogFormat, builder: TableBuilder, line: int, mismatches, vocab
) -> None:
    ids = _ints(record, fmt.ids, vocab)
    train = _floats(record, fmt.train, "log-probabilities")
    rollout = _floats(record, fmt.rollout, "log-probabilities")
    n = ids.shape[0]
    for key, arr in ((fmt.train, train), (fmt.rollout, rollout)):
        if arr.shape[0] != n:
            raise BadRecord(f"'{key}' has {arr.shape[0]} entries, '{fmt.ids}' {n}")
    kept = None
    if fmt.log_kept_mass and fmt.log_kept_mass in record:
        kept = _floats(record, fmt.log_kept_mass, "log kept mass")
        if kept.shape[0] != n:
            raise BadRecord(f"'{fmt.log_kept_mass}' has {kept.shape[0]} entries, '{fmt.ids}' {n}")
    mask = _mask(record, fmt.mask, n)
    prompt, offset, batch = prompt_key(record, fmt), _offset(record, fmt, n), _batch(record, fmt)
    if fmt.rollout_ids and fmt.rollout_ids in record:
        other = _ints(record, fmt.rollout_ids, vocab)
        if other.shape != ids.shape or (other != ids).any():
            where = _first_difference(ids, other)
            mismatches.add(line, f"token ids differ between train and rollout ({where})")
            return
    builder.add(
        ids=ids,
        train=train,
        rollout=rollout,
        kept=kept,
        mask=mask,
        prompt=prompt,
        offset=offset,
        line=line,
        batch=batch,
        offset_known=fmt.position_offset is not None and fmt.position_offset in record,
    )


def add_split(
    record: dict, fmt: LogFormat, pending: dict, builder: TableBuilder, line: int, mismatches, vocab
):
    side = record[fmt.side]
    if side not in ("train", "rollout"):
        raise BadRecord(f'\'{fmt.side}\' must be "train" or "rollout", got {side!r}')
    if fmt.prompt[0] not in record or fmt.sample not in record:
        raise BadRecord(f"a split record needs '{fmt.prompt[0]}' and '{fmt.sample}' to be joined")
    prompt = prompt_key(record, fmt)
    sample = record[fmt.sample]
    if isinstance(sample, bool) or not isinstance(sample, str | int):
        raise BadRecord(f"'{fmt.sample}' must be a string or an integer")
    ids = _ints(record, fmt.ids, vocab)
    lp = _floats(record, fmt.logprobs, "log-probabilities")
    if lp.shape != ids.shape:
        raise BadRecord(f"'{fmt.logprobs}' has {lp.shape[0]} entries, '{fmt.ids}' {ids.shape[0]}")
    kept = None
    if side == "rollout" and fmt.log_kept_mass in record:
        kept = _floats(record, fmt.log_kept_mass, "log kept mass")
        if kept.shape != ids.shape:
            raise BadRecord(
                f"'{fmt.log_kept_mass}' has {kept.shape[0]} entries, '{fmt.ids}' {ids.shape[0]}"
            )
    mask = _mask(record, fmt.mask, ids.shape[0])
    entry = (side, ids, lp, kept, mask, _offset(record, fmt, ids.shape[0]), line, sample)
    key = (prompt, str(sample))
    other = pending.pop(key, None)
    if other is None:
        pending[key] = entry
        return
    if other[0] == side:
        pending[key] = other
        raise BadRecord(
            f"second {side} record for prompt {prompt!r} sample {sample!r} "
            f"(first at line {other[6]})"
        )
    tr, ro = (entry, other) if side == "train" else (other, entry)
    if tr[1].shape != ro[1].shape or (tr[1] != ro[1]).any():
        mismatches.add(
            ro[6],
            f"token ids differ between train record (line {tr[6]}) and rollout record "
            f"(line {ro[6]}) ({_first_difference(tr[1], ro[1])})",
        )
        return
    mask = tr[4] if ro[4] is None else ro[4] if tr[4] is None else tr[4] & ro[4]
    builder.add(
        ids=tr[1],
        train=tr[2],
        rollout=ro[2],
        kept=ro[3],
        mask=mask,
        prompt=prompt,
        offset=ro[5],
        line=ro[6],
        offset_known=ro[5] > 0 or (side == "rollout" and fmt.position_offset in record),
    )


def _record_tokens(record: object, fmt: LogFormat | None) -> int:
    """How many tokens a record left out would have given (0 when that cannot be told)."""
    if fmt is None or not isinstance(record, dict):
        return 0
    ids = record.get(fmt.ids)
    return len(ids) if isinstance(ids, list) else 0


class Reading:
    """The per-record half of reading a log, shared by every file reader (JSONL, Parquet, Arrow).

    A reader hands each decoded record to ``take`` with its 1-based line (or row) number and
    counts what it could not decode with ``bad``; ``table`` then builds the ``LogTable`` or
    raises ``LogError`` as ``read_log`` does. ``unit`` is how messages name a record's place.
    """

    def __init__(self, path: str, format: str | None, vocab_size: int | None, unit: str = "line"):
        if format is not None and format not in FORMATS:
            raise LogError(
                f"{path}: unknown log format {format!r} (expected one of: {', '.join(FORMATS)})"
            )
        self.path, self.vocab_size, self.unit = path, vocab_size, unit
        self.fmt = FORMATS[format] if format is not None else None
        self.builder, self.pending = TableBuilder(), {}
        self.malformed, self.mismatches = _Problems(), _Problems()
        self.first_keys: dict | None = None
        self.dropped_tokens = 0  # the tokens of the records left out
        self.frames = Frames()

    def bad(self, line: int, reason: str) -> None:
        self.malformed.add(line, reason)

    def take(self, record: object, line: int) -> None:
        """Take one decoded record: held until its hook batch is complete (``Frames``), then
        validated and added; the records of a batch cut short are counted, never data."""
        kept, dropped = self.frames.take(record, line)
        self._dropped(dropped)
        for whole, at in kept:
            self._take_one(whole, at)

    def _dropped(self, dropped) -> None:
        for record, line, reason in dropped:
            self.malformed.add(line, reason)
            fmt = self.fmt
            if fmt is None and isinstance(record, dict):  # no record taken yet
                fmt = FORMATS.get(detect_format(record) or "")
            self.dropped_tokens += _record_tokens(record, fmt)

    def _take_one(self, record: object, line: int) -> None:
        """Validate one decoded record and add its sequence, or count why not."""
        if not isinstance(record, dict):
            self.malformed.add(line, f"not a JSON object (got {type(record).__name__})")
            return
        if self.first_keys is None:
            self.first_keys = record
            if self.fmt is None:
                name = detect_format(record)
                if name is None:
                    raise LogError(f"{self.path}:{line}: {unknown_fields(record)}")
                self.fmt = FORMATS[name]
        fmt, vocab = self.fmt, self.vocab_size
        try:
            if fmt.side is not None and fmt.side in record:
                add_split(record, fmt, self.pending, self.builder, line, self.mismatches, vocab)
            else:
                missing = [k for k in fmt.required if k not in record]
                if missing:
                    near = near_key(missing[0], record)
                    raise BadRecord(f"missing key '{missing[0]}' ({fmt.name} format){near}")
                add_joined(record, fmt, self.builder, line, self.mismatches, vocab)
        except PositiveLogprob as bad:  # not rounding: nothing in this log can be trusted
            at = f":{line}" if self.unit == "line" else f": {self.unit} {line}"
            raise LogError(f"{self.path}{at}: {bad}") from None
        except BadRecord as bad:
            self.malformed.add(line, str(bad))
            self.dropped_tokens += _record_tokens(record, fmt)

    def table(self, sha256: str, lines: int, blank: int = 0, kind: str = "JSON") -> LogTable:
        """The token table of every record taken; ``LogError`` when none gave a sequence."""
        self._dropped(self.frames.end())
        path, fmt, builder = self.path, self.fmt, self.builder
        malformed, mismatches, pending = self.malformed, self.mismatches, self.pending
        if self.first_keys is None and malformed.count == 0:
            raise LogError(
                f"{path}: no {kind} record in the file ({lines} {self.unit}s, 0 invalid)"
            )
        if (
            self.first_keys is not None
            and builder.sequences == 0
            and mismatches.count == 0
            and not pending
        ):
            guess = detect_format(self.first_keys)
            if guess is not None and guess != fmt.name:
                raise LogError(
                    f"{path}: no record has the {fmt.name} fields; the records look like the "
                    f"{guess} format (declare format: {guess})"
                )
        unpaired = _Problems()
        for (prompt, _), entry in sorted(pending.items(), key=lambda kv: kv[1][6]):
            sample = entry[7]
            missing = "train" if entry[0] == "rollout" else "rollout"
            unpaired.add(
                entry[6],
                f"{entry[0]} record for prompt {prompt!r} sample {sample!r} has no {missing} "
                "record",
            )
        if builder.sequences == 0:
            raise LogError(
                _no_usable(path, lines - blank, malformed, mismatches, unpaired, self.unit)
            )
        columns = builder.columns()
        return LogTable(
            path=path,
            format=fmt.name,
            sha256=sha256,
            columns=MappingProxyType(columns),
            prompt_names=tuple(builder.prompts),
            lines=lines,
            blank_lines=blank,
            sequences=builder.sequences,
            padding_tokens=builder.padding,
            malformed=tuple(malformed.listed),
            malformed_count=malformed.count,
            mismatches=tuple(mismatches.listed),
            mismatch_count=mismatches.count,
            unpaired=tuple(unpaired.listed),
            unpaired_count=unpaired.count,
            has_kept_mass=builder.kept_mass_seen,
            malformed_tokens=self.dropped_tokens,
            partial_batches=self.frames.partial,
        )


def read_jsonl_log(
    path: str | os.PathLike,
    format: str | None = "generic",
    *,
    vocab_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> LogTable:
    """Read the JSONL log at ``path`` in ``format`` (``None``: detect from the first record).

    A token id must be below ``vocab_size`` (the contract's ``policy.vocab_size``), when given.
    ``progress(done, total)`` is called now and then while reading. Raises ``LogError`` when the
    file holds no usable record. ``evidence.logs.read_log`` reads a log stored in any format.
    """
    path = os.fspath(path)
    reading = Reading(path, format, vocab_size)
    handle, total = open_log(path)
    digest = hashlib.sha256()
    lines = blank = done = 0
    step = total // 100 + 1  # about a hundred progress calls per file
    mark = step
    limit = LIMITS["log_record"]
    with handle:
        for raw in bounded_lines(handle, limit, digest.update):
            lines += 1
            done += raw if isinstance(raw, LongLine) else len(raw)
            if progress is not None and done >= mark:
                progress(done, total)
                mark = done + step
            if isinstance(raw, LongLine):
                reading.bad(
                    lines,
                    f"the line holds {int(raw)} bytes, above the limit of {size_text(limit)} "
                    "for one record; not read",
                )
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise LogError(
                    f"{path}:{lines}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column "
                    f"{err.start + 1}); a JSONL log must be UTF-8"
                ) from None
            if not text.strip():
                blank += 1
                continue
            try:
                record = parse_line(text)
            except json.JSONDecodeError as err:
                cut = not raw.endswith(b"\n") and done == total
                why = "truncated record at end of file" if cut else "invalid JSON"
                reading.bad(lines, f"{why}: {err.msg} (column {err.colno})")
                continue
            except BadRecord as bad:
                reading.bad(lines, str(bad))
                continue
            reading.take(record, lines)
    if progress is not None:
        progress(total, total)
    return reading.table(digest.hexdigest(), lines, blank)


def open_log(path: str):
    """``(binary handle, size)`` of a log file; ``LogError`` when it is missing, empty, or
    refused by ``contracts.bounded`` (not a regular file, or above ``LIMITS["log"]``)."""
    try:
        handle = open_regular(path, LIMITS["log"])
    except FileNotFoundError:
        raise LogError(f"{path}: evidence file not found") from None
    except NotRegularFile as err:
        raise LogError(f"{path}: is {err.kind}, not a log file") from None
    except OSError as err:
        raise LogError(f"{path}: cannot read: {err.strerror}") from None
    total = os.fstat(handle.fileno()).st_size
    if total == 0:
        handle.close()
        raise LogError(f"{path}: the log file is empty")
    return handle, total


def _no_usable(path: str, records: int, malformed, mismatches, unpaired, unit="line") -> str:
    """The one-line error for a log of which no record gave a sequence, quoting bad lines."""
    kinds = (
        (malformed.count, "malformed"),
        (mismatches.count, "with train and rollout token ids that differ"),
        (unpaired.count, "unpaired"),
    )
    counts = ", ".join(f"{n} {what}" for n, what in kinds if n)
    listed = sorted((*malformed.listed, *mismatches.listed, *unpaired.listed), key=lambda p: p.line)
    quoted = "".join(f"; {unit} {p.line}: {p.reason}" for p in listed[:QUOTED])
    more = malformed.count + mismatches.count + unpaired.count - len(listed[:QUOTED])
    rest = f" (and {more} more)" if more > 0 else ""
    noun = f"non-blank {unit}" if unit == "line" else unit
    lines = f"{records} {noun}" + ("" if records == 1 else "s")
    return f"{path}: no usable record in {lines} ({counts}){quoted}{rest}"


def unknown_fields(record: dict) -> str:
    keys = ", ".join(sorted(record)[:8]) or "none"
    known = "; ".join(f"{name}: {', '.join(f.required)}" for name, f in FORMATS.items())
    hints = field_hints(record)
    return f"the record has none of the known field sets ({known}); its keys: {keys}{hints}"
