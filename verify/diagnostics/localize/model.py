"""The model a diagnostic command runs: ``--model``/``--params``, else the contract's own.

A shipped checkpoint name (``tiny-lm``), an entry point ``package.module:function`` with a
params file (``kernels.user_model``) or a Hugging Face checkpoint folder ``hf:PATH``
(``kernels.hf``; a ``--model`` path is relative to the working directory, a contract's to the
contract). Without ``--model`` the contract's ``evidence.emulate`` model and params are used,
and ``tiny-lm`` when it has none. Token windows come from the checkpoint's held-out text, or the
params file's ``extra/prompts``; without them (and for an ``hf:`` folder) tokens are drawn
uniformly from the vocabulary.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import numpy as np

from contracts import KernelContractsError
from contracts.sections import HF_PREFIX

__all__ = ["Chosen", "ModelError", "choose_model", "token_rows"]


class ModelError(KernelContractsError, ValueError):
    """An unusable model choice; ``str(err)`` is the message for the user."""


class Chosen(NamedTuple):
    name: str
    fn: Any  # fn(params, tokens) -> logits [batch, seq, vocab]
    params: Any
    windows: np.ndarray | None  # token windows [rows, width]
    max_length: int | None  # the longest sequence it runs (None: not known)
    vocab: int


def _directory(contract) -> str:
    path = contract.source.path
    return os.path.dirname(os.path.abspath(path)) if os.path.isfile(path) else os.getcwd()


def choose_model(
    contract,
    model: str | None,
    params: str | None,
    length: int | None = None,
    *,
    trust_code: bool = False,
) -> Chosen:
    """The model ``--model``/``--params`` name, or the contract's (module docstring); a
    ``length`` (``--length``) longer than the model's sequences is a ``ModelError``, and so is
    code the contract names without ``trust_code`` (``verify.common.consent``)."""
    if model is None:
        from verify.common.consent import consent_problem

        problem = consent_problem(contract, trust_code)
        if problem is not None:
            raise ModelError(problem)
    chosen = _choose(contract, model, params)
    if length is not None and chosen.max_length is not None and length > chosen.max_length:
        raise ModelError(
            f"--length {length}: model {chosen.name} runs sequences of at most "
            f"{chosen.max_length} tokens"
        )
    return chosen


def _choose(contract, model: str | None, params: str | None) -> Chosen:
    from kernels.model import CHECKPOINTS
    from kernels.user_model import UserModelError, is_entry_point, load_user_model

    ev = contract.evidence.emulate
    options = {"evidence.emulate.model": "--model" if model is not None else None,
               "evidence.emulate.params": "--params" if params is not None else None}  # fmt: skip
    if model is None:
        model = ev.model if ev is not None else "tiny-lm"
        if params is None and ev is not None:
            params = ev.params
    if is_entry_point(model):
        if params is None:
            raise ModelError(f"--model {model}: an entry point needs --params PATH")
        try:
            um = load_user_model(model, params, _directory(contract))
        except UserModelError as err:
            option = options.get(err.key)
            text = str(err).replace(f"{err.key}: ", f"{option}: ", 1) if option else str(err)
            raise ModelError(text) from None
        width = None if um.windows is None else int(um.windows.shape[1])
        return Chosen(model, um.fn, um.params, um.windows, width, um.vocab)
    if model.startswith(HF_PREFIX):
        return _hf(model, options["evidence.emulate.model"])
    if model not in CHECKPOINTS:
        raise ModelError(
            f"--model {model}: unknown model (shipped: {', '.join(sorted(CHECKPOINTS))}; or an "
            "entry point package.module:function with --params PATH)"
        )
    from kernels.localization import shipped_model
    from kernels.model import load_pretrained

    fn, state, windows = shipped_model(model)
    config = load_pretrained(model).config
    return Chosen(model, fn, state, windows, min(config.context, windows.shape[1]), config.vocab)


def _hf(model: str, option: str | None) -> Chosen:
    from kernels.hf.checkpoint import logits_function
    from kernels.hf.errors import CheckpointError

    try:
        fn, params, config = logits_function(model[len(HF_PREFIX) :])
    except CheckpointError as err:
        raise ModelError(
            f"{option or 'evidence.emulate.model'}: cannot load {model}: {err}"
        ) from None
    return Chosen(model, fn, params, None, config.max_position_embeddings, config.vocab_size)


def token_rows(chosen: Chosen, count: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` token sequences of ``length``: held-out windows cut at seeded offsets (rows
    without repetition while there are enough), else uniform tokens."""
    if chosen.windows is None:
        return rng.integers(0, chosen.vocab, (count, length)).astype(np.int32)
    rows, width = chosen.windows.shape
    pick = rng.permutation(rows)[:count] if count <= rows else rng.integers(0, rows, count)
    start = rng.integers(0, width - length + 1, count)
    return np.stack([chosen.windows[r, s : s + length] for r, s in zip(pick, start, strict=True)])
