"""kernels.rl: policy-gradient correction weights, the measurement of their bias, and an RL
post-training loop that samples with K_inf and trains with K_train.

Public names are re-exported lazily, as in ``kernels``: importing the package loads nothing
heavy until a name is used.
"""

from __future__ import annotations

from contracts.lazy import lazy_exports

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
    "RLConfig": "kernels.rl.loop",
    "RunResult": "kernels.rl.loop",
    "Rollout": "kernels.rl.loop",
    "Session": "kernels.rl.loop",
    "StepRecord": "kernels.rl.loop",
    "rl_step": "kernels.rl.loop",
    "run_rl": "kernels.rl.loop",
    "start_session": "kernels.rl.loop",
    "Batch": "kernels.rl.grpo",
    "Correction": "kernels.rl.grpo",
    "correct": "kernels.rl.grpo",
    "group_advantages": "kernels.rl.grpo",
    "train_step": "kernels.rl.grpo",
    "TASKS": "kernels.rl.task",
    "ByteClassTask": "kernels.rl.task",
    "get_task": "kernels.rl.task",
    "group_prompts": "kernels.rl.task",
    "degraded_steps": "kernels.rl.curves",
    "mean_curve": "kernels.rl.curves",
    "summary_row": "kernels.rl.curves",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
