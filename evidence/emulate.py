"""Emulation evidence: what a contract's ``evidence.emulate`` asks the kernels to run.

``emulate_contract(contract)`` reads the contract's evidence settings (``evidence.emulate``:
the model, its prompts, ``max_new_tokens`` and seed; the sampling policy; the runtime clauses'
serving batch), loads the model, puts it on the contract's two kernels
(``kernels.emulation.decoder_pair`` or ``user_pair``), draws the prompts (seeded) and hands
these plain values to ``kernels.emulation.emulate``, whose token table it returns: one row per
generated token, one 1-D numpy array per column.

The model is the shipped checkpoint by name (``tiny-lm``), whose prompts are cut from its
held-out text; a user model (``model: "package.module:function"`` with ``params: PATH``, see
:mod:`kernels.model.user_model`), imported from the contract file's directory
(``model_directory``) only with the user's consent (``emulate_contract``'s ``trust_code``),
whose prompts come from the params file's ``extra/prompts`` windows or, without them,
uniformly from the vocabulary; or a Hugging Face checkpoint
(``model: "hf:FOLDER"``, see :mod:`kernels.model.hf`) or a GGUF file (``model: "gguf:FILE"``,
see :mod:`kernels.model.gguf`), for which ``prompts`` is a count of
prompts (``PROMPT_BYTES`` tokens) drawn uniformly from its vocabulary, or a text file of
prompts (one a line, blank lines skipped) encoded by the checkpoint's tokenizer, served in the
file's order, each whole: the rows right-padded to the longest prompt, each with its own length
(``kernels.emulation.emulate``'s ``lengths``), so no prompt is cut; a prompt the model's context
cannot hold beside ``max_new_tokens`` is refused at ``evidence.emulate.prompts``. With
``chat_template: true`` each line is a user message rendered through the GGUF file's chat
template (``kernels.model.checkpoints.checkpoint_chat``), and the only sequence length is the
longest prompt's plus ``max_new_tokens``. Loading a checkpoint runs no code from its folder. The
model's vocabulary (256 bytes for the shipped one) is what is measured, whatever
``policy.vocab_size`` says; the divergence bounds do not depend on the vocabulary size.

Prompts are served in batches of a fixed size (``serving_batch``: the upper end of the
contract's first runtime ``batch_size`` range, at most ``MAX_BATCH``, and at most the number of
prompts); a short last batch is filled with further prompts (seeded by the batch's start)
whose rows are dropped. ``batch_size`` and ``sequence_length`` override both choices for one
setting of a runtime sweep (``sweep``, ``evidence.envelope.settings``): every batch then holds
exactly ``batch_size`` sequences, and each prompt is ``sequence_length - max_new_tokens``
tokens long, so every sequence ends at that length (``length_range`` gives the lengths the
model can run); a prompt file's shorter prompts are served whole and end before it. Batches of
fewer than ``CALL_ROWS`` rows are served that many rows to a call
(``kernels.emulation.decoder_pair``'s ``groups``: the kernels still built for the batch, and
each batch sampling with its own key), with the bits of one call for each batch (a padded
program's rows, below); not where a matmul shares one scale over all its rows.

With ``shared=True`` (the default) the settings of a sweep share one compiled program per
kernel: each runs padded to the largest batch and the longest prompt of the settings whose
reduction splits it shares (``kernels.batching.split_class``, ``kernels.attention.kv_splits``),
the padding rows and positions dropped, with the bits it gives in its own shape. Where a matmul
shares one scale over all its rows (``per_tensor`` scaling of FP8 or int8 inputs), rows are not
independent, and every setting runs in its own shape, as does the one setting of a sweep of
one. With its batches in one call (above), the shared sweep of ``fp8-emulated.yaml`` costs
0.6 of the CPU time of one program per setting (``bench/bench_emulate_compile.py``).

``prompt_count`` counts a contract's prompts, ``prompt_stream`` turns a prompt file into one
token stream (the diagnostic commands cut their windows from it), and ``checkpoint_sha256``
fingerprints the model's files. Importing this module imports no JAX: the model is loaded on
first use.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from importlib import resources
from typing import NamedTuple

import numpy as np

from kernel_contracts.contracts.bounded import LIMITS, UnsafeFile, open_regular, read_file
from kernel_contracts.contracts.model import Contract, EmulateEvidence, KernelSpec
from kernel_contracts.contracts.sections import CHECKPOINT_PREFIXES
from kernel_contracts.evidence.envelope import settings
from kernel_contracts.kernels.emulation import (
    Decoding,
    Padding,
    ServedPair,
    decoder_pair,
    emulate,
    prompts_from,
    user_pair,
)

__all__ = [
    "CALL_ROWS",
    "MAX_BATCH",
    "PROMPT_BYTES",
    "checkpoint_sha256",
    "emulate_contract",
    "length_range",
    "model_directory",
    "prompt_count",
    "prompt_stream",
    "serving_batch",
    "sweep",
    "sweep_padding",
]

PROMPT_BYTES = 32  # drawn prompts' length, shortened when the context cannot hold it and the output
MAX_BATCH = 32  # the largest serving batch emulated
CALL_ROWS = 16  # batches of fewer rows are served this many rows to a call, each its own key

_PROMPTS_KEY = "evidence.emulate.prompts"
_CHAT_KEY = "evidence.emulate.chat_template"


def _settings(contract: Contract) -> EmulateEvidence:
    return contract.evidence.emulate or EmulateEvidence()


def serving_batch(contract: Contract, prompts: int) -> int:
    """How many sequences K_inf serves at once for this contract."""
    batch = MAX_BATCH
    for clause in contract.runtime:
        if clause.batch_size is not None:
            batch = min(batch, max(1, int(clause.batch_size[1])))
            break
    return max(1, min(batch, prompts))


def sweep(contract: Contract) -> list[tuple[int | None, int | None]]:
    """The (batch size, sequence length) settings ``evidence.envelope.settings`` gives for
    ``contract``: batches of at most ``MAX_BATCH``, lengths within ``length_range``."""
    return settings(contract, MAX_BATCH, lambda: length_range(contract))


def model_directory(contract: Contract) -> str:
    """The directory a user model's module is imported from: the contract file's."""
    path = contract.source.path
    return os.path.dirname(os.path.abspath(path)) if os.path.isfile(path) else os.getcwd()


def _is_user(model: str) -> bool:
    from kernel_contracts.kernels.model.user_model import is_entry_point

    return is_entry_point(model)


def _checkpoint(model: str) -> str | None:
    """The checkpoint spec (``hf:FOLDER``, ``gguf:FILE``) ``model`` is, or ``None``."""
    return model if model.startswith(CHECKPOINT_PREFIXES) else None


# -- prompts -------------------------------------------------------------------------------


def _prompt_texts(path: str) -> list[str]:
    return [text for _, text in _prompt_lines(path)]


def _prompt_lines(path: str) -> list[tuple[int, str]]:
    """The prompt file's non-blank lines, each with its line number (from 1)."""
    from kernel_contracts.kernels.model.user_model import UserModelError

    try:
        text = read_file(path, LIMITS["prompts"]).decode("utf-8")
        texts = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    except FileNotFoundError:
        raise UserModelError(_PROMPTS_KEY, f"no such file: {path}") from None
    except UnsafeFile as err:
        raise UserModelError(_PROMPTS_KEY, f"cannot read {err}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserModelError(_PROMPTS_KEY, f"cannot read {path} as UTF-8 text: {err}") from None
    lines = [(n + 1, t) for n, t in enumerate(texts) if t.strip()]
    if not lines:
        raise UserModelError(_PROMPTS_KEY, f"{path} holds no prompts")
    return lines


def prompt_count(ev: EmulateEvidence) -> int:
    """How many prompts ``ev`` runs: its count, or the prompts of its prompt file."""
    return len(_prompt_texts(ev.prompts)) if isinstance(ev.prompts, str) else ev.prompts


def _encoded(path: str, checkpoint: str, vocab: int, texts: list[str]) -> list[list[int]]:
    """``texts`` (read from the prompt file ``path``) encoded by the tokenizer of the checkpoint
    spec ``checkpoint``, every id checked against the model's vocabulary."""
    from kernel_contracts.kernels.model.checkpoints import checkpoint_tokenizer
    from kernel_contracts.kernels.model.hf.errors import CheckpointError
    from kernel_contracts.kernels.model.hf.tokenizer import encode
    from kernel_contracts.kernels.model.user_model import MODEL_KEY, UserModelError

    try:
        ids = encode(checkpoint_tokenizer(checkpoint), texts)
    except CheckpointError as err:
        raise UserModelError(MODEL_KEY, f"{checkpoint}: {err}") from None
    top = max((max(row) for row in ids if row), default=-1)
    if top >= vocab:
        raise UserModelError(
            _PROMPTS_KEY,
            f"{path}: the tokenizer gives token id {top}, outside the model's vocabulary "
            f"[0, {vocab})",
        )
    return ids


def _chat_texts(path: str, checkpoint: str, texts: list[str]) -> list[str]:
    """``texts`` (the lines of the prompt file ``path``) as one-turn chats rendered by the chat
    template of the checkpoint spec ``checkpoint``."""
    from kernel_contracts.kernels.model.checkpoints import checkpoint_chat
    from kernel_contracts.kernels.model.hf.errors import CheckpointError
    from kernel_contracts.kernels.model.user_model import UserModelError

    try:
        return checkpoint_chat(checkpoint, texts)
    except CheckpointError as err:
        raise UserModelError(_CHAT_KEY, f"{checkpoint}: {err}") from None


class _Rows(NamedTuple):
    """A prompt file's prompts as token rows right-padded with zeros to the longest, and each
    prompt's length (its own tokens, served whole)."""

    rows: np.ndarray  # [prompts, longest] int32
    lengths: np.ndarray  # [prompts] int64


def _hf_rows(ev: EmulateEvidence, checkpoint: str, vocab: int, room: int) -> _Rows | None:
    """The prompt file's prompts as padded token rows, or ``None`` (a count). ``room``: the
    most prompt tokens the model's context holds beside the ``max_new_tokens``."""
    if not isinstance(ev.prompts, str):
        return None
    from kernel_contracts.kernels.model.user_model import UserModelError

    numbers, texts = zip(*_prompt_lines(ev.prompts), strict=True)
    if ev.chat_template:
        texts = _chat_texts(ev.prompts, checkpoint, list(texts))
    ids = _encoded(ev.prompts, checkpoint, vocab, list(texts))
    lengths = np.asarray([len(row) for row in ids], np.int64)
    if not lengths.all():
        line = numbers[int(np.argmin(lengths))]
        raise UserModelError(_PROMPTS_KEY, f"{ev.prompts}:{line}: the prompt encodes to no tokens")
    longest = int(lengths.max())
    if longest > room and not ev.chat_template:  # a chat prompt's error names its key (_lengths)
        line = numbers[int(np.argmax(lengths))]
        raise UserModelError(
            _PROMPTS_KEY,
            f"{ev.prompts}:{line}: the prompt encodes to {longest} tokens, more than the "
            f"{room} that the model's context holds beside max_new_tokens "
            f"({ev.max_new_tokens}); a prompt is served whole, never cut: shorten it",
        )
    rows = np.zeros((len(ids), longest), np.int32)
    for n, row in enumerate(ids):
        rows[n, : len(row)] = row
    return _Rows(rows, lengths)


def prompt_stream(path: str, checkpoint: str, vocab: int) -> np.ndarray:
    """The prompt file ``path`` as one stream of real text: its prompts joined by newlines and
    encoded whole by the tokenizer of the checkpoint spec ``checkpoint``.
    The diagnostic commands cut their token windows from it. Raises ``UserModelError`` at
    ``evidence.emulate.prompts`` for an unreadable or empty file or an id outside ``vocab``."""
    (ids,) = _encoded(path, checkpoint, vocab, ["\n".join(_prompt_texts(path))])
    return np.asarray(ids, np.int32)


# -- the model on the contract's kernels -----------------------------------------------------


def _hf_config(ev: EmulateEvidence, checkpoint: str):
    from kernel_contracts.kernels.model.checkpoints import checkpoint_config
    from kernel_contracts.kernels.model.hf.errors import CheckpointError
    from kernel_contracts.kernels.model.user_model import MODEL_KEY, UserModelError

    try:
        return checkpoint_config(checkpoint)
    except CheckpointError as err:
        raise UserModelError(MODEL_KEY, f"cannot load {ev.model}: {err}") from None


def _lengths(ev: EmulateEvidence, width: int, context: int | None) -> tuple[int, int]:
    """The sequence lengths a model of ``context`` (``None``: any) runs with prompts of at
    most ``width`` tokens: a prompt of at least one token and the ``max_new_tokens``."""
    longest = ev.max_new_tokens + width
    if ev.chat_template and context is not None and longest > context:
        from kernel_contracts.kernels.model.user_model import UserModelError

        raise UserModelError(
            _CHAT_KEY,
            f"the chat prompts ({width} tokens) and max_new_tokens ({ev.max_new_tokens}) exceed "
            f"the model's context of {context} tokens",
        )
    hi = longest if context is None else min(context, longest)
    return (hi if ev.chat_template else ev.max_new_tokens + 1), hi  # a chat prompt is whole


def length_range(contract: Contract) -> tuple[int, int]:
    """The shortest and longest sequences (prompt + generated tokens) the emulation of
    ``contract`` can run: a prompt of at least one token, within the model's context and its
    prompt windows (a user model without windows: prompts of at most ``PROMPT_TOKENS``)."""
    ev = _settings(contract)
    checkpoint = _checkpoint(ev.model)
    if checkpoint is not None:
        config = _hf_config(ev, checkpoint)
        context = config.max_position_embeddings
        rows = _hf_rows(ev, checkpoint, config.vocab_size, context - ev.max_new_tokens)
        width = PROMPT_BYTES if rows is None else rows.rows.shape[1]
        return _lengths(ev, width, context)
    if _is_user(ev.model):
        from kernel_contracts.kernels.model.user_model import (
            MODEL_KEY,
            PROMPT_TOKENS,
            UserModelError,
            load_params,
        )

        if ev.params is None:
            raise UserModelError(MODEL_KEY, f"the entry point {ev.model!r} needs params: PATH")
        windows = load_params(ev.params)[1]
        return _lengths(ev, PROMPT_TOKENS if windows is None else windows.shape[1], None)
    from kernel_contracts.kernels.model.tinylm import load_pretrained, pretrained_extra

    context = load_pretrained(ev.model).config.context
    return _lengths(ev, pretrained_extra(ev.model)["heldout_windows"].shape[1], context)


class _Served(NamedTuple):
    """The contract's model on its kernel pair, and where its prompts come from."""

    pair: Callable[[Padding | None, int], ServedPair]  # the pair (padded or not; batches a call)
    vocab: int
    windows: np.ndarray | None  # prompt windows; None: the rows, or uniform random prompts
    prompt_len: int  # the default prompt length
    lengths: tuple[int, int]  # the sequence lengths it can run
    rows: _Rows | None = None  # the prompts themselves, served in order (a prompt file)


def _decoding(contract: Contract, ev: EmulateEvidence) -> Decoding:
    policy = contract.policy
    return Decoding(ev.max_new_tokens, policy.temperature, policy.top_k, policy.top_p)


def _on_decoder(contract: Contract, ev: EmulateEvidence, batch: int, model, context: int):
    """A decoder with the ``Ops`` injection points (TinyLM, a Hugging Face decoder) on the
    contract's kernels, once its context is known to hold the continuation."""
    if not 1 <= ev.max_new_tokens < context:
        raise ValueError(
            f"evidence.emulate.max_new_tokens must be in [1, {context - 1}] for model "
            f"{ev.model!r} (context {context}), got {ev.max_new_tokens}"
        )
    kernels, decoding = contract.kernels, _decoding(contract, ev)

    def pair(padding: Padding | None, groups: int) -> ServedPair:
        return decoder_pair(
            model, kernels.train, kernels.inference, batch=batch, decoding=decoding,
            padding=padding, groups=groups,
        )  # fmt: skip

    return pair


def _shipped(contract: Contract, ev: EmulateEvidence, batch: int) -> _Served:
    from kernel_contracts.kernels.model.tinylm import load_pretrained, pretrained_extra

    model = load_pretrained(ev.model)
    context = model.config.context
    pair = _on_decoder(contract, ev, batch, model, context)
    windows = pretrained_extra(ev.model)["heldout_windows"].astype(np.int32)
    lengths = _lengths(ev, windows.shape[1], context)
    prompt_len = min(PROMPT_BYTES, context - ev.max_new_tokens)
    return _Served(pair, model.config.vocab, windows, prompt_len, lengths)


def _hf(contract: Contract, ev: EmulateEvidence, batch: int) -> _Served:
    from kernel_contracts.kernels.model.checkpoints import load_checkpoint
    from kernel_contracts.kernels.model.hf.errors import CheckpointError
    from kernel_contracts.kernels.model.user_model import MODEL_KEY, UserModelError

    try:
        model = load_checkpoint(ev.model)
    except CheckpointError as err:
        raise UserModelError(MODEL_KEY, f"cannot load {ev.model}: {err}") from None
    context, vocab = model.context, model.config.vocab_size
    pair = _on_decoder(contract, ev, batch, model, context)
    rows = _hf_rows(ev, ev.model, vocab, context - ev.max_new_tokens)
    if rows is None:  # prompts drawn from the vocabulary
        width = prompt_len = min(PROMPT_BYTES, context - ev.max_new_tokens)
    else:  # a prompt file's prompts, served whole
        width = prompt_len = rows.rows.shape[1]
    return _Served(pair, vocab, None, prompt_len, _lengths(ev, width, context), rows)


def _user(contract: Contract, ev: EmulateEvidence, batch: int, trust_code: bool) -> _Served:
    from kernel_contracts.kernels.model.user_model import PROMPT_TOKENS, load_user_model

    um = load_user_model(ev.model, ev.params, model_directory(contract), trust_code=trust_code)
    kernels = contract.kernels
    pair = user_pair(
        um, kernels.train, kernels.inference, batch=batch, decoding=_decoding(contract, ev)
    )
    width = PROMPT_TOKENS if um.windows is None else um.windows.shape[1]
    lengths = _lengths(ev, width, None)
    return _Served(lambda *_: pair, um.vocab, um.windows, min(PROMPT_TOKENS, width), lengths)


def _prompts(
    served: _Served, count: int, length: int, seed: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """``count`` prompt rows of ``length`` columns and each one's length (``None``: all of
    them): a prompt file's in order (again from the first), each at most ``length`` tokens,
    or drawn prompts of ``length`` tokens."""
    if served.rows is not None:
        at = np.arange(count) % served.rows.rows.shape[0]
        return served.rows.rows[at, :length], np.minimum(served.rows.lengths[at], length)
    if served.windows is not None:
        return prompts_from(served.windows, count, length, seed), None
    rng = np.random.default_rng(seed)
    return rng.integers(0, served.vocab, (count, length)).astype(np.int32), None


def emulate_contract(
    contract: Contract,
    *,
    progress: Callable[[int, int], None] | None = None,
    batch_size: int | None = None,
    sequence_length: int | None = None,
    trust_code: bool = False,
    shared: bool = True,
) -> dict[str, np.ndarray]:
    """The token table of ``contract``'s kernel pair on the model its ``evidence.emulate``
    names (module docstring).

    ``progress(done, total)`` is called after each served batch with prompts done so far.
    ``batch_size`` and ``sequence_length`` fix one setting of a runtime sweep. ``trust_code``
    is the user's consent to import a user model's module (``kernels.model.user_model``):
    without it such a model is a ``UserModelError``, and nothing is imported. ``shared`` (the
    default): a setting of the sweep runs padded to the shape the sweep's settings share, so
    all of them run one compiled program per kernel (``False``: in its own shape, one program
    per setting; the same bits either way; ``bench/bench_emulate_compile.py`` compares them).
    """
    ev = _settings(contract)
    count = prompt_count(ev)
    if count < 1:
        raise ValueError(f"evidence.emulate.prompts must be at least 1, got {count}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"evidence.emulate: batch size must be at least 1, got {batch_size}")
    batch = serving_batch(contract, count) if batch_size is None else batch_size
    if _checkpoint(ev.model) is not None:
        served = _hf(contract, ev, batch)
    elif _is_user(ev.model):
        served = _user(contract, ev, batch, trust_code)
    else:
        served = _shipped(contract, ev, batch)
    prompt_len = served.prompt_len
    if sequence_length is not None:
        lo, hi = served.lengths
        if not lo <= sequence_length <= hi:
            raise ValueError(
                f"evidence.emulate: sequence length {sequence_length} is outside the lengths "
                f"model {ev.model!r} can run with max_new_tokens {ev.max_new_tokens}: [{lo}, {hi}]"
            )
        prompt_len = sequence_length - ev.max_new_tokens
    padding = None
    if shared and (batch_size, sequence_length) != (None, None) and not _is_user(ev.model):
        setting = (batch_size, sequence_length)
        padding = sweep_padding(contract, count, prompt_len, setting)
    prompts, lengths = _prompts(served, count, prompt_len, ev.seed)
    last = (count - 1) // batch * batch  # the last batch's first prompt
    missing = last + batch - count
    fill, fill_lengths = (
        _prompts(served, missing, prompt_len, ev.seed + 1 + last) if missing else (None, None)
    )
    groups = _groups(contract, batch, -(-count // batch), padding)
    return emulate(
        served.pair(padding, groups), prompts, seed=ev.seed, fill=fill, lengths=lengths,
        fill_lengths=fill_lengths, progress=progress,
    )  # fmt: skip


def _groups(contract: Contract, batch: int, batches: int, padding: Padding | None) -> int:
    """How many batches of ``batch`` one call serves: as many as fill ``CALL_ROWS`` rows (a
    padded program's rows), at most ``batches``; one where a matmul shares a scale over its
    rows."""
    kernels = contract.kernels
    if not all(map(_rows_independent, (kernels.train, kernels.inference))):
        return 1
    rows = CALL_ROWS if padding is None else padding.rows
    return max(1, min(rows // batch, batches))


# -- one program per sweep -------------------------------------------------------------------


def _rows_independent(spec: KernelSpec) -> bool:
    """Whether ``spec``'s matmul computes each row of its left operand from that row alone:
    every scaling but one scale shared by the whole tensor (which a wider-than-FP8 input
    never applies)."""
    from kernel_contracts.kernels.numerics.formats import format_info

    m = spec.matmul
    scaled = m.is_int8 or format_info(m.inputs).is_fp8
    return not (scaled and m.scaling.kind == "per_tensor")


def sweep_padding(
    contract: Contract, count: int, prompt_len: int, setting: tuple[int | None, int | None]
) -> Padding | None:
    """The padded shape in which ``setting`` of the contract's sweep runs, so that the settings
    share one compiled program per kernel with the bits each gives alone; ``None`` (its own
    shape) outside the sweep, in a sweep of one setting, or where rows are not independent.

    The settings whose batches have the same reduction splits (one ``split_class``) run as
    the largest of their batches; of those, the settings whose caches have the same number of
    attention splits run with the longest of their prompts. The rows of a batch are
    independent (every matmul scales per row or block), the padding positions come after
    every position that is kept, and the reduction trees are padded with zeros, so no kept bit
    changes (``tests/evidence/test_sweep_compiles_once.py`` pins them)."""
    from kernel_contracts.kernels.attention import kv_splits
    from kernel_contracts.kernels.batching import split_class

    kernels = contract.kernels
    grid = sweep(contract)
    if setting not in grid or len(grid) == 1:
        return None  # outside the sweep, or nothing to share
    if not all(map(_rows_independent, (kernels.train, kernels.inference))):
        return None
    new = _settings(contract).max_new_tokens
    batching = kernels.inference.batching
    page = kernels.inference.attention.page_size

    def shape(b: int | None, length: int | None) -> tuple[int, int, int, int]:
        """(batch, prompt width, split class, attention splits) of a setting."""
        b = serving_batch(contract, count) if b is None else b
        width = prompt_len if length is None else length - new
        cls = split_class(b, batching)
        return b, width, cls, kv_splits(cls, width + new, page, batching)

    _, _, cls, kv = shape(*setting)
    shapes = [shape(*s) for s in grid]
    rows = max(b for b, _, c, _ in shapes if c == cls)
    width = max(w for _, w, c, k in shapes if (c, k) == (cls, kv))
    return Padding(rows, width, cls)


# -- fingerprints ----------------------------------------------------------------------------


def _shipped_sha256(model: str) -> str | None:
    """sha256 of the shipped checkpoint file of ``model``; ``None`` when there is none."""
    try:
        from kernel_contracts.kernels.model.tinylm import (
            CHECKPOINTS,  # loaded on first use: logs need no JAX
        )

        files = CHECKPOINTS[model]
        data = (
            resources.files("kernel_contracts.kernels")
            .joinpath("checkpoints", files[0])
            .read_bytes()
        )
    except (KeyError, AttributeError, OSError):
        return None
    return hashlib.sha256(data).hexdigest()


def _hf_sha256(model: str) -> str | None:
    """sha256 of a checkpoint's files (an ``hf:`` folder's config and weights, a ``gguf:``
    file); ``None`` for another model."""
    if _checkpoint(model) is None:
        return None
    from kernel_contracts.kernels.model.checkpoints import checkpoint_sha256

    return checkpoint_sha256(model)


def _file_sha256(path: str) -> str | None:
    """sha256 of a user model's params file; ``None`` when it cannot be read."""
    try:
        with open_regular(path, LIMITS["params"]) as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:  # refusals (contracts.bounded.UnsafeFile) included
        return None


def checkpoint_sha256(ev: EmulateEvidence) -> str | None:
    """sha256 of the files of the model ``ev`` names: a user model's params file, an ``hf:``
    folder's config and weights, a ``gguf:`` file, or the shipped checkpoint file; ``None``
    when there is none or it cannot be read."""
    if ev.params is not None:
        return _file_sha256(ev.params)
    return _hf_sha256(ev.model) or _shipped_sha256(ev.model)
