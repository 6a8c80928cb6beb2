"""Loading valid contracts: the shipped examples, merging, defaults, locations, canonical form."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import pathlib

import pytest

from kernel_contracts import contracts
from kernel_contracts.contracts import PRESETS, AccumulatorSpec, ContractError, MatmulSpec, Scaling

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "contracts" / "examples"

MINIMAL = """\
contract: 1
name: minimal
kernels:
  train: {preset: fp32}
  inference: {preset: h100-fp8}
numerical:
  - id: N1
    metric: logit_drift
    max: 2e-2
guarantees:
  - id: G1
    quantity: token_tv
    max: 1.01e-2
    from: [N1]
"""


@pytest.mark.parametrize("name", ["fp8-rollout", "bf16-serving", "refuted-on-purpose"])
def test_examples_load(name):
    path = EXAMPLES / f"{name}.yaml"
    c = contracts.load(path)
    raw = path.read_bytes()
    assert c.source.sha256 == hashlib.sha256(raw).hexdigest()
    assert c.source.path == str(path)
    assert raw.startswith(b"# ")  # each example says what it shows
    assert c.evidence.emulate is None and c.evidence.logprobs is None  # proofs only
    assert json.loads(c.source.canonical)["name"] == c.name


def test_fp8_example_thresholds_sit_above_the_tight_bounds():
    c = contracts.load(EXAMPLES / "fp8-rollout.yaml")
    delta, t, horizon = c.clause("N1").max, c.policy.temperature, c.policy.max_new_tokens
    tv = math.tanh(delta / (2 * t))
    kl = delta**2 / (2 * t**2)
    seq = min(
        1 - (1 - tv) ** horizon, math.sqrt(horizon * kl / 2), math.sqrt(1 - math.exp(-horizon * kl))
    )
    expected = {
        "G_tv": tv,
        "G_log_ratio": 2 * delta / t,
        "G_kl": kl,
        "G_seq_tv": seq,
        "G_reward": 1.0 * seq,
        "G_pg_plain": 2 * 5.0 * 1.0 * tv,
        "G_pg_tis": 0.0,
        "G_clip": (math.exp(2 * delta / t) - 1) / 0.2,
    }
    assert {g.id for g in c.guarantees} == set(expected)
    for g in c.guarantees:
        assert expected[g.id] <= g.max <= 1.02 * expected[g.id] + 0.001, g.id
    assert c.guarantee("G_pg_tis").estimator == "tis"
    assert math.exp(2 * delta / t) <= c.guarantee("G_pg_tis").cap
    assert c.guarantee("G_seq_tv").horizon == horizon == 512


def test_refuted_example_sits_on_both_sides_of_the_bound():
    c = contracts.load(EXAMPLES / "refuted-on-purpose.yaml")
    bound = math.tanh(c.clause("N1").max / (2 * c.policy.temperature))
    assert c.guarantee("G_too_tight").max < bound < c.guarantee("G_edge").max


def test_minimal_contract_and_defaults():
    c = contracts.loads(MINIMAL, path="m.yaml")
    assert c.version == 1 and c.name == "minimal" and c.description == ""
    assert c.policy == contracts.Policy()
    assert c.clause("N1").max == 0.02  # 2e-2 is a number (YAML 1.2), not a string
    assert c.guarantee("G1").max == 0.0101 and c.guarantee("G1").from_ == ("N1",)
    assert c.guarantee("G1").scope == "token" and c.guarantee("G1").horizon is None
    assert c.kernels.train == PRESETS["fp32"]
    assert c.kernels.inference == PRESETS["h100-fp8"]
    assert c.statistical == c.runtime == c.slices == c.escalation == c.promotion == ()


def test_kernel_overrides_merge_over_the_preset():
    text = MINIMAL.replace(
        "  inference: {preset: h100-fp8}\n",
        "  inference:\n    preset: h100-fp8\n    matmul:\n      accumulator: {dtype: float32}\n"
        "      group: 8\n      promote_every: null\n    attention: {tiles: 64}\n",
    )
    k = contracts.loads(text).kernels.inference
    base = PRESETS["h100-fp8"]
    assert k.matmul.accumulator == AccumulatorSpec(23, "nearest_even")
    assert k.matmul.group == 8 and k.matmul.promote_every is None
    assert k.matmul.inputs == base.matmul.inputs and k.matmul.scaling == base.matmul.scaling
    assert k.attention.tiles == "64" and k.attention.kv_cache == base.attention.kv_cache
    assert k.preset == "h100-fp8"
    assert k.provenance.startswith(base.provenance)
    assert "Overridden by the contract: matmul.group, matmul.promote_every" in k.provenance


def test_the_scaling_is_parsed_once_when_the_record_is_built():
    """``MatmulSpec.scaling`` holds a ``Scaling`` (kind and block read out), written and
    compared as its DSL spelling; malformed text is refused when the record is built."""
    text = MINIMAL.replace(
        "  inference: {preset: h100-fp8}\n",
        "  inference:\n    preset: h100-fp8\n    matmul:\n      scaling: block:64\n",
    )
    c = contracts.loads(text)
    k = c.kernels.inference
    assert type(k.matmul.scaling) is Scaling
    assert (k.matmul.scaling.kind, k.matmul.scaling.block) == ("block", 64)
    assert k.matmul.scaling == "block:64" and Scaling.parse(k.matmul.scaling) is k.matmul.scaling
    assert '"scaling":"block:64"' in c.source.canonical.replace(" ", "")
    spec = dataclasses.replace(PRESETS["h100-fp8"].matmul, scaling="mx:32")
    assert (spec.scaling.kind, spec.scaling.block) == ("mx", 32)
    with pytest.raises(ValueError, match="'block:0'"):
        MatmulSpec(scaling="block:0")


def test_accumulator_partial_override_keeps_the_preset_rounding():
    text = MINIMAL.replace(
        "  inference: {preset: h100-fp8}\n",
        "  inference:\n    preset: h100-fp8\n    matmul: {accumulator: {mantissa_bits: 10}}\n",
    )
    acc = contracts.loads(text).kernels.inference.matmul.accumulator
    assert acc == AccumulatorSpec(10, "toward_zero")
    same = MINIMAL.replace(
        "  inference: {preset: h100-fp8}\n",
        "  inference:\n    preset: h100-fp8\n    matmul: {group: 4, inputs: float8_e4m3fn}\n",
    )
    k = contracts.loads(same).kernels.inference
    assert k == PRESETS["h100-fp8"]  # overrides equal to the preset change nothing


def test_sequence_scope_horizon_defaults_to_max_new_tokens():
    text = MINIMAL + (
        "  - id: G2\n    quantity: sequence_tv\n    max: 0.5\n    from: [N1]\n"
        "  - id: G3\n    quantity: reward_drift\n    reward_range: [-1, 1]\n    scope: sequence\n"
        "    horizon: 16\n    max: 0.5\n    from: [N1]\n"
        "policy: {max_new_tokens: 64}\n"
    )
    c = contracts.loads(text)
    assert c.guarantee("G2").scope == "sequence" and c.guarantee("G2").horizon == 64
    assert c.guarantee("G3").horizon == 16 and c.guarantee("G3").reward_range == (-1.0, 1.0)


def test_escalation_default_statuses():
    text = MINIMAL + (
        "escalation:\n  - when: {clause: N1}\n    severity: critical\n    action: rollback\n"
        "  - when: {clause: G1}\n    severity: warn\n    action: halt_promotion\n"
    )
    rules = contracts.loads(text).escalation
    assert rules[0].status == ("violated",) and rules[1].status == ("refuted",)


def test_logprobs_path_is_resolved_against_the_contract_directory(tmp_path):
    sub = tmp_path / "contracts"
    sub.mkdir()
    path = sub / "c.yaml"
    path.write_text(MINIMAL + "evidence:\n  logprobs: {path: ../logs/r.jsonl, format: verl}\n")
    c = contracts.load(path)
    assert c.evidence.logprobs.path == str(tmp_path / "logs" / "r.jsonl")
    assert c.evidence.logprobs.format == "verl"
    # the canonical form keeps the path as written, so it does not depend on the checkout
    assert json.loads(c.source.canonical)["evidence"]["logprobs"]["path"] == "../logs/r.jsonl"
    absolute = contracts.loads(
        MINIMAL + f"evidence: {{logprobs: {{path: '{tmp_path / 'x.jsonl'}'}}}}\n"
    )
    assert absolute.evidence.logprobs.path == str(tmp_path / "x.jsonl")
    assert os.path.isabs(contracts.loads(MINIMAL + "evidence: {logprobs: {path: a}}\n")
                         .evidence.logprobs.path)  # fmt: skip


def test_locations_of_key_paths():
    c = contracts.load(EXAMPLES / "fp8-rollout.yaml")
    lines = (EXAMPLES / "fp8-rollout.yaml").read_text(encoding="utf-8").splitlines()
    loc = c.source.locations
    for key, text in [
        ("numerical[0].max", "max: 0.02"),
        ("policy.temperature", "temperature: 1.0"),
        ("kernels.inference", "inference: {preset: h100-fp8}"),
        ("guarantees[2].from", "from: [N1]"),
    ]:
        line, col = loc[key]
        assert lines[line - 1][col - 1 :].startswith(text), key
    line, col = loc["guarantees[5].from[1]"]
    assert lines[line - 1][col - 1 :].startswith("R1]")
    line, col = loc["kernels.inference.preset"]
    assert lines[line - 1][col - 1 :].startswith("preset: h100-fp8")
    assert c.source.where("guarantees[0].max.nothing") == loc["guarantees[0].max"]
    assert c.source.where("nothing") is None


def test_canonical_form_ignores_order_comments_and_number_spelling():
    a = contracts.loads(MINIMAL)
    reordered = """\
# the same contract, keys reordered, comments added, numbers spelled differently
guarantees:
  - from: [N1]   # premise
    max: 0.0101
    quantity: token_tv
    id: G1
numerical: [{max: 0.020, metric: logit_drift, id: N1, slice: all}]
kernels: {inference: {preset: h100-fp8}, train: {preset: fp32}}
name: minimal
contract: 1
"""
    b = contracts.loads(reordered)
    assert a.source.canonical == b.source.canonical
    assert a.source.sha256 != b.source.sha256
    assert a == contracts.loads(MINIMAL)  # loading is deterministic
    changed = contracts.loads(MINIMAL.replace("max: 2e-2", "max: 0.03"))
    assert changed.source.canonical != a.source.canonical
    canonical = a.source.canonical
    assert canonical == json.dumps(json.loads(canonical), sort_keys=True, separators=(",", ":"))
    data = json.loads(canonical)
    assert data["guarantees"][0]["from"] == ["N1"]  # the DSL key, not the field name
    assert data["numerical"][0]["max"] == 0.02 and "0.02," in canonical


def test_contract_is_frozen():
    c = contracts.loads(MINIMAL)
    with pytest.raises(AttributeError):
        c.name = "other"  # type: ignore[misc]
    assert hash(c) == hash(contracts.loads(MINIMAL))  # records hash, as model.py promises


def test_truncated_sampling_with_logprobs_given():
    text = MINIMAL + "policy: {top_p: 0.9, top_k: 40, logprobs: processed, temperature: 0.7}\n"
    p = contracts.loads(text).policy
    assert p.truncated and p.logprobs == "processed" and p.top_k == 40 and p.temperature == 0.7


def test_yaml_1_1_words_are_strings():
    c = contracts.loads(MINIMAL + "description: no\n")
    assert c.description == "no"
    with pytest.raises(ContractError, match=r"runtime\[0\]\.batch_invariant: expected true or"):
        contracts.loads(MINIMAL + "runtime: [{id: R1, batch_invariant: off}]\n")
