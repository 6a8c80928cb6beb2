"""The exactness obligations of int8 kernels: proved, refuted with a confirmed witness, at the
exact boundaries, in the report and re-derived by ``verify check``, which rejects forgeries."""

from __future__ import annotations

import copy
import dataclasses
import pathlib

import pytest

from kernel_contracts import contracts
from kernel_contracts.bounds import intexact
from kernel_contracts.verify.proving.check.recheck import check_data
from kernel_contracts.verify.proving.render.report import report_json
from kernel_contracts.verify.proving.runner import run

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "contracts" / "examples" / "int8-serving.yaml"


MINIMAL = """\
contract: 1
name: int8-exactness
kernels:
  train: {{preset: {train}, matmul: {{k_max: {k_max}}}}}
  inference: {{preset: {inference}, matmul: {{k_max: {k_max}}}}}
"""


def _contract(k_max: int, side: str = "inference"):
    """Only the kernels: the reports hold the two kernel obligations and nothing else."""
    kernels = {"train": "fp32", "inference": "fp32", side: "a100-int8"}
    text = MINIMAL.format(k_max=k_max, **kernels)
    return contracts.loads(text, path="int8-exactness.yaml")  # no such file: check notes it


@pytest.fixture(scope="module")
def reports():
    """Reports (as JSON data) at the boundaries of both claims."""
    out = {}
    for k in (1040, 1041, 4096, 133144, 133145):
        out[k] = report_json(run(_contract(k)))
    return out


def _kernel(report, oid):
    return next(o for o in report["obligations"] if o["id"] == oid)


def test_example_proves_both_and_names_the_epilogue():
    r = report_json(run(contracts.load(EXAMPLE)))
    assert r["status"] == "proved" and r["exit_code"] == 0
    ids = [o["id"] for o in r["obligations"]]
    assert ids == ["G_tv", "G_log_ratio", "inference:int32", "inference:fp32"]
    for oid in ("inference:int32", "inference:fp32"):
        o = _kernel(r, oid)
        assert o["status"] == "proved" and o["counterexample"] is None
        assert o["premises_used"] == [
            "kernels.inference.matmul.inputs",
            "kernels.inference.matmul.k_max",
        ]
        assert o["smtlib"][0]["answer"] == "unsat" and "QF_NIA" in o["smtlib"][0]["text"]
    notes = _kernel(r, "inference:fp32")["notes"]
    assert any("the epilogue is the only source of divergence" in n for n in notes)
    assert check_data(r, report_dir=str(ROOT)).ok


@pytest.mark.parametrize(
    ("k", "int32", "fp32"),
    [
        (1040, "proved", "proved"),
        (1041, "proved", "refuted"),
        (4096, "proved", "refuted"),
        (133144, "proved", "refuted"),
        (133145, "refuted", "refuted"),
    ],
)
def test_verdicts_flip_exactly_at_the_boundaries(reports, k, int32, fp32):
    r = reports[k]
    assert _kernel(r, "inference:int32")["status"] == int32
    assert _kernel(r, "inference:fp32")["status"] == fp32
    assert r["exit_code"] == (0 if fp32 == "proved" else 1)
    for oid in ("inference:int32", "inference:fp32"):
        o = _kernel(r, oid)
        assert o["bound_interval"] == [str(k * 16129)] * 2
        if o["status"] == "refuted":
            cex = o["counterexample"]
            assert cex["point"] == {"K": str(k)} and cex["source"].startswith("witness: ")
            total = int(cex["value_interval"][0])
            assert total > int(o["threshold"]["rational"])
            assert o["smtlib"][0]["answer"] == "sat"
    notes = _kernel(r, "inference:fp32")["notes"]
    wraps = any("no a priori bound: the int32 accumulator can wrap" in n for n in notes)
    assert wraps == (int32 == "refuted")
    if fp32 == "refuted" and int32 == "proved":
        assert any("conversion rounds too" in n for n in notes)


def test_refutations_are_confirmed_by_the_emulated_kernel(reports):
    """The reported witnesses, run through the int8 kernel: the accumulator wraps, and the
    accumulator value that float32 cannot hold is not converted exactly."""
    np = pytest.importorskip("numpy")
    from kernel_contracts.contracts import preset
    from kernel_contracts.kernels._matmul import int8_matmul

    for k, oid in ((133145, "inference:int32"), (1041, "inference:fp32")):
        claim = next(c for c in intexact.claims(_contract(k)) if c.id == oid)
        w = intexact.witness(claim)
        total = int(_kernel(reports[k], oid)["counterexample"]["value_interval"][0])
        assert w.total == total
        x = np.concatenate([np.full(n, v, np.float32) for v, n in w.x])[None, :]
        y = np.concatenate([np.full(n, v, np.float32) for v, n in w.w])[:, None]
        spec = dataclasses.replace(preset("a100-int8").matmul, k_max=k, output="float32")
        out = int8_matmul(x, y, spec, impl="numpy")
        assert int(out.exact[0, 0]) == total
        if oid.endswith("int32"):
            assert bool(out.overflow[0, 0]) and int(out.acc[0, 0]) == total - 2**32
        else:
            assert not out.overflow[0, 0] and float(out.y[0, 0]) != total  # scales are 1


def test_train_side_int8_kernel_gets_its_own_obligations():
    c = _contract(4096, side="train")
    assert [cl.id for cl in intexact.claims(c)] == ["train:int32", "train:fp32"]
    r = report_json(run(c))
    assert [o["id"] for o in r["obligations"]] == ["train:int32", "train:fp32"]
    assert _kernel(r, "train:fp32")["premises"][0] == "kernels.train.matmul.k_max"
    assert [o["status"] for o in r["obligations"]] == ["proved", "refuted"]
    result = check_data(r, report_dir=str(ROOT))
    assert result.ok, result.differences


@pytest.mark.parametrize("k", [1040, 133145])
def test_check_accepts_the_untouched_reports(reports, k):
    result = check_data(copy.deepcopy(reports[k]), report_dir=str(ROOT))
    assert result.ok, result.differences
    assert any("not found" in n for n in result.notes)


def _flip(o):
    o["status"] = "proved" if o["status"] == "refuted" else "refuted"


MUTATIONS = {
    "status": (_flip, "status"),
    "smtlib text": (
        lambda o: o["smtlib"][0].update(text=o["smtlib"][0]["text"].replace("(<= K", "(< K")),
        "smtlib",
    ),
    "recorded answer": (
        lambda o: o["smtlib"][0].update(answer="unsat" if o["status"] == "refuted" else "sat"),
        "recorded answer",
    ),
    "bound": (lambda o: o.update(bound_interval=["1", "1"]), "bound_interval"),
    "threshold": (
        lambda o: o.update(threshold={"rational": "4294967295", "float": 4294967295.0}),
        "threshold",
    ),
    "k_max": (lambda o: o["variables"][0].update(hi="100"), "variables"),
    "witness": (
        lambda o: o.update(
            counterexample={
                "point": {"K": "133145"},
                "value_interval": ["1", "1"],
                "value": 1.0,
                "source": "witness: made up",
            }
        ),
        "counterexample",
    ),
    "notes": (lambda o: o.update(notes=[]), "notes"),
    "extra field": (lambda o: o.update(comment="fine"), "fields no report has"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_check_rejects_a_forged_kernel_obligation(reports, name):
    change, where = MUTATIONS[name]
    report = copy.deepcopy(reports[133145 if name != "status" else 1040])
    change(_kernel(report, "inference:int32"))
    result = check_data(report, report_dir=str(ROOT))
    assert not result.ok
    assert any("obligations[inference:int32]" in d and where in d for d in result.differences), (
        result.differences
    )


def test_check_rejects_a_dropped_kernel_obligation(reports):
    report = copy.deepcopy(reports[1040])
    report["obligations"] = report["obligations"][:-1]
    result = check_data(report, report_dir=str(ROOT))
    assert any(
        "int8 kernels' ['inference:int32', 'inference:fp32']" in d for d in result.differences
    )


def test_kernel_obligations_do_not_import_jax():
    """A proofs-only run stays without JAX (``test_verify_cli`` runs the CLI in a fresh
    interpreter; these modules are on its path): no import of JAX or ``kernels`` anywhere in
    them, lazy imports included."""
    import ast

    for path in ("verify/proving/kernel_obligations.py", "bounds/intexact.py", "bounds/apriori.py"):
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        assert not [m for m in names if m.split(".")[0] in ("jax", "kernels")], path
