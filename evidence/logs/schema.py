"""The JSONL log formats we read: which key of a record holds which field.

A log holds one JSON object per line and one line per generated sequence (the way RL stacks
dump a rollout batch: arrays over the response tokens). Three spellings of the same content are
understood; docs/evidence-schema.md is the user-facing description of each.

- ``generic``: this toolkit's own names (``response_ids``, ``train_logprobs``,
  ``rollout_logprobs``); a sequence may also be split into a ``train`` and a ``rollout`` record
  that the reader joins by ``(prompt_id, sample_id)``.
- ``verl``: the names of verl's ``DataProto`` batch (``responses``, ``old_log_probs``,
  ``rollout_log_probs``, ``response_mask``, ``uid``), one row of the batch per line.
- ``trl``: the names of TRL's ``GRPOTrainer`` on its vLLM importance-sampling path
  (``completion_ids``, ``old_per_token_logps``, ``sampling_per_token_logps``,
  ``completion_mask``), one completion per line.

How the records are stored is a second, independent choice (``FILE_FORMATS``): JSONL text, or
Parquet or Arrow (IPC) files with one row per sequence and the same names as columns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import MappingProxyType

from kernel_contracts.contracts.checks import VALUE_CUTOFF, closest

__all__ = [
    "FILE_FORMATS",
    "FORMATS",
    "LogFormat",
    "detect_format",
    "field_hints",
    "file_format_of",
    "near_key",
]


@dataclass(frozen=True)
class LogFormat:
    """Where the fields of one sequence live in a record of this format.

    ``ids``/``train``/``rollout`` name the token-id and log-prob arrays; ``mask`` an optional
    0/1 array of valid tokens (padding is not data); ``prompt`` the keys tried in order for the
    prompt's identity; ``sample`` the key of the sample index within a prompt group;
    ``rollout_ids`` an optional array of the token ids the inference engine reported, compared
    with ``ids``; ``log_kept_mass`` an optional per-token log S (kept sampling mass, ≤ 0);
    ``batch_size`` an optional integer, the size of the inference batch the sequence was
    served in (no framework writes it: an operator adds it to each record, and it is read from
    joined records only).
    """

    name: str
    ids: str
    train: str
    rollout: str
    mask: str | None
    prompt: tuple[str, ...]
    sample: str | None
    rollout_ids: str | None
    log_kept_mass: str | None
    position_offset: str | None
    # split records: a record with ``side`` in {"train", "rollout"} and ``logprobs``
    side: str | None = None
    logprobs: str | None = None
    batch_size: str | None = "batch_size"

    @property
    def required(self) -> tuple[str, ...]:
        return (self.ids, self.train, self.rollout)

    @property
    def names(self) -> frozenset[str]:
        """Every key this format reads."""
        optional = (self.mask, self.sample, self.rollout_ids, self.log_kept_mass,
                    self.position_offset, self.side, self.logprobs, self.batch_size)  # fmt: skip
        return frozenset((*self.required, *self.prompt, *(n for n in optional if n)))


FORMATS = MappingProxyType(
    {
        "generic": LogFormat(
            name="generic",
            ids="response_ids",
            train="train_logprobs",
            rollout="rollout_logprobs",
            mask="mask",
            prompt=("prompt_id",),
            sample="sample_id",
            rollout_ids="rollout_response_ids",
            log_kept_mass="log_kept_mass",
            position_offset="position_offset",
            side="side",
            logprobs="logprobs",
        ),
        "verl": LogFormat(
            name="verl",
            ids="responses",
            train="old_log_probs",
            rollout="rollout_log_probs",
            mask="response_mask",
            prompt=("uid", "prompt_id", "index"),
            sample="sample_id",
            rollout_ids="rollout_responses",
            log_kept_mass="log_kept_mass",
            position_offset="position_offset",
        ),
        "trl": LogFormat(
            name="trl",
            ids="completion_ids",
            train="old_per_token_logps",
            rollout="sampling_per_token_logps",
            mask="completion_mask",
            prompt=("prompt_id", "prompt"),
            sample="sample_id",
            rollout_ids="sampling_completion_ids",
            log_kept_mass="log_kept_mass",
            position_offset="position_offset",
        ),
    }
)


def detect_format(record: dict) -> str | None:
    """The format whose required keys a record carries, or ``None`` when none fits."""
    for name, fmt in FORMATS.items():
        if all(k in record for k in fmt.required):
            return name
    generic = FORMATS["generic"]
    if generic.side in record and generic.logprobs in record and generic.ids in record:
        return "generic"
    return None


def field_hints(keys) -> str:
    """``; did you mean ...`` naming, for each of ``keys`` that no format reads, the required
    field of a format closest to it (``old_logprobs``: ``old_log_probs``); ``""`` when none is
    close. For the message on a record or a table whose fields fit no format."""
    known = frozenset().union(*(f.names for f in FORMATS.values()))
    required = {name for f in FORMATS.values() for name in f.required}
    unknown = sorted(k for k in keys if isinstance(k, str) and k not in known)
    near = {key: closest(key, required, VALUE_CUTOFF) for key in unknown}
    hints = [f"'{name}' for '{key}'" for key, name in near.items() if name]
    return f"; did you mean {', '.join(hints)}?" if hints else ""


def near_key(missing: str, keys) -> str:
    """``; the record has 'X'`` when one of ``keys`` is a slip away from the ``missing`` key."""
    near = closest(missing, [k for k in keys if isinstance(k, str)], VALUE_CUTOFF)
    return f"; the record has '{near}'" if near else ""


# How a log's records are stored, and the file name endings that select each.
FILE_FORMATS = ("jsonl", "parquet", "arrow")
_ENDINGS = {".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow"}


def file_format_of(path: str) -> str:
    """The file format a log's name selects: ``.parquet``/``.pq`` Parquet, ``.arrow``/``.feather``
    Arrow IPC, anything else JSONL."""
    return _ENDINGS.get(os.path.splitext(path)[1].lower(), "jsonl")
