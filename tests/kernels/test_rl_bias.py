"""Bias of the estimators: the exact bandit bias against autodiff and against the bounds, the
special cases each estimator reduces to on one token, and the Monte-Carlo sequence bias
against an exact enumeration of every sequence."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.bounds import LEMMAS
from kernel_contracts.kernels.rl import ESTIMATOR_NAMES
from kernel_contracts.kernels.rl.bias import bandit_bias, clip_share, divergences, sequence_bias
from kernel_contracts.kernels.rl.rollouts import held_out_prompts, rollout_pairs

PARAMS = {
    "plain": {},
    "tis": {"cap": 1.1},
    "mis": {"cap": 1.1},
    "ppo_clip": {"clip_epsilon": 0.1},
    "icepop": {"band": (0.9, 1.1)},
    "seq_is": {},
    "seq_tis": {"cap": 1.1},
    "geo_mask": {"band": (0.9, 1.1)},
    "tv_mask": {"threshold": 0.05},
    "kl_mask": {"threshold": 0.005},
    "dppo_tv": {"threshold": 0.05},
    "dppo_kl": {"threshold": 0.005},
    "dual_clip": {"clip_epsilon": 0.1, "cap": 1.05},
    "seq_mask": {"band": (0.9, 1.1)},
    "seq_outlier": {"band": (0.9, 1.1)},
    "tis_mask": {"cap": 1.05, "band": (0.9, 1.1)},
    "opsm": {"threshold": 0.05},
    "kl_reject": {"reject": "token_k2,seq_max_k3", "reject_threshold": "0.005,0.01"},
    "tis_clip": {"band": (0.95, 1.05)},
    "tis_norm": {"cap": 1.1},
    "gspo": {"clip_epsilon": 0.1},
    "cispo": {"band": (0.95, 1.05)},
    "sapo": {"temperatures": (1.0, 1.05)},
    "vespo": {"gamma": (2.0, 3.0, 3.0, 2.0)},
    "clip_cov": {"clip_epsilon": 0.2, "cov_fraction": 0.1, "cov_band": (-0.5, 5.0)},
    "kl_cov": {"cov_fraction": 0.1, "kl_coef": 0.5},
}
T = 0.7


def _logits(seed: int, prompts: int = 6, vocab: int = 12, drift: float = 0.3):
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 2.0, (prompts, vocab)).astype(np.float32)
    zp = z + rng.uniform(-drift, drift, (prompts, vocab)).astype(np.float32)
    reward = (rng.random((prompts, vocab)) < 0.3).astype(np.float32)
    return z, zp, reward


def _bias_by_autodiff(name, z, zp, reward, params):
    """Σ_y π'(y)ω(y)A(y)∇_b log π(y) − Σ_y π(y)A(y)∇_b log π(y), ∇ by jax.jacobian."""
    from kernel_contracts.kernels.rl.bias import bandit_weights

    div = divergences(z, zp, T)
    p, q = np.asarray(div["p"], np.float64), np.asarray(div["q"], np.float64)
    adv = reward - (q * reward).sum(axis=1, keepdims=True)
    omega = np.asarray(
        bandit_weights(name, div["log_w"], adv, div["tv"], div["kl_inf_train"], params), np.float64
    )
    score = jax.vmap(jax.jacobian(lambda b, zi: jax.nn.log_softmax((zi + b) / T)))
    jac = np.asarray(score(jnp.zeros_like(z), z), np.float64)  # [prompt, y, b]: ∇_b log π(y)
    bias = np.einsum("py,pyb->pb", (q * omega - p) * adv, jac)
    return np.linalg.norm(bias, axis=1)


def test_realised_bias_matches_autodiff():
    z, zp, reward = _logits(1)
    for name in ["plain", "tis", "ppo_clip", "icepop", "tv_mask"]:
        got = np.asarray(bandit_bias(name, z, zp, reward, T, PARAMS[name]).realised)
        want = _bias_by_autodiff(name, z, zp, reward, PARAMS[name])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7, err_msg=name)
        assert got.max() > 1e-4  # the drift is large enough that the bias is not zero


def test_one_token_special_cases():
    z, zp, reward = _logits(2)
    b = {n: bandit_bias(n, z, zp, reward, T, PARAMS[n]) for n in ESTIMATOR_NAMES}
    # on one token the sequence ratio is the token ratio: seq_is is exact, seq_tis is tis,
    # the geometric-mean band is the token band
    assert np.all(np.asarray(b["seq_is"].realised) < 1e-6)
    assert np.all(np.asarray(b["seq_is"].discrepancy) < 1e-6)
    np.testing.assert_allclose(b["seq_tis"].realised, b["tis"].realised, rtol=1e-6)
    np.testing.assert_allclose(b["geo_mask"].realised, b["icepop"].realised, rtol=1e-6)
    # and so is the W band (seq_mask) or one outlier token (seq_outlier), same band
    for name in ("seq_mask", "seq_outlier"):
        np.testing.assert_allclose(b[name].realised, b["icepop"].realised, rtol=1e-6)
    # a position mask keeps the prompt (bias 0) or drops it (bias = the whole gradient,
    # discrepancy E_π' w = 1)
    tv = np.asarray(divergences(z, zp, T)["tv"])
    dropped = tv > PARAMS["tv_mask"]["threshold"]
    assert dropped.any() and not dropped.all()
    d = np.asarray(b["tv_mask"].discrepancy)
    np.testing.assert_allclose(d[dropped], 1.0, rtol=1e-5)
    assert np.all(d[~dropped] < 1e-6)


def test_tis_cap_zero_drops_the_whole_gradient():
    z, zp, reward = _logits(3)
    tis0 = bandit_bias("tis", z, zp, reward, T, {"cap": 0.0})
    # ω = 0: the estimate is 0, the bias is minus the true gradient E_π[A g]
    np.testing.assert_allclose(tis0.discrepancy, 1.0, rtol=1e-5)
    full = bandit_bias("tv_mask", z, zp, reward, T, {"threshold": 1e-9})
    np.testing.assert_allclose(tis0.realised, full.realised, rtol=1e-5)


def test_realised_never_exceeds_worst_case_nor_the_bounds():
    # four drift scales, from barely visible to far past the clip range
    for i, drift in enumerate([0.05, 0.3, 1.0, 3.0]):
        _check_against_bounds(*_logits(10 + i, drift=drift))


def _check_against_bounds(z, zp, reward):
    div = divergences(z, zp, T)
    osc = np.asarray((zp - z).max(axis=1) - (zp - z).min(axis=1), np.float64)
    for name in ESTIMATOR_NAMES:
        b = bandit_bias(name, z, zp, reward, T, PARAMS[name])
        assert np.all(np.asarray(b.realised) <= np.asarray(b.worst_case) * (1 + 1e-5) + 1e-7)
    ga = lambda b: np.asarray(b.score_norm, np.float64) * np.asarray(b.advantage_max)  # noqa: E731
    plain = bandit_bias("plain", z, zp, reward, T)
    eps = np.tanh(osc / (4 * T))
    bound = LEMMAS["pg_bias_plain"].numpy()(ga(plain), 1.0, eps)  # params: A, G, eps
    assert np.all(np.asarray(plain.worst_case) <= bound * (1 + 1e-5))
    for name, lemma in [("tis", "pg_bias_tis"), ("mis", "pg_bias_mis")]:
        b = bandit_bias(name, z, zp, reward, T, PARAMS[name])
        bound = LEMMAS[lemma].numpy()(ga(b), 1.0, T, 1.1, osc)  # A, G, T, c, osc
        assert np.all(np.asarray(b.worst_case) <= bound * (1 + 1e-5) + 1e-7), name
    share = np.asarray(clip_share(z, zp, T, 0.2))
    assert np.all(share <= LEMMAS["clip_budget"].numpy()(T, 0.2, osc) * (1 + 1e-5))
    assert np.all(np.asarray(div["tv"]) <= np.tanh(osc / (4 * T)) * (1 + 1e-5))


def test_discrepancy_attains_the_tis_bound_at_its_witness():
    witness = LEMMAS["pg_bias_tis"].witness(0.8, 1.0, 1.2)  # osc, T, c
    z, zp = (np.asarray(witness.instance[k], np.float32)[None] for k in ("z", "z_prime"))
    b = bandit_bias("tis", z, zp, np.zeros_like(z), 1.0, {"cap": 1.2})
    np.testing.assert_allclose(float(b.discrepancy[0]), witness.bound, rtol=1e-4)


# ------------------------------------------------------------------------- sequences


def _exact_sequence_bias(name, zt, zi, table, params, baseline):
    """Every sequence of a context-free law (logits per position), enumerated exactly."""
    L, V = zt.shape
    lp = np.asarray(jax.nn.log_softmax(zt / T), np.float64)
    lq = np.asarray(jax.nn.log_softmax(zi / T), np.float64)
    div = divergences(zt, zi, T)
    seqs = np.array(list(itertools.product(range(V), repeat=L)))
    prob = np.exp(lq[np.arange(L), seqs].sum(axis=1))
    reward = table[seqs].mean(axis=1)
    adv = reward - baseline
    from kernel_contracts.kernels.rl import correction_weights

    lr = lp[np.arange(L), seqs] - lq[np.arange(L), seqs]
    n = len(seqs)
    omega = np.asarray(
        correction_weights(
            name,
            jnp.asarray(lr, jnp.float32),
            jnp.ones((n, L)),
            jnp.asarray(np.repeat(adv[:, None], L, 1), jnp.float32),
            params=params,
            token_tv=jnp.broadcast_to(div["tv"], (n, L)),
            token_kl=jnp.broadcast_to(div["kl_inf_train"], (n, L)),
        ),
        np.float64,
    )
    gap = omega - np.exp(lr.sum(axis=1, keepdims=True))
    p = np.exp(lp)
    x = adv[:, None] / T * np.einsum("st,stv->sv", gap, np.eye(V)[seqs] - p[None])
    return prob @ (np.abs(adv) * np.abs(gap).sum(axis=1)), np.linalg.norm(prob @ x)


def test_monte_carlo_intervals_cover_the_exact_sequence_bias():
    rng = np.random.default_rng(5)
    L, V, n = 3, 4, 3000
    zt = rng.normal(0.0, 1.0, (L, V)).astype(np.float32)
    zi = zt + rng.uniform(-0.4, 0.4, (L, V)).astype(np.float32)
    table = np.array([1.0, 0.0, 0.0, 1.0], np.float32)
    q = np.asarray(jax.nn.softmax(zi / T), np.float64)
    tokens = np.stack([rng.choice(V, n, p=q[t] / q[t].sum()) for t in range(L)], axis=1)
    zt_b, zi_b = np.broadcast_to(zt, (n, L, V)), np.broadcast_to(zi, (n, L, V))
    for name in ["plain", "ppo_clip", "seq_tis"]:
        got = sequence_bias(name, tokens, zt_b, zi_b, table, T, PARAMS[name])
        disc, norm = _exact_sequence_bias(name, zt, zi, table, PARAMS[name], got.baseline)
        assert got.discrepancy.lower <= disc <= got.discrepancy.upper, (name, got, disc)
        assert got.realised.lower <= norm <= got.realised.upper, (name, got, norm)
        assert disc > 0.01 and norm > 1e-3  # the instance has a visible bias
        assert got.samples == n and got.length == L and "bootstrap" in got.method
    # sequence IS reweights by W itself: no bias, and no width to its intervals
    got = sequence_bias("seq_is", tokens, zt_b, zi_b, table, T)
    assert got.discrepancy == (0.0, 0.0, 0.0, 0.95)
    assert got.realised.upper == 0.0


@pytest.mark.no_shape_checks
def test_bad_inputs_are_refused():
    z, zp, reward = _logits(0)
    with pytest.raises(ValueError, match="unknown estimator"):
        bandit_bias("nope", z, zp, reward, T)
    with pytest.raises(ValueError, match="temperature must be positive"):
        bandit_bias("plain", z, zp, reward, 0.0)
    with pytest.raises(ValueError, match=r"expected z_train and z_inf \[prompts, vocab\]"):
        bandit_bias("plain", z, zp[:, :3], reward, T)
    with pytest.raises(ValueError, match="clip_epsilon must be in"):
        clip_share(z, zp, T, 1.5)
    tok = np.zeros((4, 2), np.int32)
    zz = np.zeros((4, 2, 12), np.float32)
    with pytest.raises(ValueError, match="level must be in"):
        sequence_bias("plain", tok, zz, zz, np.zeros(12), T, level=1.0)
    with pytest.raises(ValueError, match="expected a reward table"):
        sequence_bias("plain", tok, zz, zz, np.zeros(5), T)
    with pytest.raises(ValueError, match="expected logits"):
        sequence_bias("plain", tok, zz[:, :1], zz, np.zeros(12), T)
    with pytest.raises(ValueError, match="prompt length must be in"):
        held_out_prompts(2, 10_000, 0)
    with pytest.raises(ValueError, match="exceeds the context"):
        rollout_pairs(np.zeros((2, 120), np.int32), inference="bf16", new_tokens=20, temperature=1)
    assert math.isfinite(float(divergences(z, zp, T)["tv"].sum()))
