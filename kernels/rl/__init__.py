"""kernels.rl: policy-gradient correction weights, the measurement of their bias, and an RL
post-training loop that samples with K_inf and trains with K_train.

Public names are re-exported lazily, as in ``kernels``: importing the package loads nothing
heavy until a name is used.
"""

from __future__ import annotations

from kernel_contracts.contracts.lazy import lazy_exports

# public name -> submodule that defines it
_EXPORTS = {
    "ESTIMATOR_NAMES": "kernel_contracts.kernels.rl.estimators",
    "correction_weights": "kernel_contracts.kernels.rl.estimators",
    "check_params": "kernel_contracts.kernels.rl.estimators",
    "numpy_weights": "kernel_contracts.kernels.rl.weight_rules",
    "TIE_RULES": "kernel_contracts.kernels.rl.ties",
    "TieRule": "kernel_contracts.kernels.rl.ties",
    "tie_rule": "kernel_contracts.kernels.rl.ties",
    "tie_table": "kernel_contracts.kernels.rl.ties",
    "BanditBias": "kernel_contracts.kernels.rl.bias",
    "SequenceBias": "kernel_contracts.kernels.rl.bias",
    "bandit_bias": "kernel_contracts.kernels.rl.bias",
    "clip_share": "kernel_contracts.kernels.rl.bias",
    "sequence_bias": "kernel_contracts.kernels.rl.bias",
    "held_out_prompts": "kernel_contracts.kernels.rl.rollouts",
    "rollout_pairs": "kernel_contracts.kernels.rl.rollouts",
    "RLConfig": "kernel_contracts.kernels.rl.loop",
    "RunResult": "kernel_contracts.kernels.rl.loop",
    "Rollout": "kernel_contracts.kernels.rl.loop",
    "Session": "kernel_contracts.kernels.rl.loop",
    "StepRecord": "kernel_contracts.kernels.rl.loop",
    "rl_step": "kernel_contracts.kernels.rl.loop",
    "run_rl": "kernel_contracts.kernels.rl.loop",
    "start_session": "kernel_contracts.kernels.rl.loop",
    "Batch": "kernel_contracts.kernels.rl.grpo",
    "Correction": "kernel_contracts.kernels.rl.grpo",
    "correct": "kernel_contracts.kernels.rl.grpo",
    "group_advantages": "kernel_contracts.kernels.rl.grpo",
    "train_step": "kernel_contracts.kernels.rl.grpo",
    "TASKS": "kernel_contracts.kernels.rl.task",
    "ByteClassTask": "kernel_contracts.kernels.rl.task",
    "get_task": "kernel_contracts.kernels.rl.task",
    "group_prompts": "kernel_contracts.kernels.rl.task",
    "degraded_steps": "kernel_contracts.kernels.rl.curves",
    "mean_curve": "kernel_contracts.kernels.rl.curves",
    "summary_row": "kernel_contracts.kernels.rl.curves",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
