"""Our correction weights and our framework-named metrics against the frameworks' own outputs.

``tests/data/frameworks/record_outputs.py`` ran verl 1dda039b, TRL f2cd5771, NeMo-RL 7ea279ab
and SkyRL a9564572 (their own functions, with the trainer's roles for the trainer's and the
engine's log-probs, the settings ``verify export`` writes) on a seeded batch, an edge batch and
a batch of the sequence ratio's and the log clamps' edges (``seq_edge``), and stored the
inputs, each framework's weight ω per token and the metrics it logged (``recorded.npz``,
``recorded.json``; the framework README beside them). Here each of our
estimators, under the tie rule of the framework it exports to
(``correction_weights(..., ties=framework)``), must give the recorded ω on every real token to
float32 rounding, with the same zeros; and ``evidence.weight_diagnostics`` must give each
recorded metric of the framework's name. No torch here: only the recorded numbers. Every case
is compared on every batch; on ``seq_edge`` verl's and SkyRL's clamp of log w to ±20 decides
the tokens beyond it, and ours follows it under their rules (``kernels.rl.ties.CLAMPS``).

The differences are the frameworks' and are stated, each exactly where it occurs:

- Each framework ran under the torch it pins at its commit (``torch`` and ``pinned_torch`` in
  the JSON): verl, NeMo-RL and SkyRL under 2.11.0, whose ``clamp`` passes the gradient at
  both ends (``clamp_end_gradient`` 1), so their dual clip at w = 1 ± ε, GSPO at s = 1 ± ε,
  GSPO at log s = 10 and SAPO at |log r| = 20 equal ours (ω = w, s) with nothing stated. TRL
  pins no torch and ran under 2.14.1, whose ``clamp`` gives its ends the gradient 0: its GSPO
  at s = 1 ± ε exactly splits the tied PPO sides to s/2, where ours keeps s (the rule of the
  torch versions that pass the gradient, ``kernels.rl.ties``).
- NaN on padding. TRL's sequence modes and off-policy mask and SkyRL's sequence TIS and
  product mask multiply the padding's log-probs by the mask before summing a row, and
  NaN · 0 = NaN: a NaN-padded row gets NaN weights (TRL's opsm: a NaN mean, so the row is
  dropped where A < 0). Ours ignores what padding holds. The frameworks need finite padding,
  which their own trainers give (0.0 from the engines). GSPO's sequence mean is NaN too (0 in
  verl and SkyRL, whose clamp of log s passes no gradient at NaN).
- NaN padding also makes TRL's VESPO weight of the row 0 (φ of a NaN sum, ``nan_to_num``).
- TRL's CISPO caps w at ``epsilon_high`` from above only: our ``tis`` at that cap, not our
  ``cispo`` (which clamps from below too), so it has no tie rule and no export.

The rollout-anchored losses (``gspo``, ``cispo``, ``sapo``, ``clip_cov``, ``kl_cov``) were
recorded with the old log-probs set to the engine's (r = w). Every case is compared on every
batch; so is TRL's VESPO (its IS block and loss at a batch's first step, with the settings the
export writes), within the float32 rounding of log W carried through φ (``_rtol``). Clip-Cov's
tokens are drawn at random: ``clip_cov@all`` (share 1) drops every candidate, a determined
weight compared as the others; ``clip_cov@draw`` (share 0.02, torch seeded) is compared on what
the draw leaves determined (``DRAWN``). SkyRL's Clip-Cov ran on zeroed padding (its
``masked_mean`` turns NaN padding into NaN covariances, so nothing would be drawn).
"""

from __future__ import annotations

import functools
import json
import math
import pathlib
from fractions import Fraction

import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.evidence.framework_weights import FRAMEWORK_NAMES
from kernel_contracts.evidence.weights import label, weight_diagnostics
from kernel_contracts.kernels.rl import correction_weights
from kernel_contracts.kernels.rl.ties import TIE_RULES
from kernel_contracts.verify.pipeline.export import FRAMEWORKS
from kernel_contracts.verify.pipeline.export.request import NoCounterpart, Request

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "frameworks"
META = json.loads((DATA / "recorded.json").read_text())
with np.load(DATA / "recorded.npz") as _npz:
    ARRAYS = {k: _npz[k] for k in _npz.files}
CASES = META["cases"]
BATCHES = ("seeded", "edge", "seq_edge")
F32 = np.float32
EPS = META["thresholds"]["clip_epsilon"]

# the cases whose framework turns NaN padding into NaN weights (see the module docstring)
SPOILED_BY_NAN_PADDING = {
    "verl/gspo",
    "trl/gspo",
    "nemo-rl/gspo",
    "skyrl/gspo",
    "trl/seq_tis",
    "trl/seq_mask",
    "trl/opsm",
    "skyrl/seq_tis",
    "skyrl/seq_mask",
    "trl/vespo",
}
# the estimators of the rollout-anchored losses
ANCHORED = {"gspo", "cispo", "sapo", "clip_cov", "kl_cov"}
# Clip-Cov cases whose share draws fewer tokens than it has candidates: the framework's draw is
# random (seeded), so only what it determines is compared (test_clip_covs_random_draw_...)
DRAWN = {"verl/clip_cov@draw", "skyrl/clip_cov@draw"}
# cases whose framework has the loss under another definition, so no tie rule of ours:
# TRL's cispo caps w at epsilon_high from above only (min(w, 1 + ε), no lower clamp)
NO_TIE_RULE = {"trl/cispo"}
# which framework logs which of our framework-named metrics
LOGGED_BY = {
    "verl": {n for n in FRAMEWORK_NAMES if n.startswith("rollout_corr/")},
    "trl": {n for n in FRAMEWORK_NAMES if n.startswith("sampling/")},
    "nemo-rl": {"is_oob_ratio"},
    "skyrl": {
        "tis_token_clip_high_ratio",
        "tis_seq_clip_high_ratio",
        "token_mask_ratio",
        "product_sequence_mask_masked_ratio",
    },
}


def _inputs(batch):
    return tuple(ARRAYS[f"{batch}/{k}"] for k in ("logp_train", "logp_inf", "mask", "adv"))


def _params(case):
    return {k: tuple(v) if isinstance(v, list) else v for k, v in CASES[case]["params"].items()}


def _source(case):
    c = CASES[case]
    return f"{c['framework']} {c['commit']} {c['function']} ({c['estimator']})"


@functools.cache
def _ours(case, batch, ties="same"):
    lp, lq, mask, adv = _inputs(batch)
    c = CASES[case]
    ties = c["framework"] if ties == "same" else ties
    if case in NO_TIE_RULE and ties == c["framework"]:
        ties = None  # ours under our own rule: the test states the difference
    omega = correction_weights(
        c["estimator"], lp - lq, mask, adv, params=_params(case), logp_inf=lq, ties=ties
    )
    out = np.asarray(omega, np.float64)
    out.flags.writeable = False
    return out


def _w(batch):
    """w = π/π' per real token as float32 computes it (0 on padding)."""
    lp, lq, mask, _ = _inputs(batch)
    lr = np.where(mask > 0, lp - lq, F32(0.0))
    return np.asarray(jnp.exp(jnp.asarray(lr)), np.float64)


def _s(batch, log=False):
    """GSPO's s = exp(mean log w) per row as float32 computes it (``log``: mean log w), on
    every token."""
    lp, lq, mask, _ = _inputs(batch)
    real = mask > 0
    lr = np.where(real, lp - lq, F32(0.0))
    n = np.maximum(real.sum(axis=1, keepdims=True), 1).astype(F32)
    log_s = lr.sum(axis=1, keepdims=True, dtype=F32) / n
    if log:
        return np.broadcast_to(log_s, lp.shape)
    return np.broadcast_to(np.asarray(jnp.exp(jnp.asarray(log_s)), np.float64), lp.shape)


def _at_clip_end(batch):
    """The real tokens with w = 1 ± ε exactly in float32 (PPO's clamp ends)."""
    _, _, mask, _ = _inputs(batch)
    w32 = _w(batch).astype(F32)
    return (mask > 0) & ((w32 == F32(1 + EPS)) | (w32 == F32(1 - EPS)))


def _theirs(case, batch):
    return ARRAYS[f"{batch}/{case}"].astype(np.float64)


def _nan_rows(batch):
    lp, _, mask, _ = _inputs(batch)
    return np.isnan(np.where(mask > 0, 0.0, lp)).any(axis=1, keepdims=True)


def _stated_difference(case, batch):
    """Where the framework's ω differs from ours for a stated reason, and what it is there."""
    _, _, mask, adv = _inputs(batch)
    real = mask > 0
    ours = _ours(case, batch)
    estimator = CASES[case]["estimator"]
    old_clamp = META["clamp_end_gradient"][CASES[case]["framework"]] == 1.0
    if case == "trl/cispo":  # min(w, 1 + ε): below 1 − ε TRL keeps w where ours gives 1 − ε
        w = _w(batch)
        return real & (w.astype(F32) < F32(1 - EPS)), w
    if estimator in ("dual_clip", "clip_cov") and not old_clamp:
        return _at_clip_end(batch), ours / 2
    if estimator == "gspo" and not old_clamp:  # the same torch rule at s = 1 ± ε
        s32 = _s(batch).astype(F32)
        at_end = real & ((s32 == F32(1 + EPS)) | (s32 == F32(1 - EPS)))
        # verl and SkyRL clamp log s at 10: exactly there torch 2.14.1 passes no gradient
        at_clamp = real & (_s(batch, log=True) == F32(10.0))
        at_clamp &= case in ("verl/gspo", "skyrl/gspo")
        if (at_end | at_clamp).any():
            return at_end | at_clamp, np.where(at_clamp, 0.0, ours / 2)
    if case in ("verl/sapo", "skyrl/sapo") and not old_clamp:
        # exp(clamp(log r, −20, 20)): at log r = ±20 exactly torch 2.14.1's clamp passes no
        # gradient; the torch the frameworks pin passes it (ours: ω = w·sech²(τ(w − 1)/2))
        lp, lq, _, _ = _inputs(batch)
        return real & (np.abs(lp - lq) == F32(20.0)), np.zeros_like(ours)
    if case in SPOILED_BY_NAN_PADDING:
        spoiled = real & _nan_rows(batch)
        if case == "trl/opsm":
            spoiled &= adv < 0
            return spoiled, np.zeros_like(ours)
        if case in ("verl/gspo", "skyrl/gspo"):  # clamp(NaN, max=10) passes no gradient
            return spoiled, np.zeros_like(ours)
        if case == "trl/vespo":  # φ of a NaN sum is NaN, which nan_to_num makes 0
            return spoiled, np.zeros_like(ours)
        return spoiled, np.full_like(ours, np.nan)
    return np.zeros_like(real), ours


def _rtol(case, batch):
    """The relative tolerance per token: float32 rounding (2e-6), and for VESPO also the
    rounding of log W carried through φ. φ(W) = exp(λ + k·log W − λ·W) changes by the factor
    exp((k − λW)·Δ) when log W moves by Δ, and a float32 sum of T clamped logs ℓ_t (TRL sums
    log(exp(ℓ_t)), ours ℓ_t, each in its own order) is off by at most (T + 2)·eps·(Σ|ℓ_t| + 1):
    at log W = 3.26 (seq_edge, tokens at ±25 and ±20) |k − λW| is 76 and one ulp of log W
    moves φ by 1.5e-5."""
    lp, lq, mask, adv = _inputs(batch)
    rtol = np.full(lp.shape, 2e-6)
    if CASES[case]["estimator"] != "vespo":
        return rtol
    k_pos, lam_pos, k_neg, lam_neg = _params(case)["gamma"]
    real, low = mask > 0, math.log(1e-8)
    logs = np.clip(np.where(real, lp - lq, F32(0.0)).astype(np.float64), low, 20.0)
    log_w = np.clip(logs.sum(axis=1, keepdims=True), low, 20.0)
    k, lam = np.where(adv >= 0, k_pos, k_neg), np.where(adv >= 0, lam_pos, lam_neg)
    sum_error = (
        (lp.shape[1] + 2) * np.finfo(F32).eps * (np.abs(logs).sum(axis=1, keepdims=True) + 1)
    )
    # where the bound passes e^50 it says nothing (W near e^20: φ underflows to 0 in both)
    return rtol + np.expm1(np.minimum(np.abs(k - lam * np.exp(log_w)) * sum_error, 50.0))


def _assert_close(ours, theirs, rtol, where):
    """|ours − theirs| ≤ rtol·|theirs| on every token given (NaN equal to NaN)."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(ours - theirs) <= rtol * np.abs(theirs)) & ~(
            np.isnan(ours) & np.isnan(theirs)
        )
    assert not bad.any(), f"{where}: ours {ours[bad]}, theirs {theirs[bad]}, rtol {rtol[bad]}"


def _compared():
    """(case, batch): every case on every batch, but for Clip-Cov's random draws."""
    return [(case, batch) for case in sorted(CASES) for batch in BATCHES if case not in DRAWN]


@pytest.mark.parametrize(("case", "batch"), _compared())
def test_our_weights_equal_the_frameworks_recorded_weights(case, batch):
    _, _, mask, _ = _inputs(batch)
    real = mask > 0
    ours, theirs = _ours(case, batch), _theirs(case, batch)
    assert np.all(np.isfinite(ours)) and np.all(ours[~real] == 0)
    stated, there = _stated_difference(case, batch)
    same = real & ~stated
    where = f"{_source(case)} on the {batch} batch"
    rtol = _rtol(case, batch)
    np.testing.assert_array_equal(ours[same] > 0, theirs[same] > 0, err_msg=where)
    _assert_close(ours[same], theirs[same], rtol[same], where)
    # the stated difference is there, and only there
    _assert_close(theirs[stated], there[stated], rtol[stated], where)
    if batch != "seeded" and stated.any():
        differ = ~np.isclose(ours[stated], theirs[stated], rtol=2e-6, atol=0, equal_nan=True)
        assert differ.any(), where


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("case", sorted(DRAWN))
def test_clip_covs_random_draw_agrees_with_ours_on_what_it_determines(case, batch):
    """Clip-Cov draws max(⌊ρn⌋, 1) of its candidates (real tokens PPO keeps with
    lb < cov < ub) by ``torch.randperm``; ours drops those of largest w. Off the candidates the
    framework's ω is ours; on them each is 0 or the PPO weight, and both drop as many."""
    lp, lq, mask, adv = _inputs(batch)
    real = mask > 0
    p, ties = _params(case), CASES[case]["framework"]
    kw = {"logp_inf": lq, "ties": ties}
    ppo, every = (
        np.asarray(correction_weights("clip_cov", lp - lq, mask, adv, params=p | q, **kw))
        for q in ({"cov_band": (1e30, 2e30)}, {"cov_fraction": 1.0})  # none drawn, all drawn
    )
    if META["clamp_end_gradient"][ties] != 1.0:  # torch 2.14.1 at w = 1 ± ε (module docstring)
        ppo = np.where(_at_clip_end(batch), ppo / 2, ppo)
    candidate = real & (every == 0) & (ppo > 0)
    ours, theirs = _ours(case, batch), _theirs(case, batch)
    where = f"{_source(case)} on the {batch} batch"
    off = real & ~candidate
    np.testing.assert_allclose(theirs[off], ppo[off], rtol=2e-6, atol=0, err_msg=where)
    kept = np.isclose(theirs[candidate], ppo[candidate], rtol=2e-6, atol=0)
    assert np.all(kept | (theirs[candidate] == 0)), where
    k = max(math.floor(p["cov_fraction"] * real.sum()), 1)
    drawn = min(k, int(candidate.sum()))
    assert int((theirs[candidate] == 0).sum()) == drawn == int((ours[candidate] == 0).sum())
    if batch == "seeded":  # the draw chose: more candidates than it drops
        assert candidate.sum() > drawn > 0, where


# the cases where verl's and SkyRL's clamp of log w to ±20 shows on seq_edge (log w = ±25, and
# a sequence's sum of −49): their rollout correction and verl's DPPO take w = e^±20 there
# (``clamp: value``; a sequence's W = e^−20), their dual clip and SkyRL's DPPO get no gradient
# beyond the clamp, ω = 0 (``clamp: gradient``)
BEYOND_THE_LOG_CLAMP = {
    "verl/tis",
    "verl/mis",
    "verl/tis_norm",
    "verl/dppo_tv",
    "verl/dppo_kl",
    "verl/dual_clip",
    "verl/seq_tis",
    "skyrl/tis",
    "skyrl/mis",
    "skyrl/dppo_tv",
    "skyrl/dppo_kl",
    "skyrl/dual_clip",
    "skyrl/seq_tis",
}


@pytest.mark.parametrize("case", sorted(BEYOND_THE_LOG_CLAMP))
def test_the_frameworks_log_clamp_is_what_makes_the_seq_edge_rows_equal(case):
    # ours under the framework's rule equals theirs on every token of seq_edge (the test
    # above); our own rule, which clamps nothing, differs exactly beyond |log w| = 20
    lp, lq, mask, _ = _inputs("seq_edge")
    real = mask > 0
    c = CASES[case]
    assert TIE_RULES[c["framework"]][c["estimator"]].clamp in ("value", "gradient"), case
    beyond = real & (np.abs(lp - lq) > 20)
    theirs, unclamped = _theirs(case, "seq_edge"), _ours(case, "seq_edge", ties=None)
    np.testing.assert_allclose(unclamped[real & ~beyond], theirs[real & ~beyond], rtol=2e-6)
    assert np.any(~np.isclose(unclamped[beyond], theirs[beyond], rtol=2e-6, atol=0)), case


def test_the_frameworks_tie_rule_is_what_makes_the_dual_clip_equal():
    # at w = c with A < 0 verl's min(·, −A·c) splits the gradient (w/2); our own rule keeps w
    _, _, mask, adv = _inputs("edge")
    tied = (mask > 0) & (_w("edge").astype(F32) == F32(META["thresholds"]["cap"])) & (adv < 0)
    assert tied.sum() >= 2
    theirs = _theirs("verl/dual_clip", "edge")
    np.testing.assert_allclose(theirs[tied], _w("edge")[tied] / 2, rtol=2e-6)
    np.testing.assert_allclose(_ours("verl/dual_clip", "edge")[tied], theirs[tied], rtol=2e-6)
    np.testing.assert_allclose(_ours("verl/dual_clip", "edge", ties=None)[tied], _w("edge")[tied])


def test_verl_k1_drops_a_token_on_the_band_end_that_the_ratio_keeps():
    # at [0.8, 1.25] a float32 log w beyond float32(log 1.25) (or below float32(log 0.8)) still
    # has exp exactly 1.25 (0.8): the ratio test keeps it, verl's token_k1 (−log w against
    # float32(log(1/hi)), float32(log(1/lo))) drops it; ours under ties="verl" drops it too
    case = next(c for c in CASES if c.startswith("verl/tis_mask@"))
    lo, hi = _params(case)["band"]
    lp, lq, mask, _ = _inputs("edge")
    lr = np.where(mask > 0, lp - lq, F32(0.0))
    w32 = np.exp(lr.astype(np.float64)).astype(F32)  # exp correctly rounded, as torch's here
    on_end = (mask > 0) & ((w32 == F32(hi)) | (w32 == F32(lo)))
    k1_drops = (-lr < F32(math.log(1 / hi))) | (-lr > F32(math.log(1 / lo)))
    for end in (hi, lo):
        assert np.count_nonzero(on_end & k1_drops & (w32 == F32(end))) >= 2, end
        assert np.count_nonzero(on_end & ~k1_drops & (w32 == F32(end))) >= 2, end
    theirs = _theirs(case, "edge")
    assert np.all(theirs[on_end & k1_drops] == 0), _source(case)
    np.testing.assert_array_equal(theirs[on_end & ~k1_drops], w32[on_end & ~k1_drops])
    np.testing.assert_array_equal(_ours(case, "edge")[on_end], theirs[on_end])
    for ratio_rule in (None, "skyrl"):  # the ratio keeps every token on the band's end
        kept = _ours(case, "edge", ties=ratio_rule)[on_end]
        np.testing.assert_array_equal(kept, w32[on_end].astype(np.float64))


def test_the_edge_batch_holds_every_edge():
    lp, lq, mask, adv = _inputs("edge")
    real = mask > 0
    w = _w("edge").astype(F32)[real]
    t = META["thresholds"]
    for value in (t["cap"], *t["band"], 1 + EPS, 1 - EPS):  # ties in the ratio
        assert F32(value) in w, value
    ln2 = F32(math.log(2.0))
    assert {ln2, -ln2} <= set((lp - lq)[real].tolist())  # ties in the log-ratio
    lengths = real.sum(axis=1)
    assert 0 in lengths and 1 in lengths  # an empty row, one-token rows
    gaps = ~real & (np.cumsum(real[:, ::-1], axis=1)[:, ::-1] > 0)  # masked, a real one after
    assert gaps.any() and np.all(np.abs(lp[gaps]) > 50)  # holding garbage
    assert np.any(real & (lp == 0) & (lq < 0)) and np.any(real & (lq == 0) & (lp < 0))
    assert np.any(real & (lp == 0) & (lq == 0))  # π = 1, π' = 1, both
    assert _nan_rows("edge").any() and not _nan_rows("edge").all()  # NaN padding, and 0.0
    assert np.any(adv[real] > 0) and np.any(adv[real] < 0)


def test_the_seq_edge_batch_holds_every_edge_of_the_sequence_ratio_and_the_log_clamps():
    lp, lq, mask, adv = _inputs("seq_edge")
    real = mask > 0
    s32, log_s = _s("seq_edge").astype(F32), _s("seq_edge", log=True)
    lengths = np.broadcast_to(real.sum(axis=1, keepdims=True), real.shape)
    for tie in (F32(1 + EPS), F32(1 - EPS)):
        for a in (1.0, -1.0):
            at = real & (s32 == tie) & (adv == a)
            assert {1, 2} <= set(lengths[at].tolist()), (tie, a)  # one token and two
            rows = np.nonzero(at.any(axis=1))[0]  # and a row whose tokens differ
            assert any(len(set((lp - lq)[r][real[r]].tolist())) == 2 for r in rows), (tie, a)
    lr = (lp - lq)[real]
    for a in (1.0, -1.0):
        assert np.any(real & (log_s > 10) & (adv == a)) and np.any(real & (log_s == 10))
    assert {25.0, -25.0, 20.0, -20.0} <= set(lr.tolist())  # beyond the ±20 clamp and on it
    log_w = np.where(real, lp - lq, F32(0.0)).sum(axis=1)
    assert np.any(log_w < -40)  # a sequence's sum beyond the clamp of the sum


def test_trls_cispo_is_the_cap_at_epsilon_high_not_our_two_sided_clamp():
    # TRL f2cd5771 loss_type "cispo": clamp(w, max=epsilon_high).detach(), the cap at
    # epsilon_high itself and no lower clamp: it equals our tis at c = 1 + ε on every token,
    # and differs from our cispo (clamp to [1 − ε, 1 + ε]) exactly where w < 1 − ε
    case = "trl/cispo"
    assert CASES[case]["options"]["epsilon_high"] == pytest.approx(1 + EPS)
    differs = 0
    for batch in BATCHES:
        lp, lq, mask, adv = _inputs(batch)
        real = mask > 0
        tis = correction_weights("tis", lp - lq, mask, adv, params={"cap": 1 + EPS}, ties="trl")
        theirs = _theirs(case, batch)
        where = f"{_source(case)} on the {batch} batch"
        np.testing.assert_allclose(np.asarray(tis)[real], theirs[real], rtol=2e-6, err_msg=where)
        below = real & (_w(batch).astype(F32) < F32(1 - EPS))
        np.testing.assert_allclose(_ours(case, batch)[below], 1 - EPS, rtol=2e-6)
        differs += np.count_nonzero(below & (theirs < F32(1 - EPS)))
    assert differs > 10


def test_each_rollout_anchored_case_says_what_played_the_old_policy():
    anchored = {case: c for case, c in CASES.items() if c["estimator"] in ANCHORED}
    assert {c["framework"] for c in anchored.values()} == set(TIE_RULES)
    for case, c in anchored.items():
        assert "the engine's" in c["anchor"] and "r = w" in c["anchor"], case
    for case in ("skyrl/cispo", "skyrl/cispo@0_1.2"):  # SkyRL's own rollout anchor
        assert CASES[case]["options"]["cispo"]["cispo_anchor"] == "rollout", case
    assert {c["estimator"] for c in anchored.values() if c["framework"] == "nemo-rl"} == {
        "gspo",
        "cispo",
    }  # NeMo-RL has no SAPO


def test_every_case_names_the_framework_commit_ties_py_read():
    for case, c in CASES.items():
        if case in NO_TIE_RULE:
            assert c["estimator"] not in TIE_RULES[c["framework"]], case
            continue
        source = TIE_RULES[c["framework"]][c["estimator"]].source
        assert c["commit"] in source, (case, source)
    assert {c["framework"] for c in CASES.values()} == set(TIE_RULES)


def _estimator(case):
    return CASES[case]["estimator"], tuple(_params(case).items())


@pytest.mark.parametrize("batch", BATCHES)
def test_our_framework_metrics_equal_the_frameworks_logged_metrics(batch):
    lp, lq, mask, _ = _inputs(batch)
    rows, cols = np.nonzero(mask > 0)
    logging = [case for case, c in CASES.items() if set(c["metrics"][batch]) & set(FRAMEWORK_NAMES)]
    estimators = tuple(dict.fromkeys(_estimator(case) for case in logging))
    numbers, skipped = weight_diagnostics(
        estimators,
        (lp - lq)[rows, cols].astype(np.float64),
        lq[rows, cols].astype(np.float64),
        rows,
        sequences=mask.shape[0],
    )
    compared = 0
    for case in logging:
        c = CASES[case]
        logged = {k: v for k, v in c["metrics"][batch].items() if k in FRAMEWORK_NAMES}
        ours = numbers.get(label(_estimator(case)), {})
        ours = {k: v for k, v in ours.items() if k in LOGGED_BY[c["framework"]]}
        where = f"{_source(case)} on the {batch} batch"
        if case == "trl/opsm":  # ours read the advantage; TRL's ratio numbers do not
            assert label(_estimator(case)) in skipped, where
            assert set(numbers[label(_estimator(case))]) <= set(LOGGED_BY["trl"]), where
        assert set(ours) == set(logged), where
        for key, value in logged.items():
            if value == "nan":  # TRL's sequence modes on NaN padding: no number to compare
                assert case in SPOILED_BY_NAN_PADDING and batch == "edge", (where, key)
                continue
            assert ours[key] == pytest.approx(value, rel=2e-6, abs=1e-9), (where, key)
            compared += 1
    assert compared >= 40
    # the losses (dual clip, DPPO) log none of these names
    assert {CASES[case]["estimator"] for case in set(CASES) - set(logging)} == {
        "dual_clip",
        "dppo_tv",
        "dppo_kl",
        "vespo",
        *ANCHORED,
    }


# the AlgorithmConfig keys each SkyRL loss reads (skyrl a9564572, ppo_utils.py); the dual
# clip also reads clip_ratio_c
SKYRL_READS = {
    "ppo_utils.ppo_policy_loss": {
        "policy_loss_type",
        "eps_clip_low",
        "eps_clip_high",
        "off_policy_correction",
    },
    "ppo_utils.dppo_policy_loss": {"policy_loss_type", "dppo", "off_policy_correction"},
    "ppo_utils.gspo_policy_loss": {
        "policy_loss_type",
        "loss_reduction",
        "eps_clip_low",
        "eps_clip_high",
        "off_policy_correction",
    },
    "ppo_utils.compute_policy_loss_cispo": {"policy_loss_type", "cispo", "off_policy_correction"},
    "ppo_utils.sapo_policy_loss": {
        "policy_loss_type",
        "loss_reduction",
        "sapo",
        "off_policy_correction",
    },
    "ppo_utils.compute_policy_loss_clip_cov": {
        "policy_loss_type",
        "eps_clip_low",
        "eps_clip_high",
        "clip_cov",
    },
    "ppo_utils.compute_policy_loss_kl_cov": {"policy_loss_type", "kl_cov"},
}


def test_each_skyrl_case_records_only_the_options_its_loss_reads():
    skyrl = {case: c for case, c in CASES.items() if c["framework"] == "skyrl"}
    assert {c["function"] for c in skyrl.values()} == set(SKYRL_READS)
    for case, c in skyrl.items():
        dual = c["options"]["policy_loss_type"] == "dual_clip"
        want = SKYRL_READS[c["function"]] | ({"clip_ratio_c"} if dual else set())
        assert set(c["options"]) == want, case


# export keys with no option in the recorded call: the call itself is what they select
SELECTED_BY_THE_CALL = {
    "algorithm.rollout_correction.loss_type",  # ppo_clip: compute_policy_loss_vanilla
    "vllm_importance_sampling_correction",  # True: the IS block runs
    "generator.sampling_params.logprobs",  # the engine's log-probs are given
}


def _request(case):
    p = {k: v for k, v in _params(case).items()}
    f = lambda v: None if v is None else Fraction(v)  # noqa: E731
    band = p.get("band")
    return Request(
        guarantee="pg_bias",
        what=CASES[case]["estimator"],
        cap=f(p.get("cap")),
        band=None if band is None else (f(band[0]), f(band[1])),
        threshold=f(p.get("threshold")),
        clip_epsilon=f(p.get("clip_epsilon")),
        reject=p.get("reject"),
        reject_threshold=p.get("reject_threshold"),
        gamma=None if "gamma" not in p else tuple(Fraction(x) for x in p["gamma"]),
    )


def _option(options, key):
    """The recorded option a dotted export key names: its longest tail found in ``options``
    (nested for SkyRL's ``off_policy_correction.*`` and ``dppo.*``)."""
    parts = key.split(".")
    for start in range(len(parts)):
        node = options
        for part in parts[start:]:
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            return node
    raise KeyError(key)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_case_ran_with_the_settings_verify_export_writes(case):
    c = CASES[case]
    rule = TIE_RULES[c["framework"]].get(c["estimator"])
    exported = rule is not None and rule.exported
    try:
        pairs = FRAMEWORKS[c["framework"]].settings(_request(case))
    except NoCounterpart:
        assert not exported, case  # recorded as the framework's loss computes it, not exported
        return
    assert exported, case
    for key, value in pairs:
        if key in SELECTED_BY_THE_CALL:
            continue
        got = _option(c["options"], key)
        if isinstance(value, Fraction):
            assert got == pytest.approx(float(value), rel=1e-12), (case, key)
        else:
            assert got == value, (case, key)


def test_each_framework_ran_under_the_torch_it_pins():
    # verl 1dda039b (pyproject.toml's extras, uv.lock), NeMo-RL 7ea279ab and SkyRL a9564572
    # (pyproject.toml, uv.lock) pin torch 2.11.0 for Linux; TRL f2cd5771 pins none
    pins = {"verl": "2.11.0", "nemo-rl": "2.11.0", "skyrl": "2.11.0", "trl": None}
    assert META["pinned_torch"] == pins
    assert set(META["torch"]) == set(META["clamp_end_gradient"]) == set(TIE_RULES)
    for framework, pinned in pins.items():
        if pinned is not None:
            assert META["torch"][framework].split("+")[0] == pinned, framework
            # the torch the ties follow: clamp passes the gradient at its ends
            assert META["clamp_end_gradient"][framework] == 1.0, framework
