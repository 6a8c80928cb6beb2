"""Correction weights: each rule on hand-made ratios, padding, caps at 0, PPO's sign rule,
sequence products in log space, errors for bad names and parameters, with and without jit."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.contracts.fields import ESTIMATORS
from kernel_contracts.kernels.rl import ESTIMATOR_NAMES, correction_weights

# two sequences of four positions; the last position of row 1 is padding holding garbage
W = np.array([[0.5, 1.0, 1.5, 3.0], [0.9, 2.5, 1.1, 0.0]])
LOG_RATIO = np.log(np.where(W > 0, W, 1.0))
LOG_RATIO[1, 3] = np.nan  # padding: must be ignored
MASK = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
ADV = np.array([[1.0, -1.0, 1.0, -1.0], [-1.0, 1.0, -1.0, 1.0]])
TV = np.array([[0.01, 0.2, 0.05, 0.3], [0.0, 0.1, 0.5, 0.9]])
KL = np.array([[0.001, 0.04, 0.2, 0.0], [0.3, 0.0, 0.05, 0.9]])
Q = np.array([[0.5, 0.2, 0.4, 0.1], [0.3, 0.1, 0.6, 0.5]])  # π'(y_t); π(y_t) = w·π'(y_t)

PARAMS = {
    "plain": {},
    "tis": {"cap": 2.0},
    "mis": {"cap": 2.0},
    "ppo_clip": {"clip_epsilon": 0.2},
    "icepop": {"band": (0.6, 2.0)},
    "seq_is": {},
    "seq_tis": {"cap": 2.0},
    "geo_mask": {"band": (0.8, 1.3)},
    "tv_mask": {"threshold": 0.15},
    "kl_mask": {"threshold": 0.1},
    "dppo_tv": {"threshold": 0.1},
    "dppo_kl": {"threshold": 0.02},
    "dual_clip": {"clip_epsilon": 0.2, "cap": 2.0},
    "seq_mask": {"band": (0.5, 2.4)},
    "seq_outlier": {"band": (0.4, 2.8)},
    "tis_mask": {"cap": 1.2, "band": (0.6, 2.0)},
    "opsm": {"threshold": 0.05},
    "kl_reject": {"reject": "token_k1,seq_mean_k2", "reject_threshold": "0.45_2.2,0.2"},
    "tis_clip": {"band": (0.6, 2.0)},
    "tis_norm": {"cap": 2.0},
    "gspo": {"clip_epsilon": 0.2},
    "cispo": {"band": (0.6, 2.0)},
    "sapo": {"temperatures": (1.0, 1.5)},
    "vespo": {"gamma": (2.0, 3.0, 3.0, 1.5)},
    "clip_cov": {"clip_epsilon": 0.2, "cov_fraction": 0.3, "cov_band": (-0.2, 5.0)},
    "kl_cov": {"cov_fraction": 0.3, "kl_coef": 0.5},
}


def _binary_kl(q: float, p: float) -> float:
    return q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))


def _expected(name: str) -> np.ndarray:
    """The rules of the shared table, written out position by position."""
    out = np.zeros_like(W)
    for b in range(2):
        real = [t for t in range(4) if MASK[b, t] > 0]
        seq = math.prod(W[b, t] for t in real)
        geo = seq ** (1 / len(real))
        for t in real:
            w, a = W[b, t], ADV[b, t]
            if name == "plain":
                out[b, t] = 1.0
            elif name == "tis":
                out[b, t] = min(w, 2.0)
            elif name == "mis":
                out[b, t] = w if w <= 2.0 else 0.0
            elif name == "ppo_clip":
                clipped = (a > 0 and w > 1.2) or (a < 0 and w < 0.8)
                out[b, t] = 0.0 if clipped else w
            elif name == "icepop":
                out[b, t] = w if 0.6 <= w <= 2.0 else 0.0
            elif name == "seq_is":
                out[b, t] = seq
            elif name == "seq_tis":
                out[b, t] = min(seq, 2.0)
            elif name == "geo_mask":
                out[b, t] = w if 0.8 <= geo <= 1.3 else 0.0
            elif name == "tv_mask":
                out[b, t] = 0.0 if TV[b, t] > 0.15 else w
            elif name == "kl_mask":
                out[b, t] = 0.0 if KL[b, t] > 0.1 else w
            elif name == "dppo_tv":
                d = (w - 1) * Q[b, t]  # π(y) − π'(y)
                out[b, t] = 0.0 if (a > 0 and d > 0.1) or (a < 0 and -d > 0.1) else w
            elif name == "dppo_kl":
                far = _binary_kl(Q[b, t], w * Q[b, t]) > 0.02
                out[b, t] = 0.0 if far and ((a > 0 and w > 1) or (a < 0 and w < 1)) else w
            elif name == "dual_clip":
                clipped = (a > 0 and w > 1.2) or (a < 0 and (w < 0.8 or w > 2.0))
                out[b, t] = 0.0 if clipped else w
            elif name == "seq_mask":
                out[b, t] = seq if 0.5 <= seq <= 2.4 else 0.0
            elif name == "seq_outlier":
                out[b, t] = w if all(0.4 <= W[b, u] <= 2.8 for u in real) else 0.0
            elif name == "tis_mask":
                out[b, t] = min(w, 1.2) if 0.6 <= w <= 2.0 else 0.0
            elif name == "opsm":
                dropped = a < 0 and -math.log(seq) / len(real) > 0.05
                out[b, t] = 0.0 if dropped else w
            elif name == "kl_reject":  # k1 = −log w in [log 0.45, log 2.2], mean k2 ≤ 0.2
                k2 = sum(0.5 * math.log(W[b, u]) ** 2 for u in real) / len(real)
                kept = math.log(0.45) <= -math.log(w) <= math.log(2.2) and k2 <= 0.2
                out[b, t] = w if kept else 0.0
            elif name in ("tis_clip", "cispo"):
                out[b, t] = min(max(w, 0.6), 2.0)
            elif name == "tis_norm":  # divided by the batch mean below
                out[b, t] = min(w, 2.0)
            elif name == "gspo":  # the geometric mean, clipped at [0.8, 1.2] by A's sign
                clipped = (a > 0 and geo > 1.2) or (a < 0 and geo < 0.8)
                out[b, t] = 0.0 if clipped else geo
            elif name == "sapo":  # r·f'(r) of the gate (4/τ)·σ(τ(r − 1)), τ by A's sign
                tau = 1.0 if a > 0 else 1.5
                sig = 1 / (1 + math.exp(-tau * (w - 1)))
                out[b, t] = w * 4 * sig * (1 - sig)
            elif name == "vespo":  # e^λ·W^k·e^{−λW}, (k, λ) = (2, 3) for A ≥ 0, (3, 1.5) below
                k, lam = (2.0, 3.0) if a >= 0 else (3.0, 1.5)
                out[b, t] = math.exp(lam) * seq**k * math.exp(-lam * seq)
    if name == "tis_norm":  # the mean of min(w, 2) over the 7 real tokens: 9/7
        out = out / (np.sum(out) / np.sum(MASK))
    if name in ("clip_cov", "kl_cov"):
        out = _cov_expected(name)
    return out


def _cov_expected(name: str) -> np.ndarray:
    """Clip-Cov and KL-Cov on the table, token by token: cov over the 7 real tokens
    (log π = log w + log π'), ⌊0.3·7⌋ = 2 picked."""
    real = [(b, t) for b in range(2) for t in range(4) if MASK[b, t] > 0]
    logp = {bt: math.log(Q[bt]) + LOG_RATIO[bt] for bt in real}
    mean_a = sum(ADV[bt] for bt in real) / len(real)
    mean_l = sum(logp.values()) / len(real)
    cov = {bt: (ADV[bt] - mean_a) * (logp[bt] - mean_l) for bt in real}
    out = np.zeros_like(W)
    if name == "kl_cov":  # the 2 largest cov get w − κ·sign(log w)/A
        top = sorted(real, key=lambda bt: -cov[bt])[:2]
        for bt in real:
            w, a = W[bt], ADV[bt]
            out[bt] = w - 0.5 * np.sign(LOG_RATIO[bt]) / a if bt in top else w
        return out
    for bt in real:  # ppo_clip, then the 2 candidates of largest w dropped
        w, a = W[bt], ADV[bt]
        out[bt] = 0.0 if (a > 0 and w > 1.2) or (a < 0 and w < 0.8) else w
    candidates = [bt for bt in real if out[bt] > 0 and -0.2 < cov[bt] < 5.0]
    for bt in sorted(candidates, key=lambda bt: -W[bt])[:2]:
        out[bt] = 0.0
    return out


def _call(name, log_ratio=LOG_RATIO, mask=MASK, adv=ADV, params=None, **kw):
    return correction_weights(
        name,
        jnp.asarray(log_ratio, jnp.float32),
        jnp.asarray(mask, jnp.float32),
        jnp.asarray(adv, jnp.float32),
        params=PARAMS[name] if params is None else params,
        token_tv=jnp.asarray(TV, jnp.float32),
        token_kl=jnp.asarray(KL, jnp.float32),
        logp_inf=jnp.asarray(np.log(Q), jnp.float32),
        **kw,
    )


def test_names_are_the_shared_ones():
    shared = list(ESTIMATORS)
    assert tuple(shared) == ESTIMATOR_NAMES
    assert tuple(PARAMS) == ESTIMATOR_NAMES


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
def test_each_rule_on_hand_made_ratios(name):
    got = np.asarray(_call(name))
    np.testing.assert_allclose(got, _expected(name), rtol=1e-5, atol=1e-7)
    assert np.all(np.isfinite(got))
    assert got[1, 3] == 0.0  # padding


def test_expected_values_are_not_trivial():
    # the hand-made inputs make each rule differ from plain token IS somewhere
    token_is = np.where(MASK > 0, W, 0.0)
    for name in ESTIMATOR_NAMES:
        if name not in ("seq_is", "opsm"):  # both rows have W > 1: opsm drops nothing here
            assert not np.allclose(_expected(name), token_is), name
    assert _expected("geo_mask")[0].sum() > 0 and _expected("geo_mask")[1].sum() == 0


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
def test_jit_matches_eager(name):
    fn = jax.jit(
        lambda lr, m, a, tv, kl, lq: correction_weights(
            name, lr, m, a, params=PARAMS[name], token_tv=tv, token_kl=kl, logp_inf=lq
        )
    )
    args = [jnp.asarray(x, jnp.float32) for x in (LOG_RATIO, MASK, ADV, TV, KL, np.log(Q))]
    np.testing.assert_allclose(np.asarray(fn(*args)), np.asarray(_call(name)), rtol=1e-6)


def test_weights_carry_no_gradient():
    lr = jnp.asarray(np.log(W[:1]), jnp.float32)
    m = jnp.ones_like(lr)

    def loss(x):
        return jnp.sum(correction_weights("tis", x, m, m, params={"cap": 2.0}) * x)

    # d/dx Σ stop_grad(ω)·x = ω
    np.testing.assert_allclose(np.asarray(jax.grad(loss)(lr)), np.minimum(W[:1], 2.0), rtol=1e-6)


@pytest.mark.parametrize("name", ["tis", "seq_tis"])
def test_cap_zero_gives_zero_estimator(name):
    got = np.asarray(_call(name, params={"cap": 0.0}))
    assert np.all(got == 0.0)


def test_ppo_clip_depends_on_the_sign_of_the_advantage():
    lr = jnp.log(jnp.asarray([[1.5, 1.5, 1.5, 0.5, 0.5, 0.5]], jnp.float32))
    adv = jnp.asarray([[1.0, -1.0, 0.0, 1.0, -1.0, 0.0]], jnp.float32)
    m = jnp.ones_like(lr)
    got = np.asarray(correction_weights("ppo_clip", lr, m, adv, params={"clip_epsilon": 0.2}))
    np.testing.assert_allclose(got, [[0.0, 1.5, 1.5, 0.5, 0.0, 0.5]], rtol=1e-6)


def test_long_sequences_do_not_overflow():
    # 4096 tokens at w = e^{0.05}: W = e^{204.8} is far past float32's range
    lr = jnp.full((2, 4096), 0.05, jnp.float32)
    m = jnp.ones_like(lr).at[1, 2048:].set(0.0)
    z = jnp.zeros_like(lr)
    tis = np.asarray(correction_weights("seq_tis", lr, m, z, params={"cap": 3.0}))
    np.testing.assert_allclose(tis[0], 3.0, rtol=1e-6)
    assert np.all(tis[1, 2048:] == 0.0)
    seq = np.asarray(correction_weights("seq_is", lr, m, z))
    assert np.all(np.isfinite(seq)) and seq[0, 0] == np.finfo(np.float32).max
    # the same length at w = e^{-0.05}: W underflows to 0, no NaN
    neg = np.asarray(correction_weights("seq_is", -lr, m, z))
    assert np.all(neg == 0.0)
    # geometric mean of e^{0.05} is e^{0.05}: inside a band (0.5, 1.2)
    geo = np.asarray(correction_weights("geo_mask", lr, m, z, params={"band": (0.5, 1.2)}))
    np.testing.assert_allclose(geo[0], math.exp(0.05), rtol=1e-6)


def test_sequence_product_is_exact_in_log_space():
    rng = np.random.default_rng(0)
    lr = rng.normal(0, 0.1, (3, 50))
    m = np.ones_like(lr)
    m[2, 30:] = 0.0
    got = np.asarray(correction_weights("seq_is", jnp.asarray(lr), jnp.asarray(m), jnp.asarray(m)))
    want = np.exp((lr * m).sum(axis=1, keepdims=True)) * m
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_numpy_scalars_are_numbers():
    got = _call("tis", params={"cap": np.float32(2.0)})
    np.testing.assert_allclose(np.asarray(got), _expected("tis"), rtol=1e-5, atol=1e-7)


def test_bfloat16_log_ratios_give_float32_weights():
    lr = jnp.asarray(LOG_RATIO[:1], jnp.bfloat16)
    m = jnp.ones_like(lr)
    got = correction_weights("tis", lr, m, m, params={"cap": 2.0})
    assert got.dtype == jnp.float32


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("tis_x", {}, "unknown estimator 'tis_x'"),
        ("tis", {}, "estimator 'tis': missing parameter(s) cap"),
        ("tis", {"cap": -1.0}, "estimator 'tis': cap must be >= 0, got -1.0"),
        ("mis", {"cap": 1.0}, "estimator 'mis': cap must be > 1, got 1.0"),
        ("plain", {"cap": 2.0}, "estimator 'plain': unexpected parameter(s) cap"),
        ("ppo_clip", {"clip_epsilon": 1.0}, "clip_epsilon must be in (0, 1), got 1.0"),
        ("icepop", {"band": (1.0, 2.0)}, "band needs 0 <= lo < 1 < hi"),
        ("geo_mask", {"band": 0.5}, "band must be a pair (lo, hi)"),
        ("tv_mask", {"threshold": 1.5}, "threshold must be in (0, 1), got 1.5"),
        ("kl_mask", {"threshold": 0.0}, "threshold must be > 0, got 0.0"),
        ("dppo_tv", {"threshold": 1.0}, "threshold must be in (0, 1), got 1.0"),
        ("dual_clip", {"clip_epsilon": 0.2, "cap": 1.0}, "cap must be > 1, got 1.0"),
        ("tis_mask", {"cap": 2.0}, "estimator 'tis_mask': missing parameter(s) band"),
        ("kl_reject", {"reject": "token_k4", "reject_threshold": 0.1}, "unknown criterion"),
        ("kl_reject", {"reject": "seq_max_k1", "reject_threshold": 2.0}, "unknown criterion"),
        ("seq_tis", {"cap": float("nan")}, "cap must be finite"),
        ("tis", {"cap": "2"}, "cap must be a number"),
        ("sapo", {"temperatures": (1.0,)}, "temperatures must be a pair (tau_pos, tau_neg)"),
        ("vespo", {"gamma": (2.0, 3.0, 3.0, 0.0)}, "gamma must be > 0"),
        (
            "clip_cov",
            {"clip_epsilon": 0.2, "cov_fraction": 0.1, "cov_band": (2.0, 1.0)},
            "estimator 'clip_cov': cov_band needs lb < ub, got (2.0, 1.0)",
        ),
        (
            "clip_cov",
            {"clip_epsilon": 0.2, "cov_fraction": 0.1, "cov_band": (1.0, math.inf)},
            "cov_band[1] must be finite",
        ),
        ("kl_cov", {"cov_fraction": 0.0, "kl_coef": 1.0}, "cov_fraction must be in (0, 1]"),
        ("kl_cov", {"cov_fraction": 0.1, "kl_coef": -1.0}, "kl_coef must be >= 0, got -1.0"),
        ("kl_cov", {"cov_fraction": 0.1}, "estimator 'kl_cov': missing parameter(s) kl_coef"),
    ],
)
def test_bad_names_and_parameters_are_refused(name, params, message):
    with pytest.raises(ValueError) as err:
        correction_weights(
            name, jnp.zeros((1, 2)), jnp.ones((1, 2)), jnp.ones((1, 2)), params=params
        )
    assert message in str(err.value)


def test_the_covariance_losses_need_the_inference_log_probs():
    z = jnp.zeros((1, 2))
    for name in ("clip_cov", "kl_cov"):
        with pytest.raises(ValueError, match="needs logp_inf"):
            correction_weights(name, z, z + 1, z, params=PARAMS[name])


def test_masks_need_their_divergence():
    z = jnp.zeros((1, 2))
    with pytest.raises(ValueError, match="needs token_tv"):
        correction_weights("tv_mask", z, z + 1, z, params={"threshold": 0.1})
    with pytest.raises(ValueError, match="needs token_kl"):
        correction_weights("kl_mask", z, z + 1, z, params={"threshold": 0.1})
    for name in ("dppo_tv", "dppo_kl"):
        with pytest.raises(ValueError, match="needs logp_inf"):
            correction_weights(name, z, z + 1, z, params={"threshold": 0.1})
