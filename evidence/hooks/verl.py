"""Log a verl batch: both policies' log-probs of every sampled token, per step.

verl has two trainers. The V1 trainer (``verl/trainer/ppo/v1/trainer_base.py``, ``PPOTrainer``
and its ``sync``/``colocate_async``/``separate_async`` subclasses) is the default from 0.9.0
(``trainer.use_v1: true``); the legacy one (``verl/trainer/ppo/ray_trainer.py``,
``RayPPOTrainer``) runs with ``trainer.use_v1=false`` and is deprecated.

The legacy trainer holds a step's rollout as a ``DataProto``: ``batch`` (a TensorDict of padded
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

The V1 trainer hands its steps a ``transfer_queue.KVBatchMeta`` instead: ``keys`` (one per
sequence), ``partition_id``, ``tags`` (one dict per key; ``is_padding`` marks the no-op rows
added to fill the data-parallel ranks, which are not data) and ``extra_info``. The tensors stay
in the transfer queue, one unpadded tensor per sequence, and
``transfer_queue.kv_batch_get(keys=, partition_id=, select_fields=)`` returns them as a
TensorDict whose fields are jagged nested tensors (``is_nested``; ``values()`` and
``offsets()``), or plain 2-D tensors where every row has one length: ``prompts`` (the prompt's
tokens, unpadded), ``responses``, ``response_mask``, ``rollout_log_probs``, ``old_log_probs``
(after ``_compute_old_log_prob``) and ``uid`` (a ``NonTensorStack``: ``tolist()``).

Read against verl's source from release 0.5 to 0.10.0.dev (the main branch of August 2026,
1dda039b), the V1 trainer from 0.9.0 (``verl/protocol.py``, ``verl/trainer/ppo/ray_trainer.py``,
``verl/trainer/ppo/v1/trainer_base.py``, ``verl/trainer/ppo/v1/agent_loop_tq.py``,
``verl/trainer/ppo/padding_utils.py``, ``verl/utils/debug/metrics.py``). Nothing here imports
verl, transfer_queue or torch: any object with those attributes is a batch.

In bypass mode (``algorithm.rollout_correction.bypass_mode``) verl computes no training-kernel
log-probs at the rollout's weights: it sets ``old_log_probs`` to the rollout's (the legacy
trainer to the ``rollout_log_probs`` tensor itself, the V1 trainer to a copy of its values), and
the actor's log-probs of each mini-batch stay inside ``update_actor``. Such a batch holds a gap
of zero by construction, so the hook refuses bypass mode when it is given the trainer's config,
and refuses a V1 batch without that config.
"""

from __future__ import annotations

import itertools
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

__all__ = [
    "VERL_CHECKED",
    "VERL_V1_FIELDS",
    "VerlLogHook",
    "verl_bypass_mode",
    "verl_records",
    "verl_v1_records",
]

VERL_CHECKED = (
    "verl 0.5.0 to 0.10.0.dev (main branch of August 2026, 1dda039b): the legacy trainer "
    "throughout, the V1 trainer from 0.9.0"
)
_NEEDED = ("responses", "old_log_probs", "rollout_log_probs")
# what the V1 hook asks the transfer queue for
VERL_V1_FIELDS = (
    "prompts",
    "responses",
    "response_mask",
    "old_log_probs",
    "rollout_log_probs",
    "uid",
)
_BYPASS = "algorithm.rollout_correction.bypass_mode"


def verl_bypass_mode(config) -> bool:
    """Whether verl's config (the trainer's ``self.config``) runs in bypass mode."""
    return bool(setting(config, _BYPASS, False))


_ASYNC = ("colocate_async", "separate_async")


def _refusal(config) -> HookError | None:
    """Why a run with this config gives no log of the kernels' gap, or ``None``."""
    if verl_bypass_mode(config):
        return _refuse_bypass()
    mode = setting(config, "trainer.v1.trainer_mode")
    if setting(config, "trainer.use_v1", False) and mode in _ASYNC:
        return HookError(
            f"config trainer.v1.trainer_mode={mode}: the rollout runs on while the trainer "
            "updates, so a sequence may be sampled with older weights than those its "
            "old_log_probs are computed with, and the gap would hold that lag too; log a run "
            "with trainer.v1.trainer_mode=sync"
        )
    return None


def _refuse_bypass() -> HookError:
    return HookError(
        f"config {_BYPASS}=True: verl takes the rollout's log-probs as old_log_probs and "
        "computes no training-kernel log-probs at the rollout's weights, so a log would hold a "
        f"gap of zero by construction; log a run with {_BYPASS}=False (decoupled mode, the same "
        "kernels and weights), where old_log_probs are the training kernel's"
    )


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


def _is_padding(tag: object) -> bool:
    return bool(tag.get("is_padding", False)) if isinstance(tag, dict) else False


def _rows(value: object, key: str, count: int) -> list[np.ndarray]:
    """The per-sequence arrays of one transfer-queue field: a jagged nested tensor split at
    its ``offsets()``, or the rows of a plain 2-D tensor (every sequence of one length)."""
    if getattr(value, "is_nested", False):
        flat, cuts = to_numpy(value.values()), to_numpy(value.offsets()).astype(np.int64)
        rows = [flat[a:b] for a, b in itertools.pairwise(cuts)]
    else:
        array = to_numpy(value)
        if array.ndim != 2:
            raise HookError(f"data[{key!r}]: shape {tuple(array.shape)}, expected 2-D or nested")
        rows = list(array)
    if len(rows) != count:
        raise HookError(f"data[{key!r}]: {len(rows)} sequences, the batch has {count} keys")
    return rows


def verl_v1_records(meta, data, *, step: int | None = None) -> list[dict]:
    """The ``verl``-format log records of a V1 batch: ``meta`` the ``KVBatchMeta``, ``data`` what
    ``transfer_queue.kv_batch_get`` returned for its keys and ``VERL_V1_FIELDS``.

    One record per key not tagged ``is_padding``: the response, its mask, the prompt length as
    ``position_offset``, ``uid``, ``sample_id`` (the key's place in the batch), ``step`` when
    given, and the tags' ``min_global_steps``/``max_global_steps`` (the versions of the weights
    the rollout sampled it with) when set. Raises ``HookError`` naming every missing field and
    every sequence whose arrays disagree in length.
    """
    keys = list(getattr(meta, "keys", None) or [])
    tags = list(getattr(meta, "tags", None) or [{}] * len(keys))
    require(set(data.keys()), VERL_V1_FIELDS, "data")  # a TensorDict refuses `in`
    n = len(keys)
    if len(tags) != n:
        raise HookError(f"meta.tags: {len(tags)} tags for {n} keys")
    rows = {k: _rows(data[k], k, n) for k in VERL_V1_FIELDS[:-1]}
    uid_value = data["uid"]
    uid = list(uid_value.tolist() if hasattr(uid_value, "tolist") else uid_value)
    if len(uid) != n:
        raise HookError(f"data['uid']: {len(uid)} ids, the batch has {n} keys")
    keep = [i for i in range(n) if not _is_padding(tags[i])]
    bad = []
    for i in keep:
        length = len(rows["responses"][i])
        bad += [
            f"data[{k!r}][{i}] (key {keys[i]!r}): {len(rows[k][i])} entries, "
            f"data['responses'] {length}"
            for k in ("response_mask", "old_log_probs", "rollout_log_probs")
            if len(rows[k][i]) != length
        ]
    if bad:
        raise HookError("; ".join(bad))
    width = max((len(rows["responses"][i]) for i in keep), default=0)

    def padded(key: str, dtype) -> np.ndarray:
        out = np.zeros((len(keep), width), dtype)
        for r, i in enumerate(keep):
            out[r, : len(rows[key][i])] = rows[key][i]
        return out

    lengths = np.array([len(rows["responses"][i]) for i in keep], np.int64)
    records = sequence_records(
        "verl",
        ids=padded("responses", np.int64),
        train=padded("old_log_probs", np.float64),
        rollout=padded("rollout_log_probs", np.float64),
        mask=padded("response_mask", np.int64) != 0,
        start=np.zeros(len(keep), np.int64),
        stop=lengths,
        offset=np.array([len(rows["prompts"][i]) for i in keep], np.int64),
        prompt=np.array([str(uid[i]) for i in keep], dtype=object),
        extra=None if step is None else {"step": int(step)},
    )
    for record, i in zip(records, keep, strict=True):  # the weights' versions it was sampled at
        for version in ("min_global_steps", "max_global_steps"):
            if isinstance(tags[i], dict) and type(tags[i].get(version)) is int:
                record[version] = tags[i][version]
    return records


class VerlLogHook:
    """Appends each verl batch it is given to a JSONL log in the ``verl`` format.

    Call ``hook(batch, step=...)`` from an override of the trainer's ``_update_actor``: in the
    V1 trainer (``_update_actor(batch: KVBatchMeta, metrics)``) the hook reads the batch's
    tensors through ``fetch`` (``transfer_queue.kv_batch_get``); in the legacy one
    (``_update_actor(batch: DataProto)``, verl 0.7 on; earlier, where ``fit`` calls
    ``actor_rollout_wg.update_actor``) it reads the ``DataProto``. ``config`` is the trainer's
    config: with it the hook refuses, when it is made, bypass mode and the V1 trainer's
    asynchronous modes (``colocate_async``, ``separate_async``: the rollout's weights may lag
    the trainer's); a V1 batch needs it. Each
    call appends one batch in one write (``evidence.hooks.sink.JsonlSink``). ``path`` may hold
    ``{rank}``, filled with ``rank``, so that each process writes its own file.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        rank: int = 0,
        fsync: bool = False,
        config: object = None,
        fetch=None,
    ) -> None:
        refusal = None if config is None else _refusal(config)
        if refusal is not None:
            raise refusal
        self.config, self.fetch = config, fetch
        self.sink = JsonlSink(os.fspath(path).replace("{rank}", str(rank)), fsync=fsync)

    def records(self, batch, *, step: int | None = None) -> list[dict]:
        """The records of ``batch``, a ``DataProto`` or a V1 ``KVBatchMeta``."""
        if hasattr(batch, "partition_id") and not hasattr(batch, "batch"):
            missing = [
                name
                for name, value in (("config", self.config), ("fetch", self.fetch))
                if value is None
            ]
            if missing:
                raise HookError(
                    f"a V1 batch (KVBatchMeta) needs {' and '.join(missing)}: "
                    "VerlLogHook(path, config=self.config, fetch=transfer_queue.kv_batch_get); "
                    "the config tells bypass mode, fetch reads the tensors"
                )
            data = self.fetch(
                keys=batch.keys, partition_id=batch.partition_id, select_fields=list(VERL_V1_FIELDS)
            )
            return verl_v1_records(batch, data, step=step)
        return verl_records(batch, step=step)

    def __call__(self, batch, *, step: int | None = None) -> int:
        return self.sink.write(self.records(batch, step=step))

    def close(self) -> None:
        self.sink.close()
