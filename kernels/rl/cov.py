"""The weights of the covariance losses, Clip-Cov and KL-Cov, anchored on the rollout policy.

Both losses (verl ``compute_policy_loss_clip_cov`` / ``_kl_cov``, SkyRL's ``clip_cov`` /
``kl_cov``) pick tokens of the whole batch by the centred covariance of each real token,

    cov_t = (A_t − mean A)·(log π(y_t) − mean log π),

the means taken over the batch's real tokens, and treat the picked tokens apart:

- Clip-Cov: PPO's clipped surrogate max(−A·r, −A·clip(r, 1 − ε, 1 + ε)), and among the tokens
  PPO keeps whose cov lies strictly inside (lb, ub), ``clip_num`` = max(⌊ρ·n⌋, 1) of them, drawn
  at random, lose their gradient (n the batch's real tokens, ρ ``cov_fraction``). The weight is
  ppo_clip's, 0 on the drawn tokens. The framework draws at random; ours drops the candidates
  of largest w (ties by position), the draw that costs the bias most. Where the candidates
  number at most ``clip_num`` every one is dropped, and the two agree exactly.
- KL-Cov: the unclipped surrogate −A·r, plus κ·|log r| on the k = max(⌊ρ·n⌋, 1) tokens of
  largest cov (``torch.topk``; ours breaks ties by position). The gradient of κ·|log r| with
  respect to log π is κ·sign(log r), so on a picked token the multiplier of ∇log π·A is
  ω = w − κ·sign(log w)/A. Where A = 0 that term is no multiple of A: the weight is w there,
  and the bound (``bounds.pg.cov``) counts the penalty's gradient on every token.

With the rollout as the old policy (r = w at the learner's first step) these are correction
weights of the kernel pair; with the trainer's recomputed log-probs, as the frameworks pass
them, r = 1 at that step and the selection still acts (``docs/rl.md``).

References:
    Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
    Models" (2025), arXiv:2505.22617 — Clip-Cov and KL-Cov.
"""

from __future__ import annotations

from typing import Any

from jaxtyping import Bool, Float

# an array of either namespace (jax.numpy or numpy; this module imports no JAX)
Array = Any

__all__ = ["clip_cov_weights", "cov_scores", "kl_cov_weights", "pick_count", "top_picks"]


def cov_scores(
    xp,
    logp: Float[Array, "batch time"],
    adv: Float[Array, "batch time"],
    valid: Bool[Array, "batch time"],
) -> Float[Array, "batch time"]:
    """cov_t = (A_t − mean A)(log π_t − mean log π), the means over the real tokens
    (``valid``); padding gets −inf (never picked)."""
    n = xp.maximum(xp.sum(valid), 1).astype(logp.dtype)
    a = xp.where(valid, adv, 0.0)
    lp = xp.where(valid, logp, 0.0)
    cov = (a - xp.sum(a) / n) * (lp - xp.sum(lp) / n)
    return xp.where(valid, cov, -xp.inf)


def pick_count(xp, valid: Bool[Array, "batch time"], fraction: float) -> Array:
    """max(⌊ρ·n⌋, 1), n the real tokens: how many tokens the losses pick. ρ·n is taken in the
    namespace's default float: NumPy's float64 is Python's ``int(ρ * n)`` exactly, as the
    frameworks compute it; JAX's float32 (without x64) may round a product within 2⁻²⁴ of an
    integer onto it, one token more."""
    n = xp.sum(valid).astype(xp.asarray(0.0).dtype)
    return xp.maximum(xp.floor(fraction * n), 1.0).astype(xp.int32)


def top_picks(
    xp, score: Float[Array, "batch time"], eligible: Bool[Array, "batch time"], k: Array
) -> Bool[Array, "batch time"]:
    """The ``k`` eligible tokens of largest ``score``, ties by position (row-major)."""
    flat = score.reshape(-1)
    key = xp.where(eligible.reshape(-1), -flat, xp.inf)
    order = xp.argsort(key, stable=True)
    rank = xp.argsort(order, stable=True)  # the inverse permutation: each token's place
    return (eligible.reshape(-1) & (rank < k)).reshape(score.shape)


def clip_cov_weights(
    xp,
    w: Float[Array, "batch time"],
    ppo_omega: Float[Array, "batch time"],
    kept: Bool[Array, "batch time"],
    cov: Float[Array, "batch time"],
    valid: Bool[Array, "batch time"],
    fraction: float,
    band: tuple[float, float],
) -> Float[Array, "batch time"]:
    """Clip-Cov's ω: ``ppo_omega`` (the clipped surrogate's weight under the tie rule in use),
    0 on the ``clip_num`` candidates of largest w, a candidate a real token PPO ``kept`` with
    lb < cov < ub."""
    lb, ub = band
    candidate = valid & kept & (cov > lb) & (cov < ub)
    dropped = top_picks(xp, w, candidate, pick_count(xp, valid, fraction))
    return xp.where(dropped, 0.0, ppo_omega)


def kl_cov_weights(
    xp,
    lr: Float[Array, "batch time"],
    w: Float[Array, "batch time"],
    adv: Float[Array, "batch time"],
    cov: Float[Array, "batch time"],
    valid: Bool[Array, "batch time"],
    fraction: float,
    coef: float,
) -> Float[Array, "batch time"]:
    """KL-Cov's ω: w, and w − κ·sign(log w)/A on the k tokens of largest cov where A ≠ 0."""
    picked = top_picks(xp, cov, valid, pick_count(xp, valid, fraction))
    if coef == 0:
        return w
    safe = xp.where(adv == 0, 1.0, adv)
    return xp.where(picked & (adv != 0), w - coef * xp.sign(lr) / safe, w)
