"""The model a diagnostic command runs: ``--model``/``--params``, else the contract's own.

A shipped checkpoint name (``tiny-lm``), an entry point ``package.module:function`` with a
params file (``kernels.model.user_model``), a Hugging Face checkpoint folder ``hf:PATH``
(``kernels.model.hf``) or a GGUF file ``gguf:PATH`` (``kernels.model.gguf``; a ``--model``
path is relative to the working directory, a contract's to the contract). Without ``--model``
the contract's ``evidence.emulate`` model and params are used, and ``tiny-lm`` when it has
none. Token windows come from the checkpoint's held-out text, the
params file's ``extra/prompts`` or, for a checkpoint, the contract's prompt file
(``evidence.emulate.prompts``) encoded whole by the checkpoint's tokenizer; without any of them,
tokens are drawn uniformly from the vocabulary. ``Chosen.tokens`` says which.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.contracts.sections import CHECKPOINT_PREFIXES

__all__ = ["UNIFORM", "Chosen", "ModelError", "choose_model", "token_rows"]


UNIFORM = "tokens drawn uniformly from the vocabulary"


class ModelError(KernelContractsError, ValueError):
    """An unusable model choice; ``str(err)`` is the message for the user."""


class Chosen(NamedTuple):
    name: str
    fn: Any  # fn(params, tokens) -> logits [batch, seq, vocab]
    params: Any
    windows: np.ndarray | None  # token windows [rows, width]
    model_length: int | None  # the longest sequence the model runs (None: not known)
    vocab: int
    tokens: str = UNIFORM  # where its token windows come from, for the output

    @property
    def width(self) -> int | None:
        """The length of the token windows (``None``: uniform tokens, any length)."""
        return None if self.windows is None else int(self.windows.shape[1])


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
    an entry point, the contract's or ``--model``'s, without ``trust_code``, the consent value
    (``verify.common.consent``): its module is imported from the contract's folder first."""
    if model is None:
        from kernel_contracts.verify.common.consent import consent_problem

        problem = consent_problem(contract, trust_code)
        if problem is not None:
            raise ModelError(problem)
    chosen = _choose(contract, model, params, trust_code)
    longest, width = chosen.model_length, chosen.width
    if length is not None and longest is not None and length > longest:
        raise ModelError(
            f"--length {length}: model {chosen.name} runs sequences of at most {longest} tokens"
        )
    if length is not None and width is not None and length > width:
        raise ModelError(
            f"--length {length}: the token windows ({chosen.tokens}) are {width} tokens long; "
            f"give --length {width} or less"
        )
    return chosen


def _choose(contract, model: str | None, params: str | None, trust_code: bool) -> Chosen:
    from kernel_contracts.evidence.emulate import model_directory
    from kernel_contracts.kernels.model.tinylm import CHECKPOINTS
    from kernel_contracts.kernels.model.user_model import (
        UserModelError,
        is_entry_point,
        load_user_model,
    )

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
            um = load_user_model(model, params, model_directory(contract), trust_code=trust_code)
        except UserModelError as err:
            option = options.get(err.key)
            text = str(err).replace(f"{err.key}: ", f"{option}: ", 1) if option else str(err)
            raise ModelError(text) from None
        tokens = UNIFORM if um.windows is None else "the params file's prompts"
        return Chosen(model, um.fn, um.params, um.windows, None, um.vocab, tokens)
    if model.startswith(CHECKPOINT_PREFIXES):
        return _hf(contract, model, options["evidence.emulate.model"])
    if model not in CHECKPOINTS:
        raise ModelError(
            f"--model {model}: unknown model (shipped: {', '.join(sorted(CHECKPOINTS))}; or an "
            "entry point package.module:function with --params PATH)"
        )
    from kernel_contracts.kernels.diagnose.localization import shipped_model
    from kernel_contracts.kernels.model.tinylm import load_pretrained

    fn, state, windows = shipped_model(model)
    config = load_pretrained(model).config
    tokens = f"held-out text of {model}"
    return Chosen(model, fn, state, windows, config.context, config.vocab, tokens)


def _hf(contract, model: str, option: str | None) -> Chosen:
    from kernel_contracts.kernels.model.checkpoints import checkpoint_logits_function
    from kernel_contracts.kernels.model.hf.errors import CheckpointError

    try:
        fn, params, config = checkpoint_logits_function(model)
    except CheckpointError as err:
        raise ModelError(
            f"{option or 'evidence.emulate.model'}: cannot load {model}: {err}"
        ) from None
    vocab, longest = config.vocab_size, config.max_position_embeddings
    ev = contract.evidence.emulate
    if ev is None or not isinstance(ev.prompts, str):
        return Chosen(model, fn, params, None, longest, vocab)
    from kernel_contracts.evidence.emulate import prompt_stream
    from kernel_contracts.kernels.model.user_model import UserModelError

    try:
        stream = prompt_stream(ev.prompts, model, vocab)
    except UserModelError as err:
        raise ModelError(f"{contract.source.prefix(err.key)}{err}") from None
    tokens = f"the prompt file {ev.prompts}"
    return Chosen(model, fn, params, stream[None, :], longest, vocab, tokens)


def token_rows(chosen: Chosen, count: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` token sequences of ``length``: ``chosen``'s windows cut at seeded offsets
    (rows without repetition while there are enough), else uniform tokens."""
    if chosen.windows is None:
        return rng.integers(0, chosen.vocab, (count, length)).astype(np.int32)
    rows, width = chosen.windows.shape
    pick = rng.permutation(rows)[:count] if count <= rows else rng.integers(0, rows, count)
    start = rng.integers(0, width - length + 1, count)
    return np.stack([chosen.windows[r, s : s + length] for r, s in zip(pick, start, strict=True)])
