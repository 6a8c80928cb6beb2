"""The same verdict under any load: the shipped contracts' proofs, run while two busy processes
load both cores, give the reports (times aside) and the z3 resource units of an idle run.

Logs are read as the contracts declare them; an emulation is dropped (its clauses are then
skipped alike in both runs), so the test stays short. The emulated kernels' bits do not depend
on load (they are pinned by the kernels' own tests); the solvers' answers were what did.
"""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess
import sys

from kernel_contracts import contracts
from kernel_contracts.verify.proving import runner
from kernel_contracts.verify.proving.render.report import dumps

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "contracts" / "examples").glob("*.yaml"))
# a busy loop that ends by itself should the test be killed before its ``finally``
BUSY = "import time\nend = time.monotonic() + 300\nwhile time.monotonic() < end:\n    pass\n"


def _timeless(report):
    """The report with every time set to 0 (the only fields load may change)."""
    obligations = tuple(
        dataclasses.replace(
            o, time_ms=0.0, queries=tuple(dataclasses.replace(q, time_ms=0.0) for q in o.queries)
        )
        for o in report.obligations
    )
    return dataclasses.replace(report, obligations=obligations, timing={})


def _proofs() -> list[tuple[str, str, list[int]]]:
    """Per shipped contract: its proofs-only report without times, and the z3 resource units
    each obligation spent."""
    out = []
    for path in EXAMPLES:
        contract = contracts.load(str(path))
        evidence = dataclasses.replace(contract.evidence, emulate=None)
        report = runner.run(dataclasses.replace(contract, evidence=evidence))
        out.append((path.name, dumps(_timeless(report)), [o.rlimit for o in report.obligations]))
    return out


def test_the_shipped_proofs_decide_alike_on_a_loaded_machine():
    idle = _proofs()
    assert len(idle) == len(EXAMPLES) >= 8
    # the log evidence was read: a shipped contract has measured verdicts on its log
    assert any('"kind": "logprobs"' in text for _, text, _ in idle)
    # every obligation with a query spent units, and none was stopped by the hang guard
    assert all(n > 0 for _, text, units in idle for n in units if '"smtlib": []' not in text)
    assert not any("hang guard" in text for _, text, _ in idle)
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        loaded = _proofs()
    finally:
        for p in busy:
            p.kill()
            p.wait(30)
    assert [name for name, *_ in loaded] == [name for name, *_ in idle]
    for (name, text, units), (_, idle_text, idle_units) in zip(loaded, idle, strict=True):
        assert text == idle_text, name  # byte for byte, times aside
        assert units == idle_units, name
