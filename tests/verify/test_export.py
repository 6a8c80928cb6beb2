"""``python -m verify export``: proved settings per framework, their meaning, and bad input.

The settings of each framework are checked three ways: the exact keys and values written for
the shipped example, a simulation of each framework's documented weighting (the semantics the
framework modules' docstrings cite) against the estimator definitions of the shared table, and
the refusals (no counterpart, not proved, conflicting, unusable input) with their exact
messages and exit codes, nothing written.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import io
import json
import math
import os
import pathlib
from fractions import Fraction as F

import numpy as np
import pytest
import yaml

from kernel_contracts import contracts
from kernel_contracts.verify.cli.commands import main
from kernel_contracts.verify.pipeline.export import (
    FRAMEWORKS,
    ExportError,
    NoCounterpart,
    Request,
    plan,
)
from kernel_contracts.verify.pipeline.export.render import scalar
from kernel_contracts.verify.pipeline.export.request import DRIVING
from tests.support.cli_runner import malformed_contract, run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "contracts" / "examples" / "fp8-rollout.yaml"
TEXT = EXAMPLE.read_text(encoding="utf-8")


def _run(*argv):
    return run_cli("export", *argv)


def _contract(tmp_path, text=TEXT, name="c.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _line(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


EXPECTED = {
    "verl": {
        "algorithm": {
            "rollout_correction": {
                "rollout_is": "token",
                "rollout_is_threshold": 2.0,
                "rollout_is_batch_normalize": False,
                "rollout_rs": None,
                "rollout_rs_threshold": None,
                "bypass_mode": False,
            }
        },
        "actor_rollout_ref": {
            "actor": {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2}
        },
    },
    "nemo-rl": {
        "loss_fn": {
            "use_importance_sampling_correction": True,
            "sequence_level_importance_ratios": False,
            "truncated_importance_sampling_type": "tis",
            "truncated_importance_sampling_ratio": 2.0,
            "truncated_importance_sampling_ratio_min": None,
            "ratio_clip_min": 0.2,
            "ratio_clip_max": 0.2,
        }
    },
    "trl": {
        "vllm_importance_sampling_correction": True,
        "vllm_importance_sampling_mode": "token_truncate",
        "vllm_importance_sampling_clip_max": 2.0,
        "vllm_importance_sampling_clip_min": None,
        "off_policy_mask_threshold": None,
        "epsilon": 0.2,
        "epsilon_high": 0.2,
    },
    "skyrl": {
        "trainer": {
            "algorithm": {
                "off_policy_correction": {
                    "tis_ratio_type": "token",
                    "token_tis_ratio_clip_high": 2.0,
                    "sequence_mask_metric": None,
                    "token_mask_is_threshold_low": None,
                    "token_mask_is_threshold_high": None,
                    "outlier_token_is_threshold_low": None,
                    "outlier_token_is_threshold_high": None,
                },
                "eps_clip_low": 0.2,
                "eps_clip_high": 0.2,
            }
        }
    },
}


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


CLIP_KEYS = {
    "clip_ratio", "clip_ratio_low", "clip_ratio_high", "ratio_clip_min", "ratio_clip_max",
    "epsilon", "epsilon_high", "eps_clip_low", "eps_clip_high",
}  # fmt: skip


@pytest.fixture(scope="module")
def yaml_texts():
    return {name: _run(EXAMPLE, "--to", name) for name in FRAMEWORKS}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_example_exports_its_proved_tis_cap_and_clip_range(yaml_texts, name):
    code, out, err = yaml_texts[name]
    assert (code, err) == (0, "")
    assert yaml.safe_load(out) == EXPECTED[name]
    sha = hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    header = [line for line in out.splitlines() if line.startswith("#")]
    assert f"# sha256: {sha}" in header
    assert f"# contract: fp8-rollout-vs-fp32-train ({EXAMPLE})" in header
    assert "# guarantee G_pg_tis (pg_bias, estimator tis, cap 2.0): proved" in header
    assert "# guarantee G_clip (clip_budget, clip_epsilon 0.2): proved" in header
    (low, high), main = FRAMEWORKS[name].versions, FRAMEWORKS[name].main[:8]
    assert f"# keys checked against: {name} {low} to {high} and main@{main}" in header
    for key in _flat(EXPECTED[name]):  # each key names the guarantee it comes from
        source = "G_clip" if key.rsplit(".", 1)[-1] in CLIP_KEYS else "G_pg_tis"
        assert f"# {key} <- {source}" in header


def test_overrides_and_json_carry_the_same_settings(tmp_path, yaml_texts):
    for name in ("verl", "nemo-rl", "skyrl"):
        code, out, _ = _run(EXAMPLE, "--to", name, "--format", "overrides")
        assert code == 0
        body = [line for line in out.splitlines() if not line.startswith("#")]
        got = {}
        for line in body:
            key, value = line.split("=", 1)
            got[key] = yaml.safe_load(value)  # Hydra's literals read as YAML scalars
        assert got == _flat(EXPECTED[name])
        assert out.startswith(yaml_texts[name][1].split("\n", 1)[0])
    code, out, _ = _run(EXAMPLE, "--to", "trl", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["settings"] == EXPECTED["trl"]
    assert doc["from"]["epsilon"] == ["G_clip"]
    assert doc["guarantees"]["G_pg_tis"]["status"] == "proved"
    assert doc["contract"]["sha256"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    assert doc["framework"]["versions"] == {"min": "1.6", "max": "1.9"}
    assert doc["framework"]["main"] == "f2cd57710ae345ea6428ae95363267fcf38a3dc8"


def test_out_writes_the_stdout_text(tmp_path, yaml_texts):
    target = tmp_path / "verl.yaml"
    code, out, err = _run(EXAMPLE, "--to", "verl", "--out", target)
    assert (code, err) == (0, "")
    assert out == f"wrote 9 verl settings to {target}\n"
    assert target.read_text() == yaml_texts["verl"][1]


def test_export_imports_no_jax_nor_kernels():
    """A proofs-only export must not import JAX: the export modules import neither it nor
    ``kernels`` (the proof path, ``bounds`` and ``verify.proving.obligations``, is the plain run's,
    whose import of JAX ``test_verify_cli`` checks in a fresh interpreter)."""
    paths = sorted((ROOT / "verify" / "pipeline" / "export").glob("*.py"))
    assert len(paths) > 5, "the export modules moved: point this test at their folder"
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not [n for n in names if n.split(".")[0] in ("jax", "kernels", "flax")], path


def test_help_lists_export():
    out = io.StringIO()
    assert main(["--help"], stdout=out, stderr=io.StringIO()) == 0
    assert "export CONTRACT.yaml --to verl|nemo-rl|trl|skyrl" in " ".join(out.getvalue().split())


def test_mis_exports_a_one_sided_mask_in_every_framework(tmp_path):
    path = _contract(tmp_path, TEXT.replace("estimator: tis", "estimator: mis"))
    want = {
        "verl": {"algorithm.rollout_correction.rollout_is_threshold": "1e-09_2.0"},
        "nemo-rl": {
            "loss_fn.truncated_importance_sampling_type": "icepop",
            "loss_fn.truncated_importance_sampling_ratio_min": 0.0,
            "loss_fn.truncated_importance_sampling_ratio": 2.0,
        },
        "trl": {"vllm_importance_sampling_mode": "token_mask"},
        "skyrl": {
            "trainer.algorithm.off_policy_correction.token_mask_is_threshold_low": 0.0,
            "trainer.algorithm.off_policy_correction.token_mask_is_threshold_high": 2.0,
        },
    }
    for name, subset in want.items():
        code, out, err = _run(path, "--to", name)
        assert (code, err) == (0, "")
        flat = _flat(yaml.safe_load(out))
        assert {k: flat[k] for k in subset} == subset


# --- what the exported settings do, under each framework's documented weighting ------------


def _reference(r: Request, logw: np.ndarray, adv: np.ndarray) -> np.ndarray:
    """The estimator's per-token multiplier (the shared table), all tokens valid; ``adv`` is
    each sequence's advantage (a column)."""
    w = np.exp(logw)
    seq = np.exp(logw.sum(-1, keepdims=True)) * np.ones_like(w)
    lo, hi = map(float, r.band) if r.band is not None else (None, None)
    if r.what == "tis":
        return np.minimum(w, float(r.cap))
    if r.what == "mis":
        return w * (w <= float(r.cap))
    if r.what == "icepop":
        return w * ((lo <= w) & (w <= hi))
    if r.what == "seq_tis":
        return np.minimum(seq, float(r.cap))
    if r.what == "seq_is":
        return seq
    if r.what == "geo_mask":
        g = np.exp(logw.mean(-1, keepdims=True))
        return w * ((lo <= g) & (g <= hi))
    if r.what == "seq_mask":
        return seq * ((lo <= seq) & (seq <= hi))
    if r.what == "seq_outlier":
        return w * ((lo <= w) & (w <= hi)).all(-1, keepdims=True)
    if r.what == "tis_mask":
        return np.minimum(w, float(r.cap)) * ((lo <= w) & (w <= hi))
    if r.what in ("tis_clip", "cispo"):
        return np.clip(w, lo, hi)
    if r.what == "opsm":
        return w * ~((adv < 0) & ((-logw).mean(-1, keepdims=True) > float(r.threshold)))
    if r.what == "dual_clip":
        eps, c = float(r.clip_epsilon), float(r.cap)
        clipped = ((adv > 0) & (w > 1 + eps)) | ((adv < 0) & ((w < 1 - eps) | (w > c)))
        return w * ~clipped
    raise AssertionError(r.what)


def _verl(s: dict, logw: np.ndarray, adv: np.ndarray) -> np.ndarray:
    rc = {k.rsplit(".", 1)[1]: v for k, v in s.items() if k.startswith("algorithm.")}
    safe = np.clip(logw, -20, 20)
    if rc["bypass_mode"]:  # PPO's gradient multiplier, old = rollout, dual clip at clip_ratio_c
        actor = {k.rsplit(".", 1)[1]: v for k, v in s.items() if k.startswith("actor_")}
        ratio, c = np.exp(safe), actor["clip_ratio_c"]
        clipped = ((adv > 0) & (ratio > 1 + actor["clip_ratio_high"])) | (
            (adv < 0) & ((ratio < 1 - actor["clip_ratio_low"]) | (ratio > c))
        )
        return ratio * ~clipped * (np.abs(logw) < 20)  # the clamp passes no gradient
    keep = np.ones(logw.shape, bool)
    if rc.get("rollout_rs") is not None:  # k1 = -log w between log(lower), log(upper)
        lower, upper = map(float, rc["rollout_rs_threshold"].split("_"))
        k1 = -safe
        if rc["rollout_rs"] == "seq_mean_k1":
            k1 = k1.mean(-1, keepdims=True)
        else:
            assert rc["rollout_rs"] == "token_k1"
        keep = keep & (np.log(lower) <= k1) & (k1 <= np.log(upper))
    if rc["rollout_is"] == "token":
        raw = np.exp(safe)
    else:
        raw = np.exp(np.clip(logw.sum(-1, keepdims=True), -20, 20)) * np.ones_like(logw)
    t = rc["rollout_is_threshold"]
    if isinstance(t, str):
        lo, hi = map(float, t.split("_"))
        weight = raw * ((lo <= raw) & (raw <= hi))
    else:
        weight = np.minimum(raw, float(t))
    return weight * keep


def _nemo(s: dict, logw: np.ndarray, adv: np.ndarray) -> np.ndarray:
    kind = s["loss_fn.truncated_importance_sampling_type"]
    hi = float(s["loss_fn.truncated_importance_sampling_ratio"])
    w = np.exp(logw)
    lo = float(s["loss_fn.truncated_importance_sampling_ratio_min"] or 0.0)
    if kind == "tis":  # clamped to [min, max] (0.7 on; min None is 0)
        return np.clip(w, lo, hi)
    if kind == "icepop":
        return w * ((lo <= w) & (w <= hi))
    g = np.exp(logw.mean(-1, keepdims=True))
    return w * ((lo <= g) & (g <= hi))


def _trl(s: dict, logw: np.ndarray, adv: np.ndarray) -> np.ndarray:
    """GRPOTrainer's vLLM correction: clamp to [C_min, C_max] (truncate) or zero outside it
    (mask), a None bound being no bound (``vllm_importance_sampling_cap`` is never read); then
    the off-policy sequence mask: drop A < 0 with mean(sampling − trainer log-probs) > δ."""
    assert "vllm_importance_sampling_cap" not in s
    mode = s["vllm_importance_sampling_mode"]
    lo, hi = s["vllm_importance_sampling_clip_min"], s["vllm_importance_sampling_clip_max"]
    lo, hi = -np.inf if lo is None else float(lo), np.inf if hi is None else float(hi)
    ratio = np.exp(logw.sum(-1, keepdims=True) if mode.startswith("sequence") else logw)
    if mode.endswith("truncate"):
        ratio = np.clip(ratio, lo, hi)
    else:
        ratio = ratio * ((lo <= ratio) & (ratio <= hi))
    delta = s["off_policy_mask_threshold"]
    if delta is not None:
        ratio = ratio * ((adv >= 0) | ((-logw).mean(-1, keepdims=True) <= delta))
    return ratio * np.ones_like(logw)


def _skyrl(s: dict, logw: np.ndarray, adv: np.ndarray) -> np.ndarray:
    o = {k.rsplit(".", 1)[1]: v for k, v in s.items() if "off_policy_correction" in k}
    safe = np.clip(logw, -20, 20)
    w, keep = np.exp(safe), np.ones(logw.shape, bool)
    algo = {k.rsplit(".", 1)[1]: v for k, v in s.items() if ".cispo." in k}
    if s.get("trainer.algorithm.policy_loss_type") == "cispo":  # anchored on the rollout
        assert algo["cispo_anchor"] == "rollout" and o["tis_ratio_type"] is None
        lo, hi = 1 - float(algo["cispo_eps_clip_low"]), 1 + float(algo["cispo_eps_clip_high"])
        return np.clip(w, lo, hi)
    if o["token_mask_is_threshold_low"] is not None:
        keep &= (o["token_mask_is_threshold_low"] <= w) & (w <= o["token_mask_is_threshold_high"])
    if o["outlier_token_is_threshold_low"] is not None:
        inside = (o["outlier_token_is_threshold_low"] <= w) & (
            w <= o["outlier_token_is_threshold_high"]
        )
        keep &= inside.all(-1, keepdims=True)
    seq = np.exp(np.clip(logw.sum(-1, keepdims=True), -20, 20))
    if o["tis_ratio_type"] == "token":
        weight = np.minimum(w, float(o["token_tis_ratio_clip_high"]))
    else:
        weight = np.minimum(seq, float(o["sequence_tis_ratio_clip_high"])) * np.ones_like(w)
    if o["sequence_mask_metric"] == "geometric":
        g = np.exp(np.clip(logw.mean(-1, keepdims=True), -20, 20))
        keep &= (o["geo_mask_low"] <= g) & (g <= o["geo_mask_high"])
    if o["sequence_mask_metric"] == "product":
        keep &= (o["product_mask_low"] <= seq) & (seq <= o["product_mask_high"])
    return weight * keep


SIMULATE = {"verl": _verl, "nemo-rl": _nemo, "trl": _trl, "skyrl": _skyrl}
REQUESTS = [
    Request("G", "tis", cap=F(2)),
    Request("G", "tis", cap=F(13, 10)),
    Request("G", "mis", cap=F(3, 2)),
    Request("G", "icepop", band=(F(1, 2), F(5, 2))),
    Request("G", "icepop", band=(F(0), F(3, 2))),
    Request("G", "seq_tis", cap=F(4)),
    Request("G", "seq_is"),
    Request("G", "geo_mask", band=(F(4, 5), F(3, 2))),  # asymmetric in log: 1/hi != lo
    Request("G", "geo_mask", band=(F(999, 1000), F(1001, 1000))),
    Request("G", "seq_mask", band=(F(1, 2), F(5, 2))),
    Request("G", "seq_mask", band=(F(0), F(3, 2))),
    Request("G", "seq_outlier", band=(F(1, 5), F(4))),
    Request("G", "tis_mask", cap=F(3, 2), band=(F(1, 2), F(5, 2))),
    Request("G", "tis_mask", cap=F(3), band=(F(4, 5), F(2))),  # the cap above the band
    Request("G", "opsm", threshold=F(1, 10)),
    Request("G", "tis_clip", band=(F(1, 2), F(3, 2))),
    Request("G", "tis_clip", band=(F(0), F(3, 2))),
    Request("G", "cispo", band=(F(1, 2), F(3, 2))),
    Request("G", "dual_clip", clip_epsilon=F(1, 5), cap=F(3)),
]


def _plain(v):
    return float(v) if isinstance(v, F) else v


@pytest.mark.parametrize("name", list(FRAMEWORKS))
@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: f"{r.what}-{r.summary[-12:]}")
def test_each_exported_setting_weights_tokens_as_its_estimator(name, request_):
    try:
        pairs = FRAMEWORKS[name].settings(request_)
    except NoCounterpart:
        return  # refusals are tested below, by name
    settings = {k: _plain(v) for k, v in pairs}
    rng = np.random.default_rng(0)
    scale = 0.002 if request_.band == (F(999, 1000), F(1001, 1000)) else 0.6
    logw = rng.normal(0.0, scale, size=(400, 6)) + rng.normal(0.0, scale, size=(400, 1))
    adv = rng.choice([-1.0, 1.0], size=(400, 1))
    got = SIMULATE[name](settings, logw, adv)
    want = _reference(request_, logw, adv)
    assert np.allclose(got, want, rtol=1e-12, atol=0)
    if request_.what in ("tis_clip", "cispo"):  # both ends clamp (the floor where lo > 0)
        lo, hi = map(float, request_.band)
        assert (want == hi).any() and (want == lo).any() == (lo > 0)
        return
    assert 0 < np.count_nonzero(want) < want.size or request_.what in ("tis", "seq_tis", "seq_is")


COUNTERPARTS = {  # framework -> the estimators it carries out exactly
    "verl": {"tis", "mis", "icepop", "seq_tis", "seq_mask", "tis_mask", "dual_clip",
             "tis_norm", "kl_reject", "clip_budget"},
    "nemo-rl": {"tis", "mis", "icepop", "geo_mask", "tis_clip", "clip_budget"},
    "trl": {"tis", "mis", "icepop", "seq_tis", "seq_is", "seq_mask", "opsm", "tis_clip",
            "vespo", "clip_budget"},
    "skyrl": {"tis", "mis", "icepop", "seq_tis", "seq_mask", "seq_outlier", "tis_mask",
              "dppo_tv", "dppo_kl", "cispo", "clip_budget"},
}  # fmt: skip


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_every_shared_estimator_maps_or_is_refused_with_a_reason(name):
    params = {
        "cap": F(2), "band": (F(1, 2), F(2)), "threshold": F(1, 10), "clip_epsilon": F(1, 5),
        "reject": "token_k2,seq_max_k3", "reject_threshold": "0.1,0.2",
        "gamma": (F(2), F(3), F(3), F(2)),
    }  # fmt: skip
    mapped = set()
    for what in DRIVING:
        try:
            pairs = FRAMEWORKS[name].settings(Request("G", what, **params))
        except NoCounterpart as why:
            assert len(str(why)) > 20
            continue
        assert pairs and all(isinstance(k, str) and k for k, _ in pairs)
        mapped.add(what)
    assert mapped == COUNTERPARTS[name]


def test_verl_dual_clip_is_bypass_mode_with_clip_ratio_c():
    r = Request("G", "dual_clip", clip_epsilon=F(1, 5), cap=F(3))
    s = dict(FRAMEWORKS["verl"].settings(r))
    assert s["algorithm.rollout_correction.bypass_mode"] is True
    assert s["algorithm.rollout_correction.loss_type"] == "ppo_clip"
    assert s["actor_rollout_ref.actor.clip_ratio_low"] == F(1, 5)
    assert s["actor_rollout_ref.actor.clip_ratio_c"] == F(3)


def test_scalars_read_back_as_written():
    for v in (F(1, 10**9), F(5 * 10**8), F(1, 5), F(1000, 999), F(10**20), F(3, 10**7)):
        assert yaml.safe_load(scalar(v)) == float(v)
    for v in ("token", "1e-09_2.0", "seq-mask-tis", None, True, False):
        assert yaml.safe_load(scalar(v)) == v


# --- refusals --------------------------------------------------------------------------------


def test_a_guarantee_without_counterpart_is_refused_naming_its_line(tmp_path):
    path = _contract(tmp_path)
    c = contracts.load(path)
    guarantees = tuple(
        dataclasses.replace(g, estimator="tv_mask", cap=None) if g.id == "G_pg_tis" else g
        for g in c.guarantees
    )
    c = dataclasses.replace(c, guarantees=guarantees)
    with pytest.raises(ExportError) as err:
        plan(c, FRAMEWORKS["nemo-rl"])
    line = _line(TEXT, "estimator: tis")
    assert err.value.code == 2
    assert str(err.value) == (
        f"{path}:{line}:5: guarantees[6].estimator: nemo-rl has no counterpart for pg_bias, "
        "estimator tv_mask: no loss_fn setting masks by a distance between the distributions"
    )
    assert plan(c, FRAMEWORKS["verl"], ("G_clip",)).settings  # the rest can still be picked


def test_a_refuted_cap_exits_1_and_writes_nothing(tmp_path):
    path = _contract(
        tmp_path, TEXT.replace("cap: 2.0\n    max: 0.001", "cap: 1.01\n    max: 0.0001")
    )
    out_path = tmp_path / "out.yaml"
    code, out, err = _run(path, "--to", "trl", "--out", out_path)
    line = _line(TEXT, "id: G_pg_tis")
    assert (code, out) == (1, "")
    assert err == (
        f"{path}:{line}:5: guarantees[6].id: G_pg_tis (pg_bias, estimator tis, cap 1.01) is "
        "refuted, so no trl setting is written: bound 0.0283576 vs max 0.0001\n"
    )
    assert not out_path.exists()


def test_an_unknown_verdict_exits_1(tmp_path):
    code, out, err = _run(EXAMPLE, "--to", "verl", "--solver-budget", "1")
    assert (code, out) == (1, "")
    assert "G_pg_tis (pg_bias, estimator tis, cap 2.0) is unknown, so no verl setting" in err


def test_two_caps_conflict_until_one_is_picked(tmp_path):
    extra = (
        "  - id: G_tis3\n    quantity: pg_bias\n    score_norm: 5.0\n    advantage: 1.0\n"
        "    estimator: tis\n    cap: 3.0\n    max: 0.001\n    from: [N1]\n"
    )
    text = TEXT.replace("  - id: G_clip ", extra + "  - id: G_clip ")
    path = _contract(tmp_path, text)
    code, out, err = _run(path, "--to", "skyrl")
    assert (code, out) == (2, "")
    assert err == (
        f"{path}:{_line(text, 'id: G_tis3')}:5: guarantees[7].id: G_tis3 sets "
        "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high to 3.0 but G_pg_tis "
        "sets it to 2.0; a run uses one correction, so export one of them with --guarantee\n"
    )
    code, out, _ = _run(path, "--to", "skyrl", "--guarantee", "G_tis3", "--guarantee", "G_clip")
    flat = _flat(yaml.safe_load(out))
    assert (
        code == 0 and flat["trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high"] == 3
    )
    assert "G_pg_tis" not in out


USAGE = "usage: python -m verify export"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--to", "openrlhf"], "python -m verify export: error: --to openrlhf: unknown framework "
         "(choose from verl, nemo-rl, trl, skyrl)\n"),
        (["--to", "trl", "--format", "overrides"],
         "python -m verify export: error: --format overrides: trl reads yaml or json\n"),
        (["--to", "verl", "--format", "json"],
         "python -m verify export: error: --format json: verl reads yaml or overrides\n"),
    ],
)  # fmt: skip
def test_usage_errors_exit_2_with_the_usage_line(argv, message):
    code, out, err = _run(EXAMPLE, *argv)
    assert (code, out) == (2, "")
    assert err.startswith(USAGE) and err.endswith(message)


def _bad_input_cases(tmp_path):
    ro = tmp_path / "read-only"
    ro.mkdir()
    ro.chmod(0o555)
    missing = tmp_path / "missing.yaml"
    serving = ROOT / "contracts" / "examples" / "bf16-serving.yaml"
    malformed, expected = malformed_contract()
    guarantees_line = _line(serving.read_text(), "guarantees:")
    return ro, [
        ([missing, "--to", "verl"], f"{missing}: no such file\n"),
        ([malformed, "--to", "verl"], expected),
        ([serving, "--to", "verl"],
         f"{serving}:{guarantees_line}:1: guarantees: no guarantee maps to a verl setting (export "
         "takes pg_bias guarantees with an estimator other than plain, and clip_budget "
         "guarantees)\n"),
        ([EXAMPLE, "--to", "verl", "--out", EXAMPLE],
         f"verify: cannot write {EXAMPLE}: it is the contract ({EXAMPLE}); a report never "
         "overwrites its input\n"),
        ([EXAMPLE, "--to", "verl", "--out", ro / "out.yaml"],
         f"verify: cannot write {ro / 'out.yaml'}: the directory {ro} is not writable\n"),
        ([EXAMPLE, "--to", "verl", "--guarantee", "G_tv"],
         "--guarantee G_tv: a token_tv guarantee drives no framework setting (only pg_bias with "
         "an estimator other than plain, and clip_budget, do)\n"),
        ([EXAMPLE, "--to", "verl", "--guarantee", "G_pg_plain"],
         "--guarantee G_pg_plain: a pg_bias with estimator plain guarantee drives no framework "
         "setting (only pg_bias with an estimator other than plain, and clip_budget, do)\n"),
        ([EXAMPLE, "--to", "verl", "--guarantee", "G9"],
         "--guarantee G9: the contract has no such guarantee (its guarantees: G_tv, G_log_ratio, "
         "G_kl, G_seq_tv, G_reward, G_pg_plain, G_pg_tis, G_clip)\n"),
    ]  # fmt: skip


def test_bad_input_exits_2_with_one_message_and_writes_nothing(tmp_path, monkeypatch):
    ro, cases = _bad_input_cases(tmp_path)
    if os.geteuid() == 0:  # root writes anywhere: deny the read-only directory as a user is
        import kernel_contracts.verify.common.outputs as outputs_module

        real, denied = os.access, os.path.realpath(ro)
        monkeypatch.setattr(outputs_module.os, "access", lambda p, m: p != denied and real(p, m))
    before = EXAMPLE.read_bytes()
    for argv, message in cases:
        code, out, err = _run(*argv)
        assert (code, out, err) == (2, "", message), argv
    assert EXAMPLE.read_bytes() == before
    assert list(ro.iterdir()) == [] and not (tmp_path / "missing.yaml").exists()


def test_a_cap_of_0_is_refused_for_every_framework(tmp_path):
    path = _contract(tmp_path)
    c = contracts.load(path)
    zero = tuple(dataclasses.replace(g, cap=0.0) if g.id == "G_pg_tis" else g for g in c.guarantees)
    c = dataclasses.replace(c, guarantees=zero)
    line = _line(TEXT, "cap: 2.0")
    for name, framework in FRAMEWORKS.items():
        with pytest.raises(ExportError) as err:
            plan(c, framework)
        assert (err.value.code, str(err.value)) == (
            2,
            f"{path}:{line}:5: guarantees[6].cap: cap 0 makes every weight 0, so the estimator "
            f"learns nothing; no {name} setting is written for it",
        )


# --- the estimator example: every correction guarantee, one at a time ----------------------

RL = ROOT / "contracts" / "examples" / "rl-corrections.yaml"
CORRECTIONS = {  # guarantee -> its estimator in rl-corrections.yaml
    "G_tis": "tis", "G_tis_one": "tis", "G_mis": "mis", "G_ppo_clip": "ppo_clip",
    "G_icepop": "icepop", "G_geo_mask": "geo_mask", "G_tv_mask": "tv_mask",
    "G_kl_mask": "kl_mask", "G_seq_is": "seq_is", "G_seq_tis": "seq_tis",
    "G_ppo_clip_tail": "ppo_clip", "G_tv_mask_tail": "tv_mask",
}  # fmt: skip


@pytest.fixture(scope="module")
def rl_contract():
    return contracts.load(str(RL))


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_each_estimator_of_the_example_maps_or_names_its_line(rl_contract, name):
    text = RL.read_text(encoding="utf-8")
    for gid, estimator in CORRECTIONS.items():
        try:
            export = plan(rl_contract, FRAMEWORKS[name], (gid,))
        except ExportError as err:
            assert estimator not in COUNTERPARTS[name], (gid, str(err))
            i = [g.id for g in rl_contract.guarantees].index(gid)
            start = text.index(f"id: {gid} ")
            line = text[: text.index("estimator:", start)].count("\n") + 1
            assert str(err).startswith(
                f"{RL}:{line}:5: guarantees[{i}].estimator: {name} has no counterpart for "
                f"pg_bias, estimator {estimator}"
            ), str(err)
            continue
        assert estimator in COUNTERPARTS[name], gid
        assert all(s.guarantees == (gid,) for s in export.settings)


@pytest.mark.parametrize("name", ["verl", "skyrl"])
def test_the_log_ratio_clamp_refuses_seq_is_and_geo_mask_for_one_reason(name):
    """verl and SkyRL compute every weight from log w clamped to [-20, 20]: an estimator that
    keeps a weight above e^20 (W of seq_is; a token of a geo_mask sequence inside its band; a
    cap or band end above e^20) is refused with the same reason, one at or below e^20 maps."""
    settings = FRAMEWORKS[name].settings
    reasons = set()
    e20 = F(np.exp(20))
    for r in (
        Request("G", "seq_is"),
        Request("G", "geo_mask", band=(F(9, 10), F(111, 100))),
        *([Request("G", "ppo_clip", clip_epsilon=F(1, 5))] if name == "verl" else []),
        Request("G", "tis", cap=e20),
        Request("G", "mis", cap=e20 * 2),
        Request("G", "seq_tis", cap=F(10**9)),
        Request("G", "icepop", band=(F(1, 2), e20 + F(1, 10))),
    ):
        with pytest.raises(NoCounterpart) as why:
            settings(r)
        reasons.add(str(why.value))
    assert len(reasons) == 1
    assert reasons.pop().endswith("and no lemma bounds the clamped estimator")
    below = e20 - 1
    for r in (Request("G", "tis", cap=below), Request("G", "icepop", band=(F(0), below))):
        assert settings(r)  # a weight the estimator keeps is at most e^20: the clamp is exact
    logw = np.array([[25.0, -0.1, -0.1, -0.1, -0.1] + [-0.2] * 120])  # geometric mean ≈ 1.0
    assert abs(logw.mean()) < 0.01  # kept by a band around 1, yet one weight exceeds e^20:
    assert not np.allclose(np.exp(np.clip(logw, -20, 20)), np.exp(logw))  # clamping changes it


def test_the_whole_example_needs_a_choice_of_correction(tmp_path):
    code, out, err = _run(RL, "--to", "trl")
    lines = err.splitlines()
    assert (code, out) == (2, "")
    assert all(line.startswith(f"{RL}:") for line in lines)
    # ppo_clip twice, tv_mask twice, kl_mask and geo_mask
    assert sum("has no counterpart" in line for line in lines) == 6
    # each of these sets a key G_tis sets otherwise
    conflicting = {line.split(" sets ")[0].rsplit(" ", 1)[1] for line in lines
                   if line.endswith("export one of them with --guarantee")}  # fmt: skip
    assert conflicting == {"G_tis_one", "G_mis", "G_icepop", "G_seq_is", "G_seq_tis"}
    assert any(line.endswith("cap 0 makes every weight 0, so the estimator learns nothing; no trl "
                             "setting is written for it") for line in lines)  # fmt: skip


@pytest.mark.parametrize("framework", ["verl", "skyrl"])
def test_a_sequence_weight_exports_where_its_clamped_sum_cannot_move(tmp_path, framework):
    # verl and SkyRL clamp the sum of a sequence's log-ratios to ±20, raising a W under e^-20:
    # G_seq_tis's premises bound |log w| by 0.1 per token (N1), so its W is within e^±20 for
    # sequences of at most 200 tokens but not of 512 (the contract's max_new_tokens)
    code, out, err = _run(RL, "--to", framework, "--guarantee", "G_seq_tis")
    assert (code, out) == (1, "")
    assert err == (
        f"{RL}:{_line(RL.read_text(), 'estimator: seq_tis') + 3}:5: guarantees[11].from: "
        f"{framework} computes the seq_tis weight from the sum of a sequence's log-ratios "
        "clamped to [-20, 20] (a W under e^-20 is raised to it), so its weight equals the "
        "estimator's where each of the at most 512 tokens has |log w| <= 0.0390625; the "
        "premises of G_seq_tis do not prove that on every token (refuted: bound 0.1 vs max "
        f"0.0390625), so no {framework} setting is written\n"
    )
    text = RL.read_text().replace("max_new_tokens: 512 ", "max_new_tokens: 200 ")
    code, out, err = _run(_contract(tmp_path, text), "--to", framework, "--guarantee", "G_seq_tis")
    assert (code, err) == (0, "")
    assert "# guarantee G_seq_tis (pg_bias, estimator seq_tis, cap 2.0): proved" in out


def test_nemo_rl_tis_exports_only_below_its_float32_overflow(tmp_path):
    # NeMo-RL's weight is exp(log w) in float32, inf above log w = 88.72, where nan_to_num
    # makes it 0 and tis then weighs the token 0, not its cap: a drift of 45 (|log w| <= 90 per
    # token) is refused, one of 40 (80) is written
    text = TEXT.replace("    cap: 2.0\n    max: 0.001\n", "    cap: 2.0\n    max: 100.0\n")
    assert text.count("    max: 0.02\n") == 1 and "max: 100.0" in text
    path = _contract(tmp_path, text.replace("    max: 0.02\n", "    max: 45.0\n"))
    code, out, err = _run(path, "--to", "nemo-rl", "--guarantee", "G_pg_tis")
    assert (code, out) == (1, "")
    assert err == (
        f"{path}:{_line(text, 'cap: 2.0') + 2}:5: guarantees[6].from: nemo-rl computes the tis "
        "weight from exp of the log-ratio in float32, which overflows to inf above log w = "
        "88.72, where nan_to_num sets the weight to 0, so its weight equals the estimator's "
        "only where |log w| <= 88.0; the premises of G_pg_tis do not prove that on every token "
        "(refuted: bound 90 vs max 88), so no nemo-rl setting is written\n"
    )
    path = _contract(tmp_path, text.replace("    max: 0.02\n", "    max: 40.0\n"), "ok.yaml")
    code, out, err = _run(path, "--to", "nemo-rl", "--guarantee", "G_pg_tis")
    assert (code, err) == (0, "")
    assert "# guarantee G_pg_tis (pg_bias, estimator tis, cap 2.0): proved" in out


def test_a_proved_geo_mask_exports_and_a_cap_of_0_does_not(tmp_path):
    code, out, err = _run(RL, "--to", "nemo-rl", "--guarantee", "G_geo_mask")
    flat = _flat(yaml.safe_load(out))
    assert (code, err) == (0, "")
    got = {
        k: flat["loss_fn." + k]
        for k in (
            "truncated_importance_sampling_type",
            "truncated_importance_sampling_ratio_min",
            "truncated_importance_sampling_ratio",
        )
    }
    assert got == {"truncated_importance_sampling_type": "seq-mask-tis",
                   "truncated_importance_sampling_ratio_min": 0.9,
                   "truncated_importance_sampling_ratio": 1.11}  # fmt: skip
    assert "# guarantee G_geo_mask (pg_bias, estimator geo_mask, band [0.9, 1.11]): proved" in out
    code, out, err = _run(RL, "--to", "skyrl", "--guarantee", "G_tis_zero")
    assert (code, out) == (2, "")
    assert err == (
        f"{RL}:{_line(RL.read_text(), 'cap: 0')}:5: guarantees[3].cap: cap 0 makes every weight "
        "0, so the estimator learns nothing; no skyrl setting is written for it\n"
    )


def test_trl_vespo_is_its_loss_with_untruncated_token_weights():
    r = Request("G", "vespo", gamma=(F(2), F(3), F(5, 2), F(3, 2)))
    s = dict(FRAMEWORKS["trl"].settings(r))
    assert s["loss_type"] == "vespo" and s["importance_sampling_level"] == "token"
    assert (s["vespo_k_pos"], s["vespo_lambda_pos"]) == (F(2), F(3))
    assert (s["vespo_k_neg"], s["vespo_lambda_neg"]) == (F(5, 2), F(3, 2))
    assert s["vllm_importance_sampling_correction"] is True
    assert s["vllm_importance_sampling_mode"] == "token_truncate"  # VESPO refuses the others
    assert s["vllm_importance_sampling_clip_max"] > math.exp(20)  # the log clamp acts first
    assert s["vllm_importance_sampling_clip_min"] is None
    for name in ("verl", "nemo-rl", "skyrl"):
        with pytest.raises(NoCounterpart, match="vespo"):
            FRAMEWORKS[name].settings(r)
