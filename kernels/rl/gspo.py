"""GSPO's weight: the sequence's geometric-mean ratio, clipped as PPO clips a token's ratio.

GSPO (Zheng et al., 2025) replaces PPO's token ratio by s = exp(mean over the sequence's real
tokens of log w_t) and clips it at [1 − ε, 1 + ε]; its token form s_t = sg(s)·π(y_t)/sg(π(y_t))
has the value s at every token and the gradient s·∇log π(y_t). The gradient of
−min(s_t·A, clip(s_t)·A) with respect to log π(y_t), over A, is the weight: ω_t = s, but 0 where
the token is clipped (A > 0 and s > 1 + ε, or A < 0 and s < 1 − ε). At s = 1 ± ε both sides of
the min carry the gradient s (``clamp`` passes it at its ends), so a tied token keeps s.

verl and SkyRL clamp log s_t at 10 before exp "for numerical stability"; above it the clamp's
gradient is 0, so their weight is 0 where the mean log-ratio exceeds 10 (``clamp_log=10``).
TRL (``importance_sampling_level: sequence``) and NeMo-RL (``sequence_level_importance_ratios``)
take exp of the mean unclamped.
"""

from __future__ import annotations

from typing import Any

from jaxtyping import Bool, Float

# an array of either namespace (jax.numpy or numpy; this module imports no JAX)
Array = Any

__all__ = ["LOG_CLAMP", "gspo_weights"]

# frameworks whose GSPO loss clamps log s at 10 (its gradient is 0 above)
LOG_CLAMP = {"verl": 10.0, "skyrl": 10.0}


def gspo_weights(
    xp,
    lr: Float[Array, "batch time"],
    valid: Bool[Array, "batch time"],
    adv: Float[Array, "batch time"],
    eps: float,
    clamp_log: float | None = None,
) -> Float[Array, "batch time"]:
    """ω_t = s·1[not clipped] with s the geometric mean of w over each row's real tokens
    (``lr`` holds 0 on padding); ``clamp_log`` zeroes the rows whose mean log w exceeds it.
    ``xp`` is the array namespace that computes (``jax.numpy`` or ``numpy``)."""
    n = xp.maximum(xp.sum(valid, axis=1, keepdims=True), 1).astype(lr.dtype)
    log_s = xp.sum(xp.where(valid, lr, 0.0), axis=1, keepdims=True) / n
    s = xp.minimum(xp.exp(log_s), xp.finfo(lr.dtype).max)
    s = xp.broadcast_to(s, lr.shape)
    clipped = ((adv > 0) & (s > 1.0 + eps)) | ((adv < 0) & (s < 1.0 - eps))
    if clamp_log is not None:
        clipped |= xp.broadcast_to(log_s > clamp_log, lr.shape)
    return xp.where(clipped, 0.0, s)
