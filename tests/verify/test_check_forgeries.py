"""Forged reports and promotion records that ``verify check`` must refuse: confidence bounds
edited against their own raw values, and a stage record resting on such a report.

Each report here comes from the real pipeline on the shipped rollout-log example, edited as
someone who wants a pass would edit it: the verdicts, the overall status and the exit code made
consistent with the forged numbers, so that only a recomputation can tell.
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
import shutil

import pytest

from kernel_contracts.contracts.canonical import from_canonical
from kernel_contracts.verify.pipeline.promotion.record import checks, held, sha256_text
from kernel_contracts.verify.proving.check.recheck import check_data
from tests.verify.test_promotion import CONTRACT as PROMOTED
from tests.verify.test_promotion import _run, _sha, _stage

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "contracts" / "examples"
RATE = "S_large_ratio_rate"
# the Clopper–Pearson bounds at 95 %, to 10 digits: 209 of 4096 tokens above 0.2 on all
# tokens, 80 of 1060 on the tail tokens (the regularized incomplete beta function inverted
# at 30 digits in mpmath gives the same)
UPPER = {"all": 0.05704511912, "tail_tokens": 0.09018577380}
LOWER = {"all": 0.04548674645, "tail_tokens": 0.06254324725}


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The report of the shipped rollout-log example and the directory it was written in."""
    root = tmp_path_factory.mktemp("rollout")
    for name in ("rollout-log.yaml", "rollout-sample.jsonl"):
        shutil.copy(EXAMPLES / name, root / name)
    code, _, err = _run(root / "rollout-log.yaml", "--json", root / "r.json", "--quiet")
    assert code == 1, err
    return json.loads((root / "r.json").read_text()), root


def _clause(report: dict, id_: str, slice_: str) -> dict:
    return next(c for c in report["clauses"] if (c["id"], c["slice"]) == (id_, slice_))


def _differences(report: dict, root) -> tuple[str, ...]:
    return check_data(report, report_dir=str(root)).differences


def _number(text: str) -> float:
    return float(re.fullmatch(r".* gives ([0-9.e-]+)", text).group(1))


def test_the_shipped_report_re_checks_and_holds_both_rate_bounds(shipped):
    report, root = shipped
    assert _differences(report, root) == ()
    for name in UPPER:
        c = _clause(report, RATE, name)
        assert c["bound"] == pytest.approx(UPPER[name], rel=1e-9)
        assert c["lower"] == pytest.approx(LOWER[name], rel=1e-9)
        assert c["lower"] < c["value"] < c["bound"]
        assert c["value"] == c["basis"]["count"] / c["samples"]


def test_a_clopper_pearson_bound_below_its_own_rate_is_refused(shipped):
    """The issue's forgery: the upper bound 0.0499 beside rates 0.051 and 0.0755, both clauses
    held. The overall status stays violated (the numerical clause is not touched), so the
    report's status is consistent and only the bounds differ."""
    report, root = shipped
    forged = copy.deepcopy(report)
    for name in UPPER:
        _clause(forged, RATE, name).update(bound=0.0499, status="held")
    found = _differences(forged, root)
    assert [d.split(": ")[0] for d in found] == [
        f"clauses[{RATE}/all].bound",
        f"clauses[{RATE}/tail_tokens].bound",
    ]
    for d, name in zip(found, UPPER, strict=True):
        assert d.startswith(
            f"clauses[{RATE}/{name}].bound: 0.0499 but Clopper–Pearson at confidence 0.95 gives "
        )
        assert _number(d) == pytest.approx(UPPER[name], rel=1e-9)


def test_a_forged_count_behind_a_lowered_bound_is_refused(shipped):
    """Lowering the exceedance count with the bound leaves the rate it must give."""
    report, root = shipped
    forged = copy.deepcopy(report)
    c = _clause(forged, RATE, "tail_tokens")
    c.update(status="held", bound=0.0499, basis={"count": 30})
    found = _differences(forged, root)
    assert found[0] == (
        f"clauses[{RATE}/tail_tokens].value: {c['value']!r} but 30 of 1060 tokens give "
        f"{30 / 1060!r}"
    )
    assert any(d.startswith(f"clauses[{RATE}/tail_tokens].bound: 0.0499 but ") for d in found)


def test_a_violation_edited_to_inconclusive_is_refused(shipped):
    """The lower bound tells violated from inconclusive: it is recomputed, so the verdict is
    exactly one of them."""
    report, root = shipped
    forged = copy.deepcopy(report)
    _clause(forged, RATE, "tail_tokens").update(status="inconclusive", lower=0.04)
    found = _differences(forged, root)
    assert found[0].startswith(f"clauses[{RATE}/tail_tokens].lower: 0.04 but Clopper–Pearson ")
    assert _number(found[0]) == pytest.approx(LOWER["tail_tokens"], rel=1e-9)
    forged = copy.deepcopy(report)
    _clause(forged, RATE, "tail_tokens")["status"] = "inconclusive"
    (found,) = _differences(forged, root)
    assert found.startswith(
        f"clauses[{RATE}/tail_tokens].status: inconclusive, but its numbers (1060 samples, bound "
    )
    assert found.endswith(", max 0.05) give violated")


def test_a_quantile_bound_below_its_own_point_estimate_is_refused(shipped):
    report, root = shipped
    forged = copy.deepcopy(report)
    c = _clause(forged, "S_tail_ratio", "all")
    value, bound = c["value"], c["bound"]
    c["bound"] = 0.32
    assert c["lower"] < 0.32 < value < bound
    assert _differences(forged, root) == (
        f"clauses[S_tail_ratio/all].bound: 0.32 is below value {value!r}, the order statistic "
        "of a rank ≤ its own (4056 ≤ 4066)",
    )


def test_a_quantile_bound_at_another_rank_is_refused(shipped):
    report, root = shipped
    forged = copy.deepcopy(report)
    c = _clause(forged, "S_tail_ratio", "all")
    c["basis"] = dict(c["basis"], bound_rank=4056)
    assert _differences(forged, root) == (
        "clauses[S_tail_ratio/all].basis: {'value_rank': 4056, 'bound_rank': 4056, "
        "'lower_rank': 4044} but 4096 samples at q 0.99 and confidence 0.95 give "
        "{'value_rank': 4056, 'bound_rank': 4066, 'lower_rank': 4044}",
    )


def test_a_report_without_the_raw_values_of_its_bounds_is_refused(shipped):
    """A report written before the bounds' inputs were recorded cannot be re-checked."""
    report, root = shipped
    old = copy.deepcopy(report)
    for c in old["clauses"]:
        del c["lower"], c["basis"]
    found = _differences(old, root)
    n = len(report["clauses"])
    assert found[:n] == tuple(f"clauses[{i}]: missing fields: ['basis', 'lower']" for i in range(n))


# ---- a promotion record inherits every check of its report -------------------------------

RATE_CLAUSE = """\
  - {id: S2, metric: abs_log_ratio, statistic: exceed_rate, threshold: 0.2, max: 0.05,
     confidence: 0.95, min_samples: 500}
"""


def _forge_stage(promo, stage: str) -> None:
    """Edit the stage's report as above (S2's bound below its rate, held) and make its record
    agree: the report's new sha256, status and exit code, the checks recomputed, passed."""
    report_file, record_file = promo / f"{stage}.report.json", promo / f"{stage}.json"
    report = json.loads(report_file.read_text())
    _clause(report, "S2", "all").update(bound=0.0499, status="held")
    report["status"], report["exit_code"] = "held", 0
    text = json.dumps(report, indent=2) + "\n"
    report_file.write_text(text)
    record = json.loads(record_file.read_text())
    contract = from_canonical(report["contract"]["canonical"])
    record["report"].update(sha256=sha256_text(text), status="held", exit_code=0)
    record["checks"] = checks(contract, stage, report, record["traffic"])
    record["held"] = held(contract, report)
    record["passed"] = all(c["met"] for c in record["checks"])
    assert record["passed"]
    record_file.write_text(json.dumps(record, indent=2) + "\n")


def test_a_forged_stage_record_fails_check_and_blocks_the_next_stage(tmp_path):
    contract = tmp_path / "c.yaml"
    contract.write_text(PROMOTED.replace("guarantees:", RATE_CLAUSE + "guarantees:"))
    promo = tmp_path / "promo"
    promo.mkdir()
    code, out, _ = _stage(contract, promo, ["offline_ci"])
    assert code == 1, out  # S2 is inconclusive: 209 of 4096 tokens, bounds 0.045 and 0.057
    _forge_stage(promo, "offline_ci")
    report_file = promo / "offline_ci.report.json"
    assert json.loads((promo / "offline_ci.json").read_text())["report"]["sha256"] == _sha(
        report_file
    )
    code, out, err = _run("check", promo / "offline_ci.json")
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert len(lines) == 2, out
    assert lines[0].startswith(
        f"DIFFERENCE report {report_file}: clauses[S2/all].bound: 0.0499 but Clopper–Pearson at "
        "confidence 0.95 gives 0.0570451191"
    )
    assert lines[1] == f"{promo / 'offline_ci.json'}: 1 difference(s)"
    before = sorted(p.name for p in promo.iterdir())
    code, out, err = _stage(contract, promo, ["shadow"])
    assert (code, out) == (2, "")
    assert err.startswith(
        f"verify: --stage shadow: {promo}/offline_ci.json: does not re-check: report "
        f"{report_file}: clauses[S2/all].bound: 0.0499 but Clopper–Pearson at confidence 0.95 "
        "gives 0.0570451191"
    )
    assert err.count("\n") == 1
    assert sorted(p.name for p in promo.iterdir()) == before  # nothing written
