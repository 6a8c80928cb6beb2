"""Tokens on a threshold: ``correction_weights(..., ties=framework)`` against each framework's
own test, written here from its code (the statistic it compares, ≤ or <, and PyTorch's
autograd at a min/max tie: half the gradient to each of two equal sides, the whole gradient
through ``clamp`` at either end), on log-ratios packed around every threshold; the tie-rule
table covers exactly the estimators each framework's export writes settings for; the RL page
shows the table the code generates."""

from __future__ import annotations

import math
import pathlib
from fractions import Fraction

import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.kernels.rl import ESTIMATOR_NAMES, TIE_RULES, correction_weights, tie_table
from kernel_contracts.kernels.rl.ties import FRAMEWORKS, OURS, tie_rule

F32 = np.float32


def _around(*ends: float, ulps: int = 40) -> np.ndarray:
    """float32 log-ratios: the ``ulps`` neighbours on each side of log(end) for every end."""
    out = []
    for end in ends:
        x = F32(math.log(end))
        for _ in range(ulps):
            x = np.nextafter(x, F32(-np.inf))
        for _ in range(2 * ulps + 1):
            out.append(x)
            x = np.nextafter(x, F32(np.inf))
    return np.array(out, F32)


def _exp(lr) -> np.ndarray:
    """The float32 ratio as the weights round it (XLA's exp; float32 exp differs in the last
    bit between libraries, so a framework's rounded ratio is matched up to that rounding)."""
    return np.asarray(jnp.exp(jnp.asarray(lr, jnp.float32)))


def _weights(name, lr, adv=None, ties=None, **params) -> np.ndarray:
    lr = np.asarray(lr, F32).reshape(1, -1) if np.ndim(lr) < 2 else np.asarray(lr, F32)
    adv = np.ones_like(lr) if adv is None else np.asarray(adv, F32).reshape(lr.shape)
    return np.asarray(correction_weights(name, lr, np.ones_like(lr), adv, params=params, ties=ties))


# ---- tis_mask: verl's log-space rejection against the ratio band ----------------------------
def _verl_tis_mask(lr: np.ndarray, cap: float, lo: float, hi: float) -> np.ndarray:
    """verl: the token weight clamp(exp(log w), max=c) times the token_k1 rejection keeping
    log(lower) ≤ −log w ≤ log(upper) at the thresholds the export writes, lower = 1/hi and
    upper = 1/lo (each Python float rounded to float32 against a float32 tensor)."""
    k1 = -lr
    keep = (k1 >= F32(math.log(1 / hi))) & (k1 <= F32(math.log(1 / lo)))
    return np.where(keep, np.minimum(_exp(lr), F32(cap)), F32(0))


@pytest.mark.parametrize(("cap", "lo", "hi"), [(1.2, 0.5, 2.0), (2.0, 0.5, 1.5), (5.0, 0.3, 3.0)])
def test_tis_mask_follows_verls_log_space_test(cap, lo, hi):
    lr = _around(lo, hi)
    got = _weights("tis_mask", lr, ties="verl", cap=cap, band=(lo, hi))[0]
    want = _verl_tis_mask(lr, cap, lo, hi)
    np.testing.assert_array_equal(got > 0, want > 0)
    np.testing.assert_allclose(got, want, rtol=2e-7)
    assert 0 < int(np.sum(got > 0)) < lr.size


def test_tis_mask_differs_from_verls_only_on_weights_rounding_to_a_band_end():
    lo, hi = 0.8, 1.25  # near 1 many log-ratios round to the same float32 ratio
    lr = _around(lo, hi)
    ours = _weights("tis_mask", lr, cap=1.1, band=(lo, hi))[0]
    verl = _weights("tis_mask", lr, ties="verl", cap=1.1, band=(lo, hi))[0]
    differ = (ours > 0) != (verl > 0)
    assert differ.any()
    w = _exp(lr)
    assert np.all((w[differ] == F32(lo)) | (w[differ] == F32(hi))), w[differ]
    # SkyRL keeps the closed band on the rounded ratio, as ours does
    np.testing.assert_array_equal(
        _weights("tis_mask", lr, ties="skyrl", cap=1.1, band=(lo, hi))[0], ours
    )


def test_verl_has_no_tis_mask_with_a_band_from_zero():
    with pytest.raises(ValueError, match="a band from 0 has no token_k1 form"):
        _weights("tis_mask", [0.0], ties="verl", cap=1.5, band=(0.0, 2.0))


# ---- ratio-space masks: mis, seq_mask, geo_mask ---------------------------------------------
@pytest.mark.parametrize("framework", ["verl", "trl", "nemo-rl", "skyrl"])
def test_mis_compares_the_rounded_ratio_in_every_framework(framework):
    lr = _around(1.25, 1.5, 2.0, 3.0)
    for cap in (1.25, 1.5, 2.0, 3.0):
        got = _weights("mis", lr, ties=framework, cap=cap)[0]
        np.testing.assert_array_equal(got > 0, _exp(lr) <= F32(cap))
    # ours compares log w with log c: on these ties the two differ
    ours = _weights("mis", lr, cap=1.25)[0]
    assert np.any((ours > 0) != (_exp(lr) <= F32(1.25)))


@pytest.mark.parametrize("framework", ["verl", "trl", "skyrl"])
def test_seq_mask_compares_the_rounded_sequence_weight(framework):
    lo, hi = 0.8, 1.25
    lr = _around(lo, hi).reshape(-1, 1)  # one token a sequence: W = w
    got = _weights("seq_mask", lr, ties=framework, band=(lo, hi))[:, 0]
    w = _exp(lr[:, 0])
    keep = (w >= F32(lo)) & (w <= F32(hi))
    np.testing.assert_array_equal(got > 0, keep)
    np.testing.assert_allclose(got[keep], w[keep], rtol=2e-7)
    ours = _weights("seq_mask", lr, band=(lo, hi))[:, 0]
    assert np.any((ours > 0) != keep)


def test_geo_mask_compares_nemo_rls_rounded_geometric_mean():
    lo, hi = 0.8, 1.25
    lr = _around(lo, hi).reshape(-1, 1)
    got = _weights("geo_mask", lr, ties="nemo-rl", band=(lo, hi))[:, 0]
    g = _exp(lr[:, 0])
    keep = (g >= F32(lo)) & (g <= F32(hi))
    np.testing.assert_array_equal(got > 0, keep)
    assert np.any((_weights("geo_mask", lr, band=(lo, hi))[:, 0] > 0) != keep)


# ---- dual clip: PyTorch's autograd at min/max ties -------------------------------------------
def _torch_dual_clip(w: np.ndarray, adv: np.ndarray, eps: float, c: float) -> np.ndarray:
    """ω = ∂loss/∂log π ÷ (−A) of verl's (and NeMo-RL's, SkyRL's) dual-clip loss, with the
    backward rules of torch.clamp (gradient 1 on [min, max], ends included) and of
    torch.maximum / torch.minimum (each side's own gradient, halved where the two are equal)."""
    lo, hi = F32(1 - eps), F32(1 + eps)
    l1, l2 = -adv * w, -adv * np.clip(w, lo, hi)
    g1, g2 = w, w * ((w >= lo) & (w <= hi))  # each loss's gradient over −A
    g_max = np.where(l1 > l2, g1, np.where(l1 < l2, g2, (g1 + g2) / 2))
    top, l3 = np.maximum(l1, l2), -adv * F32(c)  # l3 is a constant: gradient 0
    g_min = np.where(top < l3, g_max, np.where(top > l3, 0, g_max / 2))
    return np.where(adv == 0, w, np.where(adv < 0, g_min, g_max)).astype(F32)


@pytest.mark.parametrize("framework", ["verl", "nemo-rl", "skyrl"])
@pytest.mark.parametrize(("eps", "c"), [(0.2, 3.0), (0.2, 1.1), (0.25, 1.5)])
def test_dual_clip_follows_torch_autograd_at_every_end(framework, eps, c):
    lr = _around(1 - eps, 1 + eps, c)
    w = _exp(lr)
    for a in (1.0, -1.0, -0.7, 0.3, -3.0):
        adv = np.full_like(lr, a)
        got = _weights("dual_clip", lr, adv, ties=framework, clip_epsilon=eps, cap=c)[0]
        np.testing.assert_allclose(got, _torch_dual_clip(w, adv, eps, c), rtol=2e-7, atol=0)


def test_dual_clip_at_the_cap_gives_half_the_weight():
    c = 1.5
    lr = np.array([math.log(c)], F32)
    assert _exp(lr)[0] == F32(c)
    ours = _weights("dual_clip", lr, [-1.0], clip_epsilon=0.2, cap=c)[0, 0]
    assert ours == pytest.approx(c)
    for framework in ("verl", "nemo-rl", "skyrl"):
        half = _weights("dual_clip", lr, [-1.0], ties=framework, clip_epsilon=0.2, cap=c)[0, 0]
        assert half == pytest.approx(c / 2), framework
    # at the clip range's ends both sides carry the gradient: the whole weight
    for a, end in ((1.0, 1.25), (-1.0, 0.75)):
        lr = np.array([math.log(end)], F32)
        assert _exp(lr)[0] == F32(end)
        got = _weights("dual_clip", lr, [a], ties="verl", clip_epsilon=0.25, cap=3.0)[0, 0]
        assert got == pytest.approx(end), (a, end)


# ---- the rules as data -----------------------------------------------------------------------
def test_estimators_a_framework_does_not_have_are_refused():
    with pytest.raises(ValueError, match="ties: trl has no estimator 'dual_clip'"):
        _weights("dual_clip", [0.0], ties="trl", clip_epsilon=0.2, cap=2.0)
    with pytest.raises(ValueError, match="ties: unknown framework 'rllib'"):
        _weights("tis", [0.0], ties="rllib", cap=2.0)


def test_rules_name_known_spaces_and_every_estimator_has_ours():
    from kernel_contracts.kernels.rl.ties import AT_TIE, SPACES

    assert tuple(OURS) == ESTIMATOR_NAMES
    for rules in (OURS, *TIE_RULES.values()):
        for rule in rules.values():
            assert rule.space in SPACES and rule.at_tie in AT_TIE and rule.source
    assert tie_rule(None, "tis_mask").space == "ratio"
    assert tie_rule("verl", "tis_mask").space == "k1"


def _request(name: str):
    from kernel_contracts.verify.pipeline.export import Request

    half, two, tenth = Fraction(1, 2), Fraction(2), Fraction(1, 10)
    return Request("G", name, cap=two, band=(half, two), threshold=tenth, clip_epsilon=tenth * 2,
                   reject="token_k1", reject_threshold="0.5_2.0",
                   gamma=(two, two + 1, two + 1, two))  # fmt: skip


def test_the_rules_cover_exactly_what_each_framework_exports():
    from kernel_contracts.verify.pipeline.export import FRAMEWORKS as EXPORTS
    from kernel_contracts.verify.pipeline.export import NoCounterpart

    assert tuple(EXPORTS) == FRAMEWORKS
    for framework, spec in EXPORTS.items():
        exported = set()
        for name in ESTIMATOR_NAMES:
            try:
                spec.settings(_request(name))
            except NoCounterpart:
                continue
            exported.add(name)
        marked = {n for n, r in TIE_RULES[framework].items() if r.exported}
        assert marked == exported, framework


def test_the_rl_page_shows_the_generated_table():
    page = pathlib.Path(__file__).resolve().parents[2] / "docs" / "rl.md"
    assert tie_table() in page.read_text("utf-8")


PARAMS = {
    "tis": {"cap": 2.0},
    "mis": {"cap": 2.0},
    "icepop": {"band": (0.5, 2.0)},
    "seq_is": {},
    "seq_tis": {"cap": 2.0},
    "geo_mask": {"band": (0.8, 1.25)},
    "dppo_tv": {"threshold": 0.05},
    "dppo_kl": {"threshold": 0.01},
    "dual_clip": {"clip_epsilon": 0.2, "cap": 1.5},
    "seq_mask": {"band": (0.5, 2.0)},
    "seq_outlier": {"band": (0.5, 2.0)},
    "tis_mask": {"cap": 1.5, "band": (0.5, 2.0)},
    "opsm": {"threshold": 0.05},
    "tis_clip": {"band": (0.5, 2.0)},
    "tis_norm": {"cap": 2.0},
    "gspo": {"clip_epsilon": 0.2},
    "cispo": {"band": (0.5, 2.0)},
    "kl_reject": {"reject": "token_k1,seq_max_k2", "reject_threshold": "0.5_2.0,0.3"},
    "sapo": {"temperatures": (1.0, 1.05)},
    "vespo": {"gamma": (2.0, 3.0, 3.0, 2.0)},
    "clip_cov": {"clip_epsilon": 0.2, "cov_fraction": 0.1, "cov_band": (-0.5, 5.0)},
    "kl_cov": {"cov_fraction": 0.1, "kl_coef": 0.5},
}


@pytest.mark.parametrize(("framework", "name"), [(f, n) for f in FRAMEWORKS for n in TIE_RULES[f]])
def test_framework_rules_differ_from_ours_only_on_ties(framework, name):
    """On log-ratios drawn at random (no float32 ratio on a threshold), every framework's rule
    gives our weights, so the rules differ only where a tie decides."""
    rng = np.random.default_rng(5)
    lr = rng.normal(0.0, 0.5, (16, 24)).astype(F32)
    adv = np.repeat(rng.choice([-1.0, 1.0], (16, 1)), 24, axis=1).astype(F32)
    lq = np.minimum(rng.normal(-1.0, 1.0, lr.shape), -lr).astype(F32)  # π(y) = π'(y)·w ≤ 1
    mask = np.ones_like(lr)
    kw = {"params": PARAMS[name], "logp_inf": lq}
    ours = np.asarray(correction_weights(name, lr, mask, adv, **kw))
    theirs = np.asarray(correction_weights(name, lr, mask, adv, ties=framework, **kw))
    np.testing.assert_allclose(theirs, ours, rtol=2e-6, atol=0)
    assert np.all((theirs > 0) == (ours > 0))
