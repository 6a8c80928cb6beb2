"""The corrections the RL frameworks offer, on one seeded batch of 64 × 256 log-probs: our
weights (``kernels.rl.correction_weights``) against each framework's definition, written here
from its documented formula (verl, TRL, NeMo-RL, SkyRL), with the framework's parameter names,
for the settings the recorded outputs of the frameworks' own code do not hold
(``tests/kernels/test_rl_recorded_frameworks.py`` compares every exported estimator with
those): verl's rejection options as bands, TRL's ``delta``, other thresholds, and SkyRL's
rollout-anchored CISPO.

Shared rules of the batch: π' = the rollout (inference) policy, π = the training policy, and
the frameworks' old policy is π' (verl's bypass mode, SkyRL's rollout log-probs, TRL's
sampling log-probs), so their ratio is w = π/π'. The masks must agree token for token; the
weights to float32 rounding.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.kernels.rl import correction_weights

B, T_MAX = 64, 256


def _batch():
    rng = np.random.default_rng(23)
    lengths = rng.integers(32, T_MAX + 1, B)
    mask = (np.arange(T_MAX)[None, :] < lengths[:, None]).astype(np.float32)
    # sampled-token probabilities spread over (0, 1), the training policy a logit step away
    x = rng.normal(-1.0, 2.0, (B, T_MAX))
    step = rng.normal(0.0, 0.02, (B, T_MAX)) + rng.normal(0.0, 0.6, (B, T_MAX)) * (
        rng.random((B, T_MAX)) < 0.1
    )
    logp_inf = -np.logaddexp(0.0, -x)  # log sigmoid
    logp_train = -np.logaddexp(0.0, -(x + step))
    adv = np.repeat(rng.normal(0.0, 1.0, (B, 1)), T_MAX, axis=1)  # one advantage a sequence
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    return f32(logp_train), f32(logp_inf), mask, f32(adv)


LOGP, LOGP_INF, MASK, ADV = _batch()
LR = (LOGP.astype(np.float64) - LOGP_INF) * MASK  # log w, 0 on padding
W = np.exp(LR)
REAL = MASK > 0


def ours(name: str, **params) -> np.ndarray:
    return np.asarray(
        correction_weights(
            name,
            jnp.asarray(LOGP - LOGP_INF),
            jnp.asarray(MASK),
            jnp.asarray(ADV),
            params=params,
            logp_inf=jnp.asarray(LOGP_INF),
        ),
        np.float64,
    )


def _same(got: np.ndarray, keep: np.ndarray, weight: np.ndarray) -> None:
    """Our ω equals the peer's weight × keep on real tokens: identical masks, weights to
    float32 rounding."""
    keep = keep & REAL
    np.testing.assert_array_equal(got > 0, keep)
    np.testing.assert_allclose(got, np.where(keep, weight, 0.0), rtol=2e-6, atol=0)
    dropped = int(np.sum(REAL & ~keep))
    assert 0 < dropped < int(np.sum(REAL)), dropped  # the rule bites on this batch, not on all


def _seq(x: np.ndarray) -> np.ndarray:
    return np.repeat(x.reshape(B, 1), T_MAX, axis=1)


# ---- DPPO's sign-aware mask against the distance-only one (verl's dppo_tv / dppo_kl and
# SkyRL's binary_tv / binary_kl: the recorded outputs) ---------------------------------------
P, Q = np.exp(LOGP.astype(np.float64)), np.exp(LOGP_INF.astype(np.float64))


def test_dppo_tv_is_sign_aware_where_tv_mask_is_not():
    # the distance-only rule on the same binary TV drops more: both directions, any advantage
    sign_aware = ours("dppo_tv", threshold=0.05) == 0
    distance_only = REAL & (np.abs(P - Q) > 0.05)
    assert np.all(sign_aware[REAL] <= distance_only[REAL])
    # the counts the RL page quotes
    assert (int(distance_only.sum()), int(sign_aware[REAL].sum()), int(REAL.sum())) == (
        385,
        187,
        8222,
    )


# ---- dual clip: verl clip_ratio_c, NeMo-RL ratio_clip_c, SkyRL dual_clip, TRL delta --------
def _dual_clip_loss(logp, logp_old, adv, eps, c):
    """The dual-clip surrogate the three frameworks document: PPO's pessimistic clipped loss,
    and for A < 0 its minimum with −A·c."""
    r = jnp.exp(logp - logp_old)
    clipped = jnp.maximum(-adv * r, -adv * jnp.clip(r, 1 - eps, 1 + eps))
    return jnp.where(adv < 0, jnp.minimum(clipped, -adv * c), clipped)


@pytest.mark.parametrize(("eps", "c"), [(0.2, 3.0), (0.2, 1.1)])
def test_dual_clip_weights_are_the_peer_surrogates_gradient(eps, c):
    # ∂loss/∂log π = −A·ω: the weight the surrogate puts on ∇log π, by autodiff
    grad = jax.grad(lambda lp: jnp.sum(_dual_clip_loss(lp, LOGP_INF, ADV, eps, c) * MASK))
    g = np.asarray(grad(jnp.asarray(LOGP)), np.float64)
    omega_peer = -g / ADV
    keep = np.abs(omega_peer) > 0
    _same(ours("dual_clip", clip_epsilon=eps, cap=c), keep, W)
    if c > 1 + eps:  # TRL's two-sided clipping caps the unclipped ratio at delta = c
        r = jnp.exp(jnp.asarray(LOGP) - LOGP_INF)

        def trl(lp):
            r = jnp.exp(lp - LOGP_INF)
            return -jnp.minimum(jnp.minimum(r, c) * ADV, jnp.clip(r, 1 - eps, 1 + eps) * ADV)

        g_trl = np.asarray(jax.grad(lambda lp: jnp.sum(trl(lp) * MASK))(jnp.asarray(LOGP)))
        _same(ours("dual_clip", clip_epsilon=eps, cap=c), np.abs(g_trl) > 0, np.asarray(r))
    # beyond ppo_clip it drops A < 0 tokens above c
    ppo = ours("ppo_clip", clip_epsilon=eps)
    extra = (ppo > 0) & ~keep
    assert extra.any() == (c < np.max(W[REAL])) and np.all(ADV[extra] < 0)


# ---- sequence masks by W: verl seq_sum_k1 (TRL's sequence_mask and SkyRL's product mask:
# tests/kernels/test_rl_recorded_frameworks.py, on their own recorded outputs) --------------
LOG_SEQ = LR.sum(axis=1)


def test_seq_mask_equals_verl_seq_sum_k1():
    lo, hi = 0.5, 3.0
    got = ours("seq_mask", band=(lo, hi))
    ratio = np.exp(LOG_SEQ)
    # verl seq_sum_k1 "a_b": keep log a ≤ Σ −log w ≤ log b, the band [1/b, 1/a] on W
    a, b = 1 / hi, 1 / lo
    _same(got, _seq((math.log(a) <= -LOG_SEQ) & (math.log(b) >= -LOG_SEQ)), _seq(ratio))
    n = int(np.sum(got[:, 0] == 0))
    assert 1 <= n <= 63, n


# ---- one outlier token: verl seq_max_k2 / seq_max_k3 (SkyRL's outlier_token_is_threshold_*:
# the recorded outputs) ----------------------------------------------------------------------
def _k3_band(tau: float) -> tuple[float, float]:
    """The roots of w − 1 − log w = τ on either side of 1, by bisection."""

    def root(a: float, b: float) -> float:
        for _ in range(200):
            m = 0.5 * (a + b)
            if (m - 1 - math.log(m) > tau) == (a - 1 - math.log(a) > tau):
                a = m
            else:
                b = m
        return 0.5 * (a + b)

    return root(1e-12, 1.0), root(1.0, 1e6)


def test_seq_outlier_equals_verl_seq_max():
    # verl seq_max_k2 τ: max_t ½(log w)² ≤ τ, the band e^{±√(2τ)}
    tau = 0.125
    k2 = np.where(REAL, 0.5 * LR**2, -np.inf).max(axis=1) <= tau
    r = math.sqrt(2 * tau)
    _same(ours("seq_outlier", band=(math.exp(-r), math.exp(r))), _seq(k2), W)
    # verl seq_max_k3 τ: max_t (w − 1 − log w) ≤ τ, the band between the two roots
    tau = 0.05
    k3 = np.where(REAL, W - 1 - LR, -np.inf).max(axis=1) <= tau
    _same(ours("seq_outlier", band=_k3_band(tau)), _seq(k3), W)


# ---- token rejection by a KL estimator and the sequence mean: verl token_k*, seq_mean_k1 ---
def test_verl_token_and_sequence_mean_rejection_map_to_our_bands():
    # token_k1 "a_b": keep log a ≤ −log w ≤ log b, i.e. icepop on [1/b, 1/a]
    a, b = 0.8, 1.5
    keep = (math.log(a) <= -LR) & (math.log(b) >= -LR)
    _same(ours("icepop", band=(1 / b, 1 / a)), keep, W)
    # token_k2 τ and token_k3 τ: icepop on e^{±√(2τ)} and between the k3 roots
    keep = 0.5 * LR**2 <= 0.02
    _same(ours("icepop", band=(math.exp(-0.2), math.exp(0.2))), keep, W)
    keep = W - 1 - LR <= 0.01
    _same(ours("icepop", band=_k3_band(0.01)), keep, W)
    # seq_mean_k1 "a_b": the mean of −log w over real tokens in [log a, log b]: geo_mask
    mean_k1 = -LR.sum(axis=1) / MASK.sum(axis=1)
    a, b = 0.99, 1.01
    keep = (mean_k1 >= math.log(a)) & (mean_k1 <= math.log(b))
    _same(ours("geo_mask", band=(1 / b, 1 / a)), _seq(keep), W)


# ---- verl's chained rejection: rollout_rs "a,b,c" with rollout_rs_threshold "x,y,z" -------
def _verl_rejection(options: str, thresholds: str) -> np.ndarray:
    """verl's rejection mask as documented: k1 = −u, k2 = u²/2, k3 = e^u − 1 − u of the
    clamped log ratio u; k1 options keep log(lower) ≤ stat ≤ log(upper), the others stat ≤ τ;
    token, sequence sum, mean and max statistics over real tokens; every option must pass."""
    u = np.clip(LR, -20.0, 20.0)
    ks = {"k1": -u, "k2": 0.5 * u**2, "k3": np.expm1(u) - u}
    keep = np.ones_like(LR, dtype=bool)
    for opt, spec in zip(options.split(","), thresholds.split(","), strict=True):
        level, k = opt.rsplit("_", 1)
        vals = ks[k]
        if level == "token":
            stat = vals
        elif level == "seq_sum":
            stat = _seq(np.sum(vals * MASK, axis=1))
        elif level == "seq_mean":
            stat = _seq(np.sum(vals * MASK, axis=1) / MASK.sum(axis=1))
        else:
            stat = _seq(np.where(REAL, vals, -np.inf).max(axis=1))
        if k == "k1":
            low, high = (float(x) for x in spec.split("_"))
            keep &= (stat >= math.log(low)) & (stat <= math.log(high))
        else:
            keep &= stat <= float(spec)
    return keep


@pytest.mark.parametrize(
    ("options", "thresholds"),
    [
        ("token_k1,seq_mean_k3,seq_max_k2", "0.5_2.0,0.002,0.08"),
        ("token_k2,seq_sum_k3", "0.05,0.3"),
        ("seq_mean_k2,seq_sum_k1", "0.001,0.4_2.5"),
    ],
)
def test_kl_reject_equals_verl_chained_rejection(options, thresholds):
    got = ours("kl_reject", reject=options, reject_threshold=thresholds)
    _same(got, _verl_rejection(options, thresholds), W)


@pytest.mark.parametrize(("eps_low", "eps_high"), [(1.0, 4.0), (0.1, 0.2)])
def test_skyrl_cispo_anchored_on_the_rollout_is_tis_clip(eps_low, eps_high):
    # SkyRL (main a9564572, cispo_anchor "rollout"): the loss −A·sg(clamp(r, 1 − ε_low,
    # 1 + ε_high))·log π with r = exp(clamp(log π − log π_rollout, ±20)): its gradient's
    # multiplier is our tis_clip at [max(0, 1 − ε_low), 1 + ε_high] (ε_low = 1, its default:
    # no floor, the ratio's own e^−20 clamp aside)
    lo, hi = max(0.0, 1 - eps_low), 1 + eps_high
    r = np.exp(np.clip(LR, -20, 20))
    skyrl = np.where(REAL, np.clip(r, 1 - eps_low, 1 + eps_high), 0.0)
    np.testing.assert_allclose(ours("tis_clip", band=(lo, hi)), skyrl, rtol=2e-6, atol=1e-8)
