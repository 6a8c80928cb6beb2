"""Write our JSONL log from inside RL frameworks: verl, TRL and SkyRL.

Each hook turns the framework's own batch record (verl's ``DataProto``, or the ``KVBatchMeta``
of its V1 trainer read through the transfer queue; the dict TRL's ``GRPOTrainer`` hands each
micro-step; SkyRL's ``TrainingInputBatch``) into log records with both policies' log-probs of
every sampled token, and appends them a batch at a time, each record framed by its batch
(``JsonlSink``). No framework, and not torch, is imported: tensors are read through
``detach().cpu().numpy()``. ``*_CHECKED`` names the framework versions each was read against.
"""

from kernel_contracts.evidence.hooks.records import HookError, sequence_records, to_numpy
from kernel_contracts.evidence.hooks.sink import JsonlSink
from kernel_contracts.evidence.hooks.skyrl import (
    SKYRL_CHECKED,
    SkyrlLogHook,
    skyrl_records,
    skyrl_skips_policy_forward,
)
from kernel_contracts.evidence.hooks.trl import TRL_CHECKED, TrlLogHook, trl_records
from kernel_contracts.evidence.hooks.verl import (
    VERL_CHECKED,
    VERL_V1_FIELDS,
    VerlLogHook,
    verl_bypass_mode,
    verl_records,
    verl_v1_records,
)

__all__ = [
    "SKYRL_CHECKED",
    "TRL_CHECKED",
    "VERL_CHECKED",
    "VERL_V1_FIELDS",
    "HookError",
    "JsonlSink",
    "SkyrlLogHook",
    "TrlLogHook",
    "VerlLogHook",
    "sequence_records",
    "skyrl_records",
    "skyrl_skips_policy_forward",
    "to_numpy",
    "trl_records",
    "verl_bypass_mode",
    "verl_records",
    "verl_v1_records",
]
