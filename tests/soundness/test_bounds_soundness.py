"""Soundness: hypothesis searches for a violation of every lemma; zero are allowed.

Logits are random, two-point splits, one huge logit, or near-ties; drifts are uniform, ±δ sign
patterns, or one-hot; vocabularies run from 2 to 10^5, temperatures from 0.05 to 20, δ up to
20. True quantities are computed in float64 with log-sum-exp (``bounds.measure``); the only
slack is TOL, a bound on float64 summation error for ≤ 10^5 terms of size ≤ 1 (10^5·2^-52
≈ 2e-11), plus a relative 1e-12 for the bound's own evaluation.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import sympy
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts.bounds import LEMMAS, measure
from kernel_contracts.bounds.pg.links import mis_drift, mis_ratio, tis_drift, tis_ratio
from kernel_contracts.bounds.sequence import sequence_routes
from kernel_contracts.bounds.token import kl_tilt_sup
from tests.support import strategies
from tests.support.strategies import examples, within


def _log_ratio_error(z: np.ndarray, zp: np.ndarray, T: float) -> float:
    """A bound on the float64 error of a computed log ratio: dividing logits of size |z|/T
    rounds by ε·|z|/T each, and the pairwise log-sum-exp adds about ε·log2(n) per side."""
    eps = np.finfo(np.float64).eps
    scale = (float(np.max(np.abs(z))) + float(np.max(np.abs(zp)))) / T
    return 4 * eps * (scale + math.log2(len(z)) + 2)


_x = sympy.Symbol("x", nonnegative=True)
_c = sympy.Symbol("c", positive=True)
_KL = sympy.lambdify([_x], kl_tilt_sup(_x), "mpmath")
_TIS = sympy.lambdify([_x, _c], tis_drift(_x, _c), "mpmath")
_MIS = sympy.lambdify([_x, _c], mis_drift(_x, _c), "mpmath")
_TIS_R = sympy.lambdify([_x, _c], tis_ratio(_x, _c), "mpmath")
_MIS_R = sympy.lambdify([_x, _c], mis_ratio(_x, _c), "mpmath")


def _f(fn, *args) -> float:
    return float(fn(*args))


def logit_pairs():
    """(z, z', T, δ) with ‖z' − z‖∞ ≤ δ, vocabularies up to 100,000 (``strategies``)."""
    return strategies.logit_pairs(
        [2, 3, 5, 17, 100, 1000, 30_000, 100_000],
        ([0.05, 0.1, 0.5, 1.0, 2.0, 20.0], (0.05, 20.0)),
        ([0.0, 1e-6, 1e-3, 0.02, 0.5, 3.0, 20.0], (0, 20)),
    )


@examples(300)
@given(logit_pairs())
def test_token_links_are_sound(case):
    z, zp, T, _ = case
    d = zp - z  # the drift the two vectors really have (after float rounding of z + Δ)
    osc = float(np.max(d) - np.min(d))
    assert within(osc, 2 * float(np.max(np.abs(d))))  # drift_to_oscillation
    s = osc / T
    r = measure.max_abs_log_ratio(z, zp, T)
    tv = measure.tv(z, zp, T)
    assert within(r, s)  # token_log_ratio
    assert within(tv, math.tanh(s / 4))  # token_tv_tanh
    assert within(tv, math.tanh(r / 2))  # ratio_to_tv
    for reverse in (False, True):
        kl = measure.kl(z, zp, T, reverse=reverse)
        assert within(kl, _f(_KL, s))  # token_kl_exact
        assert within(kl, s * s / 8)  # token_kl_hoeffding
        assert within(kl, r * math.tanh(r / 2))  # ratio_to_kl
    if s < 700:  # beyond, e^s overflows float64; the log form |log w| ≤ s is checked above
        # e^r turns the log ratio's absolute float error into a relative one of the same size
        slack = math.exp(_log_ratio_error(z, zp, T))
        assert within(measure.clip_share(z, zp, T, 0.2), math.expm1(s) / 0.2 * slack)  # clip_budget


@examples(200)
@given(logit_pairs(), st.sampled_from([1.0001, 1.02, 1.2, 2.0, 3.0, 10.0]) | st.floats(1.0001, 20))
def test_importance_sampling_links_are_sound(case, cap):
    z, zp, T, _ = case
    d = zp - z
    s = float(np.max(d) - np.min(d)) / T
    r = measure.max_abs_log_ratio(z, zp, T)
    tv = measure.tv(z, zp, T)
    excess = measure.tis_excess(z, zp, T, cap)
    masked = measure.mis_masked_mass(z, zp, T, cap)
    assert within(excess, _f(_TIS, s, cap))  # pg_bias_tis
    assert within(masked, _f(_MIS, s, cap))  # pg_bias_mis
    assert within(excess, _f(_TIS_R, r, cap))  # pg_bias_tis_ratio
    assert within(masked, _f(_MIS_R, r, cap))  # pg_bias_mis_ratio
    assert within(excess, tv)  # pg_bias_tv_capped (TIS)
    assert within(masked, min(1.0, tv * cap / (cap - 1)))  # pg_bias_tv_capped (MIS)


@examples(150)
@given(logit_pairs(), st.integers(0, 2**32 - 1))
def test_reward_and_plain_gradient_links_are_sound(case, seed):
    z, zp, T, _ = case
    rng = np.random.default_rng(seed)
    p = np.exp(measure.log_softmax(z, T))
    q = np.exp(measure.log_softmax(zp, T))
    tv = measure.tv(z, zp, T)
    a, b = sorted(rng.normal(0, 3, 2))
    reward = rng.choice([a, b], z.size) if rng.random() < 0.5 else rng.uniform(a, b, z.size)
    drift = abs(float(np.sum((p - q) * reward)))
    assert within(drift, (b - a) * tv)  # reward_drift_tv
    G, A = 5.0, 2.0
    g = G * A * rng.uniform(-1, 1, (z.size, 3))
    g /= np.maximum(1.0, np.linalg.norm(g, axis=1, keepdims=True) / (G * A))  # ‖g(y)‖ ≤ G·A
    bias = float(np.linalg.norm((q - p) @ g))
    assert within(bias, 2 * G * A * tv)  # pg_bias_plain


def _sequence_tv(step_p, step_q, vocab: int, length: int) -> float:
    """Exact TV of two autoregressive laws by enumerating every sequence."""
    total = 0.0
    for seq in itertools.product(range(vocab), repeat=length):
        lp = lq = 0.0
        for t in range(length):
            lp += step_p[seq[:t]][seq[t]]
            lq += step_q[seq[:t]][seq[t]]
        total += abs(math.exp(lp) - math.exp(lq))
    return total / 2


@examples(60)
@given(
    st.integers(2, 3),
    st.integers(1, 5),
    st.floats(0.05, 5.0),
    st.floats(0.0, 3.0),
    st.integers(0, 2**32 - 1),
)
def test_sequence_routes_are_sound_for_adaptive_laws(vocab, length, T, delta, seed):
    """Per-prefix logits chosen adversarially at random (not i.i.d.): every route holds."""
    rng = np.random.default_rng(seed)
    step_p, step_q, worst_s = {}, {}, 0.0
    for t in range(length):
        for prefix in itertools.product(range(vocab), repeat=t):
            z = rng.normal(0, rng.choice([0.1, 1.0, 5.0]), vocab)
            d = np.where(rng.random(vocab) < 0.5, delta, -delta) * rng.choice([1.0, rng.random()])
            step_p[prefix] = measure.log_softmax(z, T)
            step_q[prefix] = measure.log_softmax(z + d, T)
            worst_s = max(worst_s, float(np.max(d) - np.min(d)) / T)
    tv_seq = _sequence_tv(step_p, step_q, vocab, length)
    s = sympy.Float(worst_s, 30)
    routes = sequence_routes(sympy.tanh(s / 4), kl_tilt_sup(s), s, sympy.Integer(length))
    for name, expr in routes.items():
        assert within(tv_seq, float(expr.evalf(30))), name


@examples(100)
@given(st.floats(0.0, 1.0), st.floats(0.0, 5.0), st.floats(0.05, 5.0), st.integers(0, 2**32 - 1))
def test_statistical_premise_is_sound(rho, threshold, T, seed):
    """Mean TV over tokens where a ρ-fraction exceeds the drift threshold (arbitrarily)."""
    rng = np.random.default_rng(seed)
    n = 50
    exceed = rng.random(n) < rho
    rate = float(np.mean(exceed))
    tvs = []
    for i in range(n):
        z = rng.normal(0, 2, 8)
        delta = rng.uniform(threshold, threshold + 30) if exceed[i] else threshold
        tvs.append(measure.tv(z, z + np.where(rng.random(8) < 0.5, delta, -delta), T))
    bound = LEMMAS["expected_tv_exceedance"].evaluate(osc=2 * threshold, T=T, rho=rate)
    assert within(float(np.mean(tvs)), bound)
