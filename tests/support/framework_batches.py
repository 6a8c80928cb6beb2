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
