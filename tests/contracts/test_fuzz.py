"""Fuzzing the loader: whatever the input, the only exception is ContractError, every problem
is well formed, and whatever loads has a stable canonical form."""

from __future__ import annotations

import json
import math
import pathlib

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kernel_contracts import contracts
from kernel_contracts.contracts import ContractError
from kernel_contracts.contracts.fields import OBJECTS, QUANTITIES
from tests.support.strategies import examples

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = [
    p.read_text(encoding="utf-8")
    for p in [
        *sorted((ROOT / "contracts" / "examples").glob("*.yaml")),
        ROOT / "tests" / "data" / "valid" / "kitchen_sink.yaml",
    ]
]
FAST = settings(examples(150), suppress_health_check=[HealthCheck.too_slow])


def _check(data: str | bytes) -> contracts.Contract | None:
    """Load ``data``; a rejection must be a ContractError with well-formed problems."""
    try:
        c = contracts.loads(data, path="fuzz.yaml")
    except ContractError as e:
        assert e.problems
        for p in e.problems:
            assert p.path == "fuzz.yaml"
            assert p.line is None or (p.line >= 1 and p.col >= 1)
            assert p.message and "\n" not in p.message
            assert str(p).startswith("fuzz.yaml")
        assert str(e) == "\n".join(map(str, e.problems))
        return None
    assert json.loads(c.source.canonical)["name"] == c.name
    assert contracts.loads(data, path="fuzz.yaml").source.canonical == c.source.canonical
    return c


@FAST
@given(st.binary(max_size=400))
@example(b"\xff\xfe\x00")
@example(b"\x00")
@example(b"&a [*a]")
@example(b"? [a]\n: b")
@example(b"!!binary aGk=")
@example(b"a: !!float abc")
@example(b"a: !!int 1.5")
@example(b"a: !!bool maybe")
@example(b"a: !!null x")
@example(b"%YAML 1.1\n---\na: 1")
def test_random_bytes(data):
    _check(data)


_YAMLISH = st.text(
    alphabet=st.sampled_from([*":-[]{},&*!|>'\"#?%@` \n\t.eE+0123456789abcNxy~", "\u00e9"]),
    max_size=120,
)


@FAST
@given(_YAMLISH)
def test_random_yaml_punctuation(text):
    _check(text)


_KEYS = [*sorted({k for f in OBJECTS.values() for k in f.known}), "all", "x", "N1", "<<"]
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        ["fp32", "h100-fp8", "N1", "G1", "all", "token_tv", "logit_drift", "tv", "quantile",
         "processed", "tis", "sequence", "1e-3", "yes", ".inf", "float32", "block:128", ""]
    ),
    st.text(max_size=8),
)  # fmt: skip
_TREES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=6), inner, max_size=5),
    ),
    max_leaves=30,
)


def _json(tree) -> str:
    """JSON text (which is YAML); non-finite floats as YAML's .inf/.nan."""
    return (
        json.dumps(tree, allow_nan=True)
        .replace("-Infinity", "-.inf")
        .replace("Infinity", ".inf")
        .replace("NaN", ".nan")
    )


@FAST
@given(st.dictionaries(st.sampled_from(OBJECTS["contract"].known), _TREES, max_size=8))
def test_random_contract_shaped_mappings(tree):
    _check(_json(tree))


_TOKENS = [
    "-1", "0", "1", "2", "0.5", "1.5", ".nan", "-.inf", "1e999", "1e-3", "yes", "null", "~",
    "[]", "{}", "[0, 1]", "[1, 0]", "*x", "&x 1", "!!python/none", "'s'", "N9", "all", "G1",
    "S1", "tail_tokens", "true", "fp32", "tis", "sequence", "token_kl",
]  # fmt: skip


@FAST
@given(
    st.sampled_from(range(len(SOURCES))),
    st.lists(
        st.tuples(st.sampled_from(["delete", "duplicate", "swap", "value", "indent"]),
                  st.integers(0, 10**6), st.integers(0, 10**6), st.sampled_from(_TOKENS)),
        min_size=1, max_size=4,
    ),
)  # fmt: skip
def test_mutated_shipped_contracts(which, edits):
    lines = SOURCES[which].splitlines()
    for op, i, j, token in edits:
        i, j = i % len(lines), j % len(lines)
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "value" and ": " in lines[i]:
            lines[i] = lines[i][: lines[i].index(": ") + 2] + token
        elif op == "indent":
            lines[i] = "  " + lines[i]
    _check("\n".join(lines) + "\n")


@examples(200)
@given(st.floats(min_value=0, allow_nan=False, allow_infinity=False))
def test_thresholds_read_back_exactly(x):
    text = (
        "contract: 1\nname: n\nkernels: {train: {preset: fp32}, inference: {preset: bf16}}\n"
        f"numerical: [{{id: N1, metric: tv, max: {x!r}}}]\n"
    )
    c = contracts.loads(text)
    assert c.clause("N1").max == x
    assert math.copysign(1, c.clause("N1").max) == math.copysign(1, x)


@examples(100)
@given(st.sampled_from(QUANTITIES), st.floats(min_value=0, max_value=10))
def test_any_quantity_with_its_fields_loads(quantity, bound):
    extra = {
        "reward_drift": "    reward_range: [0, 1]\n",
        "pg_bias": "    score_norm: 1\n    advantage: 1\n",
        "clip_budget": "    clip_epsilon: 0.2\n",
    }.get(quantity, "")
    text = (
        "contract: 1\nname: n\nkernels: {train: {preset: fp32}, inference: {preset: mxfp8}}\n"
        "numerical: [{id: N1, metric: logit_oscillation, max: 0.1}]\n"
        f"guarantees:\n  - id: G1\n    quantity: {quantity}\n    max: {bound!r}\n"
        f"    from: [N1]\n{extra}"
    )
    c = contracts.loads(text)
    assert c.guarantee("G1").quantity == quantity and c.guarantee("G1").max == bound
