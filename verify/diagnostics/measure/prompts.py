"""The prompts of ``python -m verify measure``: a prompt file's lines, or token windows.

``read_prompts`` reads a prompt file (UTF-8, one prompt per non-blank line). ``prompt_rows``
turns it into token rows with the model's tokenizer (UTF-8 bytes for the byte-level shipped
model, the folder's ``tokenizer.json`` for a checkpoint). The generation kernels serve a batch
of prompts of one length, without a padding mask, so every row is cut to the shortest prompt's
length (at most ``PROMPT_TOKENS``); ``Prompts.cut`` counts the prompts that lost tokens, and the
command warns with the counts. Without a prompt file the shipped model's held-out windows are
the prompts; a checkpoint has no held-out text, so its windows are drawn uniformly from its
vocabulary (seeded) and need no tokenizer.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.contracts.bounded import LIMITS, NotRegularFile, read_file

__all__ = ["PROMPT_TOKENS", "MeasureError", "Prompts", "cut_warning", "prompt_rows", "read_prompts"]

PROMPT_TOKENS = 32  # the longest prompt kept


class MeasureError(KernelContractsError):
    """An input of ``measure`` that cannot be used (the message names it)."""


class Prompts(NamedTuple):
    """Prompt token rows and how they were made.

    ``rows``: ``[prompts, width]`` int32 token ids. ``source``: how the outputs name them (the
    prompt file, or how the windows were drawn). ``cut``: prompts of the file that were longer
    than ``width`` tokens and lost their tail; ``longest``: the longest prompt's tokens (equal
    to ``width`` for windows)."""

    rows: np.ndarray
    source: str
    cut: int = 0
    longest: int = 0


def read_prompts(path: str) -> list[str]:
    """The non-blank lines of the UTF-8 file at ``path``; ``MeasureError`` naming the file (and
    the line of an undecodable byte) when it cannot be read or holds no prompt."""
    try:
        data = read_file(path, LIMITS["prompts"])
    except FileNotFoundError:
        raise MeasureError(f"--prompts {path}: no such file") from None
    except NotRegularFile as err:
        raise MeasureError(f"--prompts {path}: is {err.kind}, not a prompt file") from None
    except OSError as err:
        raise MeasureError(f"--prompts {path}: cannot read: {err.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise MeasureError(f"--prompts {path}:{line}: not UTF-8 text ({err.reason})") from None
    texts = [t for t in text.splitlines() if t.strip()]
    if not texts:
        raise MeasureError(f"--prompts {path}: holds no prompts (one per non-blank line)")
    return texts


def prompt_rows(
    loaded, path: str | None, count: int, new_tokens: int, seed: int, *, chat: bool = False
) -> Prompts:
    """The prompts of model ``loaded`` (``run.Loaded``): the file at ``path`` cut to one
    length, or ``count`` windows (the shipped model's held-out text, or a checkpoint's
    vocabulary drawn with ``seed``); every row leaves room for ``new_tokens`` in the model's
    context. ``chat``: the file's lines are user messages rendered through the GGUF model's
    chat template, served whole (``MeasureError`` unless they encode to one length)."""
    room = loaded.context - new_tokens
    if room < 1:
        raise MeasureError(
            f"--new-tokens {new_tokens}: {loaded.name} has a context of {loaded.context} "
            "tokens, which must hold at least one prompt token more"
        )
    width = room if chat else min(PROMPT_TOKENS, room)
    if path is None:
        return _windows(loaded, count, width, seed)
    texts = read_prompts(path)
    ids = loaded.tokenize(_chat(loaded.name, texts) if chat else texts)
    if chat and len({len(row) for row in ids}) > 1:
        lengths = ", ".join(f"line {n + 1}: {len(row)}" for n, row in enumerate(ids))
        raise MeasureError(
            f"--prompts {path}: the chat prompts encode to different lengths ({lengths} "
            "tokens); cutting one would drop the assistant's cue at its end"
        )
    empty = [n + 1 for n, row in enumerate(ids) if not row]
    if empty:
        raise MeasureError(f"--prompts {path}: prompt {empty[0]} encodes to no tokens")
    lengths = [len(row) for row in ids]
    width = min(width, *lengths)
    rows = np.asarray([row[:width] for row in ids], np.int64)
    if rows.max() >= loaded.vocab:
        raise MeasureError(
            f"--prompts {path}: token id {int(rows.max())} lies outside the vocabulary of "
            f"{loaded.name} [0, {loaded.vocab})"
        )
    cut = sum(n > width for n in lengths)
    return Prompts(rows.astype(np.int32), path, cut, max(lengths))


def _chat(model: str, texts: list[str]) -> list[str]:
    from kernel_contracts.kernels.model.checkpoints import checkpoint_chat
    from kernel_contracts.kernels.model.hf.errors import CheckpointError

    try:
        return checkpoint_chat(model, texts)
    except CheckpointError as err:
        raise MeasureError(f"--chat-template: {err}") from None


def _windows(loaded, count: int, width: int, seed: int) -> Prompts:
    if loaded.windows is not None:
        from kernel_contracts.kernels.emulation import prompts_from

        width = min(width, loaded.windows.shape[1])
        rows = prompts_from(loaded.windows, count, width, seed)
        return Prompts(rows, f"{count} held-out windows", 0, width)
    rows = np.random.default_rng(seed).integers(0, loaded.vocab, (count, width))
    source = f"{count} windows drawn uniformly from the vocabulary (seed {seed})"
    return Prompts(rows.astype(np.int32), source, 0, width)


def cut_warning(prompts: Prompts) -> str | None:
    """The warning for prompts cut to one length, with the counts; ``None`` when none was."""
    if not prompts.cut:
        return None
    n, width = prompts.rows.shape
    return (
        f"{prompts.source}: {prompts.cut} of {n} prompts cut to {width} tokens (the longest "
        f"had {prompts.longest}): a batch serves prompts of one length, so every prompt is cut "
        f"to the shortest (at most {PROMPT_TOKENS} tokens)"
    )
