"""Write our JSONL log from inside RL frameworks: verl, TRL and SkyRL.

Each hook turns the framework's own batch record (verl's ``DataProto``, the dict TRL's
``GRPOTrainer`` generates, SkyRL's ``TrainingInputBatch``) into log records with both
policies' log-probs of every sampled token, and appends them a batch at a time
(``JsonlSink``). No framework, and not torch, is imported: tensors are read through
``detach().cpu().numpy()``. ``*_CHECKED`` names the framework versions each was read against.
"""

from kernel_contracts.evidence.hooks.records import HookError, sequence_records, to_numpy
from kernel_contracts.evidence.hooks.sink import JsonlSink
from kernel_contracts.evidence.hooks.skyrl import SKYRL_CHECKED, SkyrlLogHook, skyrl_records
from kernel_contracts.evidence.hooks.trl import TRL_CHECKED, TrlLogHook, trl_records
from kernel_contracts.evidence.hooks.verl import VERL_CHECKED, VerlLogHook, verl_records

__all__ = [
    "SKYRL_CHECKED",
    "TRL_CHECKED",
    "VERL_CHECKED",
    "HookError",
    "JsonlSink",
    "SkyrlLogHook",
    "TrlLogHook",
    "VerlLogHook",
    "sequence_records",
    "skyrl_records",
    "to_numpy",
    "trl_records",
    "verl_records",
]
