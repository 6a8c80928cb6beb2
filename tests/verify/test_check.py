"""``verify check``: accepts untouched reports and rejects every mutation of one."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import re
import shutil
import time

import pytest

from kernel_contracts.contracts import load
from kernel_contracts.verify.cli.commands import main
from kernel_contracts.verify.proving.check.recheck import ReportUnreadable, check_data, check_report

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
MEASURED = CONTRACT.replace("check-me", "measure-me").replace(
    "runtime:",
    "statistical:\n  - {id: S1, metric: tv, statistic: quantile, q: 0.99, max: 0.01, "
    "confidence: 0.95, min_samples: 1000}\nruntime:",
)
# an emulation measures every metric exactly (a log bounds tv and logit_drift only from below);
# the contract that declares it is the measured one's with this evidence section
EMULATE = "evidence:\n  emulate: {model: tiny-lm, prompts: 50, max_new_tokens: 100, seed: 0}\n"
RUNTIME = {
    "sequences": 50,
    "batch_size": {"recorded": 50, "min": 50, "max": 50},
    "sequence_length": {"recorded": 50, "exact": 50, "min": 164, "max": 164},
    "clauses": [{"clause": "R1", "condition": "batch_size", "outside": 0, "inside": 50}],
}
SOURCE = {
    "kind": "emulate",
    "fingerprint": "sha256:" + "ab" * 32,
    "config_sha256": "cd" * 32,
    "checkpoint_sha256": "ef" * 32,
    "model": "tiny-lm",
    "prompts": 50,
    "max_new_tokens": 100,
    "seed": 0,
    "train": "fp32",
    "inference": "h100-fp8",
    "tokens": 5000,
    "batch_size": 50,
    "sequence_length": 164,
    "sweep": {"settings": 1, "swept": True},
    "runtime": RUNTIME,
    "label": "emulate:tiny-lm/h100-fp8@batch50,length164",
}
# R1's batch-size range makes the emulation one setting of a runtime sweep
SWEEP = [{"source": SOURCE["label"], "batch_size": 50, "sequence_length": 164, "tokens": 5000}]
ASSUMPTIONS = [
    "tokens are treated as independent draws from the measured distribution",
    "each clause and slice is bounded at its own confidence (no multiple-testing correction)",
]


def _measured(report: dict, root) -> dict:
    """``report`` (of MEASURED, proofs only) as if its contract declared an emulation (its file
    ``measured.yaml`` in ``root`` is rewritten so) and the emulation had been measured: N1
    violated (max 0.03 > 0.02), S1 held (upper bound 0.008 ≤ 0.01 on 5000 tokens, at the order
    statistics of the ranks that n, q and confidence give), R1 held on its 50 sequences."""
    r = copy.deepcopy(report)
    path = root / "measured.yaml"
    path.write_text(MEASURED + EMULATE)
    canonical = load(str(path)).source.canonical
    r["contract"].update(
        canonical=canonical,
        canonical_sha256=hashlib.sha256(canonical.encode()).hexdigest(),
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
    )
    r["evidence"] = {
        "sources": [copy.deepcopy(SOURCE)],
        "assumptions": list(ASSUMPTIONS),
        "sweep": copy.deepcopy(SWEEP),
    }
    common = {"fingerprint": SOURCE["fingerprint"], "source": SOURCE["label"]}
    r["clauses"][0].update(status="violated", samples=5000, value=0.03, bound=0.03,
                           reason="max logit_drift over 5000 tokens is 0.03", **common)  # fmt: skip
    r["clauses"][1].update(status="held", samples=5000, value=0.004, bound=0.008, lower=0.003,
                           basis={"value_rank": 4950, "bound_rank": 4962, "lower_rank": 4938},
                           reason="order-statistic bound", **common)  # fmt: skip
    r["clauses"][2].update(status="held", samples=50, reason="kv_cache agree with the kernel "
                           "spec; batch_size: all 50 sequences inside [1, 64]")  # fmt: skip
    r["status"], r["exit_code"] = "violated", 1
    # both guarantees rest on N1, which the evidence violates
    r["support"] = [
        {"guarantee": g, "status": "violated", "premises": {"N1": "violated"}, "unchecked": [],
         "reason": "the evidence violates premise(s) N1"}
        for g in ("G1", "G2")
    ]  # fmt: skip
    return r


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    out = {}
    cwd = os.getcwd()
    os.chdir(root)  # the reports name their contract by a relative path, as users give it
    try:
        for name, text in (("proved", CONTRACT), ("refuted", REFUTED), ("measured", MEASURED)):
            (root / f"{name}.yaml").write_text(text)
            code = main([f"{name}.yaml", "--json", f"{name}.json", "--quiet"],
                        stdout=io.StringIO(), stderr=io.StringIO())  # fmt: skip
            assert code == (1 if name == "refuted" else 0)
            out[name] = json.loads((root / f"{name}.json").read_text())
    finally:
        os.chdir(cwd)
    out["measured"] = _measured(out["measured"], root)
    out["root"] = root
    out["elsewhere"] = tmp_path_factory.mktemp("elsewhere")  # no contract file, no report
    return out


def _differences(reports, data, where: str, monkeypatch) -> tuple[str, ...]:
    """Re-check ``data`` next to its contract file, or with none found: from another working
    directory, the report's directory holding no contract."""
    if where == "beside":
        return check_data(data, report_dir=str(reports["root"])).differences
    monkeypatch.chdir(reports["elsewhere"])
    return check_data(data, report_dir=str(reports["elsewhere"])).differences


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


def _canonical(change):
    """Edit the contract's canonical form and recompute both of its hashes."""

    def mutate(r):
        plain = json.loads(r["contract"]["canonical"])
        change(plain)
        text = json.dumps(plain, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()
        r["contract"].update(canonical=text, canonical_sha256=digest, sha256=digest)

    return mutate


PROVED_MUTATIONS |= {
    "symbolic text": lambda r: _ob(r)["symbolic"].update(text="tanh(delta_N1/(4*T))"),
    "symbolic latex": lambda r: _ob(r)["symbolic"].update(latex="\\tanh{x}"),
    "chain": _set(("obligations", 0, "chain"), ["logit_drift_to_tv"]),
    "route": _set(("obligations", 0, "route"), "token_tv_loose"),
    "note added": lambda r: _ob(r)["notes"].append("checked by hand"),
    "alternative formula": lambda r: _ob(r)["alternatives"][0].update(formula="0"),
    "alternative value": lambda r: _ob(r)["alternatives"][0].update(value=0.0),
    "variable clause": _set(("obligations", 0, "variables", 0, "clause"), "R1"),
    "variable renamed": _set(("obligations", 0, "variables", 0, "name"), "delta_R1"),
    "constant added": lambda r: _ob(r)["constants"].update(L="1" + "0" * 50),
    "constant T tiny": _set(("obligations", 0, "constants", "T"), "1/1000000000000"),
    "reason on a proof": _set(("obligations", 0, "reason"), "by inspection"),
    "field added": lambda r: _ob(r).update(verified_by="a reviewer"),
    "field removed": lambda r: _ob(r).pop("route"),
    "query field added": lambda r: _q(r).update(note="fine"),
    "top-level field added": _set(("trusted",), True),
    "proved to unknown with a reason": lambda r: _ob(r).update(status="unknown", reason="t/o"),
    "bound NaN": lambda r: _ob(r).update(bound=float("nan")),
    "bound removed": lambda r: _ob(r).update(bound=None, bound_interval=None),
    "bound infinite": lambda r: _ob(r).update(bound=float("inf")),
    "canonical sha256": _set(("contract", "canonical_sha256"), "0" * 64),
    "canonical temperature, hashes recomputed": _canonical(
        lambda p: p["policy"].update(temperature=2.0)
    ),
    "canonical max, hashes recomputed": _canonical(lambda p: p["guarantees"][0].update(max=0.5)),
    "canonical drift limit, hashes recomputed": _canonical(
        lambda p: p["numerical"][0].update(max=0.01)
    ),
    "canonical not canonical, hashes recomputed": _canonical(
        lambda p: p["kernels"]["inference"].update(provenance="measured by us")
    ),
    "canonical invalid, hashes recomputed": _canonical(
        lambda p: p["policy"].update(temperature=-1.0)
    ),
    "runtime clause held": lambda r: r["clauses"][1].update(status="held"),
    "runtime clause reason": lambda r: r["clauses"][1].update(reason="all conditions hold"),
    "skipped clause reason": lambda r: r["clauses"][0].update(reason="not needed"),
    "clause threshold": lambda r: r["clauses"][0].update(threshold=0.5),
    "clause field added": lambda r: r["clauses"][0].update(checked=True),
    "escalation when": lambda r: r["escalation"][0].update(when=["unknown"]),
    "escalation observed": lambda r: r["escalation"][0].update(observed=["refuted"]),
    "escalation action": lambda r: r["escalation"][0].update(action="log"),
    "evidence added": _set(("evidence",), {"sources": [SOURCE], "assumptions": []}),
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
    "counterexample value": lambda r: _ob(r)["counterexample"].update(value=0.5),
    "counterexample value interval": lambda r: _ob(r)["counterexample"].update(
        value_interval=["1/2", "1/2"]
    ),
    "counterexample source": lambda r: _ob(r)["counterexample"].update(source="a reviewer"),
    "counterexample field added": lambda r: _ob(r)["counterexample"].update(exact=True),
    "reason on a refutation": _set(("obligations", 0, "reason"), "too tight"),
    "escalation not fired": lambda r: r["escalation"][0].update(fired=False),
}


def _forge_held(r):
    """The review's forged evidence verdict: violated edited to held, statuses to match."""
    r["clauses"][0]["status"] = "held"
    for part in r["support"]:
        part.update(
            status="held", premises={"N1": "held"}, reason="the evidence held every premise"
        )
    r["status"], r["exit_code"] = "held", 0


def _envelope(r) -> dict:
    return r["evidence"]["sources"][0]["runtime"]


def _relabel(r):
    """The source named another emulation, and every verdict naming it too."""
    label = "emulate:tiny-lm/h100-fp8-fast-accum@batch50,length164"
    r["evidence"]["sources"][0]["label"] = r["evidence"]["sweep"][0]["source"] = label
    for c in r["clauses"][:2]:
        c["source"] = label


MEASURED_MUTATIONS = {
    "violated to held": _forge_held,
    "held on too few samples": lambda r: r["clauses"][1].update(samples=999),
    "held above max": lambda r: r["clauses"][1].update(bound=0.02),
    "held to violated": lambda r: r["clauses"][1].update(status="violated"),
    "confidence": lambda r: r["clauses"][1].update(confidence=0.5),
    "statistic": lambda r: r["clauses"][1].update(statistic="mean"),
    "metric": lambda r: r["clauses"][1].update(metric="kl"),
    "threshold": lambda r: r["clauses"][1].update(threshold=0.1),
    "fingerprint": lambda r: r["clauses"][1].update(fingerprint="sha256:" + "0" * 64),
    "source": lambda r: r["clauses"][1].update(source="other.jsonl"),
    "samples negative": lambda r: r["clauses"][1].update(samples=-5),
    "samples not a count": lambda r: r["clauses"][1].update(samples=5000.5),
    "bound NaN": lambda r: r["clauses"][1].update(bound=float("nan")),
    "value infinite": lambda r: r["clauses"][0].update(value=float("inf")),
    "violated without a reason": lambda r: r["clauses"][0].update(reason=""),
    "evidence removed": _set(("evidence",), None),
    "emulation model": lambda r: r["evidence"]["sources"][0].update(model="tiny-lm-2"),
    "emulation label": _relabel,
    "emulation field removed": lambda r: r["evidence"]["sources"][0].pop("config_sha256"),
    "emulation not swept": lambda r: r["evidence"].pop("sweep"),
    "emulation of another setting": lambda r: r["evidence"]["sweep"][0].update(batch_size=64),
    "settings of the sweep": lambda r: r["evidence"]["sources"][0]["sweep"].update(settings=16),
    "emulation read as a log": lambda r: r["evidence"]["sources"][0].update(kind="logprobs"),
    "samples of another count": lambda r: r["clauses"][0].update(samples=4000),
    "tokens of the source": lambda r: r["evidence"]["sources"][0].update(tokens=4000),
    "runtime envelope counts": lambda r: _envelope(r)["clauses"][0].update(inside=49),
    "overall status": _set(("status",), "held"),
}


WHERE = ("beside", "elsewhere")


@pytest.mark.parametrize("where", WHERE)
def test_untouched_reports_are_accepted(reports, where, monkeypatch):
    for name in ("proved", "refuted", "measured"):
        data = copy.deepcopy(reports[name])
        assert _differences(reports, data, where, monkeypatch) == (), name
        notes = check_data(data, report_dir=str(reports[where])).notes if where != "beside" else ()
        assert any("not found: everything was re-derived" in n for n in notes) == (
            where != "beside"
        )


def test_there_are_enough_mutations():
    assert len(PROVED_MUTATIONS) + len(REFUTED_MUTATIONS) + len(MEASURED_MUTATIONS) >= 100


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    ("kind", "name"),
    [("proved", n) for n in sorted(PROVED_MUTATIONS)]
    + [("refuted", n) for n in sorted(REFUTED_MUTATIONS)]
    + [("measured", n) for n in sorted(MEASURED_MUTATIONS)],
)
def test_mutation_is_rejected(reports, kind, name, where, monkeypatch):
    mutations = {"proved": PROVED_MUTATIONS, "refuted": REFUTED_MUTATIONS}
    data = copy.deepcopy(reports[kind])
    mutations.get(kind, MEASURED_MUTATIONS)[name](data)
    assert data != reports[kind]
    if name == "contract sha256" and where == "elsewhere":
        # the sha256 of the file's bytes: without the file, only its canonical form is known
        assert _differences(reports, data, where, monkeypatch) == ()
        return
    assert _differences(reports, data, where, monkeypatch), name


def test_forged_evidence_verdict_is_named(reports):
    data = copy.deepcopy(reports["measured"])
    _forge_held(data)
    assert check_data(data, report_dir=str(reports["elsewhere"])).differences == (
        "clauses[N1/all].status: held, but its numbers (5000 samples, bound 0.03, max 0.02) "
        "give violated",
    )


def test_forged_formula_without_the_contract_file(reports, tmp_path, monkeypatch):
    """The review's forged report: a weaker bound, its queries regenerated so they re-run
    consistently, checked where no contract file can be found."""
    data = copy.deepcopy(reports["refuted"])
    ob = _ob(data)
    weaker = ob["symbolic"]["srepr"].replace("Rational(1, 2)", "Rational(1, 4)")
    assert weaker != ob["symbolic"]["srepr"]
    ob["symbolic"]["srepr"] = weaker
    ob["status"], data["status"], data["exit_code"] = "proved", "proved", 0
    (tmp_path / "forged.json").write_text(json.dumps(data))
    monkeypatch.chdir(reports["elsewhere"])
    out = io.StringIO()
    assert main(["check", str(tmp_path / "forged.json")], stdout=out, stderr=io.StringIO()) == 1
    assert "DIFFERENCE obligations[G1].symbolic.srepr: " in out.getvalue()


def test_check_ends_quickly_on_forged_huge_constants(reports):
    start = time.perf_counter()
    for change in (
        _set(("obligations", 0, "constants", "T"), "1/1000000000000"),
        lambda r: _ob(r)["constants"].update(L="1" + "0" * 50),
        _canonical(lambda p: p["policy"].update(temperature=1e-12, max_new_tokens=10**50)),
    ):
        data = copy.deepcopy(reports["proved"])
        change(data)
        assert check_data(data, report_dir=str(reports["elsewhere"])).differences
    assert time.perf_counter() - start < 30


def test_report_of_a_tiny_temperature_re_checks(tmp_path):
    """At T = 1e-12 the bound cannot be evaluated (e^(4·10^10)): unknown with no bound, which
    check accepts, since its own evaluation fails the same way."""
    text = CONTRACT.replace("temperature: 1.0", "temperature: 1.0e-12").replace(
        "  - {id: G2, quantity: token_log_ratio, max: 0.0404, from: [N1]}\n",
        "  - {id: G2, quantity: clip_budget, clip_epsilon: 0.2, max: 0.5, from: [N1]}\n",
    )
    (tmp_path / "tiny.yaml").write_text(text)
    args = [str(tmp_path / "tiny.yaml"), "--json", str(tmp_path / "tiny.json"), "--quiet"]
    assert main(args, stdout=io.StringIO(), stderr=io.StringIO()) == 3
    data = json.loads((tmp_path / "tiny.json").read_text())
    assert _ob(data, 1)["bound"] is None and _ob(data, 1)["status"] == "unknown"
    assert check_data(data, report_dir=str(tmp_path)).differences == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"status": "proved",', "duplicate key status"),
        ('"status": "proved",', "duplicate key obligations[0].status"),
        ('"bound": NaN,', "obligations[0].bound: NaN is not a number"),
        ('"bound": Infinity,', "obligations[0].bound: Infinity is not a number"),
        ('"bound": -Infinity,', "obligations[0].bound: -Infinity is not a number"),
        ('"bound": 1e999,', "obligations[0].bound: a number out of range"),
    ],
)
def test_duplicate_keys_and_non_finite_numbers_exit_2(reports, tmp_path, text, message):
    src = (reports["root"] / "proved.json").read_text()
    if message.startswith("duplicate key obligations"):
        src = src.replace('"quantity": "token_tv",', '"quantity": "token_tv",\n' + text, 1)
    elif message.startswith("duplicate"):
        src = src.replace('"exit_code"', text + '\n  "exit_code"', 1)
    else:
        src = re.sub(r'"bound": [^,]+,', text, src, count=1)
    path = tmp_path / "bad.json"
    path.write_text(src)
    out, err = io.StringIO(), io.StringIO()
    assert main(["check", str(path)], stdout=out, stderr=err) == 2
    assert err.getvalue() == f"{path}: not a usable report: {message}\n"
    assert out.getvalue() == ""


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
