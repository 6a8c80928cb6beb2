"""The exported keys, pinned against the frameworks' own field lists, and ``--check-version``.

NeMo-RL's loss config accepts unknown keys without a word (a pydantic model with
``extra="allow"``), so a misspelt key would be ignored in a run: every key any mapping can
write is checked here against the field list of the framework's config class, recorded with
the file and commit it was read from. Each framework's export names the releases its keys
were checked against; ``--check-version`` refuses a release outside them, and malformed
release numbers, with exit 2 and nothing written.
"""

from __future__ import annotations

import pathlib
from fractions import Fraction as F

import pytest

from kernel_contracts.verify.pipeline.export import FRAMEWORKS, NoCounterpart, Request
from kernel_contracts.verify.pipeline.export.request import DRIVING, parse_version
from tests.support.cli_runner import run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "contracts" / "examples" / "fp8-rollout.yaml"

# NVIDIA-NeMo/RL nemo_rl/algorithms/loss/loss_functions.py @ 7ea279ab: ClippedPGLossConfig
NEMO_RL_LOSS_FN = {
    "disable_ppo_ratio", "token_level_loss", "sequence_level_importance_ratios",
    "ratio_clip_min", "ratio_clip_max", "ratio_clip_c", "reference_policy_kl_penalty",
    "reference_policy_kl_type", "kl_input_clamp_value", "kl_output_clamp_value",
    "use_kl_in_reward", "use_importance_sampling_correction",
    "truncated_importance_sampling_type", "truncated_importance_sampling_ratio",
    "truncated_importance_sampling_ratio_min", "use_on_policy_kl_approximation",
    "force_on_policy_ratio", "use_cispo", "positive_example_nll_weight",
}  # fmt: skip
# the same file: the values truncated_importance_sampling_type takes
NEMO_RL_TIS_TYPES = {"tis", "icepop", "seq-mask-tis"}
# huggingface/trl trl/trainer/grpo_config.py @ f2cd5771: the GRPOConfig fields the export uses
TRL_GRPO_CONFIG = {
    "vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min", "epsilon",
    "epsilon_high", "off_policy_mask_threshold", "use_vllm", "loss_type",
    "importance_sampling_level", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
    "vespo_lambda_neg",
}  # fmt: skip
# the same file: the modes vllm_importance_sampling_mode takes
TRL_MODES = {"token_truncate", "token_mask", "sequence_truncate", "sequence_mask"}
# verl-project/verl verl/trainer/config/algorithm.py @ 1dda039b: RolloutCorrectionConfig
VERL_ROLLOUT_CORRECTION = {
    "rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs",
    "rollout_rs_threshold", "bypass_mode", "loss_type",
}  # fmt: skip
# verl-project/verl verl/trainer/config/actor/actor.yaml @ 1dda039b: the clip keys
VERL_ACTOR = {"clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c"}
# NovaSky-AI/SkyRL skyrl/train/config/config.py @ a9564572: OffPolicyCorrectionConfig
SKYRL_OFF_POLICY_CORRECTION = {
    "tis_ratio_type", "token_tis_ratio_clip_high", "sequence_tis_ratio_clip_high",
    "sequence_mask_metric", "geo_mask_high", "geo_mask_low", "product_mask_high",
    "product_mask_low", "outlier_token_is_threshold_low", "outlier_token_is_threshold_high",
    "token_mask_is_threshold_low", "token_mask_is_threshold_high",
}  # fmt: skip
# the same file: the AlgorithmConfig clip and policy-loss keys, DPPOConfig (skyrl-v0.3.0 too),
# and SamplingParams' logprobs (the rollout log-probs DPPO compares with)
SKYRL_ALGORITHM = {"eps_clip_low", "eps_clip_high", "clip_ratio_c", "policy_loss_type"}
SKYRL_DPPO = {"dppo_type", "delta_low", "delta_high"}
SKYRL_SAMPLING = {"logprobs"}
# the same file at a9564572: CISPOConfig (the rollout anchor is on the main branch only) and the
# policy_loss_type values the exports write (the DPPO loss and the CISPO loss)
SKYRL_CISPO = {"cispo_eps_clip_low", "cispo_eps_clip_high", "cispo_anchor"}
SKYRL_LOSS_TYPES = {"dppo", "cispo"}
# skyrl/train/config/config.py @ skyrl-v0.3.0 and a9564572: the values DPPOConfig.dppo_type takes
SKYRL_DPPO_TYPES = {"binary_tv", "binary_kl"}

KNOWN = {  # framework -> (key prefix, the fields under it)
    "nemo-rl": [("loss_fn.", NEMO_RL_LOSS_FN)],
    "trl": [("", TRL_GRPO_CONFIG)],
    "verl": [("algorithm.rollout_correction.", VERL_ROLLOUT_CORRECTION),
             ("actor_rollout_ref.actor.", VERL_ACTOR)],
    "skyrl": [("trainer.algorithm.off_policy_correction.", SKYRL_OFF_POLICY_CORRECTION),
              ("trainer.algorithm.dppo.", SKYRL_DPPO),
              ("trainer.algorithm.cispo.", SKYRL_CISPO),
              ("trainer.algorithm.", SKYRL_ALGORITHM),
              ("generator.sampling_params.", SKYRL_SAMPLING)],
}  # fmt: skip

PARAMS = {"cap": F(2), "band": (F(1, 2), F(2)), "threshold": F(1, 10), "clip_epsilon": F(1, 5),
          "reject": "token_k1,seq_sum_k2", "reject_threshold": "0.5_2.0,0.3",
          "gamma": (F(2), F(3), F(3), F(2))}  # fmt: skip


def _every_setting(name: str) -> list[tuple[str, object]]:
    pairs = []
    for what in DRIVING:
        for band in ((F(1, 2), F(2)), (F(0), F(3, 2))):
            try:
                pairs += FRAMEWORKS[name].settings(Request("G", what, **(PARAMS | {"band": band})))
            except NoCounterpart:
                continue
    return pairs


def _field(name: str, key: str) -> str | None:
    """The field ``key`` names, when it lies under one of the framework's known sections."""
    for prefix, fields in KNOWN[name]:
        rest = key.removeprefix(prefix)
        if key.startswith(prefix) and "." not in rest:
            return rest if rest in fields else None
    return None


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_every_written_key_is_a_field_of_the_framework_config(name):
    pairs = _every_setting(name)
    assert len(pairs) > 10
    unknown = sorted({k for k, _ in pairs if _field(name, k) is None})
    assert unknown == [], f"{name} writes keys its config does not define: {unknown}"


def test_the_mode_strings_are_the_frameworks_own():
    nemo = {v for k, v in _every_setting("nemo-rl") if k.endswith("_sampling_type")}
    trl = {v for k, v in _every_setting("trl") if k == "vllm_importance_sampling_mode"}
    dppo = {v for k, v in _every_setting("skyrl") if k.endswith(".dppo_type")}
    assert nemo and nemo <= NEMO_RL_TIS_TYPES
    assert trl and trl <= TRL_MODES
    assert dppo == SKYRL_DPPO_TYPES
    losses = {v for k, v in _every_setting("skyrl") if k.endswith("policy_loss_type")}
    assert losses == SKYRL_LOSS_TYPES
    anchors = {v for k, v in _every_setting("skyrl") if k.endswith(".cispo_anchor")}
    assert anchors == {"rollout"}  # CISPOConfig takes "old" or "rollout"
    assert not any(k == "vllm_importance_sampling_cap" for k, _ in _every_setting("trl"))


def test_a_misspelt_key_is_caught():
    assert _field("nemo-rl", "loss_fn.truncated_importance_sampling_ratio_max") is None
    assert _field("skyrl", "trainer.algorithm.off_policy_correction.geo_mask_hi") is None
    assert _field("verl", "algorithm.rollout_correction.rollout_is") == "rollout_is"


# --- --check-version -------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_the_checked_releases_are_accepted_at_both_ends(name):
    low, high = FRAMEWORKS[name].versions
    assert parse_version(low) < parse_version(high)
    plain = run_cli("export", EXAMPLE, "--to", name)
    assert plain[0] == 0
    for release in (low, high, f"{high}.3"):
        assert run_cli("export", EXAMPLE, "--to", name, "--check-version", release) == plain


@pytest.mark.parametrize(
    ("name", "release"),
    [("verl", "0.7"), ("verl", "0.11"), ("trl", "1.5.2"), ("trl", "2.0"), ("nemo-rl", "0.5"),
     ("skyrl", "1.0"),
     # unreleased: the main branches read (0.10.0.dev, 1.10.0.dev0) are not these releases
     ("verl", "0.10"), ("trl", "1.10"), ("nemo-rl", "0.8"), ("skyrl", "0.4"),
     # a main-branch commit other than the one read
     ("verl", "main@f2cd5771"), ("trl", "main@1dda039b"), ("skyrl", "main@a9564572e0")],
)  # fmt: skip
def test_a_release_outside_the_checked_range_is_refused(tmp_path, name, release):
    target = tmp_path / "out.yaml"
    code, out, err = run_cli(
        "export", EXAMPLE, "--to", name, "--check-version", release, "--out", target
    )
    (low, high), main = FRAMEWORKS[name].versions, FRAMEWORKS[name].main[:8]
    assert (code, out) == (2, "")
    assert err == (
        f"--check-version {release}: the {name} settings were checked against {name} {low} to "
        f"{high} and main@{main} only (their keys, values and meaning); nothing is written for "
        f"{name} {release}\n"
    )
    assert not target.exists()


@pytest.mark.parametrize(
    "release",
    ["0.x", "1", "v0.9", "0.9.0.dev0", "0..9", "09.1", "0.9 ", "", "0.9-rc1", "1e3", "main",
     "main@", "main@1dda03", "main@1DDA039B", "main@1dda039b9c6311889a9c9a26040677e1254814f9a",
     "master@1dda039b"],
)  # fmt: skip
def test_a_malformed_release_is_refused(release):
    code, out, err = run_cli("export", EXAMPLE, "--to", "verl", "--check-version", release)
    assert (code, out) == (2, "")
    assert err == (
        f"--check-version {release}: not a release number; write it as X.Y (e.g. 0.9) or "
        "X.Y.Z, or main@COMMIT for the checked commit of the main branch\n"
    )


def test_the_version_check_comes_before_the_contract_is_read(tmp_path):
    missing = tmp_path / "missing.yaml"
    code, _, err = run_cli("export", missing, "--to", "trl", "--check-version", "1.0")
    assert code == 2 and err.startswith("--check-version 1.0: the trl settings")


# the latest release of each framework, read from its tags (verl v0.9.0, TRL v1.9.0, NeMo-RL
# v0.7.0, SkyRL skyrl-v0.3.0), and the main-branch commit whose code was read
LATEST = {"verl": ("0.9", "1dda039b9c6311889a9c9a26040677e1254814f9"),
          "trl": ("1.9", "f2cd57710ae345ea6428ae95363267fcf38a3dc8"),
          "nemo-rl": ("0.7", "7ea279abfbeb698b092856d0dab61e7cf39bc909"),
          "skyrl": ("0.3", "a9564572eb8e91076be43c1bd5e4615e3de17265")}  # fmt: skip


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_only_released_versions_and_the_read_main_commit_are_accepted(name):
    latest, main = LATEST[name]
    assert FRAMEWORKS[name].versions[1] == latest
    assert FRAMEWORKS[name].main == main
    plain = run_cli("export", EXAMPLE, "--to", name)
    for token in (f"main@{main[:7]}", f"main@{main[:8]}", f"main@{main}"):
        assert run_cli("export", EXAMPLE, "--to", name, "--check-version", token) == plain
    checked = f"# keys checked against: {name} {FRAMEWORKS[name].versions[0]} to {latest} and "
    assert checked + f"main@{main[:8]}\n" in plain[1]
