"""kernels.rl: policy-gradient correction weights and the measurement of their bias.

Public names are re-exported lazily, as in ``kernels``: importing the package loads nothing
heavy until a name is used.
"""

from __future__ import annotations

import importlib

# public name -> submodule that defines it
_EXPORTS = {
    "ESTIMATOR_NAMES": "kernels.rl.estimators",
    "correction_weights": "kernels.rl.estimators",
    "check_params": "kernels.rl.estimators",
    "BanditBias": "kernels.rl.bias",
    "SequenceBias": "kernels.rl.bias",
    "bandit_bias": "kernels.rl.bias",
    "clip_share": "kernels.rl.bias",
    "sequence_bias": "kernels.rl.bias",
    "held_out_prompts": "kernels.rl.rollouts",
    "rollout_pairs": "kernels.rl.rollouts",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kernels.rl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
