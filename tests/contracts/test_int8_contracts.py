"""The int8 kernel fields of the DSL: the preset, merging, the canonical form and its checks."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

from kernel_contracts import contracts
from kernel_contracts.contracts import EpilogueSpec, IntAccumulatorSpec
from kernel_contracts.contracts.canonical import from_canonical

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "contracts" / "examples" / "int8-serving.yaml"

BASE = """\
contract: 1
name: t
kernels:
  train: {preset: fp32}
  inference:
    preset: a100-int8
"""


def _load(matmul: str = ""):
    text = BASE + (f"    matmul: {matmul}\n" if matmul else "")
    return contracts.loads(text, path="t.yaml")


def test_preset_is_a_complete_int8_kernel():
    spec = contracts.preset("a100-int8").matmul
    assert spec.is_int8 and spec.inputs == "int8" and spec.scaling == "per_row"
    assert spec.accumulator == IntAccumulatorSpec("int32")
    assert spec.epilogue == EpilogueSpec("float32", "acc_sw_sx", False, "nearest_even")
    assert spec.k_max == 4096 and spec.output == "bfloat16"
    assert spec.group == 1 and spec.promote_every is None
    assert "ScaledEpilogue" in contracts.preset("a100-int8").provenance


def test_example_spells_out_the_preset_with_its_own_k_max():
    c = contracts.load(EXAMPLE)
    spec = c.kernels.inference.matmul
    assert spec == dataclasses.replace(contracts.preset("a100-int8").matmul, k_max=1024)
    assert EXAMPLE.read_bytes().startswith(b"# ")


@pytest.mark.parametrize(
    ("matmul", "epilogue"),
    [
        ("{epilogue: {fused: true}}", EpilogueSpec("float32", None, True, "nearest_even")),
        (
            "{epilogue: {order: acc_sxsw, scales: float16, rounding: toward_zero}}",
            EpilogueSpec("float16", "acc_sxsw", False, "toward_zero"),
        ),
    ],
)
def test_epilogue_fields_merge_and_round_trip(matmul, epilogue):
    c = _load(matmul)
    assert c.kernels.inference.matmul.epilogue == epilogue
    plain = json.loads(c.source.canonical)["kernels"]["inference"]["matmul"]
    assert plain["accumulator"] == {"dtype": "int32"}
    assert ("order" in plain["epilogue"]) == (epilogue.order is not None)
    again = from_canonical(c.source.canonical)
    assert again.kernels == c.kernels and again.source.canonical == c.source.canonical


def test_float_contracts_keep_their_canonical_form():
    """k_max and epilogue are left out while unset: no existing canonical text changes."""
    for path in sorted((ROOT / "contracts" / "examples").glob("*.yaml")):
        c = contracts.load(path)
        for side in ("train", "inference"):
            plain = json.loads(c.source.canonical)["kernels"][side]["matmul"]
            if not getattr(c.kernels, side).matmul.is_int8:
                assert "k_max" not in plain and "epilogue" not in plain, path.name
    fp8 = contracts.load(ROOT / "contracts" / "examples" / "fp8-rollout.yaml")
    assert '"accumulator":{"mantissa_bits":13,"rounding":"toward_zero"}' in fp8.source.canonical


def test_a_declared_k_max_on_a_float_kernel_is_kept():
    c = contracts.loads(
        BASE.replace("preset: a100-int8", "{preset: bf16, matmul: {k_max: 8192}}"),
        path="t.yaml",
    )
    assert c.kernels.inference.matmul.k_max == 8192
    assert from_canonical(c.source.canonical).kernels == c.kernels


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda m: m["epilogue"].update(order="acc_sx_sw", fused=True),
            "kernels.inference.matmul.epilogue.order: a fused epilogue rounds the exact "
            "product once: no order",
        ),
        (
            lambda m: m.update(accumulator={"dtype": "int32", "mantissa_bits": 31}),
            "kernels.inference.matmul.accumulator.mantissa_bits: give dtype or mantissa_bits, "
            "not both",
        ),
        (
            lambda m: m.update(epilogue=None),
            "kernels.inference.matmul.epilogue: expected a mapping, got null",
        ),
    ],
)
def test_a_forged_int8_canonical_form_is_refused(change, message):
    plain = json.loads(_load().source.canonical)
    change(plain["kernels"]["inference"]["matmul"])
    text = json.dumps(plain, sort_keys=True, separators=(",", ":"))
    with pytest.raises(contracts.ContractError) as info:
        from_canonical(text)
    assert [f"{p.key}: {p.message}" for p in info.value.problems] == [message]


def test_an_order_is_required_when_a_fused_start_is_made_separate():
    """No shipped preset is fused, so this rule is reached through the reader directly."""
    from kernel_contracts.contracts.checks import Checker
    from kernel_contracts.contracts.kernelspec import _epilogue

    ck = Checker("t.yaml", {})
    start = EpilogueSpec(order=None, fused=True)
    assert _epilogue(ck, {"fused": False}, "m.epilogue", start) is None
    assert [p.message for p in ck.problems] == [
        "fused: false needs an order (acc_sx_sw, acc_sw_sx, acc_sxsw)"
    ]
    assert _epilogue(ck, {"fused": False, "order": "acc_sxsw"}, "m.epilogue", start) == (
        EpilogueSpec(order="acc_sxsw", fused=False)
    )


def test_schema_knows_the_int8_fields():
    jsonschema = pytest.importorskip("jsonschema")
    schema = contracts.json_schema()
    matmul = schema["properties"]["kernels"]["properties"]["inference"]["properties"]["matmul"]
    assert "int8" in matmul["properties"]["inputs"]["enum"]
    assert "int32" in matmul["properties"]["accumulator"]["properties"]["dtype"]["enum"]
    validator = jsonschema.Draft202012Validator(schema)
    tree = {
        "contract": 1,
        "name": "t",
        "kernels": {
            "train": {"preset": "fp32"},
            "inference": {"preset": "a100-int8", "matmul": {"epilogue": {"order": "later"}}},
        },
    }
    assert not validator.is_valid(tree)
    tree["kernels"]["inference"]["matmul"]["epilogue"]["order"] = "acc_sx_sw"
    assert validator.is_valid(tree)
