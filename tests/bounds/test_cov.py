"""Clip-Cov and KL-Cov anchored on the rollout (``bounds.pg.cov``, ``kernels.rl.cov``).

The bounds: Clip-Cov's E_π'|ω − w| ≤ 1 (bias ≤ G·A), attained at every premise value; KL-Cov's
bias ≤ G·κ, attained wherever w can differ from 1. The tests try to break them on adversarial
batches (ties of the covariance, the band's ends, A = 0, one-token batches, huge and tiny
log-probs), check the witnesses' batches against the weight rule itself, and read, derive and
prove the DSL's guarantees.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_contracts import bounds
from kernel_contracts.bounds import LEMMAS, measure
from kernel_contracts.bounds.pg.cov import band_batch, cov_of
from kernel_contracts.bounds.pg.evaluate import pg_bias_bound, pg_bias_supremum
from kernel_contracts.contracts.errors import KernelContractsError
from kernel_contracts.kernels.rl.weight_rules import numpy_weights
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import discharge
from tests.support.pg_contracts import pg_contract

CLIP = {"clip_epsilon": 0.2, "cov_fraction": 0.0002, "cov_band": (1.0, 5.0)}  # verl's defaults
KL = {"cov_fraction": 0.0002, "kl_coef": 0.1}
RULES = (None, "verl", "skyrl")


def _batch(seed: int, shape=(4, 9)):
    """A batch built to sit on edges: covariance ties (repeated A and log π), A = 0 rows,
    log-ratios 0 and ±huge, log-probs from −60 to 0, padding holding garbage."""
    rng = np.random.default_rng(seed)
    b, t = shape
    lq = rng.choice([-60.0, -5.0, -1.0, -0.1, 0.0], shape) * rng.uniform(0.5, 1.0, shape)
    lr = rng.choice([0.0, -30.0, 30.0, 0.1, -0.1, 0.5, -0.5], shape) * rng.uniform(0, 1, shape)
    lr = np.minimum(lr, -lq)  # π ≤ 1
    adv = np.repeat(rng.choice([-2.0, -1.0, 0.0, 1.0, 2.0], (b, 1)), t, axis=1)
    mask = (rng.random(shape) < 0.8).astype(np.float64)
    mask[0, 0] = 1.0
    lr = np.where(mask > 0, lr, rng.choice([np.nan, 1e4], shape))
    return lr.astype(np.float32), lq.astype(np.float32), mask.astype(np.float32), adv


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([1e-4, 0.1, 0.5, 1.0]),
    st.sampled_from([(-1e9, 1e9), (0.0, 0.5), (-3.0, -0.01), (1.0, 5.0)]),
    st.sampled_from(RULES),
)
def test_clip_cov_drops_at_most_its_count_among_candidates_and_never_raises_a_weight(
    seed, fraction, band, ties
):
    lr, lq, mask, adv = _batch(seed)
    params = {"clip_epsilon": 0.2, "cov_fraction": fraction, "cov_band": band}
    omega = numpy_weights("clip_cov", lr, mask, adv, params=params, logp_inf=lq, ties=ties)
    ppo = numpy_weights("ppo_clip", lr, mask, adv, params={"clip_epsilon": 0.2}, logp_inf=lq)
    real = mask > 0
    w = np.exp(np.where(real, lr, 0.0).astype(np.float64))
    assert np.all(omega[~real] == 0)
    # ω ∈ {0, w/2, w}: never above w, so E_π'|ω − w| ≤ E_π' w = 1 at every position
    assert np.all((omega >= 0) & (omega <= w * (1 + 1e-6)))
    # the covariance drops at most max(⌊ρn⌋, 1) tokens, each one PPO kept, inside the band
    logp = np.where(real, lq.astype(np.float64) + lr, 0.0)
    cov = np.zeros_like(logp)
    cov[real] = cov_of(logp[real], adv[real])
    dropped = real & (omega == 0) & (ppo > 0)
    k = max(math.floor(fraction * real.sum()), 1)
    assert dropped.sum() <= k
    lb, ub = band
    assert np.all((cov[dropped] > lb - 1e-3 * (1 + abs(lb))) & (cov[dropped] < ub + 1e-3))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([1e-4, 0.2, 1.0]),
    st.sampled_from([0.0, 0.1, 3.0]),
    st.sampled_from(RULES),
)
def test_kl_cov_changes_exactly_its_count_by_kappa_over_a_and_nothing_else(
    seed, fraction, kappa, ties
):
    lr, lq, mask, adv = _batch(seed)
    params = {"cov_fraction": fraction, "kl_coef": kappa}
    omega = numpy_weights("kl_cov", lr, mask, adv, params=params, logp_inf=lq, ties=ties)
    real = mask > 0
    w = np.exp(np.where(real, lr, 0.0).astype(np.float64)) * real
    # |(ω − w)·A| ≤ κ on every token: the penalty's gradient, whatever the batch
    gap = np.abs((omega - w) * adv)
    assert np.all(gap <= kappa * (1 + 1e-5) + 1e-6 * w)
    changed = gap > 1e-6 * (1 + w)
    k = max(math.floor(fraction * real.sum()), 1)
    assert changed.sum() <= k
    # the changed tokens have the largest covariances
    logp = np.where(real, lq.astype(np.float64) + lr, 0.0)
    cov = np.full(logp.shape, -np.inf)
    cov[real] = cov_of(logp[real], adv[real])
    if changed.any():
        assert cov[changed].min() >= np.sort(cov[real])[::-1][k - 1] - 1e-3


@pytest.mark.parametrize("ties", RULES)
def test_a_one_token_batch_is_always_picked_by_kl_cov_and_never_by_clip_cov(ties):
    lr, lq, adv, one = (np.array([[x]], np.float32) for x in (0.3, -1.0, -1.0, 1.0))
    kl = numpy_weights("kl_cov", lr, one, adv, params=KL, logp_inf=lq, ties=ties)
    assert float(kl[0, 0]) == pytest.approx(math.exp(0.3) + 0.1, rel=1e-6)  # w − κ·1/(−1)
    # one token: cov = 0, outside verl's band (1, 5): nothing is drawn
    clip = numpy_weights("clip_cov", lr, one, adv, params=CLIP, logp_inf=lq, ties=ties)
    assert float(clip[0, 0]) == pytest.approx(math.exp(0.3), rel=1e-6)


def test_kl_cov_keeps_w_where_the_advantage_is_zero_or_the_ratio_is_one():
    lr = np.array([[0.2, 0.0, -0.2]], np.float32)
    lq = np.log(np.array([[0.1, 0.2, 0.3]], np.float32))
    adv = np.array([[0.0, 1.0, 1.0]])
    got = numpy_weights("kl_cov", lr, np.ones_like(lr), adv, logp_inf=lq,
                        params={"cov_fraction": 1.0, "kl_coef": 0.5})  # fmt: skip
    want = [math.exp(0.2), 1.0, math.exp(-0.2) + 0.5]
    np.testing.assert_allclose(got[0], want, rtol=1e-6)


# ---- the witnesses ----------------------------------------------------------------------
@pytest.mark.parametrize("osc", [0.0, 0.05, 0.4, 3.0])
@pytest.mark.parametrize("band", [(1.0, 5.0), (-2.0, -1.0), (-0.5, 0.5), (1e-4, 2e-4), (1e3, 1e4)])
@pytest.mark.parametrize("ties", RULES)
def test_the_clip_cov_witness_batch_drops_every_token_under_the_rule(osc, band, ties):
    """For each token y, the two-token batch {y, o} of the witness: the rule (ours and every
    framework's) drops y, so the discrepancy E_π'|ω − w| is 1, the bound."""
    wit = LEMMAS["pg_bias_clip_cov"].witness(osc, 1.0, *band)
    assert wit.achieved == pytest.approx(1.0, rel=1e-12) and wit.ratio == pytest.approx(1.0)
    batch = wit.instance["batch"]
    a_y, a_o = batch["adv"]
    assert max(abs(a_y), abs(a_o)) <= 1.0
    params = {"clip_epsilon": 0.2, "cov_fraction": 0.0002, "cov_band": band}
    for lp, lq in zip(batch["logp"], batch["logq"], strict=True):
        lr = np.array([[lp - lq, batch["log_ratio_other"]]])
        lq2 = np.array([[lq, batch["logp_other"] - batch["log_ratio_other"]]])
        adv = np.array([[a_y, a_o]])
        omega = numpy_weights("clip_cov", lr, np.ones_like(lr), adv, params=params,
                              logp_inf=lq2, ties=ties)  # fmt: skip
        assert omega.dtype == np.float64 and float(omega[0, 0]) == 0.0, (lp, lq)


def test_band_batch_fails_loudly_where_float64_cannot_place_the_covariances():
    # a band narrower than the float64 spacing at its middle: no batch, and the witness says so
    with pytest.raises(ValueError, match="no two-token batch"):
        LEMMAS["pg_bias_clip_cov"].witness(0.4, 1.0, 1e6, 1e6 + 1e-10)
    a_y, a_o, lp_o = band_batch(np.array([-0.1, -3.0]), 1.0, 5.0)
    assert a_y - a_o > 0 and lp_o < -3.0


@pytest.mark.parametrize("osc", [1e-6, 0.05, 0.4, 3.0])
@pytest.mark.parametrize("kappa", [0.0, 0.1, 2.0])
def test_the_kl_cov_witness_attains_g_kappa_and_the_rule_gives_it(osc, kappa):
    wit = LEMMAS["pg_bias_kl_cov"].witness(osc, 1.0, kappa)
    assert wit.achieved == pytest.approx(wit.bound, rel=1e-12)
    z, zp = wit.instance["z"], wit.instance["z_prime"]
    lw, lq = measure.log_ratio(z, zp, 1.0), measure.log_softmax(zp, 1.0)
    q = np.exp(lq)
    gap = 0.0
    for a in (1.0, -1.0):  # each token alone in its batch: picked
        for i in range(len(z)):
            lr, lqi, one = np.array([[lw[i]]]), np.array([[lq[i]]]), np.ones((1, 1))
            om = numpy_weights("kl_cov", lr, one, a * one, logp_inf=lqi,
                               params={"cov_fraction": 0.0002, "kl_coef": kappa})  # fmt: skip
            gap += q[i] * abs(float(om[0, 0]) - math.exp(lw[i])) * abs(a) / 2
    assert gap == pytest.approx(wit.bound, rel=1e-9, abs=1e-12)


def test_the_exact_bounds_in_rationals():
    """The forms are G·A and G·κ: the witnesses' discrepancies are sums of π-masses, which in
    exact rationals are 1 (Clip-Cov) and κ·1 (KL-Cov, every w ≠ 1)."""
    p = [Fraction(3, 7), Fraction(4, 7)]  # π of a two-token pair
    q = [Fraction(1, 2), Fraction(1, 2)]  # π': every w = p/q differs from 1
    assert sum(q[i] * (p[i] / q[i]) for i in range(2)) == 1
    kappa = Fraction(1, 10)
    assert sum(qi * kappa * (pi != qi) for pi, qi in zip(p, q, strict=True)) == kappa


# ---- DSL, derivations and obligations ---------------------------------------------------
_CLIP_LINE = "estimator: clip_cov, clip_epsilon: 0.2, cov_fraction: 0.0002, cov_band: [1, 5]"
_KL_LINE = "estimator: kl_cov, cov_fraction: 0.0002, kl_coef: 0.1"


def test_the_dsl_reads_both_and_derives_g_a_and_g_kappa_on_every_premise():
    lines = [f"{_CLIP_LINE}, max: 100, from: [{p}]" for p in ("N1", "N2", "N3")]
    lines += [f"{_KL_LINE}, max: 100, from: [{p}]" for p in ("N1", "N2", "N3")]
    c = pg_contract(lines, name="cov", tv="0.1")
    assert c.guarantee("G0").cov_band == (1.0, 5.0) and c.guarantee("G3").kl_coef == 0.1
    derived = bounds.derive(c)
    for d in derived[:3]:  # G·A = 5·1
        assert d.value == pytest.approx(5.0) and d.chain[-1] == "pg_bias_clip_cov"
        assert d.extra["attained"]
    for d in derived[3:]:  # G·κ = 5·0.1
        assert d.value == pytest.approx(0.5) and d.chain[-1] == "pg_bias_kl_cov"
        assert d.extra["attained"]
    assert any("every draw" in n for n in derived[0].notes)
    assert any("no factor A" in n for n in derived[3].notes)


@pytest.mark.parametrize("line", [_CLIP_LINE, _KL_LINE])
def test_obligations_prove_above_and_refute_below_where_attained(line):
    (d,) = bounds.derive(pg_contract([f"{line}, max: 100, from: [N1]"], name="c"))
    above, below = (
        discharge(x)
        for x in bounds.derive(
            pg_contract(
                [f"{line}, max: {d.value * f!r}, from: [N1]" for f in (1.01, 0.99)], name="c"
            )
        )
    )
    assert above.status is Status.PROVED, above.reason
    assert below.status is Status.REFUTED, below.reason


def test_kl_cov_at_a_zero_premise_is_not_attained_and_never_refutes():
    c = pg_contract([f"{_KL_LINE}, max: 0.25, from: [N1]"], name="c", delta="0")
    (d,) = bounds.derive(c)
    assert not d.extra["attained"]
    assert discharge(d).status is Status.UNKNOWN


def test_the_plot_numbers_agree_with_the_derivation():
    assert pg_bias_bound("clip_cov", osc=0.3, G=5.0, **CLIP) == pytest.approx(5.0)
    assert pg_bias_supremum("clip_cov", osc=0.0, G=5.0, **CLIP) == 5.0
    assert pg_bias_bound("kl_cov", osc=0.3, G=5.0, **KL) == pytest.approx(0.5)
    assert pg_bias_supremum("kl_cov", osc=0.3, G=5.0, **KL) == pytest.approx(0.5)
    assert pg_bias_supremum("kl_cov", osc=0.0, G=5.0, **KL) == 0.0


@pytest.mark.parametrize(
    ("guarantee", "message"),
    [
        ("estimator: kl_cov, cov_fraction: 0.1", "needs kl_coef"),
        ("estimator: kl_cov, cov_fraction: 2, kl_coef: 1", "must be in (0, 1], got 2.0"),
        ("estimator: clip_cov, clip_epsilon: 0.2, cov_fraction: 0.1, cov_band: [2, 1]",
         "needs lb < ub"),
        ("estimator: kl_cov, cov_fraction: 0.1, kl_coef: 1, kl_coeff: 1",
         "did you mean 'kl_coef'"),
        ("estimator: kl_cov, cov_fraction: 0.1, kl_coef: 1, cov_band: [1, 2]",
         "applies only to estimator clip_cov"),
    ],
)  # fmt: skip
def test_bad_parameters_are_refused_with_their_key(guarantee, message):
    with pytest.raises(KernelContractsError) as err:
        pg_contract([f"{guarantee}, max: 1, from: [N1]"], name="cov")
    text = str(err.value)
    assert message in text and "guarantees[0]." in text, text


@pytest.mark.parametrize("name", ["clip_cov", "kl_cov"])
def test_every_framework_refuses_the_export_with_the_reason(name):
    from kernel_contracts.verify.pipeline.export import FRAMEWORKS, NoCounterpart, Request

    reasons = {
        "verl": "bypass mode",
        "skyrl": f"refuses {name}",
        "trl": f"TRL has no {name} loss",
        "nemo-rl": f"NeMo-RL has no {name} loss",
    }
    for framework, why in reasons.items():
        with pytest.raises(NoCounterpart, match=why):
            FRAMEWORKS[framework].settings(Request("G", name))


def test_the_rl_page_guarantees_are_read_and_proved():
    import pathlib
    import re

    from kernel_contracts import contracts
    from tests.support.pg_contracts import head

    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "rl.md").read_text("utf-8")
    section = page[page.index("## The covariance losses") :]
    block = re.search(r"```yaml\n(guarantees:\n.*?)```", section, re.S).group(1)
    c = contracts.loads(head(name="cov").replace("guarantees:\n", "") + block, path="rl.md")
    assert [g.estimator for g in c.guarantees] == ["clip_cov", "kl_cov"]
    for d in bounds.derive(c):
        assert discharge(d).status is Status.PROVED, d.guarantee


def _bandit(name, params, z, zp, reward):
    """The exact one-token bias at each prompt (the setting of ``kernels.rl.bias``): every
    prompt's whole vocabulary one batch, scores ∇_b log softmax(z + b)(y) = e_y − π; returns
    (‖bias‖, G, A) per prompt, in float64."""
    lp = np.stack([measure.log_softmax(row, 1.0) for row in z])
    lq = np.stack([measure.log_softmax(row, 1.0) for row in zp])
    p, q = np.exp(lp), np.exp(lq)
    adv = reward - (q * reward).sum(axis=1, keepdims=True)
    omega = numpy_weights(name, lp - lq, np.ones_like(lp), adv, params=params, logp_inf=lq)
    coef = q * (omega - np.exp(lp - lq)) * adv
    bias = coef - p * coef.sum(axis=1, keepdims=True)
    eye = np.eye(z.shape[1])
    g = np.linalg.norm(eye[None] - p[:, None, :], axis=2).max(axis=1)
    return np.linalg.norm(bias, axis=1), g, np.abs(adv).max(axis=1)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([1e-3, 0.3, 3.0, 30.0]),
    st.sampled_from([0.01, 0.3, 1.0]),
    st.sampled_from([(-0.5, 2.0), (-1e9, 1e9), (0.0, 1e-3)]),
)
def test_the_exact_bandit_bias_stays_below_both_forms(seed, drift, fraction, band):
    """Every prompt's exact one-token bias is at most G·A (Clip-Cov) and G·κ (KL-Cov), G and A
    the prompt's own score norm and largest |A|: drifts from barely visible to far past the
    clip range, rewards with ties, the rule picking by covariance across the whole batch."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 3, (4, 7))
    zp = z + rng.uniform(-drift, drift, z.shape)
    reward = rng.choice([0.0, 1.0, 5.0], (4, 7))
    clip = {"clip_epsilon": 0.2, "cov_fraction": fraction, "cov_band": band}
    bias, g, a = _bandit("clip_cov", clip, z, zp, reward)
    assert np.all(bias <= g * a * (1 + 1e-9) + 1e-12)
    bias, g, _ = _bandit("kl_cov", {"cov_fraction": fraction, "kl_coef": 0.7}, z, zp, reward)
    assert np.all(bias <= 0.7 * g * (1 + 1e-9) + 1e-12)


def test_the_export_request_carries_and_names_every_parameter():
    from kernel_contracts.verify.pipeline.export.request import request_of

    lines = [f"{_CLIP_LINE}, max: 5, from: [N1]", f"{_KL_LINE}, max: 5, from: [N1]"]
    clip, kl = (request_of(g) for g in pg_contract(lines, name="cov").guarantees)
    assert clip.cov_band == (1, 5) and clip.cov_fraction == Fraction(1, 5000)
    assert clip.summary == (
        "pg_bias, estimator clip_cov, clip_epsilon 0.2, cov_fraction 0.0002, cov_band [1.0, 5.0]"
    )
    assert kl.summary == "pg_bias, estimator kl_cov, cov_fraction 0.0002, kl_coef 0.1"


def test_the_numpy_count_is_the_frameworks_int_of_a_double_product():
    """ρ = 0.29, n = 100: the double product is 28.999999999999996, so verl and SkyRL pick
    int(·) = 28 tokens; NumPy's float64 gives 28 (a float32 product would round to 29)."""
    assert int(0.29 * 100) == 28 and math.floor(np.float32(0.29) * np.float32(100)) == 29
    rng = np.random.default_rng(0)
    lr = rng.normal(0, 0.3, (4, 25)).astype(np.float32)
    lq = np.minimum(rng.normal(-2, 1, lr.shape), -lr).astype(np.float32)
    adv = rng.normal(0, 1, lr.shape)
    omega = numpy_weights("kl_cov", lr, np.ones_like(lr), adv, logp_inf=lq,
                          params={"cov_fraction": 0.29, "kl_coef": 0.5})  # fmt: skip
    assert int(np.sum(np.abs(omega - np.exp(lr.astype(np.float64))) > 1e-3)) == 28
