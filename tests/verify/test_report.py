"""Static clause verdicts, escalation decisions and the report renderings."""

from __future__ import annotations

import json
from fractions import Fraction as F

import sympy

from kernel_contracts import contracts
from kernel_contracts.bounds.derivation import Derivation, Variable
from kernel_contracts.verify.common.clauses import ClauseResult
from kernel_contracts.verify.common.escalation import decide
from kernel_contracts.verify.common.static_clauses import (
    NO_EVIDENCE,
    skipped_measurements,
    static_clauses,
)
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import discharge
from kernel_contracts.verify.proving.render.documents import to_html, to_markdown
from kernel_contracts.verify.proving.render.report import ContractInfo, Report, report_json

BASE = """\
contract: 1
name: static
policy: {temperature: 1.0}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
numerical:
  - {id: N1, metric: logit_drift, max: 0.02}
statistical:
  - {id: S1, metric: tv, statistic: mean, max: 0.01, slices: [all, tail]}
slices:
  tail: {token_prob: [0, 0.01]}
"""


def _runtime(fields: str):
    text = BASE + f"runtime:\n  - {{id: R1, {fields}}}\n"
    return static_clauses(contracts.loads(text))[0]


def test_runtime_clauses_checked_against_the_kernel_spec():
    kernel_kv = contracts.loads(BASE).kernels.inference.attention.kv_cache
    other = "bfloat16" if kernel_kv != "bfloat16" else "float32"
    wrong = _runtime(f"kv_cache: {other}")
    assert wrong.status is Status.VIOLATED and kernel_kv in wrong.reason
    assert _runtime(f"kv_cache: {kernel_kv}").status is Status.HELD
    online = _runtime(f"kv_cache: {kernel_kv}, batch_size: [1, 8]")
    assert online.status is Status.SKIPPED and "monitor" in online.reason
    batching = contracts.loads(BASE).kernels.inference.batching
    invariant = _runtime("batch_invariant: true")
    expected = Status.VIOLATED if batching == "dynamic" else Status.HELD
    assert invariant.status is expected


def test_unmeasured_clauses_are_skipped_per_slice():
    got = skipped_measurements(contracts.loads(BASE))
    assert [(c.id, c.slice, c.status) for c in got] == [
        ("N1", "all", Status.SKIPPED),
        ("S1", "all", Status.SKIPPED),
        ("S1", "tail", Status.SKIPPED),
    ]
    assert all(c.reason == NO_EVIDENCE for c in got)


def test_escalation_fires_on_listed_statuses_only():
    rules = contracts.loads(
        BASE + "escalation:\n"
        "  - {when: {clause: N1}, severity: critical, action: route_to_train_kernel}\n"
        "  - {when: {clause: S1, status: [inconclusive, violated]}, severity: warn, "
        "action: alert}\n"
    ).escalation
    verdicts = [("N1", Status.HELD), ("S1", Status.HELD), ("S1", Status.INCONCLUSIVE)]
    first, second = decide(rules, verdicts)
    assert (first.fired, first.observed) == (False, ("held",))
    assert (second.fired, second.observed, second.action) == (
        True,
        ("held", "inconclusive"),
        "alert",
    )
    assert decide(rules, [("N1", Status.VIOLATED)])[0].fired


def _report(name: str) -> Report:
    d = sympy.Symbol("delta_N1", nonnegative=True)
    variables = (Variable("delta_N1", F(0), F(1, 50), "N1"),)
    derivation = Derivation("G<1>", "token_tv", ("token_tv_tanh",), ("N1",), sympy.tanh(d / 2),
                            variables, {}, F(1, 100), 0.0)  # fmt: skip
    clause = ClauseResult("N1", "numerical", "all", Status.SKIPPED, "logit_drift", "max", 0.02,
                          reason="a <reason> & more")  # fmt: skip
    return Report(ContractInfo("c.yaml", "0" * 64, "{}", name), "test", "3.11", {"z3": "x"},
                  (discharge(derivation),), (clause,), None, (), {"solve": 1.0})  # fmt: skip


def test_renderings_share_the_report_and_escape_text():
    report = _report("<script>alert(1)</script>")
    html = to_html(report)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "G&lt;1&gt;" in html and "a &lt;reason&gt; &amp; more" in html
    assert "background:#1a7f37" in html  # the proved verdict's colour
    md = to_markdown(report)
    assert "| G<1> | token_tv | **proved** |" in md and "a <reason> & more" in md
    data = json.loads(json.dumps(report_json(report)))
    assert data["status"] == "proved" and data["obligations"][0]["status"] == "proved"
    assert data["obligations"][0]["bound_interval"][0].count("/") == 1
