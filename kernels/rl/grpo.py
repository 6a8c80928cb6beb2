"""One GRPO / REINFORCE update on the training kernel, with an off-policy correction.

The rollouts were sampled from the inference kernel's policy π' (K_inf); the update
differentiates the training kernel's policy π (K_train, float32) at the same tokens. Each
token's policy-gradient term ∇log π(y_t)·A_t is multiplied by the correction weight ω_t of a
named estimator (``kernels.rl.estimators``), computed from log w_t = log π(y_t) − log π'(y_t)
and, for the mask estimators, the full-vocabulary TV or KL at the position. The loss is the
token mean −Σ ω_t·A_t·log π(y_t) / Σ mask, so its gradient is the corrected estimate.

Group-relative advantages (GRPO): each prompt's ``group_size`` completions are compared with
their own mean reward, A = (r − mean_g r) / (std_g r + eps), or without the division when
``normalize`` is off (plain REINFORCE with a per-group baseline).

``correct`` computes the weights from both kernels' logits (a small ``jax.jit`` per
estimator: its name and parameters are static); ``train_step`` is one ``nnx.jit`` that takes
them as data, so one compiled update serves every estimator, and a run traces each once
(``TRACES`` counts traces).

References:
    Shao et al., "DeepSeekMath" (2024), arXiv 2402.03300 — GRPO's group-relative advantage.
    Williams, "Simple statistical gradient-following algorithms" (1992) — REINFORCE.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jaxtyping import Array, ArrayLike, Float, Int

from kernel_contracts.kernels.model.tinylm import TinyLM
from kernel_contracts.kernels.rl.estimators import correction_weights

__all__ = [
    "TRACES",
    "Batch",
    "Correction",
    "StepStats",
    "correct",
    "group_advantages",
    "train_step",
]

# how many times the jitted update has been traced (a retrace detector)
TRACES: dict[str, int] = {"correct": 0, "train_step": 0}


class Correction(NamedTuple):
    """The correction of one batch: per-token weights and what they did."""

    weights: Float[Array, "seqs new"]  # ω (stop-gradient), 0 on padding
    log_ratio: Float[Array, "seqs new"]  # log π(y_t) − log π'(y_t)
    train_logprobs: Float[Array, "seqs new"]  # log π(y_t), K_train before the update
    rollout_logprobs: Float[Array, "seqs new"]  # log π'(y_t), K_inf
    masked_share: Float[Array, ""]  # share of tokens with ω = 0
    clipped_share: Float[Array, ""]  # share of tokens with 0 < ω < their IS weight


class Batch(NamedTuple):
    """One batch of rollouts as the update reads it."""

    tokens: Int[Array, "seqs length"]  # prompt + generated tokens
    weights: Float[Array, "seqs new"]  # ω of each generated token
    advantages: Float[Array, " seqs"]
    mask: Float[Array, "seqs new"]  # 1 on generated tokens, 0 on padding


class StepStats(NamedTuple):
    loss: Float[Array, ""]
    grad_norm: Float[Array, ""]  # global L2 norm of the gradient, before any clipping


def group_advantages(
    rewards: Float[ArrayLike, " seqs"],
    group_size: int,
    *,
    normalize: bool = True,
    eps: float = 1e-6,
) -> Float[Array, " seqs"]:
    """Group-relative advantages: consecutive runs of ``group_size`` rows form one group."""
    rewards = jnp.asarray(rewards, jnp.float32)
    if rewards.ndim != 1 or group_size < 1 or rewards.shape[0] % group_size:
        raise ValueError(
            f"expected [seqs] rewards in groups of {group_size}, got shape {rewards.shape}"
        )
    r = rewards.reshape(-1, group_size)
    centred = r - r.mean(axis=1, keepdims=True)
    if normalize:
        centred = centred / (r.std(axis=1, keepdims=True) + eps)
    return centred.reshape(-1)


def _is_weight(name: str, log_ratio, mask):
    """The uncorrected importance weight each estimator starts from: W for sequence ones."""
    lr = jnp.where(mask > 0, log_ratio, 0.0)
    if name in ("seq_is", "seq_tis", "seq_mask"):
        lr = jnp.broadcast_to(jnp.sum(lr, axis=1, keepdims=True), lr.shape)
    return jnp.exp(jnp.minimum(lr, 80.0))


def _taken(z, tokens, temperature):
    logp = jax.nn.log_softmax(z / temperature, axis=-1)
    return jnp.take_along_axis(logp, tokens[..., None], axis=-1)[..., 0]


@partial(jax.jit, static_argnames=("estimator", "params", "temperature"))
def correct(
    train_logits: Float[ArrayLike, "seqs new vocab"],
    rollout_logits: Float[ArrayLike, "seqs new vocab"],
    generated: Int[ArrayLike, "seqs new"],
    advantages: Float[ArrayLike, " seqs"],
    mask: Float[ArrayLike, "seqs new"],
    token_tv: Float[ArrayLike, "seqs new"],
    token_kl: Float[ArrayLike, "seqs new"],
    *,
    estimator: str,
    params: tuple[tuple[str, float | tuple[float, float]], ...] = (),
    temperature: float = 1.0,
) -> Correction:
    """The estimator's weights from both kernels' logits at the sampled tokens.

    ``token_tv`` is TV(π, π') and ``token_kl`` is KL(π' ‖ π) at each position (read by
    ``tv_mask`` and ``kl_mask``); ``advantages`` are per sequence (read by ``ppo_clip`` and the
    advantage-aware masks); the rollout's log-probs of the sampled tokens feed the DPPO masks.
    """
    TRACES["correct"] += 1
    train_lp = _taken(train_logits, generated, temperature)
    rollout_lp = _taken(rollout_logits, generated, temperature)
    log_ratio = train_lp - rollout_lp
    adv = jnp.broadcast_to(advantages[:, None], mask.shape)
    omega = correction_weights(
        estimator,
        log_ratio,
        mask,
        adv,
        params=dict(params),
        token_tv=token_tv,
        token_kl=token_kl,
        logp_inf=rollout_lp,
    )
    valid = mask > 0
    n = jnp.maximum(valid.sum(), 1)
    if estimator == "plain":
        masked = clipped = jnp.zeros((), jnp.float32)
    else:
        ref = _is_weight(estimator, log_ratio, mask)
        masked = (jnp.sum(valid & (omega == 0)) / n).astype(jnp.float32)
        clipped = (jnp.sum(valid & (omega > 0) & (omega < ref * (1 - 1e-6))) / n).astype(
            jnp.float32
        )
    return Correction(omega, log_ratio, train_lp, rollout_lp, masked, clipped)


@nnx.jit(static_argnames=("temperature",))
def train_step(
    model: TinyLM, optimizer: nnx.Optimizer, batch: Batch, *, temperature: float = 1.0
) -> StepStats:
    """One optimizer step on ``model`` (K_train) of the loss −Σ ω·A·log π(y) / Σ mask, whose
    gradient is the corrected policy-gradient estimate (ω is a constant of the loss)."""
    TRACES["train_step"] += 1
    new = batch.mask.shape[1]
    prompt_len = batch.tokens.shape[1] - new
    generated = batch.tokens[:, prompt_len:]
    scale = jax.lax.stop_gradient(batch.weights * batch.advantages[:, None] * batch.mask)
    count = jnp.maximum(batch.mask.sum(), 1.0)

    def loss_fn(m: TinyLM):
        z = m(batch.tokens[:, :-1])[:, prompt_len - 1 :]
        return -jnp.sum(scale * _taken(z, generated, temperature)) / count

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    grad_norm = optax.tree.norm(grads)
    optimizer.update(model, grads)
    return StepStats(loss=loss, grad_norm=grad_norm)
