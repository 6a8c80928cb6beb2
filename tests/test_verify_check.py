"""``verify check``: accepts untouched reports and rejects every mutation of one."""

from __future__ import annotations

import copy
import io
import json
import shutil

import pytest

from verify.check import ReportUnreadable, check_data, check_report
from verify.cli import main

CONTRACT = """\
contract: 1
name: check-me
policy: {temperature: 1.0}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
numerical:
  - {id: N1, metric: logit_drift, max: 0.02}
runtime:
  - {id: R1, kv_cache: float8_e4m3fn, batch_size: [1, 64]}
observability:
  - {id: O1, log: [logit_drift, tv]}
guarantees:
  - {id: G1, quantity: token_tv, max: 0.0100, from: [N1]}
  - {id: G2, quantity: token_log_ratio, max: 0.0404, from: [N1]}
escalation:
  - when: {clause: G1, status: [refuted]}
    severity: critical
    action: halt_promotion
"""
REFUTED = CONTRACT.replace("max: 0.0100", "max: 0.00999").replace("check-me", "refute-me")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    out = {}
    for name, text in (("proved", CONTRACT), ("refuted", REFUTED)):
        (root / f"{name}.yaml").write_text(text)
        code = main([str(root / f"{name}.yaml"), "--json", str(root / f"{name}.json"), "--quiet"],
                    stdout=io.StringIO(), stderr=io.StringIO())  # fmt: skip
        assert code == (0 if name == "proved" else 1)
        out[name] = json.loads((root / f"{name}.json").read_text())
    out["root"] = root
    return out


def _ob(r, i=0):
    return r["obligations"][i]


def _q(r, i=0):
    return _ob(r, i)["smtlib"][0]


def _set(path, value):
    def mutate(r):
        *head, last = path
        target = r
        for key in head:
            target = target[key]
        target[last] = value

    return mutate


def _text_edit(old, new, count=1):
    def mutate(r):
        q = _q(r)
        assert old in q["text"]
        q["text"] = q["text"].replace(old, new, count)

    return mutate


def _drop_premise_line(r):
    q = _q(r)
    q["text"] = "\n".join(ln for ln in q["text"].splitlines() if "premise_N1" not in ln)


def _reorder(key):
    def mutate(r):
        r[key] = r[key][::-1]

    return mutate


PROVED_MUTATIONS = {
    "flip verdict to refuted": _set(("obligations", 0, "status"), "refuted"),
    "flip verdict to unknown": _set(("obligations", 0, "status"), "unknown"),
    "bound float": lambda r: _ob(r).update(bound=_ob(r)["bound"] * 1.01),
    "bound interval lo": lambda r: _ob(r)["bound_interval"].__setitem__(0, "1/1000"),
    "bound interval widened": lambda r: _ob(r)["bound_interval"].__setitem__(1, "1/99"),
    "bound interval shifted": lambda r: _ob(r).update(bound_interval=["1/200", "1/199"]),
    "threshold rational": _set(("obligations", 0, "threshold", "rational"), "1/50"),
    "threshold float": _set(("obligations", 0, "threshold", "float"), 0.02),
    "constant T": _set(("obligations", 0, "constants", "T"), "2"),
    "premise range shrunk": _set(("obligations", 0, "variables", 0, "hi"), "1/100"),
    "smtlib goal edited": _text_edit("(/ 1.0 100.0)) :named goal", "(/ 1.0 10.0)) :named goal"),
    "smtlib premise deleted": _drop_premise_line,
    "smtlib goal replaced by false": _text_edit(":named goal", ":named goal))\n(assert false"),
    "smtlib bound constant edited": _text_edit("(/ 1.0 50.0)", "(/ 1.0 51.0)"),
    "smtlib answer": lambda r: _q(r).update(answer="sat"),
    "smtlib expected": lambda r: _q(r).update(expected="sat"),
    "smtlib dropped": lambda r: _ob(r).update(smtlib=[]),
    "smtlib box": lambda r: _q(r)["box"].update(delta_N1=["0", "1/100"]),
    "smtlib degree": lambda r: _q(r).update(degree=_q(r)["degree"] + 2),
    "core name dropped": lambda r: _q(r).update(core=_q(r)["core"][1:]),
    "core bogus name": lambda r: _q(r).update(core=[*_q(r)["core"], "lemma_bogus"]),
    "unsat core": lambda r: _ob(r).update(unsat_core=["goal"]),
    "premise dropped": _set(("obligations", 0, "premises"), []),
    "premises_used": _set(("obligations", 0, "premises_used"), []),
    "srepr": lambda r: _ob(r)["symbolic"].update(
        srepr=_ob(r)["symbolic"]["srepr"].replace("tanh", "exp")
    ),
    "statement": lambda r: _ob(r).update(statement="token_tv ≤ anything"),
    "quantity": _set(("obligations", 0, "quantity"), "token_kl"),
    "obligation id": _set(("obligations", 0, "id"), "G9"),
    "obligation removed": lambda r: r["obligations"].pop(),
    "obligations reordered": _reorder("obligations"),
    "clauses reordered": _reorder("clauses"),
    "clause removed": lambda r: r["clauses"].pop(0),
    "clause verdict held without evidence": lambda r: r["clauses"][0].update(status="held"),
    "clause verdict violated": lambda r: r["clauses"][1].update(status="violated"),
    "clause family": lambda r: r["clauses"][0].update(family="statistical"),
    "clause slice": lambda r: r["clauses"][0].update(slice="tail"),
    "status": _set(("status",), "held"),
    "exit code": _set(("exit_code",), 3),
    "contract sha256": _set(("contract", "sha256"), "0" * 64),
    "contract canonical": lambda r: r["contract"].update(
        canonical=r["contract"]["canonical"].replace("0.02", "0.03")
    ),
    "contract name": _set(("contract", "name"), "someone-else"),
    "escalation fired": lambda r: r["escalation"][0].update(fired=True),
    "escalation removed": _set(("escalation",), []),
    "variables malformed": _set(("obligations", 0, "variables"), "junk"),
    "clauses malformed": _set(("clauses",), [1, 2]),
}

REFUTED_MUTATIONS = {
    "refuted to proved": _set(("obligations", 0, "status"), "proved"),
    "counterexample moved": lambda r: _ob(r)["counterexample"]["point"].update(delta_N1="0"),
    "counterexample outside the box": lambda r: _ob(r)["counterexample"]["point"].update(
        delta_N1="1"
    ),
    "counterexample removed": _set(("obligations", 0, "counterexample"), None),
    "sat answer": lambda r: _q(r).update(answer="unsat"),
    "threshold raised": _set(("obligations", 0, "threshold", "rational"), "1/50"),
}


def test_untouched_reports_are_accepted(reports):
    for name in ("proved", "refuted"):
        result = check_data(copy.deepcopy(reports[name]), report_dir=str(reports["root"]))
        assert result.differences == (), name
        assert result.queries >= 2


def test_there_are_enough_mutations():
    assert len(PROVED_MUTATIONS) + len(REFUTED_MUTATIONS) >= 30


@pytest.mark.parametrize("name", sorted(PROVED_MUTATIONS))
def test_mutation_of_a_proved_report_is_rejected(reports, name):
    data = copy.deepcopy(reports["proved"])
    PROVED_MUTATIONS[name](data)
    assert data != reports["proved"]
    assert check_data(data, report_dir=str(reports["root"])).differences, name


@pytest.mark.parametrize("name", sorted(REFUTED_MUTATIONS))
def test_mutation_of_a_refuted_report_is_rejected(reports, name):
    data = copy.deepcopy(reports["refuted"])
    REFUTED_MUTATIONS[name](data)
    assert check_data(data, report_dir=str(reports["root"])).differences, name


def test_differences_are_named(reports):
    data = copy.deepcopy(reports["proved"])
    _q(data)["answer"] = "sat"
    found = check_data(data, report_dir=str(reports["root"])).differences
    assert any(d.startswith("obligations[G1].smtlib[0]: recorded answer sat") for d in found)


def test_changed_contract_file_is_rejected(reports, tmp_path):
    shutil.copy(reports["root"] / "proved.json", tmp_path / "proved.json")
    text = CONTRACT.replace("name: check-me", "name: check-me  # edited")
    (tmp_path / "proved.yaml").write_text(text)
    data = json.loads((tmp_path / "proved.json").read_text())
    data["contract"]["path"] = "proved.yaml"  # found next to the report
    (tmp_path / "proved.json").write_text(json.dumps(data))
    result = check_report(str(tmp_path / "proved.json"))
    assert any(d.startswith("contract.sha256") for d in result.differences)
    (tmp_path / "proved.yaml").write_text(CONTRACT)
    assert check_report(str(tmp_path / "proved.json")).differences == ()


def test_unreadable_reports_exit_2(tmp_path):
    for i, text in enumerate(["not json", "[1, 2]", '{"format": "other"}', "\udcff"]):
        path = tmp_path / f"r{i}.json"
        path.write_text(text, errors="surrogateescape")
        with pytest.raises(ReportUnreadable):
            check_report(str(path))
        err = io.StringIO()
        assert main(["check", str(path)], stdout=io.StringIO(), stderr=err) == 2
        assert str(path) in err.getvalue()
    assert main(["check", str(tmp_path / "missing.json")], stdout=io.StringIO(),
                stderr=io.StringIO()) == 2  # fmt: skip


def test_check_command_exit_codes(reports, tmp_path):
    good = reports["root"] / "proved.json"
    out = io.StringIO()
    assert main(["check", str(good)], stdout=out, stderr=io.StringIO()) == 0
    assert "all agree" in out.getvalue()
    data = copy.deepcopy(reports["proved"])
    data["obligations"][0]["status"] = "refuted"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    out = io.StringIO()
    assert main(["check", str(bad)], stdout=out, stderr=io.StringIO()) == 1
    assert "DIFFERENCE obligations[G1]" in out.getvalue()
