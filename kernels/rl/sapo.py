"""The weight of SAPO's soft gate, anchored on the rollout policy (``sapo``).

SAPO replaces PPO's clip by a smooth gate on the ratio r = π_θ/π_old: the per-token loss is
−A·f_τ(r) with f_τ(r) = (4/τ)·σ(τ(r − 1)), τ = τ_pos where A > 0 and τ_neg where A ≤ 0 (verl
``compute_policy_loss_sapo``, TRL ``loss_type="sapo"``, SkyRL ``sapo_policy_loss``). Its gradient
is −A·f_τ'(r)·r·∇log π_θ with f_τ'(r) = 4σ(x)σ(−x), x = τ(r − 1), so the multiplier of
∇log π·A is

    ω = r·4σ(x)σ(−x) = r·sech²(τ(r − 1)/2),

1 at r = 1 and falling to 0 on both sides. Anchored on the rollout (π_old = π', so r = w at the
learner's first step) it is the correction weight of the kernel pair; anchored on the trainer's
recomputed log-probs, as every framework does by default, r = 1 at that step and the mismatch
enters only through the separate IS weight (``docs/rl.md``).

4σ(x)σ(−x) is written 4e^{−|x|}/(1 + e^{−|x|})², which neither overflows nor loses the tail:
a weight w saturated at the dtype's largest number gets ω = 0, as the gate's limit.

References:
    Gao et al., "Soft Adaptive Policy Optimization" (2025), arXiv:2511.20347.
"""

from __future__ import annotations

from typing import Any

from jaxtyping import Float

# an array of either namespace (jax.numpy or numpy; this module imports no JAX)
Array = Any

__all__ = ["sapo_gate_weight"]


def sapo_gate_weight(
    xp,
    w: Float[Array, "batch time"],
    advantages: Float[Array, "batch time"],
    tau_pos: float,
    tau_neg: float,
) -> Float[Array, "batch time"]:
    """ω = w·sech²(τ(w − 1)/2), τ = ``tau_pos`` where A > 0 and ``tau_neg`` where A ≤ 0;
    ``xp`` is the array namespace that computes (``jax.numpy`` or ``numpy``)."""
    tau = xp.where(advantages > 0, tau_pos, tau_neg).astype(w.dtype)
    e = xp.exp(-xp.abs(tau * (w - 1.0)))
    return w * (4.0 * e / xp.square(1.0 + e))
