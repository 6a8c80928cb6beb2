"""Promotion stages: ``python -m verify CONTRACT.yaml --stage STAGE --promotion-dir DIR`` and
``python -m verify check RECORD.json``: each requirement, each refusal with its exact message
and exit code, records bound to the contract, the report and the previous record."""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil

import pytest

from tests.support.cli_runner import run_cli

SAMPLE = (
    pathlib.Path(__file__).resolve().parents[2] / "contracts" / "examples" / "rollout-sample.jsonl"
)
CONTRACT = """\
contract: 1
name: promo
policy: {temperature: 1.0, vocab_size: 256, max_new_tokens: 64}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
statistical:
  - {id: S1, metric: abs_log_ratio, statistic: quantile, q: 0.99, max: 0.5, confidence: 0.95,
     min_samples: 500}
guarantees:
  - {id: G1, quantity: token_tv, max: 0.41, from: [S1]}
promotion:
  offline_ci: {}
  shadow: {min_tokens: 1000}
  canary: {traffic: 0.05, min_tokens: 4000}
  full: {}
"""
STAGES = (["offline_ci"], ["shadow"], ["canary", "--traffic", "0.1"], ["full"])


def _run(*args):
    return run_cli(*args)


def _stage(contract, directory, stage, *extra):
    return _run(
        contract, "--evidence", SAMPLE, "--stage", *stage, "--promotion-dir", directory, "--quiet",
        *extra,
    )  # fmt: skip


def _sha(path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def _listing(directory) -> dict:
    return {
        p.name: p.read_bytes() if p.is_file() else None
        for p in sorted(pathlib.Path(directory).iterdir())
    }


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """A contract and a directory in which all four stages passed, in order."""
    root = tmp_path_factory.mktemp("chain")
    contract = root / "c.yaml"
    contract.write_text(CONTRACT)
    promo = root / "records" / "promo"  # missing: the first stage creates it and its parent
    for stage in STAGES:
        code, out, err = _stage(contract, promo, stage)
        assert (code, err) == (0, ""), out + err
        assert out.endswith(f"promotion: {stage[0]} passed (record {promo}/{stage[0]}.json)\n")
    return contract, promo


@pytest.fixture
def copy(chain, tmp_path):
    """A private copy of the chain: (contract, directory)."""
    contract = tmp_path / "c.yaml"
    shutil.copy(chain[0], contract)
    promo = tmp_path / "promo"
    shutil.copytree(chain[1], promo)
    return contract, promo


def test_four_stages_write_records_bound_to_contract_report_and_previous(chain):
    contract, promo = chain
    names = ["offline_ci", "shadow", "canary", "full"]
    assert sorted(p.name for p in promo.iterdir()) == sorted(
        [f"{n}.json" for n in names] + [f"{n}.report.json" for n in names]
    )
    previous = None
    for name in names:
        record = json.loads((promo / f"{name}.json").read_text())
        assert record["format"] == "kernel-contracts/promotion/1"
        assert (record["stage"], record["passed"]) == (name, True)
        assert record["contract"]["sha256"] == _sha(contract)
        assert record["report"] == {
            "path": f"{name}.report.json",
            "sha256": _sha(promo / f"{name}.report.json"),
            "status": "held",
            "exit_code": 0,
        }
        report = json.loads((promo / f"{name}.report.json").read_text())
        assert report["contract"]["sha256"] == _sha(contract)
        assert record["previous"] == (
            None
            if previous is None
            else {
                "stage": previous,
                "path": f"{previous}.json",
                "sha256": _sha(promo / f"{previous}.json"),
            }
        )
        assert record["held"] == ["S1[all]"]
        previous = name
    canary = json.loads((promo / "canary.json").read_text())
    assert (canary["traffic"], canary["tokens"]) == (0.1, 4096)
    assert canary["requirements"] == {"min_tokens": 4000, "traffic": 0.05}
    assert [(c["requirement"], c["met"], c["detail"]) for c in canary["checks"]] == [
        ("min_tokens", True, "4096 logged evidence tokens, 4000 required"),
        ("traffic", True, "traffic share declared 0.1, at least 0.05 required"),
        ("obligations", True, "1 of 1 proved"),
        ("clauses", True, "every clause held"),
        ("escalation", True, "no halt_promotion or rollback fired"),
    ]


def test_check_re_checks_a_record_and_its_whole_chain(chain):
    _, promo = chain
    code, out, err = _run("check", promo / "full.json")
    assert (code, err) == (0, "")
    assert out == (
        f"{promo / 'full.json'}: re-checked, all agree (stage full, passed; the chain of records "
        "and every report re-checked)\n"
    )


def test_requirements_not_met_write_a_failed_record_and_exit_1(copy):
    contract, promo = copy
    code, out, err = _stage(contract, promo, ["canary", "--traffic", "0.01"])
    assert (code, err) == (1, "")
    assert "traffic        NOT MET  traffic share declared 0.01, at least 0.05 required\n" in out
    assert out.endswith(f"promotion: canary not passed (record {promo}/canary.json)\n")
    record = json.loads((promo / "canary.json").read_text())
    assert record["passed"] is False
    assert _run("check", promo / "canary.json")[0] == 0  # a failed record re-checks too
    before = _listing(promo)
    code, out, err = _stage(contract, promo, ["full"])
    assert (code, out) == (2, "")
    assert err == (
        f"verify: --stage full: {promo}/canary.json: stage canary did not pass; run --stage "
        "canary again once it does\n"
    )
    assert _listing(promo) == before


def test_min_tokens_and_unmeasured_clauses_are_requirements(tmp_path):
    contract = tmp_path / "c.yaml"
    # a top-1 flip needs the whole vocabulary: a sampled-token log cannot measure it at all;
    # the log bounds a drift only from below, so it cannot hold that either
    flip = (
        "numerical:\n  - {id: N1, metric: logit_drift, max: 0.5}\nstatistical:\n"
        "  - {id: S2, metric: top1_flip, statistic: mean, max: 0.5, confidence: 0.95}"
    )
    contract.write_text(CONTRACT.replace("statistical:", flip))
    promo = tmp_path / "promo"
    promo.mkdir()
    code, out, _ = _stage(contract, promo, ["offline_ci"])
    assert code == 1
    assert "clauses        NOT MET  N1[all] inconclusive; S2[all] not measured here nor held at " \
           "an earlier stage\n" in out  # fmt: skip
    code, out, _ = _run(contract, "--stage", "offline_ci", "--promotion-dir", promo, "--quiet")
    assert code == 1 and "min_tokens     met      0 evidence tokens, 0 required\n" in out


def test_min_tokens_counts_logged_tokens(tmp_path):
    contract = tmp_path / "c.yaml"
    contract.write_text(
        CONTRACT.replace("shadow: {min_tokens: 1000}", "shadow: {min_tokens: 5000}")
    )
    promo = tmp_path / "promo"
    promo.mkdir()
    assert _stage(contract, promo, ["offline_ci"])[0] == 0
    code, out, _ = _stage(contract, promo, ["shadow"])
    assert code == 1
    assert "min_tokens     NOT MET  4096 logged evidence tokens, 5000 required\n" in out


def test_a_halting_escalation_fails_the_stage(tmp_path):
    contract = tmp_path / "c.yaml"
    contract.write_text(
        CONTRACT + "escalation:\n  - {when: {clause: S1, status: [held]}, severity: critical, "
        "action: halt_promotion}\n"
    )
    promo = tmp_path / "promo"
    promo.mkdir()
    code, out, _ = _stage(contract, promo, ["offline_ci"])
    assert code == 1
    assert "escalation     NOT MET  halt_promotion on S1\n" in out


def _refused(contract, promo, stage, message, *extra):
    before = _listing(promo)
    code, out, err = _stage(contract, promo, stage, *extra)
    assert (code, out, err) == (2, "", message)
    assert _listing(promo) == before  # nothing written


def test_skipping_a_stage_is_refused(copy):
    contract, promo = copy
    (promo / "canary.json").unlink()
    _refused(
        contract, promo, ["full"],
        f"verify: --stage full: {promo}/canary.json: no record of stage canary; run --stage "
        "canary first (stages are not skipped)\n",
    )  # fmt: skip


def test_a_changed_contract_is_refused(copy):
    contract, promo = copy
    old = _sha(contract)
    contract.write_text(CONTRACT + "# edited\n")
    _refused(
        contract, promo, ["full"],
        f"verify: --stage full: {promo}/canary.json: stale: made for contract sha256 {old}, "
        f"this contract's is {_sha(contract)} (the contract changed; run every stage again "
        "from the first)\n",
    )  # fmt: skip


def test_a_record_of_another_contract_is_refused(copy, tmp_path):
    contract, promo = copy
    other = tmp_path / "other"
    other.mkdir()
    other_contract = tmp_path / "other.yaml"
    other_contract.write_text(CONTRACT.replace("name: promo", "name: other"))
    assert _stage(other_contract, other, ["offline_ci"])[0] == 0
    shutil.copy(other / "offline_ci.json", promo / "offline_ci.json")
    shutil.copy(other / "offline_ci.report.json", promo / "offline_ci.report.json")
    _refused(
        contract, promo, ["shadow"],
        f"verify: --stage shadow: {promo}/offline_ci.json: stale: made for contract sha256 "
        f"{_sha(other_contract)}, this contract's is {_sha(contract)} (the contract changed; "
        "run every stage again from the first)\n",
    )  # fmt: skip


def test_a_changed_report_is_stale(copy):
    contract, promo = copy
    report = promo / "shadow.report.json"
    old = _sha(report)
    report.write_text(report.read_text().replace('"status": "held"', '"status": "held" '))
    _refused(
        contract, promo, ["canary", "--traffic", "0.1"],
        f"verify: --stage canary: {promo}/shadow.json: does not re-check: report.sha256: "
        f"{old!r} but {promo}/shadow.report.json hashes to {_sha(report)} (the report changed "
        "since the record was made)\n",
    )  # fmt: skip


def test_an_earlier_stage_run_again_makes_later_records_stale(copy):
    contract, promo = copy
    old = _sha(promo / "shadow.json")
    assert _stage(contract, promo, ["shadow"])[0] == 0
    new = _sha(promo / "shadow.json")
    assert new != old  # a new record (its creation time)
    message = _stage(contract, promo, ["full"])[2]
    assert message.startswith(f"verify: --stage full: {promo}/canary.json: does not re-check: ")
    assert "previous: " in message and message.count("\n") == 1


def test_a_forged_pass_is_caught(copy):
    contract, promo = copy
    assert _stage(contract, promo, ["canary", "--traffic", "0.01"])[0] == 1
    record = json.loads((promo / "canary.json").read_text())
    record["passed"] = True
    (promo / "canary.json").write_text(json.dumps(record))
    _refused(
        contract, promo, ["full"],
        f"verify: --stage full: {promo}/canary.json: does not re-check: passed: true but "
        "recomputed false\n",
    )  # fmt: skip
    code, out, _ = _run("check", promo / "canary.json")
    assert code == 1
    assert out == (
        f"DIFFERENCE passed: true but recomputed false\n{promo / 'canary.json'}: 1 difference(s)\n"
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"format": "kernel-contracts/promotion/1", "stage": ', "not a JSON promotion record: "
         "Expecting value: line 1 column 53 (char 52)"),
        ('{"format": "kernel-contracts/promotion/1", "stage": "shadow", "stage": "full"}',
         "not a usable promotion record: duplicate key stage"),
        ('{"format": "kernel-contracts/promotion/1", "tokens": NaN}',
         "not a usable promotion record: tokens: NaN is not a number"),
        ("[1, 2]", "not a promotion record (not a JSON object)"),
        ('{"format": "kernel-contracts/report/1"}',
         "not a promotion record (format 'kernel-contracts/promotion/1')"),
    ],
)  # fmt: skip
def test_a_corrupted_previous_record_is_refused(copy, text, why):
    contract, promo = copy
    (promo / "shadow.json").write_text(text)
    _refused(
        contract, promo, ["canary", "--traffic", "0.1"],
        f"verify: --stage canary: {promo}/shadow.json: {why}\n",
    )  # fmt: skip


def test_a_record_with_a_missing_field_is_refused(copy):
    contract, promo = copy
    record = json.loads((promo / "shadow.json").read_text())
    del record["held"]
    (promo / "shadow.json").write_text(json.dumps(record))
    _refused(
        contract, promo, ["canary", "--traffic", "0.1"],
        f"verify: --stage canary: {promo}/shadow.json: does not re-check: record: missing "
        "fields: ['held']\n",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stage", "prod"], "python -m verify: error: argument --stage: invalid choice: "
         "'prod' (choose from 'offline_ci', 'shadow', 'canary', 'full')\n"),
        (["--stage", "canary", "--traffic", "1.5"],
         "python -m verify: error: argument --traffic: must be a share in (0, 1]: 1.5\n"),
        (["--stage", "canary", "--traffic", "nan"],
         "python -m verify: error: argument --traffic: must be a share in (0, 1]: nan\n"),
        (["--stage", "canary", "--traffic", "x"],
         "python -m verify: error: argument --traffic: not a number: 'x'\n"),
    ],
)  # fmt: skip
def test_usage_errors(chain, args, message):
    code, out, err = _run(chain[0], *args)
    assert (code, out) == (2, "")
    assert err.endswith(message) and err.startswith("usage: python -m verify")


def test_stage_argument_refusals(copy, tmp_path):
    contract, promo = copy
    cases = [
        (["--stage", "shadow"], "verify: --stage shadow needs --promotion-dir DIR (where stage "
         "records are kept)\n"),
        (["--promotion-dir", promo], "verify: --promotion-dir and --traffic go with --stage "
         "STAGE\n"),
        (["--stage", "full", "--traffic", "0.5", "--promotion-dir", promo],
         "verify: --traffic applies to the shadow and canary stages, not full\n"),
        (["--stage", "shadow", "--promotion-dir", contract],
         f"verify: --promotion-dir {contract}: not a directory\n"),
        (["--stage", "shadow", "--promotion-dir", contract / "records"],
         f"verify: --promotion-dir {contract / 'records'}: cannot create it (Not a "
         "directory)\n"),
        (["--stage", "canary", "--promotion-dir", promo],
         "verify: --stage canary: stage canary requires a traffic share of at least 0.05: give "
         "--traffic SHARE, the share of production traffic its evidence comes from\n"),
    ]  # fmt: skip
    before = _listing(promo)
    for args, message in cases:
        assert _run(contract, "--evidence", SAMPLE, *args) == (2, "", message)
    assert _listing(promo) == before


def test_undeclared_stages_are_refused(tmp_path):
    promo = tmp_path / "promo"
    promo.mkdir()
    contract = tmp_path / "c.yaml"
    contract.write_text(CONTRACT.replace("  canary: {traffic: 0.05, min_tokens: 4000}\n", ""))
    _refused(
        contract, promo, ["canary", "--traffic", "0.1"],
        f"verify: --stage canary: {contract}: promotion.canary: stage not declared (declared: "
        "offline_ci, shadow, full)\n",
    )  # fmt: skip
    contract.write_text(CONTRACT[: CONTRACT.index("promotion:")])
    _refused(
        contract, promo, ["offline_ci"],
        f"verify: --stage offline_ci: {contract}: the contract declares no promotion stages\n",
    )  # fmt: skip


def test_a_stage_file_that_cannot_be_written_leaves_nothing(copy):
    contract, promo = copy
    (promo / "full.json").unlink()
    (promo / "full.json").mkdir()
    report = (promo / "full.report.json").read_bytes()
    _refused(contract, promo, ["full"], f"verify: cannot write {promo}/full.json: is a directory\n")
    assert (promo / "full.report.json").read_bytes() == report


def test_check_finds_a_forged_report_behind_a_consistent_record(copy):
    """The report's status is edited, its sha256 in the record too: the record's hashes
    agree, but the report itself no longer re-checks."""
    _, promo = copy
    report_file = promo / "offline_ci.report.json"
    report = json.loads(report_file.read_text())
    report["clauses"][0]["status"] = "violated"
    report_file.write_text(json.dumps(report))
    record_file = promo / "offline_ci.json"
    record = json.loads(record_file.read_text())
    record["report"]["sha256"] = _sha(report_file)
    record_file.write_text(json.dumps(record))
    code, out, _ = _run("check", record_file)
    assert code == 1
    lines = out.splitlines()
    assert lines[-1] == f"{record_file}: {len(lines) - 1} difference(s)"
    assert (
        "DIFFERENCE checks: " in out
        and f"DIFFERENCE report {report_file}: status: 'held' but its parts give 'violated'" in out
    )


def test_check_of_a_record_with_a_duplicate_key_exits_2(copy):
    _, promo = copy
    path = promo / "full.json"
    path.write_text(
        path.read_text().replace('"stage": "full",', '"stage": "full", "stage": "full",')
    )
    code, out, err = _run("check", path)
    assert (code, out) == (2, "")
    assert err == f"{path}: not a usable promotion record: duplicate key stage\n"


def test_check_of_a_chain_with_a_missing_link(copy):
    _, promo = copy
    (promo / "shadow.json").unlink()
    code, out, _ = _run("check", promo / "full.json")
    assert code == 1
    assert out.startswith(
        f"DIFFERENCE previous: {promo}/canary.json: does not re-check: previous: "
        f"{promo}/shadow.json: no record of stage shadow"
    )
