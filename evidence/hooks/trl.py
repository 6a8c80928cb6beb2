"""Log TRL's ``GRPOTrainer`` generation batches: the trained model's and vLLM's log-probs.

With ``use_vllm=True`` and ``vllm_importance_sampling_correction=True`` (its default),
``GRPOTrainer._generate_and_score_completions`` returns a dict that holds, per completion:

- ``completion_ids`` (int64, batch × completion, right-padded) and ``completion_mask`` (0/1);
- ``old_per_token_logps`` (float32): the trained model's log-probs of the sampled tokens;
- ``sampling_per_token_logps`` (float32): vLLM's log-probs of the same tokens;
- ``prompt_ids`` and ``prompt_mask`` (batch × prompt, left-padded);
- ``tool_mask`` (0 on tokens a tool wrote, when tools are used).

One generation batch serves ``steps_per_generation`` micro-steps
(``GRPOTrainer._prepare_inputs``: it generates every ``steps_per_generation × num_iterations``
micro-steps, shuffles the rows, splits them into ``steps_per_generation`` slices and hands
slice ``_step % steps_per_generation`` to each micro-step; ``state.global_step`` grows once per
``gradient_accumulation_steps`` micro-steps). With ``steps_per_generation`` above
``gradient_accumulation_steps`` one generation's rows are trained in several optimiser steps,
and which row goes to which is known only after the shuffle.

A ``TrainerCallback`` is handed the arguments, the state and the model, not the batch, so the
hook has two halves. ``TrlLogHook.attach(trainer)`` wraps the trainer's ``_prepare_inputs`` to
write each slice the first time a training micro-step takes it, with ``step`` the optimiser
step that trains on it, ``state.global_step + 1`` (1-based: the step TRL logs that update's
metrics at); with ``num_iterations`` above 1 the same slice object comes back for the later
passes and is not written again. And it registers a ``TrainerCallback``
(``TrlLogHook.callback``) that closes the log when training ends. The prompt id is a digest of
the prompt's token ids (TRL keeps no prompt id), so the completions of one prompt share it.

Read against TRL's source from 0.28 (the first release whose dict carries
``sampling_per_token_logps``) to the main branch of July 2026, 1.10.dev, f2cd5771
(``trl/trainer/grpo_trainer.py``, whose ``_prepare_inputs`` is the same throughout); neither
TRL nor torch is imported here, and transformers only when the callback is made.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Mapping

import numpy as np

from kernel_contracts.evidence.hooks.records import (
    HookError,
    check_shapes,
    require,
    sequence_records,
    to_numpy,
)
from kernel_contracts.evidence.hooks.sink import JsonlSink

__all__ = ["TRL_CHECKED", "TrlLogHook", "trl_records"]

TRL_CHECKED = "TRL 0.28 to 1.10.dev (GRPOTrainer with vLLM importance sampling)"
_NEEDED = ("completion_ids", "completion_mask", "old_per_token_logps", "sampling_per_token_logps")
_PREPARE = "_prepare_inputs"


def _prompt_digest(ids: np.ndarray) -> str:
    return hashlib.sha256(ids.astype("<i8").tobytes()).hexdigest()[:16]


def trl_records(output: Mapping, *, step: int | None = None) -> list[dict]:
    """The ``trl``-format log records of one ``_generate_and_score_completions`` result.

    Each record holds the completion up to its last unmasked token, its mask (times
    ``tool_mask``), the prompt length as ``position_offset``, ``prompt_id`` (a digest of the
    prompt's token ids), ``sample_id`` (the row) and ``step`` when given. Raises ``HookError``
    naming every missing key or misshapen tensor (no ``sampling_per_token_logps``: vLLM
    importance sampling is off, or TRL is older than 0.28).
    """
    require(output, _NEEDED, "output")
    ids = to_numpy(output["completion_ids"])
    if ids.ndim != 2:
        raise HookError(f"output['completion_ids']: shape {tuple(ids.shape)}, expected 2-D")
    rows, cols = ids.shape
    arrays = {k: to_numpy(output[k]) for k in _NEEDED[1:]}
    if output.get("tool_mask") is not None:
        arrays["tool_mask"] = to_numpy(output["tool_mask"])
    check_shapes(arrays, rows, cols, "output")
    mask = arrays["completion_mask"] != 0
    if "tool_mask" in arrays:
        mask &= arrays["tool_mask"] != 0
    if output.get("prompt_ids") is not None:
        prompt_ids = to_numpy(output["prompt_ids"])
        prompt_mask = (
            to_numpy(output["prompt_mask"]) != 0
            if output.get("prompt_mask") is not None
            else np.ones(prompt_ids.shape, bool)
        )
        if prompt_ids.shape[0] != rows or prompt_mask.shape != prompt_ids.shape:
            raise HookError(
                f"output['prompt_ids']/['prompt_mask']: shapes {tuple(prompt_ids.shape)} and "
                f"{tuple(prompt_mask.shape)}, expected {rows} rows each"
            )
        offset = prompt_mask.sum(axis=1)
        prompt = np.array([_prompt_digest(prompt_ids[r][prompt_mask[r]]) for r in range(rows)])
    else:
        offset, prompt = np.zeros(rows, np.int64), np.arange(rows)
    stop = np.where(mask.any(axis=1), cols - np.argmax(mask[:, ::-1], axis=1), 0)
    return sequence_records(
        "trl",
        ids=ids,
        train=arrays["old_per_token_logps"],
        rollout=arrays["sampling_per_token_logps"],
        mask=mask,
        start=np.zeros(rows, np.int64),
        stop=stop,
        offset=offset,
        prompt=prompt,
        extra=None if step is None else {"step": int(step)},
    )


def _callback_type(hook: TrlLogHook) -> type:
    from transformers import TrainerCallback  # loaded when a callback is made, not before

    class LogprobLogCallback(TrainerCallback):
        """Closes the log-prob log when training ends."""

        def on_train_end(self, args, state, control, **kwargs):
            hook.close()

    return LogprobLogCallback


class TrlLogHook:
    """Appends the completions of every TRL generation batch to a JSONL log (``trl`` format).

    ``hook.attach(trainer)`` before ``trainer.train()``; or call ``hook.write(output, step)``
    yourself with a dict ``_generate_and_score_completions`` or ``_prepare_inputs`` returned.
    ``path`` may hold ``{rank}``, filled with the trainer's process index, so each process
    writes its own file.
    """

    def __init__(self, path: str | os.PathLike, *, fsync: bool = False) -> None:
        self.path, self.fsync, self.rank = os.fspath(path), fsync, 0
        self.sink: JsonlSink | None = None

    def open(self, rank: int | None = None) -> None:
        """Open the log (``{rank}`` in the path filled with ``rank``) unless it is open."""
        self.rank = self.rank if rank is None else rank
        if self.sink is None:
            self.sink = JsonlSink(self.path.replace("{rank}", str(self.rank)), fsync=self.fsync)

    def write(self, output: Mapping, step: int | None = None) -> int:
        records = trl_records(output, step=step)  # refused before the file is touched
        self.open()
        return self.sink.write(records)

    def callback(self):
        """A ``transformers.TrainerCallback`` that closes this log at the end of training."""
        return _callback_type(self)()

    def attach(self, trainer):
        """Log every completion ``trainer`` trains on from now on, once, at the optimiser step
        that first trains on it; returns ``trainer``."""
        prepare = getattr(trainer, _PREPARE, None)
        if not callable(prepare):
            raise HookError(
                f"trainer: no method {_PREPARE} (a GRPOTrainer of {TRL_CHECKED} has it)"
            )
        accelerator = getattr(trainer, "accelerator", None)
        self.open(int(getattr(accelerator, "process_index", 0)))
        slices = int(getattr(getattr(trainer, "args", None), "steps_per_generation", None) or 1)
        written: deque = deque(maxlen=slices)  # the slices of the current generation written

        def logged(*args, **kwargs):
            inputs = prepare(*args, **kwargs)
            model = getattr(trainer, "model", None)
            training = getattr(model, "training", True)
            if training and not any(inputs is seen for seen in written):
                state = getattr(trainer, "state", None)
                step = getattr(state, "global_step", None)
                self.write(inputs, None if step is None else step + 1)
                written.append(inputs)
            return inputs

        setattr(trainer, _PREPARE, logged)
        trainer.add_callback(self.callback())
        return trainer

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
            self.sink = None
