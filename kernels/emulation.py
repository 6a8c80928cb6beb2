"""Emulation: a model through a training and an inference kernel, measured per token.

A :class:`ServedPair` is one model on two kernel specs at one serving batch. ``decoder_pair``
builds it for a model with the :class:`~kernels.ops.Ops` injection points (TinyLM, a Hugging
Face decoder, :mod:`kernels.model.hf`): K_inf (the inference spec: emulated matmuls with
reduction splits that depend on the batch, paged low-precision KV cache) decodes through the
paged cache, K_train (the training spec) teacher-forces the same sequences. ``user_pair`` builds
it for a user model (:mod:`kernels.model.user_model`): both kernels are the user's function
through :func:`kernels.diagnose.transform.on_kernel` (K_inf at the serving batch, K_train with
fixed batching; recognised attention in float32 in both), and K_inf generates by rerunning the
function on the whole sequence buffer (no KV cache).

``emulate(pair, prompts, seed=...)`` serves the prompt token rows in batches of the pair's
size, samples ``decoding.new_tokens`` tokens after each with K_inf at the pair's sampling
settings (top-k / top-p), teacher-forces them through K_train, and measures every generated
token over the full vocabulary (``logprobs: full_vocab`` semantics: the metrics are those of
softmax(z/T), whatever the sampling keeps), with the portable measurement (the same bits on
every backend). A short last batch is filled with the ``fill`` rows (copies of the last prompt
without them), whose rows are dropped, so every row was computed in a batch of the pair's
size. With ``lengths`` each prompt has its own length, its row right-padded to the width of
``prompts``: K_inf feeds each row its prompt up to its length and samples after it, K_train
teacher-forces the sequences, and both are read at each row's own positions; nothing masks the
padding, which lies after the row's prompt, is overwritten by its samples and is seen by no
earlier position (causal attention). A pair built with ``groups`` serves that many batches to a
call, each sampling with the key it has in a call of its own. The result is a token table: one
row per generated token, one 1-D numpy array per column (``TABLE_COLUMNS``).

``prompts_from`` cuts prompts at seeded offsets from token windows.

This module takes plain values: which model, prompts, batch and sampling a contract asks for
is read by ``evidence.emulate``. Importing it imports no JAX.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from jaxtyping import Int

from kernel_contracts.contracts.model import KernelSpec
from kernel_contracts.kernels.measurement.columns import TABLE_COLUMNS
from kernel_contracts.kernels.model.user_model import UserModel

__all__ = [
    "TABLE_COLUMNS",
    "Decoding",
    "Padding",
    "ServedPair",
    "decoder_pair",
    "emulate",
    "prompts_from",
    "user_pair",
]


class Decoding(NamedTuple):
    """How K_inf samples: ``new_tokens`` tokens after each prompt at ``temperature``, keeping
    the ``top_k`` most likely tokens (0: all) and the ``top_p`` nucleus (1.0: all)."""

    new_tokens: int
    temperature: float
    top_k: int = 0
    top_p: float = 1.0


class ServedPair(NamedTuple):
    """One model on a kernel pair, serving ``batch`` sequences at once: ``run(prompts, key)``
    samples after each of ``batch`` prompts on K_inf and teacher-forces the sequences on
    K_train, and returns the sequences and both kernels' logits at the generated positions,
    ``(tokens [batch, prompt + new], z_inf [batch, new, vocab], z_train [batch, new, vocab])``
    (a pair built with ``Padding``: its ``rows`` rows, the batch's first, and tokens of the padded
    width). ``run(prompts, key, lengths)`` serves right-padded prompts, row ``i`` of
    ``lengths[i]`` tokens: its new tokens are ``tokens[i, lengths[i] : lengths[i] + new]``
    (``per_row``: whether the pair can; a user model's cannot).

    With ``groups`` above 1, one call serves that many batches, ``groups * batch`` prompts
    (batch after batch) with a 1-D array of ``groups`` keys, one for each batch's sampling:
    each batch's rows get the bits they get in a call of their own."""

    batch: int
    decoding: Decoding
    run: Callable
    per_row: bool = True
    groups: int = 1


def prompts_from(
    windows: Int[np.ndarray, "rows width"], count: int, length: int, seed: int
) -> Int[np.ndarray, "count length"]:
    """``count`` prompts of ``length`` tokens cut at seeded offsets from held-out windows."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, windows.shape[0], count)
    starts = rng.integers(0, windows.shape[1] - length + 1, count)
    return np.stack([windows[r, s : s + length] for r, s in zip(rows, starts, strict=True)])


class Padding(NamedTuple):
    """The shape one compiled program of a kernel pair serves: ``rows`` sequences of prompts
    ``width`` tokens wide (each batch and prompt padded up to them, the padding dropped), on
    inference kernels built for a batch of ``kernel_batch`` (one with the same reduction
    splits as every batch served: :func:`kernels.batching.split_class`)."""

    rows: int
    width: int
    kernel_batch: int


def decoder_pair(
    model: Any,
    train: KernelSpec,
    inference: KernelSpec,
    *,
    batch: int,
    decoding: Decoding,
    padding: Padding | None = None,
    groups: int = 1,
) -> ServedPair:
    """``model`` (a decoder with the ``Ops`` injection points: TinyLM, a Hugging Face decoder)
    on K_train = ``train`` and K_inf = ``inference`` at a serving batch of ``batch``: K_inf
    samples through the paged KV cache, K_train teacher-forces the samples.

    With ``padding``, every batch runs in the one program of that shape: the prompts padded
    with zero tokens to ``padding.width`` columns and zero rows to ``padding.rows``; ``run``
    then returns all ``padding.rows`` rows (the first ``batch`` are the batch's) and the
    tokens of the padded width. The caller must know that the kernels treat rows
    independently (no scale shared by the rows of a matmul) and that the padded length keeps
    every reduction split; the bits of the batch's rows are then those of an unpadded run.

    With ``groups`` above 1, each call serves ``groups`` batches (``ServedPair``), on kernels
    still built for a batch of ``batch`` (or ``padding.kernel_batch``); the caller must know that
    the kernels treat rows independently, as for ``padding``, whose ``rows`` must then hold
    ``groups * batch`` rows. A padded program samples with one key for each row (each a copy of
    its batch's), so batches of every size share it."""
    if groups < 1 or (padding is not None and groups * batch > padding.rows):
        raise ValueError(f"{groups} batches of {batch} rows do not fit the padding {padding}")
    import jax.numpy as jnp

    from kernel_contracts.kernels.model.decode import generate, teacher_force, teacher_force_padded
    from kernel_contracts.kernels.model.tinylm import with_ops
    from kernel_contracts.kernels.ops import inference_ops, train_ops

    k_train = with_ops(model, train_ops(train))
    ops_batch = batch if padding is None else padding.kernel_batch
    k_inf = with_ops(model, inference_ops(inference, batch_size=ops_batch))
    temperature = jnp.float32(decoding.temperature)
    new = decoding.new_tokens
    per_key = None if groups == 1 else batch  # rows sampled by each key

    def run(chunk, key, lengths=None):
        if lengths is not None:  # prompts of their own lengths, right-padded
            lengths = jnp.asarray(lengths, jnp.int32)
            tokens, z_inf = generate(
                k_inf, chunk, key, temperature, lengths, new_tokens=new,
                top_k=decoding.top_k, top_p=decoding.top_p, rows_per_key=per_key,
            )  # fmt: skip
            return tokens, z_inf, teacher_force_padded(k_train, tokens, lengths, new_tokens=new)
        tokens, z_inf = generate(
            k_inf, chunk, key, temperature, new_tokens=new, top_k=decoding.top_k,
            top_p=decoding.top_p, rows_per_key=per_key,
        )  # fmt: skip
        return tokens, z_inf, teacher_force(k_train, tokens, prompt_len=chunk.shape[1])

    def run_padded(chunk, key, lengths=None):
        rows, width = chunk.shape
        prompt_len = jnp.int32(width)
        if lengths is not None:  # the padding rows as wide as the batch
            prompt_len = jnp.pad(jnp.asarray(lengths, jnp.int32), (0, padding.rows - rows),
                                 constant_values=width)  # fmt: skip
        pad = ((0, padding.rows - rows), (0, padding.width - width))
        chunk = jnp.pad(chunk, pad)
        keys, row_in_key = _row_keys(key, batch, padding.rows)
        tokens, z_inf = generate(
            k_inf, chunk, keys, temperature, prompt_len, row_in_key, new_tokens=new,
            top_k=decoding.top_k, top_p=decoding.top_p, rows_per_key=padding.rows,
        )  # fmt: skip
        return tokens, z_inf, teacher_force_padded(k_train, tokens, prompt_len, new_tokens=new)

    return ServedPair(batch, decoding, run if padding is None else run_padded, groups=groups)


def _row_keys(key, batch: int, rows: int):
    """One key for each of ``rows`` rows, and each row's place in its batch: the batches of
    ``batch`` rows take their keys from ``key`` (one key, or one for each batch) in order, the
    rows past them the last key."""
    import jax.numpy as jnp

    keys = key[None] if key.ndim == 0 else key
    row = np.arange(rows)
    which = np.minimum(row // batch, keys.shape[0] - 1)
    return keys[jnp.asarray(which)], jnp.asarray(row % batch, jnp.int32)


def user_pair(
    model: UserModel, train: KernelSpec, inference: KernelSpec, *, batch: int, decoding: Decoding
) -> ServedPair:
    """A user model on K_train = ``train`` (fixed batching) and K_inf = ``inference`` at a
    serving batch of ``batch`` (module docstring). Raises ``UserModelError`` when the function
    fails on the served shape, changes its vocabulary with the shape, or uses a primitive the
    emulation cannot run through."""
    import jax.numpy as jnp

    from kernel_contracts.kernels.diagnose.transform import on_kernel
    from kernel_contracts.kernels.model.user_model import (
        MODEL_KEY,
        UserModelError,
        decoder,
        output_shape,
        teacher_forcer,
    )

    f_inf = on_kernel(model.fn, inference, batch_size=batch, attention="float32")
    f_train = on_kernel(model.fn, train, batching="fixed", attention="float32")
    generate, teacher_force = decoder(f_inf), teacher_forcer(f_train)
    new = decoding.new_tokens
    temperature = jnp.float32(decoding.temperature)

    def run(chunk, key, lengths=None):
        if lengths is not None:
            raise ValueError(f"{model.name} serves a batch of prompts of one length")
        # the one shape both kernels run, checked before anything is compiled
        shape = output_shape(
            model.fn, model.params, model.name, chunk.shape[0], chunk.shape[1] + new - 1
        )
        if shape[2] != model.vocab:
            raise UserModelError(MODEL_KEY, f"{model.name} changes its vocabulary with the shape")
        try:
            tokens, z_inf = generate(
                model.params, chunk, key, temperature, new_tokens=new,
                top_k=decoding.top_k, top_p=decoding.top_p,
            )  # fmt: skip
            z_train = teacher_force(model.params, tokens, prompt_len=chunk.shape[1])
        except NotImplementedError as err:  # a primitive the transform cannot emulate through
            raise UserModelError(MODEL_KEY, str(err)) from None
        return tokens, z_inf, z_train

    return ServedPair(batch, decoding, run, per_row=False)


def emulate(
    pair: ServedPair,
    prompts: Int[np.ndarray, "prompts width"],
    *,
    seed: int,
    fill: Int[np.ndarray, "fill width"] | None = None,
    lengths: Int[np.ndarray, " prompts"] | None = None,
    fill_lengths: Int[np.ndarray, " fill"] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, np.ndarray]:
    """The token table of ``prompts`` served through ``pair`` (module docstring).

    ``seed`` seeds the sampling (batch ``i`` samples with ``fold_in(key(seed), i * batch)``);
    ``fill`` holds the rows that complete a short last batch (as many as it lacks);
    ``lengths`` (``None``: every row's width) gives each prompt's length, its row right-padded
    to the width (``fill_lengths`` the fill rows'): each prompt is served whole, its new tokens
    sampled from its own end; prompts of one length run as without them, with the same bits;
    ``progress(done, total)`` is called after each served batch with prompts done so far.
    """
    import jax  # here, not at the top: importing this module must not import JAX
    import jax.numpy as jnp

    from kernel_contracts.kernels.measurement._measure import measure

    count, width = prompts.shape
    batch, new = pair.batch, pair.decoding.new_tokens
    if count < 1:
        raise ValueError("emulate needs at least one prompt")
    if fill is not None and fill.shape[0] != -count % batch:
        raise ValueError(
            f"{count} prompts in batches of {batch} need {-count % batch} fill rows, "
            f"got {fill.shape[0]}"
        )
    lengths = _row_lengths(lengths, count, width)
    fill_lengths = None if fill is None else _row_lengths(fill_lengths, fill.shape[0], width)
    per_row = not (np.all(lengths == width) and (fill is None or np.all(fill_lengths == width)))
    if per_row and not pair.per_row:
        raise ValueError("this pair serves a batch of prompts of one length")
    key = jax.random.key(seed)
    groups = pair.groups
    parts: list[dict[str, np.ndarray]] = []
    for first in range(0, count, batch * groups):
        chunks, served, ends = [], [], []
        for start in range(first, first + batch * groups, batch):
            ids = np.arange(start, start + batch)
            real = ids < count
            at = np.minimum(ids, count - 1)
            chunk, end = prompts[at], lengths[at]
            if fill is not None and real.any() and not real.all():  # their rows are dropped
                chunk = np.concatenate([chunk[real], fill])
                end = np.concatenate([end[real], fill_lengths])
            chunks.append(chunk)  # a batch past the prompts: copies of the last, dropped
            served.append(real)
            ends.append(end)
        starts = jnp.arange(first, first + batch * groups, batch)
        if groups == 1:
            keys = jax.random.fold_in(key, first)
        else:  # one key for each batch, as in a call of its own
            keys = jax.vmap(lambda s: jax.random.fold_in(key, s))(starts)
        ends = np.concatenate(ends)
        args = (jnp.asarray(ends),) if per_row else ()
        tokens, z_inf, z_train = pair.run(jnp.asarray(np.concatenate(chunks)), keys, *args)
        rows = tokens.shape[0]  # a padded pair returns its padding rows too
        kept = np.concatenate([*served, np.zeros(rows - batch * groups, bool)])
        ends = np.concatenate([ends, np.full(rows - batch * groups, width, ends.dtype)])
        at = ends[:, None] + np.arange(new)  # each row's generated positions
        observed = np.take_along_axis(np.asarray(tokens), at, axis=1)
        vocab = z_inf.shape[-1]
        metrics = measure(
            z_train.reshape(-1, vocab),
            z_inf.reshape(-1, vocab),
            observed.reshape(-1),
            pair.decoding.temperature,
            impl="portable",  # the same bits on every backend and machine
        )
        keep = np.repeat(kept, new)
        part = {k: np.asarray(v)[keep] for k, v in metrics.items()}
        part["top1_flip"] = part["top1_flip"].astype(np.int64)
        part["position"] = at.reshape(-1).astype(np.int64)[keep]
        part["prompt"] = np.repeat(np.arange(first, first + rows), new)[keep]
        part["token"] = observed.reshape(-1).astype(np.int64)[keep]
        parts.append(part)
        if progress is not None:
            for start in range(first, min(first + batch * groups, count), batch):
                progress(min(start + batch, count), count)
    return {c: np.concatenate([p[c] for p in parts]) for c in TABLE_COLUMNS}


def _row_lengths(lengths: np.ndarray | None, rows: int, width: int) -> np.ndarray:
    """Each of ``rows`` prompts' length (``None``: ``width``), checked to lie in [1, width]."""
    if lengths is None:
        return np.full(rows, width, np.int64)
    lengths = np.asarray(lengths, np.int64)
    if lengths.shape != (rows,) or not np.all((lengths >= 1) & (lengths <= width)):
        raise ValueError(f"prompt lengths must be {rows} counts in [1, {width}], got {lengths}")
    return lengths
