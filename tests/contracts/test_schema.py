"""The JSON Schema of DSL v1: well formed, met by every shipped contract, and in agreement
with the validator on which keys exist and which are required."""

from __future__ import annotations

import copy
import functools
import json
import pathlib

import pytest

from kernel_contracts import contracts
from kernel_contracts.contracts.document import read_document
from kernel_contracts.contracts.fields import OBJECTS

jsonschema = pytest.importorskip("jsonschema")

ROOT = pathlib.Path(__file__).resolve().parents[2]
KITCHEN_SINK = ROOT / "tests" / "data" / "valid" / "kitchen_sink.yaml"
SHIPPED = [*sorted((ROOT / "contracts" / "examples").glob("*.yaml")), KITCHEN_SINK]


def _tree(path: pathlib.Path):
    doc = read_document(path.read_bytes(), str(path))
    assert doc.problems == ()
    return doc.tree


@functools.cache
def _validator():
    schema = contracts.json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _objects(schema: dict) -> dict[str, list[dict]]:
    """Each DSL object of the schema under the name the validator's table uses."""
    p = schema["properties"]
    kernel = p["kernels"]["properties"]["train"]
    matmul = kernel["properties"]["matmul"]
    stages = p["promotion"]["properties"]
    return {
        "contract": [schema],
        "policy": [p["policy"]],
        "kernels": [p["kernels"]],
        "kernel": [kernel, p["kernels"]["properties"]["inference"]],
        "matmul": [matmul],
        "accumulator": [matmul["properties"]["accumulator"]],
        "epilogue": [matmul["properties"]["epilogue"]],
        "attention": [kernel["properties"]["attention"]],
        "numerical": [p["numerical"]["items"]],
        "statistical": [p["statistical"]["items"]],
        "runtime": [p["runtime"]["items"]],
        "observability": [p["observability"]["items"]],
        "slice": [p["slices"]["additionalProperties"]],
        "guarantee": [p["guarantees"]["items"]],
        "escalation": [p["escalation"]["items"]],
        "when": [p["escalation"]["items"]["properties"]["when"]],
        "promotion": [p["promotion"]],
        "stage": [stages[s]["anyOf"][0] for s in stages],
        "evidence": [p["evidence"]],
        "emulate": [p["evidence"]["properties"]["emulate"]["anyOf"][0]],
        "logprobs": [p["evidence"]["properties"]["logprobs"]],
    }


def test_schema_is_valid_draft_2020_12():
    schema = contracts.json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    json.dumps(schema)  # plain JSON data
    schema["title"] = "changed"
    assert contracts.json_schema()["title"] != "changed"  # callers get a copy


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_contracts_conform(path):
    contracts.load(path)
    errors = [e.message for e in _validator().iter_errors(_tree(path))]
    assert errors == []


def test_schema_and_validator_agree_on_keys():
    found = _objects(contracts.json_schema())
    assert set(found) == set(OBJECTS)
    for name, objects in found.items():
        fields = OBJECTS[name]
        union = set().union(*(o["properties"] for o in objects))
        assert union == set(fields.known), name
        for o in objects:
            assert o["additionalProperties"] is False, name
            assert set(o.get("required", ())) == set(fields.required), name
            assert o.get("description"), name


def _unknown_key_cases():
    """(description, key path, mutate) for an unknown key in every kind of DSL object."""
    places = {
        "contract": [],
        "policy": ["policy"],
        "kernels": ["kernels"],
        "kernel": ["kernels", "inference"],
        "matmul": ["kernels", "inference", "matmul"],
        "accumulator": ["kernels", "inference", "matmul", "accumulator"],
        "epilogue": ["kernels", "train", "matmul", "epilogue"],
        "attention": ["kernels", "inference", "attention"],
        "numerical": ["numerical", 0],
        "statistical": ["statistical", 0],
        "runtime": ["runtime", 0],
        "observability": ["observability", 0],
        "slice": ["slices", "tail_tokens"],
        "guarantee": ["guarantees", 0],
        "escalation": ["escalation", 0],
        "when": ["escalation", 0, "when"],
        "promotion": ["promotion"],
        "stage": ["promotion", "shadow"],
        "evidence": ["evidence"],
        "emulate": ["evidence", "emulate"],
        "logprobs": ["evidence", "logprobs"],
    }
    assert set(places) == set(OBJECTS)
    return sorted(places.items())


@pytest.mark.parametrize(("name", "place"), _unknown_key_cases(), ids=lambda x: str(x))
def test_unknown_key_is_refused_by_both(name, place):
    tree = copy.deepcopy(_tree(KITCHEN_SINK))
    target = tree
    for step in place:
        target = target[step]
    target["zz_unknown"] = 1
    assert not _validator().is_valid(tree)
    key = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in place).lstrip(".")
    key = f"{key}.zz_unknown" if key else "zz_unknown"
    with pytest.raises(contracts.ContractError) as info:
        contracts.loads(json.dumps(tree), path="k.json")  # JSON is YAML
    assert [(p.key, p.message) for p in info.value.problems] == [(key, "unknown key")]


@pytest.mark.parametrize(
    ("place", "value"),
    [
        (["policy", "temperature"], 0),
        (["policy", "top_p"], 1.5),
        (["statistical", 0, "confidence"], 1.2),
        (["numerical", 0, "max"], -1),
        (["numerical", 0, "max"], True),
        (["guarantees", 3, "clip_epsilon"], 1),
        (["guarantees", 2, "cap"], -1),
        (["guarantees", 7, "band"], [1.0, 2.0]),
        (["guarantees", 8, "threshold"], 1),
        (["kernels", "inference", "preset"], "h100-fp9"),
        (["kernels", "inference", "matmul", "scaling"], "block:0"),
        (["kernels", "inference", "matmul", "scaling"], "block:08"),
        (["kernels", "inference", "matmul", "scaling"], "mx:16"),
        (["runtime", 0, "batch_size"], [1, 2, 3]),
        (["contract"], 2),
    ],
    ids=str,
)
def test_bad_values_are_refused_by_both(place, value):
    tree = copy.deepcopy(_tree(KITCHEN_SINK))
    target = tree
    for step in place[:-1]:
        target = target[step]
    target[place[-1]] = value
    assert not _validator().is_valid(tree)
    with pytest.raises(contracts.ContractError):
        contracts.loads(json.dumps(tree))


def _required_key_cases():
    places = dict(_unknown_key_cases())
    return [(name, places[name], key) for name in sorted(OBJECTS) for key in OBJECTS[name].required]


@pytest.mark.parametrize(("name", "place", "key"), _required_key_cases(), ids=str)
def test_missing_required_key_is_refused_by_both(name, place, key):
    tree = copy.deepcopy(_tree(KITCHEN_SINK))
    target = tree
    for step in place:
        target = target[step]
    del target[key]
    assert not _validator().is_valid(tree)
    with pytest.raises(contracts.ContractError) as info:
        contracts.loads(json.dumps(tree))
    where = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in place).lstrip(".")
    path = f"{where}.{key}" if where else key
    assert (path, "missing required key") in [(p.key, p.message) for p in info.value.problems]
