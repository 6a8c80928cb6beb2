"""The two shipped evidence contracts run end to end: the sample log and real emulation."""

from __future__ import annotations

import hashlib
import io
import json
import pathlib
import subprocess
import sys

import pytest

from kernel_contracts import contracts
from kernel_contracts.evidence.logs import read_log
from kernel_contracts.verify.cli.commands import main
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.decide import evaluate

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "contracts" / "examples"
SAMPLE = EXAMPLES / "rollout-sample.jsonl"


def test_sample_log_is_small_and_clean():
    assert SAMPLE.stat().st_size < 500_000
    table = read_log(SAMPLE)
    assert (table.sequences, table.tokens) == (64, 4096)
    assert table.malformed_count == table.mismatch_count == table.unpaired_count == 0
    assert table.columns["position"].min() == 32  # position_offset: the prompt length
    assert len(table.prompt_names) == 64


def test_rollout_log_example_verdicts():
    c = contracts.load(EXAMPLES / "rollout-log.yaml")
    results, report = evaluate(c)
    got = {(r.id, r.slice): r.status for r in results}
    assert got == {
        ("N_is_cap", "all"): Status.VIOLATED,
        ("S_tail_ratio", "all"): Status.HELD,
        ("S_tail_ratio", "tail_tokens"): Status.HELD,
        ("S_tail_ratio", "late"): Status.HELD,
        ("S_large_ratio_rate", "all"): Status.INCONCLUSIVE,
        ("S_large_ratio_rate", "tail_tokens"): Status.VIOLATED,
        ("S_tv", "all"): Status.INCONCLUSIVE,  # a log bounds the TV from below only
    }
    sha = hashlib.sha256(SAMPLE.read_bytes()).hexdigest()
    assert {r.fingerprint for r in results} == {f"sha256:{sha}"}
    metrics = report["sources"][0]["framework_metrics"]
    assert metrics["token_mult_prob_error"] > 1.0
    assert report["sources"][0]["truncated_support_shift"]["detected"] is False


def test_rollout_log_example_through_the_cli(tmp_path):
    out = tmp_path / "report.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "verify",
            str(EXAMPLES / "rollout-log.yaml"),
            "--json",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 1, run.stderr  # N_is_cap and a slice of S_large_ratio_rate
    assert run.stderr == ""  # --quiet: no progress bar
    report = json.loads(out.read_text())
    statuses = {(c["id"], c.get("slice")): c["status"] for c in report["clauses"]}
    assert statuses[("N_is_cap", "all")] == "violated"
    assert statuses[("S_tv", "all")] == "inconclusive"
    assert report["evidence"]["sources"][0]["tokens"] == 4096


def test_missing_evidence_file_exits_2(tmp_path):
    text = (
        (EXAMPLES / "rollout-log.yaml")
        .read_text()
        .replace("rollout-sample.jsonl", "no-such-log.jsonl")
    )
    path = tmp_path / "c.yaml"
    path.write_text(text)
    run = subprocess.run(
        [sys.executable, "-m", "verify", str(path), "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 2
    assert "no-such-log.jsonl: evidence file not found" in run.stderr
    assert "Traceback" not in run.stderr


def test_logs_only_evaluation_imports_no_jax():
    code = (
        "import sys, contracts; from verify.decide import evaluate; "
        f"evaluate(contracts.load({str(EXAMPLES / 'rollout-log.yaml')!r})); "
        "print('jax' in sys.modules)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert run.stdout.strip() == "False", run.stderr


@pytest.mark.slow
def test_fp8_emulated_example_as_shipped(tmp_path):
    """Real emulation through both kernels, through the command line, and the report re-checks
    (the slowest test here: about 75 s alone on 2 cores, five settings of the runtime sweep)."""
    out = tmp_path / "report.json"
    stdout, stderr = io.StringIO(), io.StringIO()
    code = main(
        [str(EXAMPLES / "fp8-emulated.yaml"), "--json", str(out), "--quiet"],
        stdout=stdout,
        stderr=stderr,
    )
    assert code == 1, stderr.getvalue()  # the top-1 flip rate and the KL maximum are violated
    report = json.loads(out.read_text())
    by = {(c["id"], c["slice"]): c for c in report["clauses"]}
    assert by[("N1", "all")]["samples"] == 512
    measured = [c for c in report["clauses"] if c["family"] in ("numerical", "statistical")]
    assert measured and all(c["status"] != "skipped" for c in measured)
    assert by[("S_tv_tail", "all")]["status"] == "held"
    assert by[("S_tv_tail", "all")]["bound"] <= 0.1
    assert by[("S_kl_max", "all")]["reason"].startswith("empirical: the maximum over 512")
    # the runtime clause's batch sizes [1, 16] and lengths [1, 128] are swept: corners and centre
    sources = report["evidence"]["sources"]
    assert [(s["batch_size"], s["sequence_length"]) for s in sources] == [
        (1, 33), (1, 128), (8, 64), (16, 33), (16, 128)
    ]  # fmt: skip
    for src in sources:
        assert src["kind"] == "emulate" and src["tokens"] == 512
        assert src["sweep"] == {"settings": 5, "swept": True}
        assert src["checkpoint_sha256"] is not None and src["inference"] == "h100-fp8"
    assert {c["fingerprint"] for c in measured} == {s["fingerprint"] for s in sources}
    # the sweep as the report lists it
    sweep = report["evidence"]["sweep"]
    assert [(s["batch_size"], s["sequence_length"], s["tokens"]) for s in sweep] == [
        (1, 33, 512), (1, 128, 512), (8, 64, 512), (16, 33, 512), (16, 128, 512)
    ]  # fmt: skip
    assert by[("R1", "all")]["status"] == "held"
    assert [o["status"] for o in report["obligations"]] == ["proved"]
    check_out = io.StringIO()
    assert main(["check", str(out)], stdout=check_out, stderr=io.StringIO()) == 0, (
        check_out.getvalue()
    )
