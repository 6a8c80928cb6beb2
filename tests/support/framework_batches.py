"""The recorded framework batches of tests/data/frameworks, as the hooks meet them in training.

Each array is wrapped in ``Tensor``, a stand-in with torch's ``detach().cpu().numpy()``
surface (a bfloat16 one refuses ``numpy()``, as torch's does); verl's ``DataProto`` is an
object with ``batch``, ``non_tensor_batch`` and ``meta_info``; SkyRL's ``TrainingInputBatch``
a dict with a ``metadata`` attribute; TRL's generation batch a plain dict.
"""

from __future__ import annotations

import json
import pathlib
from types import SimpleNamespace

import numpy as np

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "frameworks"


class Tensor:
    """A torch tensor's surface: ``detach``, ``cpu``, ``numpy``, ``float`` and ``dtype``."""

    def __init__(self, array: np.ndarray, dtype: str):
        self.array, self.dtype = array, dtype

    def detach(self):
        return self

    def cpu(self):
        return self

    def float(self):
        return Tensor(self.array.astype(np.float32), "torch.float32")

    def numpy(self):
        if self.dtype == "torch.bfloat16":  # torch: "Got unsupported ScalarType BFloat16"
            raise TypeError("Got unsupported ScalarType BFloat16")
        return self.array


def _load(name: str, container: str):
    z = np.load(DATA / name)
    tensors = {
        k.split("/", 1)[1]: Tensor(z[k], str(z[f"dtype/{k}"]))
        for k in z.files
        if k.startswith(container + "/")
    }
    return z, tensors, json.loads(str(z["meta"]))


def verl_batch():
    """verl's ``DataProto`` after the old-log-prob pass."""
    z, tensors, meta = _load("verl_dataproto.npz", "batch")
    non_tensor = {
        k.split("/", 1)[1]: z[k].astype(object) for k in z.files if k.startswith("non_tensor")
    }
    return SimpleNamespace(batch=tensors, non_tensor_batch=non_tensor, meta_info=meta)


def trl_output():
    """The dict TRL's ``GRPOTrainer._generate_and_score_completions`` returns."""
    return _load("trl_generation.npz", "output")[1]


class SkyrlBatch(dict):
    """SkyRL's ``TrainingInputBatch``: a dict of tensors with a ``metadata`` attribute."""

    metadata = None


def skyrl_batch():
    """SkyRL's ``TrainingInputBatch`` after ``fwd_logprobs_values_reward``."""
    z, tensors, meta = _load("skyrl_training_input.npz", "batch")
    batch = SkyrlBatch(tensors, **dict.fromkeys(z["none"].tolist()))
    batch.metadata = meta
    return batch


class Nested:
    """A jagged nested tensor's surface (``torch.nested``, ``layout=torch.jagged``): ``values()``
    the rows laid end to end, ``offsets()`` where each row starts (and the last ends)."""

    is_nested = True

    def __init__(self, rows: list[np.ndarray], dtype: str):
        self.rows, self.dtype = rows, dtype

    def values(self):
        return Tensor(np.concatenate(self.rows), self.dtype)

    def offsets(self):
        return Tensor(np.cumsum([0, *map(len, self.rows)]).astype(np.int64), "torch.int64")


class NonTensorStack(list):
    """tensordict's ``NonTensorStack`` surface: ``tolist()``."""

    def tolist(self):
        return list(self)


def _field(rows: list[np.ndarray], dtype: str):
    """A field as the transfer queue holds it: a plain 2-D tensor when every row has one
    length (verl stacks them), else a jagged nested tensor."""
    if len({len(r) for r in rows}) == 1:
        return Tensor(np.stack(rows), dtype)
    return Nested(rows, dtype)


class TensorDict(dict):
    """A TensorDict's surface as the hooks read it: fields by key and ``keys()``; like
    tensordict's, it refuses ``key in td``."""

    def __contains__(self, key):
        raise NotImplementedError("TensorDict does not support membership checks with `in`")


class TransferQueue:
    """The part of ``transfer_queue`` verl's V1 trainer reads a batch with: ``kv_batch_get``
    returns the selected fields of the given keys, one row per key in their order."""

    def __init__(self):
        self.samples: dict[tuple[str, str], dict[str, np.ndarray]] = {}
        self.dtypes: dict[str, str] = {}

    def kv_batch_get(self, *, keys, partition_id, select_fields):
        rows = [self.samples[(partition_id, k)] for k in keys]
        out = TensorDict()
        for field in select_fields:
            value = (
                NonTensorStack(r[field] for r in rows)
                if field == "uid"
                else _field([r[field] for r in rows], self.dtypes[field])
            )
            dict.__setitem__(out, field, value)
        return out


def verl_v1_batch(rows=(0, 1, 2, 3), padding: int = 1):
    """verl's V1 trainer at ``_update_actor``: ``(KVBatchMeta, TransferQueue)`` holding the
    sequences ``rows`` of the recorded ``DataProto``, each unpadded as the agent loop puts it
    (``verl/trainer/ppo/v1/agent_loop_tq.py``), after ``_compute_old_log_prob``, and ``padding``
    no-op rows tagged ``is_padding`` (``verl/trainer/ppo/padding_utils.py``)."""
    legacy = verl_batch()
    b = {k: t.array for k, t in legacy.batch.items()}
    width = b["responses"].shape[1]
    queue, keys, tags = TransferQueue(), [], []
    for key in ("prompts", "responses", "response_mask"):
        queue.dtypes[key] = "torch.int64"
    for key in ("old_log_probs", "rollout_log_probs"):
        queue.dtypes[key] = "torch.float32"
    for row in rows:
        prompt_len = int(b["attention_mask"][row, :-width].sum())
        length = int(b["attention_mask"][row, -width:].sum())
        uid = str(legacy.non_tensor_batch["uid"][row])
        sample = {
            "prompts": b["prompts"][row, b["prompts"].shape[1] - prompt_len :],
            "uid": uid,
            **{
                k: b[k][row, :length]
                for k in ("responses", "response_mask", "old_log_probs", "rollout_log_probs")
            },
        }
        keys.append(f"{uid}_{row}_0")
        queue.samples[("train", keys[-1])] = sample
        tags.append({"status": "success", "prompt_len": prompt_len, "response_len": length})
    for i in range(padding):
        one = np.array([2], np.int64)
        keys.append(f"pad0_{i}_0")
        queue.samples[("train", keys[-1])] = {
            "prompts": one,
            "responses": one,
            "response_mask": np.zeros(1, np.int64),
            "old_log_probs": np.zeros(1, np.float32),
            "rollout_log_probs": np.zeros(1, np.float32),
            "uid": "pad0",
        }
        tags.append({"status": "success", "is_padding": True, "prompt_len": 1, "response_len": 1})
    meta = SimpleNamespace(partition_id="train", keys=keys, tags=tags, extra_info={})
    return meta, queue
