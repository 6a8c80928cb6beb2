"""Evidence by emulation: the shipped policy through a contract's two kernels, measured per token.

``emulate(contract)`` loads the trained model named by ``contract.evidence.emulate``, draws
prompts from its held-out text (seeded), generates continuations with K_inf (the contract's
inference kernel: emulated matmuls, paged low-precision KV cache, dynamic batching) at the
contract's sampling policy, teacher-forces the same sequences through K_train, and measures
every generated token over the full vocabulary. The result is a token table: one row per
generated token, one 1-D numpy array per column.

Prompts are served in batches of a fixed size (the upper end of the contract's first runtime
``batch_size`` range, at most 32, and at most the number of prompts); a short last batch is
filled with further prompts whose rows are dropped, so every row was computed in a batch of
that size. ``batch_size`` and ``sequence_length`` override both choices for one setting of a
runtime sweep: every batch then holds exactly ``batch_size`` sequences, and each prompt is
``sequence_length - max_new_tokens`` bytes long, so every sequence ends at that length
(``length_range`` gives the lengths the model can run). The model's vocabulary (256 bytes) is
what is measured, whatever ``policy.vocab_size`` says; the divergence bounds do not depend on
the vocabulary size.
Sampling applies the policy's top-k / top-p; the metrics are always those of the full-vocabulary
distributions softmax(z/T) (``logprobs: full_vocab`` semantics).

A user model (``model: "package.module:function"`` with ``params: PATH``, see
:mod:`kernels.model.user_model`) runs the same loop: both kernels are the user's function through
:func:`kernels.diagnose.transform.on_kernel` (K_inf at the serving batch, K_train with fixed batching;
recognised attention in float32 in both), K_inf generates by rerunning the function on the
whole sequence buffer (no KV cache), and prompts come from the params file's ``extra/prompts``
windows or, without them, uniformly from the vocabulary. Its vocabulary is what it returns.

A Hugging Face checkpoint (``model: "hf:FOLDER"``, see :mod:`kernels.model.hf`) runs as the shipped
policy does: the decoder on K_inf's ``Ops`` decodes through the paged KV cache, the decoder on
K_train's teacher-forces. ``prompts`` is a count of prompts drawn uniformly from its vocabulary,
or a text file of prompts (one a line, blank lines skipped) encoded by the folder's
``tokenizer.json``, served in the file's order; every prompt is cut to the shortest one's
length (at most ``PROMPT_BYTES`` tokens), so each batch holds prompts of one length. Loading a
checkpoint runs no code from its folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from kernel_contracts.contracts.model import Contract, EmulateEvidence
from kernel_contracts.kernels.measurement.columns import TABLE_COLUMNS

__all__ = [
    "MAX_BATCH",
    "PROMPT_BYTES",
    "TABLE_COLUMNS",
    "emulate",
    "length_range",
    "prompt_count",
    "prompt_stream",
    "prompts_from",
    "serving_batch",
]

PROMPT_BYTES = 32  # prompt length, shortened when the context cannot hold it and the output
MAX_BATCH = 32  # the largest serving batch emulated


def serving_batch(contract: Contract, prompts: int) -> int:
    """How many sequences K_inf serves at once for this contract."""
    batch = MAX_BATCH
    for clause in contract.runtime:
        if clause.batch_size is not None:
            batch = min(batch, max(1, int(clause.batch_size[1])))
            break
    return max(1, min(batch, prompts))


def prompts_from(windows: np.ndarray, count: int, length: int, seed: int) -> np.ndarray:
    """``count`` prompts of ``length`` bytes cut at seeded offsets from held-out windows."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, windows.shape[0], count)
    starts = rng.integers(0, windows.shape[1] - length + 1, count)
    return np.stack([windows[r, s : s + length] for r, s in zip(rows, starts, strict=True)])


class _Pair(NamedTuple):
    """One model on a contract's two kernels: what the shared measurement loop needs."""

    name: str
    vocab: int
    windows: np.ndarray | None  # prompt windows; None: uniform random prompts
    prompt_len: int  # the default prompt length
    lengths: tuple[int, int]  # the sequence lengths it can run
    # (prompts, key, temperature) -> (tokens, z_inf, z_train) for one served batch
    run: Callable
    rows: np.ndarray | None = None  # the prompts themselves, served in order (a prompt file)


def _user(model: str) -> bool:
    from kernel_contracts.kernels.model.user_model import is_entry_point

    return is_entry_point(model)


def _hf(model: str) -> str | None:
    """The checkpoint folder an ``hf:FOLDER`` model names, or ``None``."""
    from kernel_contracts.contracts.sections import HF_PREFIX

    return model[len(HF_PREFIX) :] if model.startswith(HF_PREFIX) else None


_PROMPTS_KEY = "evidence.emulate.prompts"


def _prompt_texts(path: str) -> list[str]:
    from kernel_contracts.kernels.model.user_model import UserModelError

    try:
        with open(path, encoding="utf-8") as f:
            texts = [line.rstrip("\r\n") for line in f]
    except FileNotFoundError:
        raise UserModelError(_PROMPTS_KEY, f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserModelError(_PROMPTS_KEY, f"cannot read {path} as UTF-8 text: {err}") from None
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise UserModelError(_PROMPTS_KEY, f"{path} holds no prompts")
    return texts


def prompt_count(ev: EmulateEvidence) -> int:
    """How many prompts ``ev`` runs: its count, or the prompts of its prompt file."""
    return len(_prompt_texts(ev.prompts)) if isinstance(ev.prompts, str) else ev.prompts


def _encoded(path: str, folder: str, model: str, vocab: int, texts: list[str]) -> list[list[int]]:
    """``texts`` (read from the prompt file ``path``) encoded by the checkpoint's tokenizer,
    every id checked against the model's vocabulary."""
    from kernel_contracts.kernels.model.hf.errors import CheckpointError
    from kernel_contracts.kernels.model.hf.tokenizer import encode, read_tokenizer
    from kernel_contracts.kernels.model.user_model import MODEL_KEY, UserModelError

    try:
        ids = encode(read_tokenizer(folder), texts)
    except CheckpointError as err:
        raise UserModelError(MODEL_KEY, f"{model}: {err}") from None
    top = max((max(row) for row in ids if row), default=-1)
    if top >= vocab:
        raise UserModelError(
            _PROMPTS_KEY,
            f"{path}: the tokenizer gives token id {top}, outside the model's vocabulary "
            f"[0, {vocab})",
        )
    return ids


def _hf_rows(ev: EmulateEvidence, folder: str, vocab: int) -> np.ndarray | None:
    """The prompt file's prompts as token rows cut to the shortest, or ``None`` (a count)."""
    if not isinstance(ev.prompts, str):
        return None
    from kernel_contracts.kernels.model.user_model import UserModelError

    ids = _encoded(ev.prompts, folder, ev.model, vocab, _prompt_texts(ev.prompts))
    width = min(len(row) for row in ids)
    if width == 0:
        line = next(i for i, row in enumerate(ids) if not row)
        raise UserModelError(_PROMPTS_KEY, f"{ev.prompts}: prompt {line + 1} encodes to no tokens")
    return np.asarray([row[:width] for row in ids], np.int32)


def prompt_stream(path: str, folder: str, model: str, vocab: int) -> np.ndarray:
    """The prompt file ``path`` as one stream of real text: its prompts joined by newlines and
    encoded whole by the tokenizer of the checkpoint ``folder`` (``model`` names it in errors).
    The diagnostic commands cut their token windows from it. Raises ``UserModelError`` at
    ``evidence.emulate.prompts`` for an unreadable or empty file or an id outside ``vocab``."""
    (ids,) = _encoded(path, folder, model, vocab, ["\n".join(_prompt_texts(path))])
    return np.asarray(ids, np.int32)


def _hf_config(ev: EmulateEvidence, folder: str):
    from kernel_contracts.kernels.model.hf.config import read_config
    from kernel_contracts.kernels.model.hf.errors import CheckpointError
    from kernel_contracts.kernels.model.user_model import MODEL_KEY, UserModelError

    try:
        return read_config(folder)
    except CheckpointError as err:
        raise UserModelError(MODEL_KEY, f"cannot load {ev.model}: {err}") from None


def _directory(contract: Contract) -> str:
    """The directory a user model's module is imported from: the contract file's."""
    path = contract.source.path
    return os.path.dirname(os.path.abspath(path)) if os.path.isfile(path) else os.getcwd()


def length_range(contract: Contract) -> tuple[int, int]:
    """The shortest and longest sequences (prompt + generated tokens) the emulation of
    ``contract`` can run: a prompt of at least one token, within the model's context and its
    prompt windows (a user model without windows: prompts of at most ``PROMPT_TOKENS``)."""
    ev = contract.evidence.emulate or EmulateEvidence()
    folder = _hf(ev.model)
    if folder is not None:
        config = _hf_config(ev, folder)
        rows = _hf_rows(ev, folder, config.vocab_size)
        width = PROMPT_BYTES if rows is None else rows.shape[1]
        context = config.max_position_embeddings
        return ev.max_new_tokens + 1, min(context, ev.max_new_tokens + width)
    if _user(ev.model):
        from kernel_contracts.kernels.model.user_model import (
            MODEL_KEY,
            PROMPT_TOKENS,
            UserModelError,
            load_params,
        )

        if ev.params is None:
            raise UserModelError(MODEL_KEY, f"the entry point {ev.model!r} needs params: PATH")
        windows = load_params(ev.params)[1]
        width = PROMPT_TOKENS if windows is None else windows.shape[1]
        return ev.max_new_tokens + 1, ev.max_new_tokens + width
    from kernel_contracts.kernels.model.tinylm import load_pretrained, pretrained_extra

    context = load_pretrained(ev.model).config.context
    width = pretrained_extra(ev.model)["heldout_windows"].shape[1]
    return ev.max_new_tokens + 1, min(context, ev.max_new_tokens + width)


def _decoder_run(contract: Contract, ev: EmulateEvidence, batch: int, model, context: int):
    """The ``run`` of a :class:`_Pair` for a model with the :class:`~kernels.ops.Ops` injection
    points (TinyLM, a Hugging Face decoder): sample on K_inf through the paged cache, then
    teacher-force the samples on K_train."""
    from kernel_contracts.kernels.model.decode import generate, teacher_force
    from kernel_contracts.kernels.model.tinylm import with_ops
    from kernel_contracts.kernels.ops import inference_ops, train_ops

    if not 1 <= ev.max_new_tokens < context:
        raise ValueError(
            f"evidence.emulate.max_new_tokens must be in [1, {context - 1}] for model "
            f"{ev.model!r} (context {context}), got {ev.max_new_tokens}"
        )
    k_train = with_ops(model, train_ops(contract.kernels.train))
    k_inf = with_ops(model, inference_ops(contract.kernels.inference, batch_size=batch))
    policy = contract.policy

    def run(chunk, key, temperature):
        tokens, z_inf = generate(
            k_inf, chunk, key, temperature, new_tokens=ev.max_new_tokens,
            top_k=policy.top_k, top_p=policy.top_p,
        )  # fmt: skip
        return tokens, z_inf, teacher_force(k_train, tokens, prompt_len=chunk.shape[1])

    return run


def _shipped_pair(contract: Contract, ev: EmulateEvidence, batch: int) -> _Pair:
    from kernel_contracts.kernels.model.tinylm import load_pretrained, pretrained_extra

    model = load_pretrained(ev.model)
    context = model.config.context
    run = _decoder_run(contract, ev, batch, model, context)
    windows = pretrained_extra(ev.model)["heldout_windows"].astype(np.int32)
    lengths = (ev.max_new_tokens + 1, min(context, ev.max_new_tokens + windows.shape[1]))
    prompt_len = min(PROMPT_BYTES, context - ev.max_new_tokens)
    return _Pair(ev.model, model.config.vocab, windows, prompt_len, lengths, run)


def _hf_pair(contract: Contract, ev: EmulateEvidence, batch: int) -> _Pair:
    from kernel_contracts.kernels.model.hf.checkpoint import load_decoder
    from kernel_contracts.kernels.model.hf.errors import CheckpointError
    from kernel_contracts.kernels.model.user_model import MODEL_KEY, UserModelError

    folder = _hf(ev.model)
    try:
        model = load_decoder(folder)
    except CheckpointError as err:
        raise UserModelError(MODEL_KEY, f"cannot load {ev.model}: {err}") from None
    context, vocab = model.context, model.config.vocab_size
    run = _decoder_run(contract, ev, batch, model, context)
    rows = _hf_rows(ev, folder, vocab)

    width = PROMPT_BYTES if rows is None else rows.shape[1]
    lengths = (ev.max_new_tokens + 1, min(context, ev.max_new_tokens + width))
    prompt_len = min(PROMPT_BYTES, width, context - ev.max_new_tokens)
    return _Pair(ev.model, vocab, None, prompt_len, lengths, run, rows)


def _user_pair(contract: Contract, ev: EmulateEvidence, batch: int) -> _Pair:
    from kernel_contracts.kernels.diagnose.transform import on_kernel
    from kernel_contracts.kernels.model.user_model import (
        MODEL_KEY,
        PROMPT_TOKENS,
        UserModelError,
        decoder,
        load_user_model,
        output_shape,
        teacher_forcer,
    )

    um = load_user_model(ev.model, ev.params, _directory(contract))
    f_inf = on_kernel(um.fn, contract.kernels.inference, batch_size=batch, attention="float32")
    f_train = on_kernel(um.fn, contract.kernels.train, batching="fixed", attention="float32")
    generate, teacher_force = decoder(f_inf), teacher_forcer(f_train)
    policy, new = contract.policy, ev.max_new_tokens

    def run(chunk, key, temperature):
        # the one shape both kernels run, checked before anything is compiled
        shape = output_shape(um.fn, um.params, ev.model, chunk.shape[0], chunk.shape[1] + new - 1)
        if shape[2] != um.vocab:
            raise UserModelError(MODEL_KEY, f"{ev.model} changes its vocabulary with the shape")
        try:
            tokens, z_inf = generate(
                um.params, chunk, key, temperature, new_tokens=new,
                top_k=policy.top_k, top_p=policy.top_p,
            )  # fmt: skip
            z_train = teacher_force(um.params, tokens, prompt_len=chunk.shape[1])
        except NotImplementedError as err:  # a primitive the transform cannot emulate through
            raise UserModelError(MODEL_KEY, str(err)) from None
        return tokens, z_inf, z_train

    width = PROMPT_TOKENS if um.windows is None else um.windows.shape[1]
    lengths = (ev.max_new_tokens + 1, ev.max_new_tokens + width)
    return _Pair(ev.model, um.vocab, um.windows, min(PROMPT_TOKENS, width), lengths, run)


def _prompts(pair: _Pair, count: int, length: int, seed: int) -> np.ndarray:
    if pair.rows is not None:  # a prompt file: its prompts in order (again from the first)
        return pair.rows[np.arange(count) % pair.rows.shape[0], :length]
    if pair.windows is not None:
        return prompts_from(pair.windows, count, length, seed)
    rng = np.random.default_rng(seed)
    return rng.integers(0, pair.vocab, (count, length)).astype(np.int32)


def emulate(
    contract: Contract,
    *,
    progress: Callable[[int, int], None] | None = None,
    batch_size: int | None = None,
    sequence_length: int | None = None,
) -> dict[str, np.ndarray]:
    """The token table of ``contract``'s kernel pair on the shipped policy or a user model.

    ``progress(done, total)`` is called after each served batch with prompts done so far.
    ``batch_size`` and ``sequence_length`` fix one setting of a runtime sweep (module
    docstring).
    """
    import jax  # here, not at the top: importing this module must not import JAX
    import jax.numpy as jnp

    from kernel_contracts.kernels.measurement._measure import measure

    ev = contract.evidence.emulate or EmulateEvidence()
    policy = contract.policy
    count = prompt_count(ev)
    if count < 1:
        raise ValueError(f"evidence.emulate.prompts must be at least 1, got {count}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"evidence.emulate: batch size must be at least 1, got {batch_size}")
    batch = serving_batch(contract, count) if batch_size is None else batch_size
    build = (
        _hf_pair if _hf(ev.model) is not None else _user_pair if _user(ev.model) else _shipped_pair
    )
    pair = build(contract, ev, batch)
    prompt_len = pair.prompt_len
    if sequence_length is not None:
        lo, hi = pair.lengths
        if not lo <= sequence_length <= hi:
            raise ValueError(
                f"evidence.emulate: sequence length {sequence_length} is outside the lengths "
                f"model {ev.model!r} can run with max_new_tokens {ev.max_new_tokens}: [{lo}, {hi}]"
            )
        prompt_len = sequence_length - ev.max_new_tokens
    prompts = _prompts(pair, count, prompt_len, ev.seed)
    temperature = jnp.float32(policy.temperature)
    key = jax.random.key(ev.seed)
    vocab = pair.vocab
    parts: list[dict[str, np.ndarray]] = []
    for start in range(0, count, batch):
        ids = np.arange(start, start + batch)
        real = ids < count
        chunk = prompts[np.minimum(ids, count - 1)]
        if not real.all():  # fill the batch with other prompts; their rows are dropped
            fill = _prompts(pair, int((~real).sum()), prompt_len, ev.seed + 1 + start)
            chunk = np.concatenate([chunk[real], fill])
        tokens, z_inf, z_train = pair.run(
            jnp.asarray(chunk), jax.random.fold_in(key, start), temperature
        )
        observed = tokens[:, prompt_len:]
        metrics = measure(
            z_train.reshape(-1, vocab),
            z_inf.reshape(-1, vocab),
            observed.reshape(-1),
            policy.temperature,
            impl="portable",  # the same bits on every backend and machine
        )
        n_new = ev.max_new_tokens
        keep = np.repeat(real, n_new)
        part = {k: np.asarray(v)[keep] for k, v in metrics.items()}
        part["top1_flip"] = part["top1_flip"].astype(np.int64)
        part["position"] = np.tile(np.arange(prompt_len, prompt_len + n_new), batch)[keep]
        part["prompt"] = np.repeat(ids, n_new)[keep]
        part["token"] = np.asarray(observed).reshape(-1).astype(np.int64)[keep]
        parts.append(part)
        if progress is not None:
            progress(min(start + batch, count), count)
    return {c: np.concatenate([p[c] for p in parts]) for c in TABLE_COLUMNS}
