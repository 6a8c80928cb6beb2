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
    "epsilon_high", "off_policy_mask_threshold", "use_vllm",
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
# the same file: the AlgorithmConfig clip keys
SKYRL_ALGORITHM = {"eps_clip_low", "eps_clip_high", "clip_ratio_c"}

KNOWN = {  # framework -> (key prefix, the fields under it)
    "nemo-rl": [("loss_fn.", NEMO_RL_LOSS_FN)],
    "trl": [("", TRL_GRPO_CONFIG)],
    "verl": [("algorithm.rollout_correction.", VERL_ROLLOUT_CORRECTION),
             ("actor_rollout_ref.actor.", VERL_ACTOR)],
    "skyrl": [("trainer.algorithm.off_policy_correction.", SKYRL_OFF_POLICY_CORRECTION),
              ("trainer.algorithm.", SKYRL_ALGORITHM)],
}  # fmt: skip

PARAMS = {"cap": F(2), "band": (F(1, 2), F(2)), "threshold": F(1, 10), "clip_epsilon": F(1, 5)}


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
    assert nemo and nemo <= NEMO_RL_TIS_TYPES
    assert trl and trl <= TRL_MODES
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
     ("skyrl", "1.0")],
)  # fmt: skip
def test_a_release_outside_the_checked_range_is_refused(tmp_path, name, release):
    target = tmp_path / "out.yaml"
    code, out, err = run_cli(
        "export", EXAMPLE, "--to", name, "--check-version", release, "--out", target
    )
    low, high = FRAMEWORKS[name].versions
    assert (code, out) == (2, "")
    assert err == (
        f"--check-version {release}: the {name} settings were checked against {name} {low} to "
        f"{high} only (their keys, values and meaning); nothing is written for {name} {release}\n"
    )
    assert not target.exists()


@pytest.mark.parametrize(
    "release", ["0.x", "1", "v0.9", "0.9.0.dev0", "0..9", "09.1", "0.9 ", "", "0.9-rc1", "1e3"]
)
def test_a_malformed_release_is_refused(release):
    code, out, err = run_cli("export", EXAMPLE, "--to", "verl", "--check-version", release)
    assert (code, out) == (2, "")
    assert err == (
        f"--check-version {release}: not a release number; write it as X.Y (e.g. 0.9) or X.Y.Z\n"
    )


def test_the_version_check_comes_before_the_contract_is_read(tmp_path):
    missing = tmp_path / "missing.yaml"
    code, _, err = run_cli("export", missing, "--to", "trl", "--check-version", "1.0")
    assert code == 2 and err.startswith("--check-version 1.0: the trl settings")
