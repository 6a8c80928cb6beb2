"""The conformance suite with its positive controls: the null fault is detected by no check,
every other fault by the check designed for it, the table is computed from the runs; the
checks and faults on hand-made cases; ``python -m verify conformance`` and its bad input."""

from __future__ import annotations

import json
import pathlib
from dataclasses import replace

import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.contracts.presets import PRESETS
from kernel_contracts.kernels._matmul import matmul
from kernel_contracts.kernels.diagnose.faults import FAULTS, applies, designed_check, inject
from kernel_contracts.kernels.numerics.ulp import identical
from kernel_contracts.verify.diagnostics.conformance import CHECKS, Model, Observed, run_suite
from kernel_contracts.verify.diagnostics.conformance.checks import Baseline, sign_test
from kernel_contracts.verify.diagnostics.conformance.probes import boundary_position, probes
from tests.support.cli_runner import malformed_contract, run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "contracts" / "examples"
INT8 = PRESETS["a100-int8"]
D, VOCAB = 64, 16  # one matmul of the random probe's shape (64 rows, K = 64, 16 columns)


def _logits(params, tokens):
    return jnp.tanh(params["embed"][tokens]) @ params["head"]


def _model() -> Model:
    rng = np.random.default_rng(0)
    params = {
        "embed": rng.standard_normal((VOCAB, D)).astype(np.float32),
        "head": rng.standard_normal((D, VOCAB)).astype(np.float32),
    }
    return Model(_logits, params, rng.integers(0, VOCAB, (4, 16)).astype(np.int32))


@pytest.fixture(scope="module")
def table():
    return run_suite(INT8, seed=0, model=_model())


# ------------------------------------------------------------------ the table's promises


def test_the_null_fault_is_detected_by_no_check(table):
    null = next(r for r in table.rows if r.fault == "null")
    assert null.applies
    assert [v.fired for v in null.verdicts] == [False] * len(CHECKS)  # every check ran
    assert table.false_alarms == ()


@pytest.mark.parametrize("fault", [f.name for f in FAULTS if f.name != "null"])
def test_each_fault_is_detected_by_the_check_designed_for_it(table, fault):
    row = next(r for r in table.rows if r.fault == fault)
    assert row.applies and row.designed == designed_check(fault, INT8.matmul)
    verdict = row.verdicts[table.checks.index(row.designed)]
    assert verdict.fired is True, verdict.detail


def test_the_flags_follow_from_the_verdicts(table):
    fired = {
        (r.fault, c): v.fired
        for r in table.rows
        for c, v in zip(table.checks, r.verdicts, strict=True)
    }
    faults = [r.fault for r in table.rows if r.fault != "null"]
    silent = tuple(c for c in table.checks if not any(fired[f, c] for f in faults))
    assert table.silent_checks == silent
    assert table.undetected == () and table.missed == () and table.ok
    # detection is not the same everywhere: the table has more than the designed checks in it
    assert fired["truncation", "bit_identity"] and not fired["order_swapped", "bit_identity"]
    assert fired["int32_overflow", "int8_exactness"] and not fired["int32_overflow", "max_ulp"]


def test_a_verdict_is_what_its_fault_does_to_the_probes(table):
    """The truncation row's rounding-bias count, recomputed from the fault's implementation
    and the NumPy reference on the random probe alone (a subset of what the check saw)."""
    pr = probes(INT8.matmul, 0)
    got = np.asarray(inject("truncation", INT8.matmul).matmul(pr.random_x, pr.random_w, 1))
    ref = matmul(pr.random_x, pr.random_w, INT8.matmul, impl="numpy")
    moved = ~identical(ref, got)
    assert (np.abs(got[moved]) < np.abs(ref[moved])).all()  # every change is toward zero
    detail = table.rows[[r.fault for r in table.rows].index("truncation")].verdicts[3].detail
    toward, total = (int(t) for t in detail.split(" differing")[0].split(" of "))
    assert toward == total >= int(moved.sum()) > 0


# ------------------------------------------------------------------ checks, faults, probes


def _obs(random, **kw) -> Observed:
    base = dict(extreme=None, boundary=None, ties=None, exactness=None, k_max_in_range=None,
                logits=None, batch=())  # fmt: skip
    return Observed(random=np.float32(random), **{**base, **kw})


def _base(random) -> Baseline:
    r = np.float32(random)
    star = r.astype(np.float64)
    return Baseline("bfloat16", r, None, None, None, np.ones_like(r, bool), None,
                    (star, np.full_like(star, 0.01), np.zeros_like(star)), None, None)  # fmt: skip


def test_checks_on_hand_made_outputs():
    run = {c.name: c.run for c in CHECKS}
    ref = [1.0, 2.0, -3.0]
    same = run["bit_identity"](_obs(ref), _base(ref))
    assert (same.fired, same.value) == (False, 1.0)
    off = [1.0078125, 2.0, -3.0]  # one bf16 ulp at 1.0
    assert run["bit_identity"](_obs(off), _base(ref)).fired
    assert not run["max_ulp"](_obs(off), _base(ref)).fired  # 1 ulp is within the limit
    two = [1.015625, 2.0, -3.0]
    assert run["max_ulp"](_obs(two), _base(ref)).value == 2.0
    bound = run["apriori_bound"](_obs([1.005, 2.0, -3.0]), _base(ref))
    assert bound.fired is False and bound.value == pytest.approx(0.5, rel=1e-6)
    assert run["apriori_bound"](_obs([1.02, 2.0, -3.0]), _base(ref)).fired
    assert run["int8_exactness"](_obs(ref), _base(ref)).fired is None  # not int8
    assert run["top1_agreement"](_obs(ref), _base(ref)).fired is None  # no model
    varies = np.array([False, True, True])  # the reference's row 0 changes alone too
    batch = ((np.float32(ref), np.float32(off), varies),)
    assert not run["batch_invariance"](_obs(ref, batch=batch), _base(ref)).fired
    batch = ((np.float32(ref), np.float32(off), ~varies),)
    assert run["batch_invariance"](_obs(ref, batch=batch), _base(ref)).fired


def test_sign_test_hand_values():
    assert sign_test(0, 10) == 2 / 1024
    assert sign_test(5, 10) == 1.0
    assert sign_test(1, 3) == 1.0
    assert sign_test(0, 0) == 1.0
    assert sign_test(20, 20) == 2 / 2**20


def test_fault_applicability_and_refusal():
    specs = [PRESETS[p].matmul for p in ("fp32", "h100-fp8", "mxfp8", "a100-int8")]
    specs.append(replace(INT8.matmul, k_max=1024))  # 1024·127² ≤ 2**24: float32 sums exact
    table = {f.name: tuple(applies(f.name, s) for s in specs) for f in FAULTS}
    assert table == {  #   fp32  h100-fp8 mxfp8 a100-int8 (k_max 1024)
        "null": (True, True, True, True, True),
        "scale_bf16": (False, True, False, True, True),  # MX scales: powers of two, exact
        "double_rounding": (False, True, True, True, True),
        "order_swapped": (False, False, False, True, True),
        "truncation": (False, True, True, True, True),
        "fused_vs_separate": (False, False, False, True, True),
        "int32_overflow": (False, False, False, True, True),
        "beyond_2_24": (False, False, False, True, False),
        "operand_mismatch": (True, True, True, True, True),
    }
    with pytest.raises(ValueError, match="does not apply"):
        inject("order_swapped", specs[1])


def test_output_faults_on_hand_values():
    from kernel_contracts.kernels.diagnose.faults import _round_bits, _truncate
    from kernel_contracts.kernels.numerics.formats import cast_output_np

    y = np.float32([1.0 + 3 * 2**-8, -(1.0 + 3 * 2**-8), 65519.0])
    assert _truncate(y, "bfloat16").tolist() == [1.0 + 2**-7, -(1.0 + 2**-7), 65280.0]
    y16 = np.float32([1.0 + 3 * 2**-11, 65519.0, 1e30])
    assert _truncate(y16, "float16").tolist() == [1.0 + 2**-10, 65504.0, 65504.0]
    # 1 + 2**-8 + 2**-12 rounds to 10 bits as 1 + 2**-8, a bfloat16 tie that goes to even:
    # twice rounded it is 1, once rounded 1 + 2**-7
    z = np.float32([1.0 + 2**-8 + 2**-12])
    assert _round_bits(z, 10).tolist() == [1.0 + 2**-8]
    assert cast_output_np(_round_bits(z, 10), "bfloat16").tolist() == [1.0]
    assert cast_output_np(z, "bfloat16").tolist() == [1.0 + 2**-7]


def test_boundary_position_hand_values():
    v = np.array([1.0 + 2**-8, 1.0 + 2**-8 + 2**-20, 1.0, 3.0])
    assert boundary_position(v, "bfloat16", False).tolist() == [0.0, 2**-13, 0.5, 0.5]
    assert boundary_position(v, "bfloat16", True).tolist() == [0.5, 0.5 - 2**-13, 0.0, 0.0]


# ------------------------------------------------------------------------- command line


def _run(*argv):
    return run_cli("conformance", *argv)


def test_cli_table_for_a_float32_kernel(tmp_path):
    report = tmp_path / "conf.json"
    contract = EXAMPLES / "int8-serving.yaml"
    code, out, err = _run(contract, "--kernel", "train", "--sequences", 0, "--json", report)
    assert (code, err) == (0, "")
    assert "conformance of the train kernel (fp32), seed 0" in out
    assert "double_rounding   not applicable to this kernel" in out
    assert out.endswith("conformance: ok\n")
    doc = json.loads(report.read_text())
    rows = {r["fault"]: r for r in doc["faults"]}
    assert rows["operand_mismatch"]["checks"]["bit_identity"]["fired"] is True
    assert rows["null"]["checks"]["bit_identity"]["fired"] is False
    assert doc["inapplicable"] == ["rounding_boundaries", "int8_exactness", "top1_agreement"]


def test_cli_bad_input_exits_2_with_one_message_and_writes_nothing(tmp_path):
    contract = EXAMPLES / "int8-serving.yaml"
    missing = tmp_path / "missing.yaml"
    malformed, expected = malformed_contract()
    report = tmp_path / "out.json"
    cases = [
        ([missing], f"{missing}: no such file\n"),
        ([malformed], expected),
        ([contract, "--model", "gpt-9"],
         "--model gpt-9: unknown model (shipped: tiny-lm; or an entry point "
         "package.module:function with --params PATH)\n"),
        ([contract, "--model", "pkg.mod:fn"],
         "--model pkg.mod:fn: an entry point needs --params PATH\n"),
        ([contract, "--length", 200],
         "--length 200: model tiny-lm runs sequences of at most 128 tokens\n"),
        ([contract, "--length", 0],
         "--length 0: the top-1 check needs at least one token per sequence\n"),
        ([contract, "--json", contract],
         f"verify: cannot write {contract}: it is the contract ({contract}); a report never "
         "overwrites its input\n"),
    ]  # fmt: skip
    for argv, message in cases:
        code, out, err = _run(*argv, *([] if "--json" in argv else ["--json", report]))
        assert (code, out, err) == (2, "", message), argv
        assert not report.exists()
    code, out, err = _run(contract, "--kernel", "gpu")
    assert (code, out) == (2, "")
    assert err.endswith(
        "argument --kernel: invalid choice: 'gpu' (choose from 'inference', 'train')\n"
    )
