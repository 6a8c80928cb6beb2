"""``python -m verify init``: the starter contract proves as written for several setups, says
what to measure, never replaces a file without --force, and refuses bad input with exit 2; the
installed ``kernel-contracts`` script runs the same command line."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tests.support.cli_runner import run_cli

SETUPS = [
    ["--framework", "verl", "--vocab", "151936", "--temperature", "1.0", "--preset", "h100-fp8",
     "--estimator", "tis"],
    ["--framework", "trl", "--vocab", "32000", "--estimator", "icepop", "--band", "0.8", "1.25"],
    ["--framework", "nemo-rl", "--vocab", "128256", "--temperature", "0.7", "--preset", "mxfp8",
     "--estimator", "ppo_clip", "--clip-epsilon", "0.28"],
    ["--framework", "skyrl", "--vocab", "50257", "--preset", "bf16", "--estimator", "seq_tis",
     "--max-new-tokens", "1024"],
]  # fmt: skip
USAGE = "usage: python -m verify init"


@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: f"{s[1]}-{s[s.index('--estimator') + 1]}")
def test_the_starter_contract_proves_as_written(tmp_path, setup):
    path = tmp_path / "contract.yaml"
    code, out, err = run_cli("init", *setup, "-o", path)
    assert (code, err) == (0, ""), err
    assert out.startswith(f"wrote {path}: every guarantee in it is proved")
    text = path.read_text(encoding="utf-8")
    assert f"vocab_size: {setup[3]}" in text and "What to measure:" in text
    # the export it leads to, or why the framework has no setting for the estimator
    assert f"--to {setup[1]}" in text or f"# {setup[1]} has no setting for" in text
    report = tmp_path / "r.json"
    code, out, err = run_cli(path, "--json", report)
    assert (code, err) == (0, ""), out
    obligations = json.loads(report.read_text(encoding="utf-8"))["obligations"]
    assert [o["status"] for o in obligations] == ["proved"] * 3
    # the one premise is skipped in a proofs-only run, and the summary says so
    assert "N_drift[all]   numerical        skipped      proofs-only run" in out


def test_without_out_the_contract_goes_to_stdout():
    code, out, err = run_cli("init", "--framework", "trl", "--vocab", "151936")
    assert (code, err) == (0, "")
    assert out.startswith("# A starter contract for a trl setup") and "contract: 1\n" in out
    assert "#   logprobs: {path: rollouts.jsonl, format: trl}" in out


def test_an_existing_file_is_replaced_only_with_force(tmp_path):
    path = tmp_path / "contract.yaml"
    path.write_text("mine\n", encoding="utf-8")
    args = ["init", "--framework", "verl", "--vocab", "151936", "-o", path]
    assert run_cli(*args) == (2, "", f"verify init: {path} exists; give --force to replace it\n")
    assert path.read_text(encoding="utf-8") == "mine\n"
    code, _, err = run_cli(*args, "--force")
    assert (code, err) == (0, "") and "contract: 1" in path.read_text(encoding="utf-8")


def _usage(message: str) -> str:
    return f"python -m verify init: error: {message}\n"


BAD = [
    (["--framework", "openrlhf", "--vocab", "100"],
     _usage("argument --framework: invalid choice: 'openrlhf' (choose from 'verl', 'nemo-rl', "
            "'trl', 'skyrl')")),
    (["--framework", "verl", "--vocab", "1"],
     _usage("argument --vocab: a vocabulary has at least 2 tokens, got 1")),
    (["--framework", "verl", "--vocab", "151k"],
     _usage("argument --vocab: not an integer: '151k'")),
    (["--framework", "verl"], _usage("the following arguments are required: --vocab")),
    (["--framework", "verl", "--vocab", "100", "--temperature", "nan"],
     _usage("argument --temperature: must be positive and finite: nan")),
    (["--framework", "verl", "--vocab", "100", "--preset", "h200"],
     _usage("argument --preset: invalid choice: 'h200' (choose from 'fp32', 'bf16', 'h100-fp8', "
            "'h100-fp8-fast-accum', 'mxfp8', 'a100-int8')")),
    (["--framework", "verl", "--vocab", "100", "--estimator", "plain", "--cap", "2"],
     _usage("--cap: estimator plain takes no parameter")),
    (["--framework", "verl", "--vocab", "100", "--estimator", "mis", "--cap", "0.5"],
     _usage("--cap: must be > 1 for estimator mis, got 0.5")),
    (["--framework", "verl", "--vocab", "100", "--estimator", "icepop", "--band", "2", "3"],
     _usage("--band: a band LO HI needs 0 <= LO < 1 < HI, got 2 3")),
    (["--framework", "verl", "--vocab", "100", "--estimator", "kl_reject"],
     _usage("--estimator kl_reject: its criteria (reject, reject_threshold) are written in the "
            "contract; start from another estimator and replace it")),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_input_exits_2_with_one_clear_line(tmp_path, args, message):
    out_path = tmp_path / "c.yaml"
    code, out, err = run_cli("init", *args, "-o", out_path)
    assert (code, out) == (2, "")
    assert err.startswith(USAGE) and err.endswith(message)
    assert not out_path.exists()


def test_paths_that_cannot_be_written_exit_2(tmp_path):
    args = ["init", "--framework", "verl", "--vocab", "100", "-o"]
    missing = tmp_path / "no" / "c.yaml"
    assert run_cli(*args, missing) == (2, "", f"verify init: cannot write {missing}: no such "
                                              "directory\n")  # fmt: skip
    assert run_cli(*args, tmp_path) == (2, "", f"verify init: {tmp_path}: is a directory\n")
    blocked = tmp_path / "file"
    blocked.write_text("x", encoding="utf-8")
    inside = blocked / "c.yaml"
    assert run_cli(*args, inside) == (2, "", f"verify init: cannot write {inside}: no such "
                                             "directory\n")  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_the_installed_console_script_runs_the_command_line(tmp_path):
    script = pathlib.Path(sys.executable).with_name("kernel-contracts")
    if not script.exists():
        pytest.skip("kernel-contracts is not installed here (pip install -e . installs it)")
    path = tmp_path / "c.yaml"
    done = subprocess.run(
        [str(script), "init", "--framework", "verl", "--vocab", "151936", "-o", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert path.read_text(encoding="utf-8").count("quantity:") == 3
    done = subprocess.run([str(script), "init", "--framework", "x", "--vocab", "2"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "invalid choice: 'x'" in done.stderr


def test_a_framework_without_the_estimator_is_said_instead_of_an_export():
    code, out, err = run_cli("init", "--framework", "trl", "--vocab", "1000", "--estimator",
                             "geo_mask")  # fmt: skip
    assert (code, err) == (0, "")
    assert "# trl has no setting for geo_mask: " in out and "--to trl" not in out
    code, out, _ = run_cli("init", "--framework", "trl", "--vocab", "1000", "--estimator", "tis")
    assert "#   python -m verify export contract.yaml --to trl" in out
