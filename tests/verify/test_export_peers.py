"""Exports of the frameworks' own corrections: verl's rollout rejection (``kl_reject``), SkyRL's
DPPO loss from 0.3 on, the DPPO refusal of verl, and the docs table generated from the export
code.

Each framework's weighting is simulated here from its code as the framework modules' docstrings
cite it (verl ``rollout_corr_helper.py`` @ 1dda039b: the rejection options judged on the
log-ratio clamped to ±20, the IS weight multiplied by the rejection mask; SkyRL
``ppo_utils.py`` ``dppo_policy_loss`` @ skyrl-v0.3.0: the ratio against the rollout log-probs,
clamped to ±20 with no gradient beyond, times the DPPO mask) and compared with the estimator's
definition (``kernels.rl.correction_weights``).
"""

from __future__ import annotations

import math
import pathlib
from fractions import Fraction as F

import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from kernel_contracts.kernels.rl import correction_weights
from kernel_contracts.verify.pipeline.export import (
    FRAMEWORKS,
    NoCounterpart,
    Request,
    export_table,
)
from kernel_contracts.verify.pipeline.export.table import sample_request
from kernel_contracts.verify.pipeline.export.verl import REJECT_CLAMPED
from tests.support.cli_runner import run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
RL = ROOT / "contracts" / "examples" / "rl-corrections.yaml"
HEAD = RL.read_text(encoding="utf-8").split("\nguarantees:\n")[0]
SLOW_OK = ("--timeout-ms", "120000")  # the wall-clock guard only: a loaded machine is slow


def _contract(tmp_path, guarantee: str, drift: str = "0.05") -> pathlib.Path:
    """The RL example's policy and clauses (N1: logit drift ≤ ``drift`` at T = 1) with one
    guarantee ``G``."""
    head = HEAD.replace("    max: 0.05\n", f"    max: {drift}\n", 1)
    path = tmp_path / "c.yaml"
    path.write_text(
        f"{head}\nguarantees:\n  - {{id: G, quantity: pg_bias, score_norm: 5.0, "
        f"advantage: 1.0, {guarantee}, from: [N1]}}\n",
        encoding="utf-8",
    )
    return path


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out


def _batch(seed: int, far: bool):
    """Log-ratios of 48 sequences × 12 tokens; with ``far``, some beyond ±20."""
    rng = np.random.default_rng(seed)
    lr = rng.normal(0.0, 0.4, (48, 12)) + rng.normal(0.0, 0.3, (48, 1))
    if far:
        lr[rng.random(lr.shape) < 0.03] = rng.choice([-35.0, -22.0, 21.0, 30.0])
    return lr


def _ours(name: str, lr: np.ndarray, adv=None, logp_inf=None, **params) -> np.ndarray:
    adv = np.ones_like(lr) if adv is None else adv
    kw = {} if logp_inf is None else {"logp_inf": jnp.asarray(logp_inf)}
    got = correction_weights(name, jnp.asarray(lr), jnp.ones(lr.shape), jnp.asarray(adv),
                             params=params, **kw)  # fmt: skip
    return np.asarray(got, np.float64)


# --- kl_reject: verl's rollout_rs / rollout_rs_threshold ------------------------------------


def _verl_rejection(settings: dict, lr: np.ndarray) -> np.ndarray:
    """verl's token weight: the token IS weight exp(clamp(u, ±20)), clamped at
    rollout_is_threshold, times the rejection mask of every rollout_rs option, each judged on
    the clamped u (k1 = −u in [log lower, log upper]; k2 = u²/2, k3 = e^u − 1 − u at most the
    threshold; token, or the sequence's sum, mean or max)."""
    rc = {k.rsplit(".", 1)[1]: v for k, v in settings.items() if k.startswith("algorithm.")}
    assert (rc["rollout_is"], rc["bypass_mode"], rc["rollout_is_batch_normalize"]) == (
        "token", False, False,
    )  # fmt: skip
    u = np.clip(lr, -20.0, 20.0)
    weight = np.minimum(np.exp(u), float(rc["rollout_is_threshold"]))
    ks = {"k1": -u, "k2": 0.5 * u * u, "k3": np.expm1(u) - u}
    options = rc["rollout_rs"].split(",")
    specs = str(rc["rollout_rs_threshold"]).split(",")
    keep = np.ones(lr.shape, bool)
    for option, spec in zip(options, specs * len(options) if len(specs) == 1 else specs,
                            strict=True):  # fmt: skip
        level, k = option.rsplit("_", 1)
        v = ks[k]
        stat = {"token": v, "seq_sum": v.sum(-1, keepdims=True),
                "seq_mean": v.mean(-1, keepdims=True),
                "seq_max": v.max(-1, keepdims=True)}[level]  # fmt: skip
        if k == "k1":
            lower, upper = (map(float, spec.split("_")) if "_" in spec
                            else (1.0 / float(spec), float(spec)))  # fmt: skip
            keep &= (stat >= math.log(lower)) & (stat <= math.log(upper))
        else:
            keep &= stat <= float(spec)
    return weight * keep


EXPORTED_REJECTIONS = [
    ("token_k1", "0.5_2.0"),
    ("token_k1", "3.0"),
    ("token_k2,token_k3", "0.08,0.05"),
    ("token_k1,seq_mean_k3,seq_max_k2", "0.5_2.0,0.05,0.3"),  # seq_max_k2 guards the mean
    ("seq_mean_k1,seq_sum_k2", "0.8_1.25,2.0"),  # seq_sum_k2 guards the mean
    ("seq_max_k3", "0.2"),
    ("seq_sum_k1,seq_sum_k3", "0.3_3.0,18.5"),  # k3 sum < 19 guards the k1 sum
]
REFUSED_REJECTIONS = [
    ("seq_mean_k1", "0.8_1.25"),  # a clamped token moves the mean
    ("seq_sum_k1", "0.3_3.0"),
    ("seq_mean_k2", "0.05"),
    ("token_k2", "250"),  # beyond the clamp: k2(±20) = 200 keeps what the exact value drops
    ("token_k1", "1e-10_2.0"),  # log a < -20
    ("token_k3,seq_max_k3", "0.1,19.5"),  # k3(-20) < 19.5: the guard is beyond the clamp too
]


def _reject(options: str, thresholds: str) -> Request:
    return Request("G", "kl_reject", reject=options, reject_threshold=thresholds)


@pytest.mark.parametrize(("options", "thresholds"), EXPORTED_REJECTIONS)
def test_kl_reject_exports_verls_rejection_with_the_weights_of_the_estimator(options, thresholds):
    settings = dict(FRAMEWORKS["verl"].settings(_reject(options, thresholds)))
    assert settings["algorithm.rollout_correction.rollout_rs"] == options
    assert settings["algorithm.rollout_correction.rollout_rs_threshold"] == thresholds
    for seed in range(3):
        lr = _batch(seed, far=True)
        want = _ours("kl_reject", lr, reject=options, reject_threshold=thresholds)
        got = _verl_rejection({k: v for k, v in settings.items()}, lr)
        assert np.array_equal(got == 0, want == 0)
        assert np.allclose(got, want, rtol=1e-6, atol=0)
        assert 0 < np.count_nonzero(want) < want.size


@pytest.mark.parametrize(("options", "thresholds"), REFUSED_REJECTIONS)
def test_kl_reject_beyond_the_clamp_is_refused(options, thresholds):
    with pytest.raises(NoCounterpart) as why:
        FRAMEWORKS["verl"].settings(_reject(options, thresholds))
    assert str(why.value) == REJECT_CLAMPED


def test_the_refusal_is_needed_the_clamp_changes_a_sequence_mean():
    # one token at log w = −60 among 39 at 0: the mean of k1 = −log w is 60/40 = 1.5 > log 2,
    # so the estimator drops the sequence; verl's clamped mean is 20/40 = 0.5, inside
    # [log 0.5, log 2], and keeps it
    lr = np.zeros((1, 40))
    lr[0, 0] = -60.0
    settings = {
        "algorithm.rollout_correction.rollout_is": "token",
        "algorithm.rollout_correction.rollout_is_threshold": 5e8,
        "algorithm.rollout_correction.rollout_is_batch_normalize": False,
        "algorithm.rollout_correction.bypass_mode": False,
        "algorithm.rollout_correction.rollout_rs": "seq_mean_k1",
        "algorithm.rollout_correction.rollout_rs_threshold": "0.5_2.0",
    }
    verl = _verl_rejection(settings, lr)
    ours = _ours("kl_reject", lr, reject="seq_mean_k1", reject_threshold="0.5_2.0")
    assert np.all(verl[0, 1:] == 1.0) and np.all(ours == 0)
    with pytest.raises(NoCounterpart):
        FRAMEWORKS["verl"].settings(_reject("seq_mean_k1", "0.5_2.0"))


def test_kl_reject_exports_end_to_end_with_its_criteria(tmp_path):
    path = _contract(
        tmp_path,
        'estimator: kl_reject, reject: "token_k1,seq_max_k2", reject_threshold: "0.5_2.0,0.02", '
        "max: 0.001",
    )
    code, out, err = run_cli("export", path, *SLOW_OK, "--to", "verl", "--format", "overrides")
    assert (code, err) == (0, "")
    assert (
        "# guarantee G (pg_bias, estimator kl_reject, reject token_k1,seq_max_k2, "
        "reject_threshold 0.5_2.0,0.02): proved\n" in out
    )
    assert "algorithm.rollout_correction.rollout_rs='token_k1,seq_max_k2'\n" in out
    assert "algorithm.rollout_correction.rollout_rs_threshold='0.5_2.0,0.02'\n" in out
    assert "algorithm.rollout_correction.rollout_is='token'\n" in out
    code, out, err = run_cli("export", path, *SLOW_OK, "--to", "trl")
    assert (code, out) == (2, "")
    assert "trl has no counterpart for pg_bias, estimator kl_reject" in err


# --- DPPO: SkyRL's policy_loss_type dppo from 0.3, verl's refused ---------------------------


def _skyrl_dppo(settings: dict, lr: np.ndarray, logp_inf: np.ndarray, adv: np.ndarray):
    """SkyRL's gradient weight of −ratio·A·mask: ratio = exp(clamp(log π − log μ, ±20)), μ the
    rollout log-probs, no gradient beyond the clamp; binary TV or KL (1e−8 in the log) mask."""
    a = "trainer.algorithm."
    assert settings[a + "policy_loss_type"] == "dppo"
    assert settings["generator.sampling_params.logprobs"] == 1
    off = [v for k, v in settings.items() if ".off_policy_correction." in k]
    assert off and all(v is None for v in off)
    low, high = settings[a + "dppo.delta_low"], settings[a + "dppo.delta_high"]
    logp = logp_inf + lr
    p, mu = np.exp(logp), np.exp(logp_inf)
    diff = p - mu
    mask = np.ones_like(lr)
    if settings[a + "dppo.dppo_type"] == "binary_tv":
        mask[(adv > 0) & (diff > high)] = 0.0
        mask[(adv < 0) & (-diff > low)] = 0.0
    else:
        kl = mu * (logp_inf - logp) + (1 - mu) * np.log((1 - mu + 1e-8) / (1 - p + 1e-8))
        mask[(adv > 0) & (diff > 0) & (kl > high)] = 0.0
        mask[(adv < 0) & (diff < 0) & (kl > low)] = 0.0
    return np.exp(np.clip(lr, -20, 20)) * (np.abs(lr) <= 20) * mask


@pytest.mark.parametrize(("what", "tau"), [("dppo_tv", F(1, 20)), ("dppo_tv", F(3, 20)),
                                           ("dppo_kl", F(1, 200))])  # fmt: skip
def test_skyrl_dppo_weights_tokens_as_the_estimator(what, tau):
    settings = dict(FRAMEWORKS["skyrl"].settings(Request("G", what, threshold=tau)))
    rng = np.random.default_rng(11)
    x = rng.normal(-1.0, 2.0, (64, 32))
    logp_inf = -np.logaddexp(0.0, -x)
    lr = np.minimum(rng.normal(0.0, 0.3, x.shape), -logp_inf)  # π = π'·w ≤ 1
    adv = np.repeat(rng.choice([-1.0, 1.0], (64, 1)), 32, axis=1)
    want = _ours(what, lr, adv, logp_inf, threshold=float(tau))
    got = _skyrl_dppo(settings, lr, logp_inf, adv)
    assert np.array_equal(got == 0, want == 0)
    assert np.allclose(got, want, rtol=1e-5, atol=0)
    assert 0 < np.count_nonzero(want) < want.size


def test_skyrl_dppo_is_exported_from_0_3_and_refused_before(tmp_path):
    path = _contract(tmp_path, "estimator: dppo_tv, threshold: 0.05, max: 0.001")
    code, out, err = run_cli("export", path, *SLOW_OK, "--to", "skyrl")
    assert (code, err) == (0, "")
    flat = _flat(yaml.safe_load(out))
    assert {
        k: v for k, v in flat.items() if "dppo" in k or k.endswith(("logprobs", "loss_type"))
    } == {
        "trainer.algorithm.policy_loss_type": "dppo",
        "trainer.algorithm.dppo.dppo_type": "binary_tv",
        "trainer.algorithm.dppo.delta_low": 0.05,
        "trainer.algorithm.dppo.delta_high": 0.05,
        "generator.sampling_params.logprobs": 1,
    }
    assert "# needs: skyrl 0.3 or later for dppo_tv (G): policy_loss_type dppo is added in " in out
    for release in ("0.3", "0.3.1", "main@a9564572"):
        assert run_cli("export", path, *SLOW_OK, "--to", "skyrl", "--check-version", release) == (
            0, out, "",
        )  # fmt: skip
    code, out, err = run_cli("export", path, *SLOW_OK, "--to", "skyrl", "--check-version", "0.2")
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "{id: G," in t)
    assert (code, out) == (2, "")
    assert err == (
        f"{path}:{line}:65: guarantees[0].estimator: skyrl 0.2 has no counterpart for "
        "pg_bias, estimator dppo_tv, threshold 0.05: policy_loss_type dppo is added in "
        "skyrl-v0.3.0 (from skyrl 0.3 on)\n"
    )


def test_skyrl_dppo_needs_premises_that_keep_the_log_ratio_inside_the_clamp(tmp_path):
    # drift 15 at T = 1: |log w| up to 30, beyond SkyRL's clamp at 20; the bias bound G·A = 5
    # is proved (D = 1) but the weights need not be the estimator's
    path = _contract(tmp_path, "estimator: dppo_tv, threshold: 0.05, max: 5.0", drift="15.0")
    code, out, err = run_cli("export", path, *SLOW_OK, "--to", "skyrl")
    assert (code, out) == (1, "")
    assert (
        "guarantees[0].from: skyrl computes the dppo_tv weight from the log-ratio clamped to "
        in err
    )
    assert "the premises of G do not prove that on every token (refuted" in err
    assert err.endswith(", so no skyrl setting is written\n")
    # drift 9.5: |log w| ≤ 19 is proved, the export is written
    path = _contract(tmp_path, "estimator: dppo_tv, threshold: 0.05, max: 5.0", drift="9.5")
    assert run_cli("export", path, *SLOW_OK, "--to", "skyrl")[0] == 0


def test_skyrl_dppo_kl_writes_a_delta_above_the_eps_of_its_binary_kl():
    s = dict(FRAMEWORKS["skyrl"].settings(Request("G", "dppo_kl", threshold=F(1, 100))))
    assert s["trainer.algorithm.dppo.delta_high"] == F(1, 100) + F(1, 10**8)
    assert s["trainer.algorithm.dppo.delta_low"] == s["trainer.algorithm.dppo.delta_high"]


@pytest.mark.parametrize("what", ["dppo_tv", "dppo_kl"])
def test_verl_dppo_is_refused_naming_the_ratio_and_its_truncation(what):
    with pytest.raises(NoCounterpart) as why:
        FRAMEWORKS["verl"].settings(Request("G", what, threshold=F(1, 20)))
    assert "old_log_prob (the training kernel's)" in str(why.value)
    assert "truncates the kept ratio at clip_ratio_c (3.0 by default)" in str(why.value)


# --- the docs table ---------------------------------------------------------------------


def test_the_rl_page_shows_the_table_the_export_code_generates():
    page = (ROOT / "docs" / "rl.md").read_text("utf-8")
    assert export_table(tuple(FRAMEWORKS.values())) in page


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_a_feature_named_in_the_table_is_one_the_export_refuses(name):
    framework = FRAMEWORKS[name]
    for what in framework.features:
        with pytest.raises(NoCounterpart):
            framework.settings(sample_request(what))


def test_the_table_marks_every_refused_counterpart():
    table = export_table(tuple(FRAMEWORKS.values()))
    lines = [line.removesuffix(" |") for line in table.splitlines()[2:]]
    rows = {line.split(" | ")[0][3:-1]: line.split(" | ")[1:] for line in lines}
    # the features the page once listed as counterparts: each "not exported", with its reason
    assert rows["dppo_tv"][0].startswith("`policy_loss.loss_mode: dppo_tv`: not exported (")
    assert rows["dual_clip"][1].startswith("`ratio_clip_c`: not exported (")
    assert rows["dual_clip"][2].startswith("`delta` (two-sided clipping")
    assert "not exported" in rows["dual_clip"][2]
    assert rows["dual_clip"][3].startswith("`policy_loss_type: dual_clip`")
    assert "not exported" in rows["dual_clip"][3]
    assert rows["dppo_tv"][3].endswith("(skyrl 0.3 on)")
    assert '`rollout_rs: "token_k1"`' in rows["kl_reject"][0]


# --- tis_clip: NeMo-RL's tis type with truncated_importance_sampling_ratio_min, from 0.7 -----


def test_nemo_rl_tis_clip_is_exported_from_0_7_and_refused_before(tmp_path):
    path = _contract(tmp_path, "estimator: tis_clip, band: [0.5, 2.0], max: 0.05")
    code, out, err = run_cli("export", path, *SLOW_OK, "--to", "nemo-rl")
    assert (code, err) == (0, "")
    loss = yaml.safe_load(out)["loss_fn"]
    assert {k: v for k, v in loss.items() if k.startswith(("truncated", "use_imp"))} == {
        "use_importance_sampling_correction": True,
        "truncated_importance_sampling_type": "tis",
        "truncated_importance_sampling_ratio": 2.0,
        "truncated_importance_sampling_ratio_min": 0.5,
    }
    assert "# needs: nemo-rl 0.7 or later for tis_clip (G): the tis type clamps" in out
    for release in ("0.7", "0.7.0", "main@7ea279ab"):
        assert run_cli("export", path, *SLOW_OK, "--to", "nemo-rl", "--check-version", release) == (
            0,
            out,
            "",
        )
    code, out, err = run_cli("export", path, *SLOW_OK, "--to", "nemo-rl", "--check-version", "0.6")
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "{id: G," in t)
    assert (code, out) == (2, "")
    assert err == (
        f"{path}:{line}:65: guarantees[0].estimator: nemo-rl 0.6 has no counterpart for "
        "pg_bias, estimator tis_clip, band [0.5, 2.0]: the tis type clamps from below at "
        "truncated_importance_sampling_ratio_min from v0.7.0; v0.6.0 ignores that key for tis "
        "and clamps from above alone (from nemo-rl 0.7 on)\n"
    )
