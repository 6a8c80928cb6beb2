"""The command line: exit codes, reports, atomic writes, usage errors, no JAX without evidence."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from kernel_contracts.verify.common import outputs as outputs_module
from tests.support.cli_runner import run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "contracts" / "examples"

PROVED = """\
contract: 1
name: all-proved
policy: {temperature: 1.0}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
numerical:
  - {id: N1, metric: logit_drift, max: 0.02}
guarantees:
  - {id: G1, quantity: token_tv, max: 0.0100, from: [N1]}
  - {id: G2, quantity: token_log_ratio, max: 0.0404, from: [N1]}
escalation:
  - when: {clause: G1, status: [refuted]}
    severity: critical
    action: halt_promotion
"""

# N2 holds only on a slice, so it bounds no guarantee over every token: G3 is unknown
UNKNOWN = PROVED.replace(
    "guarantees:",
    "  - {id: N2, metric: logit_drift, max: 0.02, slice: tail}\n"
    "slices:\n  tail: {token_prob: [0, 0.01]}\n"
    "guarantees:\n  - {id: G3, quantity: token_tv, max: 0.5, from: [N2]}",
)


def _run(*argv, cwd=None):
    return run_cli(*argv, cwd=cwd)


def _write(tmp_path, text, name="c.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_all_proved_exits_0_and_writes_three_reports(tmp_path):
    contract = _write(tmp_path, PROVED)
    paths = {k: str(tmp_path / f"r.{k}") for k in ("json", "md", "html")}
    code, out, err = _run(contract, "--json", paths["json"], "--markdown", paths["md"],
                          "--html", paths["html"])  # fmt: skip
    assert (code, err) == (0, "")
    # the unmeasured clause N1 is skipped, which ranks below proved
    assert "G1" in out and "verdict: proved (exit 0)" in out
    data = json.loads(pathlib.Path(paths["json"]).read_text())
    assert data["status"] == "proved" and data["exit_code"] == 0
    assert [o["status"] for o in data["obligations"]] == ["proved", "proved"]
    assert [o["id"] for o in data["obligations"]] == ["G1", "G2"]
    assert data["contract"]["sha256"] and data["obligations"][0]["smtlib"][0]["expected"] == "unsat"
    assert set(data["timing"]) == {"import", "derive", "solve", "evidence", "render"}
    assert data["escalation"][0]["fired"] is False
    md = pathlib.Path(paths["md"]).read_text()
    html = pathlib.Path(paths["html"]).read_text()
    assert "**Verdict: PROVED** (exit code 0)" in md and "```smt2" in md
    assert html.startswith("<!DOCTYPE html>") and "<math" in html
    assert "http://" not in html and "https://" not in html and "<script" not in html


def test_refuted_exits_1_and_escalates(tmp_path):
    contract = _write(tmp_path, PROVED.replace("max: 0.0100", "max: 0.00999"))
    code, out, _ = _run(contract, "--json", str(tmp_path / "r.json"))
    assert code == 1 and "refuted" in out
    data = json.loads((tmp_path / "r.json").read_text())
    g1 = data["obligations"][0]
    assert g1["status"] == "refuted" and g1["counterexample"]["source"]
    assert data["escalation"][0]["fired"] is True


def test_unknown_exits_3(tmp_path):
    contract = _write(tmp_path, UNKNOWN)
    code, out, err = _run(contract, "--quiet", "--json", str(tmp_path / "r.json"))
    assert (code, err) == (3, "") and out.startswith("verdict: unknown")
    g3 = json.loads((tmp_path / "r.json").read_text())["obligations"][0]
    assert g3["id"] == "G3" and g3["status"] == "unknown" and g3["reason"]


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--timeout-ms", "0", "x.yaml"],
        ["x.yaml", "--no-such-flag"],
        ["check"],
        ["synth"],
        ["schema", "extra"],
    ],
)
def test_usage_errors_exit_2_with_usage(argv):
    code, out, err = _run(*argv)
    assert code == 2 and "usage:" in err and "Traceback" not in err + out


def test_help_exits_0():
    code, out, _ = _run("--help")
    assert code == 0 and "CONTRACT.yaml" in out


def test_contract_errors_exit_2_and_write_nothing(tmp_path):
    bad = _write(tmp_path, PROVED.replace("temperature: 1.0", "temperature: 0"))
    code, _out, err = _run(bad, "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.h"))
    assert code == 2 and "temperature" in err and bad in err
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "r.h").exists()
    code, _, err = _run(str(tmp_path / "missing.yaml"))
    assert code == 2 and "missing.yaml" in err and "Traceback" not in err


def test_unwritable_report_path_exits_2_before_work(tmp_path):
    contract = _write(tmp_path, PROVED)
    code, _, err = _run(contract, "--json", str(tmp_path / "no" / "such" / "r.json"))
    assert code == 2 and "no such directory" in err


def test_internal_error_is_one_line(tmp_path, monkeypatch):
    from kernel_contracts.verify.proving import runner as run

    def boom(*a, **k):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(run, "run", boom)
    code, _out, err = _run(_write(tmp_path, PROVED))
    assert code == 2 and err == "verify: internal error: RuntimeError: simulated failure\n"


@pytest.mark.parametrize("command", ["monitor", "export"])
def test_a_missing_dependency_is_named(tmp_path, monkeypatch, command):
    """A broken installation (a dependency that cannot be imported) is one line that names the
    missing module, whichever command meets it; never "not available in this build"."""
    from kernel_contracts.verify.cli import commands

    def missing(*a, **k):
        raise ModuleNotFoundError("No module named 'pyarrow'", name="pyarrow")

    monkeypatch.setitem(commands.COMMANDS, command, missing)
    code, out, err = run_cli(command, _write(tmp_path, PROVED))
    assert (code, out) == (2, "")
    assert err == (
        "verify: the module 'pyarrow' is missing from this installation: install "
        "kernel-contracts with its dependencies (pip install kernel-contracts)\n"
    )


def test_atomic_write_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    target.write_text("old report\n")

    class Boom(OSError):
        pass

    real_fdopen = os.fdopen

    def failing_fdopen(fd, *a, **k):
        f = real_fdopen(fd, *a, **k)
        real_write = f.write

        def write(text):
            real_write(text[: len(text) // 2])  # half of it lands, then the disk fails
            raise Boom(28, "No space left on device")

        f.write = write
        return f

    monkeypatch.setattr(outputs_module.os, "fdopen", failing_fdopen)
    code, _, err = _run(_write(tmp_path, PROVED), "--json", str(target))
    assert code == 2 and "cannot write" in err
    assert target.read_text() == "old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "r.json"]


def test_a_file_named_like_a_subcommand(tmp_path):
    _write(tmp_path, PROVED, name="check")
    code, out, _ = _run("./check", "--quiet", cwd=tmp_path)
    assert code == 0 and "verdict: proved (exit 0)" in out


def _fast_examples() -> list[str]:
    """The shipped examples, except those that emulate kernels (a minute of CPU each)."""
    from kernel_contracts import contracts

    names = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        if contracts.load(path).evidence.emulate is None:
            names.append(path.stem)
    return names


def test_shipped_examples_report_and_recheck(tmp_path):
    names = _fast_examples()
    assert {"fp8-rollout", "bf16-serving", "refuted-on-purpose"} <= set(names)
    for name in names:
        report = tmp_path / f"{name}.json"
        code, _out, err = _run(str(EXAMPLES / f"{name}.yaml"), "--json", str(report), "--quiet")
        data = json.loads(report.read_text())
        assert code == data["exit_code"] and code in (0, 1, 3), (name, err)
        for o in data["obligations"]:
            if o["status"] == "refuted":
                assert o["counterexample"] is not None
        check_code, check_out, _ = _run("check", str(report))
        assert check_code == 0, check_out
    assert json.loads((tmp_path / "refuted-on-purpose.json").read_text())["exit_code"] == 1


def test_proofs_only_run_does_not_import_jax_or_evidence(tmp_path):
    contract = _write(tmp_path, PROVED)
    heavy = "('jax', 'evidence', 'kernels')"
    code = (
        "import sys; from verify.cli.commands import main; "
        f"rc = main([{contract!r}, '--quiet', '--json', {str(tmp_path / 'r.json')!r}]); "
        f"print(rc, sorted(m for m in sys.modules if m.split('.')[0] in {heavy}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)  # fmt: skip
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stderr


def test_synth_prints_proved_yaml(tmp_path):
    code, out, _ = _run("synth", _write(tmp_path, PROVED))
    assert code == 0
    assert "numerical:\n  - id: N1\n    max: 0.02" in out  # tanh(δ/2) ≤ 0.0100 ⇔ δ ≤ 0.020000667
    assert "proved" in out


def test_reports_get_the_permissions_of_a_plain_write(tmp_path):
    old = os.umask(0o022)
    try:
        target = tmp_path / "r.json"
        code, _, _ = _run(_write(tmp_path, PROVED), "--json", str(target))
    finally:
        os.umask(old)
    assert code == 0
    assert target.stat().st_mode & 0o777 == 0o644


def test_summary_columns_line_up_for_long_ids():
    """``inference:int32`` is longer than the old fixed 14-character id column."""
    code, out, _ = _run(str(EXAMPLES / "int8-serving.yaml"))
    assert code == 0
    rows = [line for line in out.splitlines() if not line.startswith("verdict:")]
    assert any(line.startswith("inference:int32 ") for line in rows)
    statuses = {line.index(word) for line in rows for word in ("proved", "skipped") if word in line}
    assert len(rows) >= 4 and len(statuses) == 1, out
