"""Log a verl ``DataProto`` batch: both policies' log-probs of every sampled token, per step.

verl's trainer holds a step's rollout as a ``DataProto``: ``batch`` (a TensorDict of padded
tensors), ``non_tensor_batch`` (numpy object arrays) and ``meta_info`` (a dict). After the
old-log-prob pass (``RayPPOTrainer.fit``, decoupled mode) it carries what a log needs:

- ``batch["responses"]`` (int64, batch × response): the sampled token ids, right-padded;
- ``batch["old_log_probs"]`` (float32): the training kernel's log-probs of them;
- ``batch["rollout_log_probs"]`` (float32): the inference engine's, present when the rollout
  is asked for them (``actor_rollout_ref.rollout.calculate_log_probs=True``);
- ``batch["response_mask"]`` (0/1, batch × response; else the response part of
  ``batch["attention_mask"]``, as verl's own debug metrics take it);
- ``batch["attention_mask"]`` (batch × (prompt + response)): its prompt part gives each
  sequence's prompt length, the position of its first response token;
- ``non_tensor_batch["uid"]``: the prompt group id.

Read against verl's source from release 0.5 to the main branch of January 2026
(``verl/protocol.py``, ``verl/trainer/ppo/ray_trainer.py``, ``verl/utils/debug/metrics.py``).
Nothing here imports verl or torch: any object with those three attributes is a batch.
In bypass mode (``algorithm.rollout_correction.bypass_mode``) verl sets ``old_log_probs`` to
the ``rollout_log_probs`` tensor itself: such a batch has no training-kernel log-probs, and
``verl_records`` refuses it rather than log a gap of zero.
"""

from __future__ import annotations

import os

import numpy as np

from kernel_contracts.evidence.hooks.records import (
    HookError,
    check_shapes,
    require,
    sequence_records,
    to_numpy,
)
from kernel_contracts.evidence.hooks.sink import JsonlSink

__all__ = ["VERL_CHECKED", "VerlLogHook", "verl_records"]

VERL_CHECKED = "verl 0.5.0 to 0.8.0.dev (main branch, January 2026)"
_NEEDED = ("responses", "old_log_probs", "rollout_log_probs")


def verl_records(data, *, step: int | None = None) -> list[dict]:
    """The ``verl``-format log records of a ``DataProto``, one per row of its batch.

    Each record holds the row's response up to its last unmasked token, its mask, the prompt
    length as ``position_offset``, ``uid`` and ``sample_id`` (the row), and ``step`` (``step``,
    else ``meta_info["global_steps"]`` when verl set it). Raises ``HookError`` naming every
    missing key or misshapen tensor.
    """
    tensors = getattr(data, "batch", None)
    if tensors is None or not hasattr(tensors, "keys"):
        raise HookError("batch: a verl DataProto has a TensorDict 'batch'; this object has none")
    keys = set(tensors.keys())
    require(keys, _NEEDED, "batch")
    if tensors["old_log_probs"] is tensors["rollout_log_probs"]:
        raise HookError(
            "batch['old_log_probs'] is batch['rollout_log_probs'] (verl's bypass mode): the "
            "batch has no training-kernel log-probs to log"
        )
    ids = to_numpy(tensors["responses"])
    if ids.ndim != 2:
        raise HookError(f"batch['responses']: shape {tuple(ids.shape)}, expected 2-D")
    rows, cols = ids.shape
    arrays = {k: to_numpy(tensors[k]) for k in _NEEDED[1:]}
    attention = to_numpy(tensors["attention_mask"]) if "attention_mask" in keys else None
    if "response_mask" in keys:
        arrays["response_mask"] = to_numpy(tensors["response_mask"])
    elif attention is not None:
        arrays["attention_mask[:, -response:]"] = attention[:, -cols:]
    check_shapes(arrays, rows, cols, "batch")
    mask = arrays.get("response_mask", arrays.get("attention_mask[:, -response:]"))
    mask = np.ones((rows, cols), bool) if mask is None else mask != 0
    if attention is not None:
        offset = (attention[:, :-cols] != 0).sum(axis=1)
    else:
        offset = np.zeros(rows, np.int64)
    extra_keys = getattr(data, "non_tensor_batch", None) or {}
    uid = np.asarray(extra_keys["uid"]) if "uid" in extra_keys else np.arange(rows)
    if uid.shape != (rows,):
        raise HookError(f"non_tensor_batch['uid']: shape {uid.shape}, expected ({rows},)")
    if step is None:
        step = (getattr(data, "meta_info", None) or {}).get("global_steps")
    # a row ends at its last unmasked token: the padding after it is not data
    stop = np.where(mask.any(axis=1), cols - np.argmax(mask[:, ::-1], axis=1), 0)
    return sequence_records(
        "verl",
        ids=ids,
        train=arrays["old_log_probs"],
        rollout=arrays["rollout_log_probs"],
        mask=mask,
        start=np.zeros(rows, np.int64),
        stop=stop,
        offset=offset,
        prompt=uid,
        extra=None if step is None else {"step": int(step)},
    )


class VerlLogHook:
    """Appends each ``DataProto`` it is given to a JSONL log in the ``verl`` format.

    Call ``hook(batch)`` (or ``hook(batch, step=...)``) where the trainer holds the batch after
    its old-log-prob pass, e.g. from an override of ``RayPPOTrainer._update_actor`` (verl 0.7
    on; earlier, where ``fit`` calls ``actor_rollout_wg.update_actor``); each call
    appends one batch in one write (``evidence.hooks.sink.JsonlSink``). ``path`` may hold
    ``{rank}``, filled with ``rank``, so that each process writes its own file.
    """

    def __init__(self, path: str | os.PathLike, *, rank: int = 0, fsync: bool = False) -> None:
        self.sink = JsonlSink(os.fspath(path).replace("{rank}", str(rank)), fsync=fsync)

    def __call__(self, data, *, step: int | None = None) -> int:
        return self.sink.write(verl_records(data, step=step))

    def close(self) -> None:
        self.sink.close()
