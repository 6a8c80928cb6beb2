"""The drift table's measurement: a model, its prompts, and each preset at each serving batch.

``load_model`` reads the shipped checkpoint by name, a Hugging Face checkpoint folder
(``hf:FOLDER``, ``kernels.model.hf``) or a GGUF file (``gguf:FILE``, ``kernels.model.gguf``),
whose tokenizer is read only when a prompt file is encoded; ``check_model`` checks a folder's
``config.json`` without importing JAX (and a GGUF file's header and metadata), so that a bad
path is refused at once. The prompts are made by ``verify.diagnostics.measure.prompts``.

``measure_setting`` runs one kernel pair, as ``kernels.emulation`` does: K_inf (the preset at
a serving batch, dynamic reduction splits and paged low-precision KV cache) generates, K_train
(the training preset, fixed batching) teacher-forces the same tokens, and ``kernels.measure``
measures every generated token over the full vocabulary. Every row is computed in a batch of
exactly the serving size (a short last batch is filled with repeated prompts whose rows are
dropped). With several local devices the model and the batch are placed on a
``kernels.model.sharding`` mesh; the results are the same bits as on one device.

``length_slices`` cuts the tokens into slices by the sequence length at which each was
generated (its position + 1): (0, 16], (16, 32], (32, 64], ... (powers of two).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernel_contracts.contracts.sections import CHECKPOINT_PREFIXES
from kernel_contracts.verify.diagnostics.measure.prompts import MeasureError

__all__ = [
    "Loaded",
    "check_model",
    "length_slices",
    "load_model",
    "measure_setting",
]


@dataclass(frozen=True)
class Loaded:
    """A model on plain ops, what it can run, and how it reads prompt text."""

    name: str
    model: Any
    vocab: int
    context: int
    tokenize: Callable[[list[str]], list[list[int]]]
    windows: np.ndarray | None  # default prompts (the shipped model's held-out text)


def check_model(name: str) -> None:
    """``MeasureError`` when ``name`` is a checkpoint (``hf:FOLDER`` or ``gguf:FILE``) whose
    configuration cannot be read or describes no decoder we run. A folder's ``config.json`` is
    read without importing JAX."""
    if not name.startswith(CHECKPOINT_PREFIXES):
        return
    from kernel_contracts.kernels.model.checkpoints import checkpoint_config
    from kernel_contracts.kernels.model.hf.errors import CheckpointError

    try:
        checkpoint_config(name)
    except CheckpointError as err:
        raise MeasureError(f"--model {name}: {err}") from None


def _encoder(name: str) -> Callable[[list[str]], list[list[int]]]:
    """Encodes texts with the checkpoint's tokenizer, read on first use (windows drawn from the
    vocabulary need none)."""

    def encode_texts(texts: list[str]) -> list[list[int]]:
        from kernel_contracts.kernels.model.checkpoints import checkpoint_tokenizer
        from kernel_contracts.kernels.model.hf import CheckpointError, encode

        try:
            tokenizer = checkpoint_tokenizer(name)
        except CheckpointError as err:
            raise MeasureError(f"--model {name}: {err}") from None
        return encode(tokenizer, texts)

    return encode_texts


def load_model(name: str) -> Loaded:
    """The shipped model ``name`` or the checkpoint ``hf:FOLDER`` or ``gguf:FILE``;
    ``MeasureError`` if neither can be loaded (every problem of a checkpoint, at its file and
    key)."""
    if name.startswith(CHECKPOINT_PREFIXES):
        from kernel_contracts.kernels.model.checkpoints import load_checkpoint
        from kernel_contracts.kernels.model.hf import CheckpointError

        try:
            model = load_checkpoint(name)
        except CheckpointError as err:
            raise MeasureError(f"--model {name}: {err}") from None
        c = model.config
        return Loaded(name, model, c.vocab_size, c.max_position_embeddings,
                      _encoder(name), None)  # fmt: skip
    from kernel_contracts.kernels.model.tinylm import CHECKPOINTS, load_pretrained, pretrained_extra

    if name not in CHECKPOINTS:
        raise MeasureError(
            f"--model {name}: not a shipped model ({', '.join(sorted(CHECKPOINTS))}) and not "
            "hf:FOLDER or gguf:FILE"
        )
    try:
        model = load_pretrained(name)
        windows = pretrained_extra(name)["heldout_windows"].astype(np.int32)
    except (OSError, KeyError, ValueError) as err:  # a missing or damaged package file
        raise MeasureError(f"--model {name}: cannot load the shipped checkpoint: {err}") from None
    return Loaded(name, model, model.config.vocab, model.config.context,
                  lambda texts: [list(t.encode("utf-8")) for t in texts], windows)  # fmt: skip


def length_slices(position: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """The tokens' masks by sequence length ``position + 1``, in (lo, hi] power-of-two bins."""
    length = np.asarray(position, np.int64) + 1
    hi = np.maximum(16, 1 << np.ceil(np.log2(np.maximum(length, 1))).astype(np.int64))
    out = {}
    for h in np.unique(hi).tolist():
        lo = 0 if h == 16 else h // 2
        out[(lo + 1, int(h))] = hi == h
    return out


def measure_setting(
    loaded: Loaded,
    prompts: np.ndarray,
    *,
    train: str,
    preset: str,
    batch: int,
    new_tokens: int,
    temperature: float,
    seed: int,
    progress: Callable[[int], None] | None = None,
) -> dict[str, np.ndarray]:
    """The measured columns (``kernels.measure``'s) and ``position`` of every generated token of
    ``prompts``, K_inf = ``preset`` served ``batch`` at a time, K_train = ``train``.
    ``progress(rows)`` is called after each served batch."""
    import jax
    import jax.numpy as jnp

    from kernel_contracts import contracts
    from kernel_contracts.kernels import (
        generate,
        inference_ops,
        measure,
        teacher_force,
        train_ops,
        with_ops,
    )
    from kernel_contracts.kernels.model.sharding import make_mesh, shard_batch, shard_model

    k_train = with_ops(loaded.model, train_ops(contracts.preset(train)))
    k_inf = with_ops(loaded.model, inference_ops(contracts.preset(preset), batch_size=batch))
    mesh = make_mesh() if len(jax.local_devices()) > 1 else None
    if mesh is not None:
        k_train, k_inf = shard_model(k_train, mesh), shard_model(k_inf, mesh)
    n, width = prompts.shape
    key, t = jax.random.key(seed), jnp.float32(temperature)
    parts = []
    for start in range(0, n, batch):
        ids = np.arange(start, start + batch)
        chunk = jnp.asarray(prompts[np.minimum(ids, n - 1)])  # a short batch repeats its last
        if mesh is not None:
            chunk = shard_batch(chunk, mesh)
        tokens, z_inf = generate(k_inf, chunk, jax.random.fold_in(key, start), t,
                                 new_tokens=new_tokens)  # fmt: skip
        z_train = teacher_force(k_train, tokens, prompt_len=width)
        vocab = z_inf.shape[-1]
        cols = measure(z_train.reshape(-1, vocab), z_inf.reshape(-1, vocab),
                       tokens[:, width:].reshape(-1), temperature)  # fmt: skip
        keep = np.repeat(ids < n, new_tokens)
        part = {k: np.asarray(v)[keep] for k, v in cols.items()}
        part["position"] = np.tile(np.arange(width, width + new_tokens), batch)[keep]
        parts.append(part)
        if progress is not None:
            progress(min(batch, n - start))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
