"""``from_canonical``: a contract's canonical JSON text read back, validated, exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_contracts.contracts import ContractError, load, loads
from kernel_contracts.contracts.canonical import from_canonical

ROOT = Path(__file__).resolve().parents[2]
FILES = [
    *sorted((ROOT / "contracts" / "examples").glob("*.yaml")),
    ROOT / "tests" / "data" / "valid" / "kitchen_sink.yaml",
]
OVERRIDES = """\
contract: 1
name: overrides
kernels:
  train: {preset: fp32}
  inference:
    preset: h100-fp8
    matmul: {accumulator: {mantissa_bits: 10}, promote_every: null}
    attention: {tiles: 64}
slices:
  long: {position: [2048, null]}
statistical:
  - {id: S1, metric: tv, statistic: exceed_rate, threshold: 0.01, max: 0.1, slices: [all, long]}
guarantees:
  - {id: G1, quantity: reward_drift, reward_range: [-1, 2], scope: sequence, horizon: 7, max: 1,
     from: [S1]}
escalation:
  - {when: {clause: G1, status: [unknown, refuted]}, severity: warn, action: alert}
promotion: {shadow: {min_tokens: 5}, canary: {traffic: 0.5}}
"""


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_round_trip_of_the_shipped_contracts(path):
    contract = load(path)
    again = from_canonical(contract.source.canonical)
    assert again.source.canonical == contract.source.canonical
    assert again.guarantees == contract.guarantees
    assert again.kernels == contract.kernels
    assert again.policy == contract.policy
    assert again.escalation == contract.escalation


def test_round_trip_of_overrides_slices_and_promotion():
    contract = loads(OVERRIDES)
    again = from_canonical(contract.source.canonical)
    assert again.source.canonical == contract.source.canonical
    assert again.kernels.inference.provenance == contract.kernels.inference.provenance
    assert again.slices == contract.slices
    assert again.promotion == contract.promotion


def _edit(text: str, change) -> str:
    plain = json.loads(text)
    change(plain)
    return json.dumps(plain, sort_keys=True, separators=(",", ":"))


CANONICAL = loads(OVERRIDES).source.canonical


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p["policy"].update(temperature=0.0), "policy.temperature: must be > 0, got 0.0"),
        (
            lambda p: p["guarantees"][0].update(horizon=0),
            "guarantees[0].horizon: must be >= 1, got 0",
        ),
        (lambda p: p.update(extra=1), "extra: unknown key"),
        (lambda p: p["kernels"]["inference"].update(provenance="mine"), "not the canonical form"),
        (lambda p: p["policy"].update(top_k=0.0), "policy.top_k"),
    ],
)
def test_a_forged_canonical_form_is_refused(change, message):
    with pytest.raises(ContractError) as err:
        from_canonical(_edit(CANONICAL, change), path="r.json: contract.canonical")
    assert message in str(err.value)
    assert str(err.value).startswith("r.json: contract.canonical")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (CANONICAL.replace('{"description"', '{"name":"x","description"', 1), "duplicate key"),
        (CANONICAL.replace('"max":1.0,', '"max":NaN,', 1), "NaN is not a number"),
        (CANONICAL.replace('"max":1.0,', '"max":1e999,', 1), "a number out of range"),
        ("[1]", "must be a JSON object"),
        ("{", "not canonical JSON"),
        (CANONICAL.replace(",", ", ", 1), "not the canonical form"),
    ],
)
def test_text_that_is_not_canonical_json_is_refused(text, message):
    with pytest.raises(ContractError) as err:
        from_canonical(text)
    assert message in str(err.value)
