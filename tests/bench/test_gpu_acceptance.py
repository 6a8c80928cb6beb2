"""The GPU acceptance run (``bench/gpu_acceptance.py``): its rehearsal on the CPU runs every
step and writes its JSON and Markdown; unusable arguments are refused with exit code 2 before
anything runs or is written."""

from __future__ import annotations

import io
import json

import pytest

from tests.bench.support import bench_module

acceptance = bench_module("gpu_acceptance")


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    return acceptance.main(argv, stdout=out, stderr=err), out.getvalue(), err.getvalue()


@pytest.mark.slow  # every step interpreted on tiny shapes: about a minute on 2 idle cores
def test_the_dry_run_rehearses_every_step(tmp_path):
    rc, out, err = run(["--dry-run", "--out", str(tmp_path)])
    assert rc == 0, out + err
    report = json.loads((tmp_path / "acceptance.json").read_text())
    assert report["run"]["dry_run"] and list(report["steps"]) == list(acceptance.STEPS)
    assert all(s["status"] == "ok" for s in report["steps"].values())
    checks = report["steps"]["check"]["rows"]
    assert {r[0] for r in checks} == {
        "matmul vs NumPy reference",
        "TinyLM forward, GPU vs CPU",
        "verdicts vs CPU file",
    }
    assert all(r[2] == "same bits" for r in checks if r[0] != "verdicts vs CPU file")
    rows = report["steps"]["matmul"]["records"]["rows"]
    for name in acceptance.MATMUL_PRESETS:
        (rec,) = [r for case, r in rows.items() if case.startswith(f"{name} (pallas")]
        assert rec["pct_native_bf16"] > 0 and rec["pct_floor_vs_published_rates"] > 0
    decode = report["steps"]["decode"]["records"]
    assert decode["K_inf"]["tokens_per_s"] > 0 and decode["plain"]["tokens_per_s"] > 0
    assert decode["K_inf"]["ops"] == "inference:h100-fp8@2"
    measured = report["steps"]["measurement"]["records"]["bench_measure_gpu"]
    assert measured["exit_code"] == 0 and "INTERPRETED" in measured["output"]
    md = (tmp_path / "acceptance.md").read_text()
    assert md.startswith("# GPU acceptance run (dry run: times mean nothing)")
    assert md.count("| check | case | result |") == len(acceptance.STEPS)


def test_unusable_arguments_are_refused_before_anything_runs(tmp_path, capsys):
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    a_list = tmp_path / "list.json"
    a_list.write_text("[1, 2]")
    a_file = tmp_path / "taken"
    a_file.write_text("")
    cases = {
        ("--reference", str(tmp_path / "missing.json")): "cannot read the reference",
        ("--reference", str(bad_json)): f"cannot read the reference {bad_json}",
        ("--reference", str(a_list)): f"{a_list}: not a verdict file (a JSON object)",
        ("--out", str(a_file)): f"--out {a_file}: exists and is not a folder",
    }
    for argv, message in cases.items():
        rc, out, err = run([*argv, "--dry-run"])
        assert (rc, out) == (2, ""), argv
        assert err.startswith("gpu_acceptance: ") and message in err, (argv, err)
    rc, out, _ = run(["--steps", "nonsense"])  # argparse's own message, on sys.stderr
    assert (rc, out) == (2, "") and "invalid choice: 'nonsense'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "list.json", "taken"]


def test_missing_wheels_are_named(monkeypatch):
    monkeypatch.setitem(acceptance.WHEELS, "no_such_module_here", "no-such-wheel")
    rc, out, err = run(["--dry-run"])
    assert (rc, out) == (2, "")
    assert err == "gpu_acceptance: missing wheels (install or carry them): no-such-wheel\n"
