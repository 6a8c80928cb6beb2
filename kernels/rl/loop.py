"""The RL post-training loop: rollouts through K_inf, log-probs and gradients through K_train.

Each step of ``run_rl`` (``start_session`` then ``rl_step`` per step):

1. draws ``groups`` fresh prompts from held-out text, each repeated ``group_size`` times;
2. samples completions with the inference kernel K_inf of a named preset (``h100-fp8``,
   ``bf16``, ``fp32``, ...): incremental decoding on emulated matmuls and the paged
   low-precision KV cache, batch-dependent reduction splits (``kernels.model.decode.generate``);
3. scores the completions with the task's rule-based reward and forms group-relative
   advantages;
4. teacher-forces the same tokens through the training kernel K_train (float32, the kernel the
   gradient flows through: ``load_pretrained``'s plain float32 ops, the same functions as
   the emulated ``fp32`` preset's K_train up to summation order) and measures both kernels'
   logits at every sampled position over the full vocabulary (``kernels.measurement._measure``):
   log w of the sampled token, token TV, KL, logit drift;
5. computes the named estimator's correction weights from those log-probs and takes one
   optimizer step of the corrected policy gradient (``kernels.rl.grpo``).

Every jitted piece is traced once per run (the model's weights are arguments, not constants),
and a ``StepRecord`` per step keeps the reward, the measured mismatch and what the correction
did. With ``keep_sequences`` the run also returns every rollout as a ``Rollout`` (the fields of
``evidence.logs.Rollout``), ready for ``evidence.logs.write_log`` and the contract's
online monitor.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array

from kernel_contracts.contracts.checks import check_temperature
from kernel_contracts.contracts.presets import PRESETS, preset
from kernel_contracts.kernels.measurement._measure import measure
from kernel_contracts.kernels.model.decode import generate, teacher_force
from kernel_contracts.kernels.model.tinylm import CHECKPOINTS, TinyLM, load_pretrained, with_ops
from kernel_contracts.kernels.ops import inference_ops
from kernel_contracts.kernels.rl.estimators import check_params
from kernel_contracts.kernels.rl.grpo import Batch, correct, group_advantages, train_step
from kernel_contracts.kernels.rl.task import get_task, group_prompts

__all__ = [
    "RECORD_FIELDS",
    "RLConfig",
    "Rollout",
    "RunResult",
    "Session",
    "StepRecord",
    "rl_step",
    "run_rl",
    "start_session",
]


@dataclass(frozen=True)
class RLConfig:
    """One RL run: the kernel pair, the correction, the task and the optimizer."""

    preset: str = "h100-fp8"  # K_inf's preset; K_train is float32
    estimator: str = "plain"  # a name of kernels.rl.estimators.ESTIMATOR_NAMES
    params: tuple[tuple[str, object], ...] = ()  # checked by check_params
    task: str = "vowels"
    groups: int = 8  # prompts per step
    group_size: int = 4  # completions per prompt
    prompt_len: int = 8
    new_tokens: int = 16
    learning_rate: float = 1e-3
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    normalize_advantages: bool = True
    seed: int = 0
    model: str = "tiny-lm"

    def check(self) -> None:
        """Raise ValueError naming the first unusable field."""
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; known: {', '.join(PRESETS)}")
        check_params(self.estimator, dict(self.params))
        try:
            hash(self.params)
        except TypeError:
            raise ValueError(
                f"params must be hashable (tuples, not lists), got {self.params!r}"
            ) from None
        get_task(self.task)
        for name in ("groups", "group_size", "prompt_len", "new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        check_temperature(self.temperature)
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.model not in CHECKPOINTS:
            raise ValueError(f"unknown model {self.model!r}; known: {', '.join(CHECKPOINTS)}")
        context = _context(self.model)
        if self.prompt_len + self.new_tokens > context:
            raise ValueError(
                f"prompt_len + new_tokens = {self.prompt_len + self.new_tokens} exceeds the "
                f"context {context} of model {self.model!r}"
            )

    @property
    def batch(self) -> int:
        return self.groups * self.group_size


class StepRecord(NamedTuple):
    """What one step measured (plain floats)."""

    step: int
    reward_mean: float
    reward_std: float
    abs_log_ratio_max: float  # max |log w| over the sampled tokens
    abs_log_ratio_mean: float
    tv_mean: float  # full-vocabulary token TV at the sampled positions
    tv_max: float
    logit_drift_max: float  # max ‖z_inf − z_train‖∞ over the sampled positions
    logit_drift_mean: float
    kl_mean: float  # mean KL(π_inf ‖ π_train)
    entropy_mean: float  # mean entropy of π_train at the sampled positions
    masked_share: float  # share of tokens the correction dropped (ω = 0)
    clipped_share: float  # share of tokens it truncated (0 < ω < the IS weight)
    weight_mean: float  # mean ω
    grad_norm: float  # before clipping
    loss: float
    rollout_s: float  # wall seconds: generation on K_inf
    update_s: float  # wall seconds: scoring, measurement and the update on K_train


RECORD_FIELDS = StepRecord._fields


@dataclass(frozen=True)
class Rollout:
    """One sampled sequence and both kernels' log-probs of its tokens, as a log records it."""

    prompt_id: str
    sample_id: int
    ids: list[int]
    train: list[float]
    rollout: list[float]
    position_offset: int = 0
    log_kept_mass: list[float] | None = None


class RunResult(NamedTuple):
    config: RLConfig
    records: tuple[StepRecord, ...]
    sequences: tuple[Rollout, ...]  # empty unless keep_sequences
    seconds: float  # wall time of the whole run, compilation included


@functools.cache
def _context(model: str) -> int:
    return load_pretrained(model).config.context


@functools.cache
def _transform(learning_rate: float, max_grad_norm: float) -> optax.GradientTransformation:
    # one object per setting: the optimizer's graph holds it, so runs with equal settings share
    # the compiled update instead of each tracing its own
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(learning_rate))


def _optimizer(model, config: RLConfig) -> nnx.Optimizer:
    tx = _transform(float(config.learning_rate), float(config.max_grad_norm))
    return nnx.Optimizer(model, tx, wrt=nnx.Param)


class Session(NamedTuple):
    """A run in progress: the policy (K_train), its optimizer and its K_inf view.

    ``k_inf`` shares ``model``'s parameter variables, so every rollout samples from the
    current weights; the optimizer updates both at once.
    """

    config: RLConfig
    model: TinyLM
    optimizer: nnx.Optimizer
    k_inf: TinyLM
    key: Array


def start_session(config: RLConfig) -> Session:
    """A session of ``config`` from the shipped pretrained model (nothing compiled yet)."""
    config.check()
    model = load_pretrained(config.model)  # float32 ops: K_train, differentiable
    optimizer = _optimizer(model, config)
    k_inf = with_ops(model, inference_ops(preset(config.preset), batch_size=config.batch))
    return Session(config, model, optimizer, k_inf, jax.random.key(config.seed))


def rl_step(
    session: Session, step: int, *, keep_sequences: bool = False
) -> tuple[StepRecord, list[Rollout]]:
    """Step ``step`` of ``session``: rollouts, measurement, one update (module docstring).

    Prompts and the sampling key depend on ``(seed, step)`` only, so two sessions that differ
    in the preset or the estimator see the same prompts at the same step.
    """
    config, model = session.config, session.model
    temperature = float(config.temperature)
    p, n, vocab = config.prompt_len, config.new_tokens, model.config.vocab
    t0 = time.perf_counter()
    prompts = group_prompts(
        config.groups, config.group_size, p, seed=config.seed * 1_000_003 + step, model=config.model
    )
    tokens, z_inf = generate(
        session.k_inf,
        jnp.asarray(prompts),
        jax.random.fold_in(session.key, step),
        jnp.float32(temperature),
        new_tokens=n,
    )
    tokens.block_until_ready()
    t1 = time.perf_counter()
    generated = tokens[:, p:]
    rewards = get_task(config.task).reward(generated)
    adv = group_advantages(rewards, config.group_size, normalize=config.normalize_advantages)
    mask = jnp.ones((config.batch, n), jnp.float32)
    z_train = teacher_force(model, tokens, prompt_len=p)  # K_train before the update
    m = measure(
        z_train.reshape(-1, vocab), z_inf.reshape(-1, vocab), generated.reshape(-1), temperature
    )
    m = {k: v.reshape(config.batch, n) for k, v in m.items()}
    corr = correct(
        z_train,
        z_inf,
        generated,
        adv,
        mask,
        m["tv"],
        m["kl_inf_train"],
        estimator=config.estimator,
        params=config.params,
        temperature=temperature,
    )
    stats = train_step(
        model,
        session.optimizer,
        Batch(tokens, corr.weights, adv, mask),
        temperature=temperature,
    )
    r, mh, st, co = jax.device_get((rewards, m, stats, corr))
    t2 = time.perf_counter()
    abs_lr = np.abs(mh["log_ratio"])
    record = StepRecord(
        step=step,
        reward_mean=float(np.mean(r)),
        reward_std=float(np.std(r)),
        abs_log_ratio_max=float(abs_lr.max()),
        abs_log_ratio_mean=float(abs_lr.mean()),
        tv_mean=float(mh["tv"].mean()),
        tv_max=float(mh["tv"].max()),
        logit_drift_max=float(mh["logit_drift"].max()),
        logit_drift_mean=float(mh["logit_drift"].mean()),
        kl_mean=float(mh["kl_inf_train"].mean()),
        entropy_mean=float(mh["entropy"].mean()),
        masked_share=float(co.masked_share),
        clipped_share=float(co.clipped_share),
        weight_mean=float(co.weights.mean()),
        grad_norm=float(st.grad_norm),
        loss=float(st.loss),
        rollout_s=t1 - t0,
        update_s=t2 - t1,
    )
    logged = _logged(step, config, np.asarray(generated), co) if keep_sequences else []
    return record, logged


def run_rl(
    config: RLConfig,
    steps: int,
    *,
    keep_sequences: bool = False,
    on_step: Callable[[StepRecord], None] | None = None,
) -> RunResult:
    """``steps`` RL steps of ``config`` from the shipped pretrained model."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    t0 = time.perf_counter()
    session = start_session(config)
    records, sequences = [], []
    for step in range(steps):
        record, logged = rl_step(session, step, keep_sequences=keep_sequences)
        records.append(record)
        sequences.extend(logged)
        if on_step is not None:
            on_step(record)
    return RunResult(config, tuple(records), tuple(sequences), time.perf_counter() - t0)


def _logged(step: int, config: RLConfig, generated, corr) -> list[Rollout]:
    train = np.minimum(np.asarray(corr.train_logprobs, np.float64), 0.0)
    rollout = np.minimum(np.asarray(corr.rollout_logprobs, np.float64), 0.0)
    out = []
    for row in range(config.batch):
        group, sample = divmod(row, config.group_size)
        out.append(
            Rollout(
                prompt_id=f"step{step:05d}-prompt{group:03d}",
                sample_id=sample,
                ids=generated[row].tolist(),
                train=train[row].tolist(),
                rollout=rollout[row].tolist(),
                position_offset=config.prompt_len,
            )
        )
    return out
