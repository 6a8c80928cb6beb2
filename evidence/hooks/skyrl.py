"""Log a SkyRL ``TrainingInputBatch``: the policy's and the rollout engine's log-probs.

SkyRL's trainer (``skyrl.train.trainer.RayPPOTrainer``) turns a step's rollouts into a
``TrainingInputBatch``, a dict of tensors with a ``metadata`` dict, and its
``fwd_logprobs_values_reward`` adds the policy's log-probs. Afterwards the batch holds:

- ``sequences`` (int64, batch × sequence): prompt and response, left-padded as one block;
- ``attention_mask`` (batch × sequence): 1 on every real token;
- ``response_mask`` (batch × response): 1 on the last ``r`` columns of a row whose response has
  ``r`` tokens (response tensors are right-aligned);
- ``loss_mask`` (batch × response): 1 on the tokens the model sampled (0 on tokens an
  environment wrote in a multi-turn rollout);
- ``action_log_probs`` (float32): the policy's log-probs of the response tokens;
- ``rollout_logprobs`` (float32): the inference engine's, when the generator returns them;
- ``metadata["uids"]``: the prompt id of each row.

The response of row i is the last ``r`` columns of ``sequences`` and of the response tensors;
its first token's position is the prompt length, ``attention_mask`` sum minus ``r``. Records
are written in the ``generic`` format. Read against SkyRL's source of August 2026 (package
``skyrl`` 0.3, a9564572: ``skyrl/train/trainer.py``, ``skyrl/train/dataset/preprocess.py``,
``skyrl/backends/skyrl_train/training_batch.py``); neither SkyRL nor torch is imported here.

SkyRL skips the policy forward pass (``RayPPOTrainer._skip_policy_forward``) when the loss reads
only the rollout's log-probs (``trainer.algorithm.policy_loss_type`` ``dppo`` or ``rollout_is``,
or ``cispo`` with ``cispo.cispo_anchor: rollout``), the KL reward is off and no
``trainer.algorithm.off_policy_correction`` is on: ``action_log_probs`` is then None on every
step. Given the trainer, the hook asks that very method when it is made (with a batch that has
rollout log-probs) and refuses such a trainer with one message; a trainer subclass that
overrides ``_skip_policy_forward`` to return False runs the pass (one forward per step, whose
output those losses never read) and is logged.
"""

from __future__ import annotations

import os

import numpy as np

from kernel_contracts.evidence.hooks.records import (
    HookError,
    check_shapes,
    require,
    sequence_records,
    setting,
    to_numpy,
)
from kernel_contracts.evidence.hooks.sink import JsonlSink

__all__ = ["SKYRL_CHECKED", "SkyrlLogHook", "skyrl_records", "skyrl_skips_policy_forward"]

SKYRL_CHECKED = "SkyRL 0.3 (skyrl package, main branch of August 2026, a9564572)"
_NEEDED = ("sequences", "attention_mask", "response_mask", "loss_mask")
_LOGPROBS = ("action_log_probs", "rollout_logprobs")
_FORCE = (
    "override _skip_policy_forward in your RayPPOTrainer subclass to return False (SkyRL then "
    "runs the pass, whose output this loss never reads)"
)


def skyrl_skips_policy_forward(trainer) -> str | None:
    """Why ``trainer`` (a SkyRL ``RayPPOTrainer``) leaves ``action_log_probs`` None on every
    step, or ``None`` when it computes them: its own ``_skip_policy_forward`` is asked about a
    batch that has rollout log-probs (a trainer without the method always runs the pass)."""
    skip = getattr(trainer, "_skip_policy_forward", None)
    if not callable(skip) or not skip({"rollout_logprobs": True}):
        return None
    loss = setting(trainer, "cfg.trainer.algorithm.policy_loss_type")
    loss = getattr(loss, "value", loss)
    return (
        f"trainer.algorithm.policy_loss_type={loss!r} with no "
        "trainer.algorithm.off_policy_correction and use_kl_in_reward off: SkyRL skips the "
        "policy forward pass, so batch['action_log_probs'] is None on every step and there are "
        f"no training-kernel log-probs to log; {_FORCE}"
    )


def skyrl_records(batch, *, step: int | None = None) -> list[dict]:
    """The ``generic``-format log records of a ``TrainingInputBatch``, one per row.

    Each record holds the row's response tokens, ``loss_mask`` as its mask, the prompt length
    as ``position_offset``, ``prompt_id`` (``metadata["uids"]``), ``sample_id`` (the row) and
    ``step`` when given. Raises ``HookError`` naming every missing or empty key (no
    ``rollout_logprobs``: the generator returned none; no ``action_log_probs``: the policy
    forward pass was skipped) and every misshapen tensor.
    """
    require(batch, _NEEDED + _LOGPROBS, "batch")
    empty = [k for k in _LOGPROBS if batch[k] is None]
    if empty:
        why = {
            "action_log_probs": f"the policy forward pass was skipped: {_FORCE}",
            "rollout_logprobs": "the generator returned no log-probs",
        }
        raise HookError("; ".join(f"batch[{k!r}]: None ({why[k]})" for k in empty))
    sequences = to_numpy(batch["sequences"])
    response = to_numpy(batch["response_mask"])
    if sequences.ndim != 2 or response.ndim != 2:
        raise HookError(
            f"batch['sequences'], ['response_mask']: shapes {tuple(sequences.shape)}, "
            f"{tuple(response.shape)}, expected 2-D"
        )
    rows, cols = response.shape
    arrays = {k: to_numpy(batch[k]) for k in ("loss_mask", *_LOGPROBS)}
    check_shapes(arrays, rows, cols, "batch")
    attention = to_numpy(batch["attention_mask"])
    check_shapes({"attention_mask": attention}, rows, sequences.shape[1], "batch")
    if cols > sequences.shape[1]:
        raise HookError(
            f"batch['response_mask']: {cols} columns, more than batch['sequences'] "
            f"({sequences.shape[1]})"
        )
    metadata = getattr(batch, "metadata", None) or {}
    uids = np.asarray(metadata["uids"]) if "uids" in metadata else np.arange(rows)
    if uids.shape != (rows,):
        raise HookError(f"metadata['uids']: shape {uids.shape}, expected ({rows},)")
    length = (response != 0).sum(axis=1)
    return sequence_records(
        "generic",
        ids=sequences[:, -cols:],
        train=arrays["action_log_probs"],
        rollout=arrays["rollout_logprobs"],
        mask=(arrays["loss_mask"] != 0) & (response != 0),
        start=cols - length,
        stop=np.full(rows, cols),
        offset=(attention != 0).sum(axis=1) - length,
        prompt=uids,
        extra=None if step is None else {"step": int(step)},
    )


class SkyrlLogHook:
    """Appends each ``TrainingInputBatch`` it is given to a JSONL log (``generic`` format).

    Call ``hook(batch, step=...)`` on the batch ``fwd_logprobs_values_reward`` returns, e.g.
    from an override of that method; each call appends one batch in one write. ``path`` may hold
    ``{rank}``, filled with ``rank``. ``trainer`` (the ``RayPPOTrainer``): a trainer that skips
    the policy forward pass is refused here, before any step (``skyrl_skips_policy_forward``).
    """

    def __init__(
        self, path: str | os.PathLike, *, rank: int = 0, fsync: bool = False, trainer=None
    ) -> None:
        why = None if trainer is None else skyrl_skips_policy_forward(trainer)
        if why:
            raise HookError(why)
        self.sink = JsonlSink(os.fspath(path).replace("{rank}", str(rank)), fsync=fsync)

    def __call__(self, batch, *, step: int | None = None) -> int:
        return self.sink.write(skyrl_records(batch, step=step))

    def close(self) -> None:
        self.sink.close()
