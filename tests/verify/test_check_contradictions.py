"""Forged reports that contradict themselves, which ``verify check`` must refuse: one case per
rule of ``verify.proving.check.sources`` and ``verify.proving.check.same_data``.

The genuine report comes from the real pipeline on the shipped rollout-log example, with the
tail thresholds at 0.3 (58 of its 4096 tokens have |log w| above 0.3) and three more clauses
on the same data. Each forgery edits one thing and makes every verdict, the overall status and the
exit code agree with it, so that the clause-by-clause recomputation accepts it: only a field
that another field, the contract or a documented rule determines can tell.
"""

from __future__ import annotations

import copy
import json
import pathlib
import shutil

import pytest

from kernel_contracts.bounds.stats import quantile_ucb_rank
from kernel_contracts.verify.decide.verdicts import rate_bounds
from tests.support.cli_runner import run_cli

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "contracts" / "examples"
EXTRA = """\
  - id: S_huge_ratio_rate       # P(|log w| > 0.5)
    metric: abs_log_ratio
    statistic: exceed_rate
    threshold: 0.5
    max: 0.05
    confidence: 0.95
    min_samples: 500
    slices: [all]
  - id: S_mid_ratio             # the 0.9-quantile of |log w|
    metric: abs_log_ratio
    statistic: quantile
    q: 0.9
    max: 0.5
    confidence: 0.95
    min_samples: 500
    slices: [all]
  - id: S_mid_loose             # the same quantile at a lower confidence
    metric: abs_log_ratio
    statistic: quantile
    q: 0.9
    max: 0.5
    confidence: 0.9
    min_samples: 500
    slices: [all]
"""
SHIFT = "evidence.sources[0].truncated_support_shift"


def _contract() -> str:
    text = (EXAMPLES / "rollout-log.yaml").read_text()
    for old, new in (("    q: 0.99\n    max: 0.5\n", "    q: 0.99\n    max: 0.3\n"),
                     ("    threshold: 0.2\n", "    threshold: 0.3\n"),
                     ("  - id: S_tv ", EXTRA + "  - id: S_tv ")):  # fmt: skip
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="module")
def genuine(tmp_path_factory):
    root = tmp_path_factory.mktemp("rollout")
    (root / "c.yaml").write_text(_contract())
    shutil.copy(EXAMPLES / "rollout-sample.jsonl", root / "rollout-sample.jsonl")
    code, _, err = run_cli("c.yaml", "--json", "r.json", "--quiet", cwd=root)
    assert code == 1, err
    return json.loads((root / "r.json").read_text())


def _clause(report: dict, id_: str, slice_: str = "all") -> dict:
    return next(c for c in report["clauses"] if (c["id"], c["slice"]) == (id_, slice_))


def _rate(report: dict, id_: str, slice_: str, count: int, samples: int) -> None:
    """A rate verdict as the run would give it on ``count`` of ``samples`` tokens."""
    upper, lower = rate_bounds(count, samples, 0.95)
    status = "held" if upper <= 0.05 else "violated" if lower > 0.05 else "inconclusive"
    c = _clause(report, id_, slice_)
    c.update(samples=samples, value=count / samples, bound=upper, lower=lower, status=status)
    c["basis"] = {"count": count}


def _overall(report: dict) -> None:
    """The overall status and exit code made to agree with the (forged) clause verdicts."""
    order = ("held", "skipped", "inconclusive", "violated")
    worst = max((c["status"] for c in report["clauses"]), key=order.index)
    report["status"] = "held" if worst == "skipped" else worst
    report["exit_code"] = {"held": 0, "inconclusive": 3, "violated": 1}[report["status"]]


def _emulated(r):
    """The issue's first edit: a log read as an emulation, which bounds tv from above (a log
    only from below), so S_tv gets an order-statistic bound and holds."""
    r["evidence"]["sources"][0]["kind"] = "emulate"
    c = _clause(r, "S_tv")
    c["basis"] = {"value_rank": 3687, "bound_rank": quantile_ucb_rank(4096, 0.9, 0.95),
                  "lower_rank": 3655}  # fmt: skip
    c.update(bound=0.03, status="held", reason="order-statistic bound of the 0.9-quantile")


def _samples_all(r):
    """The issue's second edit: twice the tokens behind one rate."""
    _rate(r, "S_large_ratio_rate", "all", 58, 8192)


def _samples_slice(r):
    _rate(r, "S_large_ratio_rate", "tail_tokens", 23, 2120)


def _below_count(r):
    """The issue's third edit: the 0.99-quantile's order statistics moved below 0.3, held."""
    _clause(r, "S_tail_ratio").update(value=0.28, bound=0.29, lower=0.27, status="held")


def _across_ranks(r):
    """A lower bound of the 0.99-quantile below that of the 0.9-quantile: violated becomes
    inconclusive."""
    _clause(r, "S_tail_ratio").update(lower=0.13, status="inconclusive", reason="more tokens")


def _same_rank(r):
    """The 0.9-quantile's point estimate lowered in one of the two clauses that state it."""
    _clause(r, "S_mid_loose")["value"] = 0.14


def _max_below_count(r):
    _clause(r, "N_is_cap").update(value=0.29, bound=0.29, status="inconclusive", reason="x")
    _overall(r)


def _max_framework(r):
    _clause(r, "N_is_cap").update(value=0.6, bound=0.6, status="inconclusive", reason="x")
    _overall(r)


def _fewer_above(r):
    """5 of 4096 tokens above 0.3, though 9 lie above 0.5 and 23 of the tail tokens above 0.3."""
    _rate(r, "S_large_ratio_rate", "all", 5, 4096)


def _caveat(r, reason: str) -> None:
    """Every log-ratio and tv verdict inconclusive, as a truncated-support caveat makes them."""
    for c in r["clauses"]:
        if c["family"] == "statistical":
            c.update(value=None, bound=None, lower=None, basis=None)
        c.update(status="inconclusive", reason=reason)
    _overall(r)


def _detected(r):
    """The issue's fourth edit: a shift detected, though its sign test says none."""
    r["evidence"]["sources"][0]["truncated_support_shift"]["detected"] = True
    _caveat(r, "a truncated-support shift is detected in the log")


def _declared(r):
    r["evidence"]["sources"][0]["truncated_support_shift"]["declared"] = True
    _caveat(r, "the contract declares processed log-probs under truncated sampling")


def _corrected(r):
    r["evidence"]["sources"][0]["truncated_support_shift"]["corrected_with_log_kept_mass"] = True


def _share(r):
    r["evidence"]["sources"][0]["truncated_support_shift"]["positive_share"] = 0.498


def _fingerprint(r):
    other = "sha256:" + "0" * 64
    r["evidence"]["sources"][0]["fingerprint"] = other
    for c in r["clauses"]:
        if c["family"] in ("numerical", "statistical"):
            c["fingerprint"] = other


def _tokens(r):
    r["evidence"]["sources"][0]["tokens"] = 8192


def _clamped(r):
    r["evidence"]["sources"][0]["clamped_logprobs"] = 3 * 4096 + 1


def _assumptions(r):
    r["evidence"]["assumptions"] = []


# forgery → (rule, the start of one difference it must give)
CASES = {
    "clamped log-probs": (
        _clamped,
        "evidence.sources[0].clamped_logprobs: 12289: not a count of at most three log-probs",
    ),
    "source kind": (
        _emulated,
        "evidence.sources[0].kind: emulate, but the contract declares no evidence.emulate",
    ),
    "fields of the kind": (
        _emulated,
        "evidence.sources[0]: fields no emulate source has: ['clamped_logprobs', 'files', ",
    ),
    "samples on slice all": (
        _samples_all,
        "clauses[S_large_ratio_rate/all].samples: 8192 but "
        "evidence.sources[0].tokens is 4096 tokens of the same source and "
        "slice 'all'",
    ),
    "samples on a slice": (
        _samples_slice,
        "clauses[S_large_ratio_rate/tail_tokens].samples: "
        "2120 but clauses[S_tail_ratio/tail_tokens].samples counts 1060 tokens "
        "of the same source and slice 'tail_tokens'",
    ),
    "order statistics against a count": (
        _below_count,
        "clauses[S_tail_ratio/all].value: 0.28 (order statistic 4056 of 4096) is "
        "at most 0.3, but clauses[S_large_ratio_rate/all].basis.count counts 58 of the same "
        "4096 tokens above 0.3, so every order statistic above rank 4038 lies above it",
    ),
    "order statistics across clauses": (
        _across_ranks,
        "clauses[S_tail_ratio/all].lower: 0.13 (order statistic 4044) is below "
        "clauses[S_mid_ratio/all].lower 0.13828939999999967 (order statistic 3655), of a rank "
        "at most its own on the same tokens",
    ),
    "one order statistic in two clauses": (
        _same_rank,
        "clauses[S_mid_ratio/all].value: 0.1442234 (order statistic 3687) but "
        "clauses[S_mid_loose/all].value 0.14 (order statistic 3687), of the same rank on the "
        "same tokens",
    ),
    "maximum against a count": (
        _max_below_count,
        "clauses[N_is_cap/all].value: 0.29 is the maximum, but "
        "clauses[S_large_ratio_rate/all].basis.count counts 58 of the same 4096 tokens above "
        "0.3",
    ),
    "maximum against order statistics": (
        _max_below_count,
        "clauses[N_is_cap/all].value: 0.29 is the maximum, but "
        "clauses[S_tail_ratio/all].value 0.32932680000000003 (order statistic 4056) lies above "
        "it",
    ),
    "maximum against the framework metrics": (
        _max_framework,
        "clauses[N_is_cap/all].value: 0.6 is the maximum |log w|, but "
        "evidence.sources[0].framework_metrics['sampling/sampling_logp_difference/max'] gives "
        "0.9700187000000001 on the same tokens",
    ),
    "counts across thresholds": (
        _fewer_above,
        "clauses[S_huge_ratio_rate/all].basis.count: 9 tokens above 0.5, but "
        "clauses[S_large_ratio_rate/all].basis.count counts only 5 of the same 4096 tokens "
        "above the lower 0.3",
    ),
    "a slice against slice all": (
        _fewer_above,
        "clauses[S_large_ratio_rate/tail_tokens].basis.count: 23 of 1060 tokens "
        "above 0.3, but clauses[S_large_ratio_rate/all].basis.count counts 5 of 4096 on slice "
        "all, a superset",
    ),
    "detection rule": (
        _detected,
        f"{SHIFT}.detected: True but the detection rule gives False on its "
        "sign_test_z -0.25, positive_share 0.498046875 and median_shift -4.04499999999996e-05",
    ),
    "declared by the contract": (
        _declared,
        f"{SHIFT}.declared: True but the contract's policy gives False (logprobs "
        "full_vocab, top_p 1.0, top_k 0)",
    ),
    "corrected by the kept mass": (
        _corrected,
        f"{SHIFT}.corrected_with_log_kept_mass: True but declared False with log S "
        "logged on 0 of 4096 tokens gives False",
    ),
    "positive share a count": (
        _share,
        f"{SHIFT}.positive_share: 0.498 is no count of 4096 tokens divided by 4096",
    ),
    "fingerprint of the files": (
        _fingerprint,
        "evidence.sources[0].fingerprint: 'sha256:" + "0" * 64 + "' but its files "
        "give 'sha256:bc97967597fbabb9c9f275f944c00ea0589e3ab77ff6bf47491d6167eed6addb'",
    ),
    "tokens of the files": (
        _tokens,
        "evidence.sources[0].tokens: 8192 but its files' tokens add up to 4096",
    ),
    "assumptions of the run": (
        _assumptions,
        "evidence.assumptions: [] but the run states ['tokens are treated as independent draws",
    ),
}


def _check(report: dict, tmp_path) -> tuple[int, list[str]]:
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(report, indent=2))
    code, out, err = run_cli("check", path)
    assert err == ""
    return code, out.splitlines()


def test_the_genuine_report_re_checks(genuine, tmp_path):
    code, lines = _check(genuine, tmp_path)
    assert code == 0, lines
    assert lines[-1].endswith("forged.json: re-checked, all agree (0 queries re-run)")
    assert _clause(genuine, "S_large_ratio_rate")["basis"] == {"count": 58}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_self_contradicting_report_is_refused(genuine, name, tmp_path):
    forge, expected = CASES[name]
    forged = copy.deepcopy(genuine)
    forge(forged)
    code, lines = _check(forged, tmp_path)
    assert code == 1, lines
    assert lines[-1].endswith(" difference(s)")
    found = [ln.removeprefix("DIFFERENCE ") for ln in lines if ln.startswith("DIFFERENCE ")]
    assert any(d.startswith(expected) for d in found), "\n".join(found)


def _shards(root) -> list[str]:
    lines = (EXAMPLES / "rollout-sample.jsonl").read_text().splitlines(keepends=True)
    (root / "a.jsonl").write_text("".join(lines[:30]))
    (root / "b.jsonl").write_text("".join(lines[30:]))
    return ["--evidence", "a.jsonl", "b.jsonl"]


def _edited(root, edit) -> list[str]:
    with (root / "edited.jsonl").open("w") as out:
        for line in (EXAMPLES / "rollout-sample.jsonl").read_text().splitlines():
            out.write(json.dumps(edit(json.loads(line))) + "\n")
    return ["--evidence", "edited.jsonl"]


def _kept(record: dict) -> dict:
    return record | {"log_kept_mass": [-0.01] * len(record["response_ids"])}


def _shifted(record: dict) -> dict:
    """Every rollout log-prob raised by 0.05 (at most 0): a shift the sign test detects."""
    key = next(k for k in record if "logprob" in k and not k.startswith("train"))
    return record | {key: [min(v + 0.05, 0.0) for v in record[key]]}


PROCESSED = (("  top_p: 1.0\n", "  top_p: 0.9\n"), ("logprobs: full_vocab", "logprobs: processed"))
# name → (contract edits, evidence arguments, what the shift record says)
GENUINE = {
    "two shards": ((), _shards, (False, False, False)),
    "declared, not corrected": (PROCESSED, lambda root: [], (True, False, False)),
    "declared and corrected": (PROCESSED, lambda root: _edited(root, _kept), (True, True, False)),
    "detected": ((), lambda root: _edited(root, _shifted), (False, False, True)),
}


@pytest.mark.parametrize("name", sorted(GENUINE))
def test_genuine_reports_of_every_shape_of_log_re_check(name, tmp_path):
    """No rule refuses what a real run writes: several files, and each state of the shift."""
    edits, evidence, shift = GENUINE[name]
    text = _contract()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (tmp_path / "c.yaml").write_text(text)
    shutil.copy(EXAMPLES / "rollout-sample.jsonl", tmp_path / "rollout-sample.jsonl")
    code, _, err = run_cli("c.yaml", *evidence(tmp_path), "--json", "r.json", "--quiet",
                           cwd=tmp_path)  # fmt: skip
    assert code in (1, 3), err
    report = json.loads((tmp_path / "r.json").read_text())
    record = report["evidence"]["sources"][0]["truncated_support_shift"]
    keys = ("declared", "corrected_with_log_kept_mass", "detected")
    assert tuple(record[k] for k in keys) == shift
    assert len(report["evidence"]["sources"][0]["files"]) == (2 if name == "two shards" else 1)
    code, lines = _check(report, tmp_path)
    assert code == 0, lines


def test_a_runtime_envelope_that_contradicts_its_extent_is_refused(tmp_path):
    """Every sequence of the log is 96 tokens long, outside [1, 80]: R1 is violated. The
    forgery counts them all inside and holds R1; the counts are raw, the extent beside them
    says otherwise."""
    text = _contract().replace("slices:\n  tail_tokens", "runtime:\n  - {id: R1, "
                               "sequence_length: [1, 80]}\n\nslices:\n  tail_tokens")  # fmt: skip
    (tmp_path / "c.yaml").write_text(text)
    shutil.copy(EXAMPLES / "rollout-sample.jsonl", tmp_path / "rollout-sample.jsonl")
    code, _, err = run_cli("c.yaml", "--json", "r.json", "--quiet", cwd=tmp_path)
    assert code == 1, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert _check(report, tmp_path)[0] == 0
    runtime = report["evidence"]["sources"][0]["runtime"]
    assert runtime["sequence_length"] == {"recorded": 64, "exact": 64, "min": 96, "max": 96}
    assert runtime["clauses"] == [
        {"clause": "R1", "condition": "sequence_length", "outside": 64, "inside": 0}
    ]
    assert _clause(report, "R1")["status"] == "violated"
    runtime["clauses"][0].update(outside=0, inside=64)
    _clause(report, "R1").update(
        status="held", reason="sequence_length: all 64 sequences inside [1, 80]"
    )
    code, lines = _check(report, tmp_path)
    assert code == 1, lines
    assert lines[0] == (
        "DIFFERENCE evidence.sources[0].runtime.clauses[0]: 0 outside, but every value lies "
        "outside: [96, 96] recorded against [1, 80]"
    )
    assert lines[1:] == [f"{tmp_path / 'forged.json'}: 1 difference(s)"]


def test_the_issue_forgeries_together_are_refused_on_every_count(genuine, tmp_path):
    """The first forgery of the issue makes its three edits at once; each is named. The second
    turns the genuine exit 1 into 3 (every violated verdict inconclusive) and is named too."""
    forged = copy.deepcopy(genuine)
    for forge in (_emulated, _samples_all, _below_count):
        forge(forged)
    code, lines = _check(forged, tmp_path)
    assert code == 1
    for name in ("source kind", "samples on slice all", "order statistics against a count"):
        assert any(ln.startswith(f"DIFFERENCE {CASES[name][1]}") for ln in lines), name
    forged = copy.deepcopy(genuine)
    _detected(forged)
    assert (genuine["exit_code"], forged["exit_code"]) == (1, 3)
    code, lines = _check(forged, tmp_path)
    assert code == 1
    assert any(ln.startswith(f"DIFFERENCE {CASES['detection rule'][1]}") for ln in lines)
