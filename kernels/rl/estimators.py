"""Off-policy correction weights for policy-gradient estimators.

Rollouts are sampled from the inference kernel's policy π' and the learner differentiates the
training kernel's policy π. With the per-token ratio w_t = π(y_t)/π'(y_t), each estimator gives
a multiplier ω_t, and the policy-gradient estimate is Σ_t ω_t · ∇log π(y_t) · A_t. The rules,
by name (``ESTIMATOR_NAMES``):

- ``plain``: ω = 1.
- ``tis`` (``cap`` c ≥ 0): ω = min(w, c); c = 0 gives ω = 0 on every token.
- ``mis`` (``cap`` c > 1): ω = w · 1[w ≤ c].
- ``ppo_clip`` (``clip_epsilon`` ε in (0, 1)): the gradient of PPO's clipped surrogate with the
  old policy π': ω = w unless the token is clipped (A > 0 and w > 1 + ε, or A < 0 and
  w < 1 − ε), then ω = 0.
- ``icepop`` (``band`` (lo, hi), 0 ≤ lo < 1 < hi): ω = w · 1[lo ≤ w ≤ hi].
- ``seq_is``: ω = W = Π_t w_t over the sequence's tokens, on every token of the sequence.
- ``seq_tis`` (``cap`` c ≥ 0): ω = min(W, c) on every token.
- ``geo_mask`` (``band`` (lo, hi)): a sequence whose geometric-mean ratio W^{1/n} lies outside
  [lo, hi] gets ω = 0; inside, ω = w per token.
- ``tv_mask`` (``threshold`` τ in (0, 1)): ω = 0 where TV(π(·|ctx), π'(·|ctx)) > τ, else w.
- ``kl_mask`` (``threshold`` τ > 0): ω = 0 where KL(π'‖π) at the position > τ, else w.
- ``dppo_tv`` (``threshold`` τ in (0, 1)): sign-aware, on the sampled token only (DPPO's
  binary TV): ω = 0 where A > 0 and π(y) − π'(y) > τ, or A < 0 and π'(y) − π(y) > τ; else w.
  ``tv_mask`` drops on the full-vocabulary distance whatever the advantage.
- ``dppo_kl`` (``threshold`` τ > 0): ω = 0 where the binary KL
  π'(y)·log(π'(y)/π(y)) + (1 − π'(y))·log((1 − π'(y))/(1 − π(y))) exceeds τ and the advantage
  pushes π(y) further from π'(y) (A > 0 with π(y) > π'(y), or A < 0 with π(y) < π'(y)); else w.
  Each term follows 0·log(0/x) = 0 (x = 0 included) and a·log(a/0) = +∞ for a > 0, so
  π'(y) = 1 gives −log π(y), π(y) = 1 > π'(y) gives +∞, and no input in [0, 1] gives NaN.
- ``dual_clip`` (``clip_epsilon`` ε, ``cap`` c > 1): ``ppo_clip``, and also ω = 0 where A < 0
  and w > c (the dual-clip surrogate is the constant c·A there).
- ``seq_mask`` (``band`` (lo, hi)): ω = W on every token of a sequence whose W lies in
  [lo, hi], 0 on the others.
- ``seq_outlier`` (``band`` (lo, hi)): a sequence with one token whose w lies outside [lo, hi]
  gets ω = 0; inside, ω = w per token.
- ``tis_mask`` (``cap`` c ≥ 0, ``band`` (lo, hi)): ω = min(w, c) where lo ≤ w ≤ hi, else 0.
- ``kl_reject`` (``reject``, ``reject_threshold``: verl's rejection criteria and thresholds,
  ``contracts.rejection``): ω = w where every criterion keeps the token (k1 = −log w inside a
  band, k2 = (log w)²/2 or k3 = w − 1 − log w at most τ, judged per token or by a sequence's
  sum, mean or maximum), else 0.
- ``opsm`` (``threshold`` δ > 0): a sequence with A < 0 whose mean of log(π'/π) over its
  tokens exceeds δ gets ω = 0; otherwise ω = w per token (the advantage is read per token, so
  a sequence-level advantage is given on each of its tokens).
- ``tis_clip`` (``band`` (lo, hi), 0 ≤ lo < 1 < hi): ω = clip(w, lo, hi), truncated IS with a
  floor (TRL's ``token_truncate`` with ``vllm_importance_sampling_clip_min``, NeMo-RL's ``tis``
  with ``truncated_importance_sampling_ratio_min``); lo = 0 is ``tis`` at cap hi.
- ``tis_norm`` (``cap`` c > 1): ω = min(w, c)/m, m the mean of min(w, c) over every real token
  of the batch given (verl's token-level ``rollout_is`` with ``rollout_is_batch_normalize``);
  where m ≤ 1e−8 the weights are left unnormalised, as verl does.
- ``gspo`` (``clip_epsilon`` ε in (0, 1)): GSPO's sequence ratio s = exp(mean of log w over
  the sequence's real tokens) on every token, 0 where clipped (A > 0 and s > 1 + ε, or A < 0
  and s < 1 − ε) (``kernels.rl.gspo``).
- ``cispo`` (``band`` (lo, hi)): CISPO anchored on the rollout, ω = sg(clip(w, lo, hi)) with
  lo = 1 − ε_low, hi = 1 + ε_high: ``tis_clip``'s weight; ``ties="skyrl"`` (and ``"verl"``)
  first clamps log w to [−20, 20] as their code does.
- ``sapo`` (``temperatures`` (τ_pos, τ_neg), each > 0): ω = w·sech²(τ(w − 1)/2), τ = τ_pos
  where A > 0 and τ_neg where A ≤ 0: the gradient of SAPO's soft gate (4/τ)·σ(τ(r − 1)) with
  the rollout as the old policy (``kernels.rl.sapo``). verl and SkyRL compute r from the
  log-ratio clamped to ±20, whose gradient is 0 beyond: under their rules (``ties=``) a token
  with |log w| > 20 gets ω = 0.
- ``vespo`` (``gamma`` (k_pos, λ_pos, k_neg, λ_neg), each > 0): ω = φ(W) = e^λ·W^k·e^{−λW} on
  every token of the sequence, (k, λ) the pos pair where A ≥ 0 and the neg pair where A < 0,
  λ at least 1e−4, W = exp of the sequence's sum of log w clamped to [log 1e−8, 20] token by
  token and again in total: TRL's VESPO at a batch's first step, where its trainer ratio is 1
  and vLLM's token IS weights make W (``kernels.rl.vespo``).
- ``clip_cov`` (``clip_epsilon`` ε, ``cov_fraction`` ρ in (0, 1], ``cov_band`` (lb, ub)):
  ``ppo_clip``'s weight, and 0 on max(⌊ρ·n⌋, 1) of the tokens PPO keeps whose batch covariance
  (A − mean A)(log π − mean log π) lies in (lb, ub), n the batch's real tokens: Clip-Cov
  anchored on the rollout. The frameworks draw those tokens at random; ours takes the largest
  w (``kernels.rl.cov``). Needs ``logp_inf`` (log π = ``logp_inf`` + log w).
- ``kl_cov`` (``cov_fraction`` ρ, ``kl_coef`` κ ≥ 0): ω = w, and w − κ·sign(log w)/A on the
  max(⌊ρ·n⌋, 1) tokens of largest covariance where A ≠ 0 (the gradient of KL-Cov's penalty
  κ·|log r|; where A = 0 it is no multiple of A and ω stays w). Needs ``logp_inf``.

Ties. ``ties=None`` decides a token on a threshold by the rule above (``kernels.rl.ties.OURS``);
``ties="verl"`` (or ``"trl"``, ``"nemo-rl"``, ``"skyrl"``) by that framework's code
(``kernels.rl.ties.TIE_RULES``): the statistic it compares (the rounded ratio, the log-ratio,
or −log w against log(1/hi) for verl's ``tis_mask``), and for the dual-clip losses the gradient
PyTorch gives at −A·w = −A·c (w/2); and verl's and SkyRL's clamp of log w to ±20 before exp
(``TieRule.clamp``): w = exp of the clamped log w in their corrections (a sequence's sum
clamped), ω = 0 beyond the clamp in the losses whose ratio goes through it. An estimator the
framework does not have is refused.

The rules are written once, for any array namespace, in ``kernels.rl.weight_rules``
(``numpy_weights`` there computes them without JAX). Products over a sequence are sums of
log-ratios; a weight is exponentiated only after capping
its logarithm, so long sequences neither overflow nor produce NaN. ``seq_is`` has no cap: its
weight saturates at the largest finite number of the dtype. Padding (mask 0) gets ω = 0 and its
log-ratio is ignored, whatever it holds.

References:
    Espeholt et al., "IMPALA" (2018) — truncated importance sampling.
    Schulman et al., "Proximal Policy Optimization Algorithms" (2017) — the clipped surrogate.
    Ye et al., "Mastering Complex Control in MOBA Games with Deep RL" (2019) — dual clip.
    DeepSeek-AI, "DeepSeek-V3.2" (2025) — the off-policy sequence mask (``opsm``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from kernel_contracts.kernels.rl.weight_rules import (
    ESTIMATOR_NAMES,
    PARAMS,
    check_params,
    weights,
)

__all__ = ["ESTIMATOR_NAMES", "PARAMS", "check_params", "correction_weights"]

_NO_PARAMS: Mapping[str, float | tuple] = MappingProxyType({})


def correction_weights(
    name: str,
    log_ratio: Float[ArrayLike, "batch time"],
    mask: Float[ArrayLike, "batch time"],
    advantages: Float[ArrayLike, "batch time"],
    *,
    params: Mapping[str, object] = _NO_PARAMS,  # checked by check_params
    token_tv: Float[ArrayLike, "batch time"] | None = None,
    token_kl: Float[ArrayLike, "batch time"] | None = None,
    logp_inf: Float[ArrayLike, "batch time"] | None = None,
    ties: str | None = None,
) -> Float[Array, "batch time"]:
    """The per-token multiplier ω (stop-gradient) of ∇log π_train(y_t) · A_t for ``name``.

    ``log_ratio`` is log π_train(y_t) − log π_inf(y_t) at the sampled tokens; ``mask`` is 1 on
    real tokens and 0 on padding (ω = 0 there). ``advantages`` matters to ``ppo_clip``,
    ``dual_clip``, ``dppo_*``, ``opsm``, ``gspo``, ``sapo`` and ``vespo``; ``token_tv``
    (``tv_mask``) and ``token_kl`` (``kl_mask``, KL(π_inf‖π_train)) are the
    full-vocabulary divergences at each position; ``logp_inf`` (``dppo_tv``, ``dppo_kl``) is
    log π_inf(y_t) at the sampled tokens. ``ties`` picks whose rule decides a token on a
    threshold: ``None`` ours, or a framework of ``kernels.rl.ties.FRAMEWORKS`` (ValueError for
    an estimator that framework does not have). ``name``, ``params`` and ``ties`` are static
    (Python values); the arrays may be traced, so the function works under ``jax.jit``.
    """
    omega = weights(
        jnp, name, log_ratio, mask, advantages, params=params, token_tv=token_tv,
        token_kl=token_kl, logp_inf=logp_inf, ties=ties,
    )  # fmt: skip
    return jax.lax.stop_gradient(omega)
