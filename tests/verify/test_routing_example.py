"""``examples/routing_loop.py``: the routing loop runs on the recorded rollouts and each action
does what its line says."""

from __future__ import annotations

import importlib.util
import io
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "routing_loop.py"


def _example():
    spec = importlib.util.spec_from_file_location("routing_loop", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_loop_applies_each_action():
    out = io.StringIO()
    assert _example().main(["--steps", "4"], stdout=out) == 0
    assert out.getvalue().splitlines() == [
        "fp8-routing-demo: 5 escalation rules; TIS cap 2 from G_pg_tis (proved, derived here)",
        "step 0: 16 sequences, 1024 tokens: N_is_cap inconclusive, S_rare_ratio inconclusive; "
        "rule 4 (info, log)",
        "  log: the decision is recorded, nothing else to do",
        "step 1: 16 sequences, 1024 tokens: N_is_cap violated, S_rare_ratio inconclusive; "
        "rule 0 (warn, mask_tokens)",
        "  mask_tokens: 1 token(s) left out of the loss at [(13, 67)]",
        "  tis_correct: weights min(w, 2) on 1023 tokens: mean 0.9949, max 1.4238, 0 capped",
        "step 2: 16 sequences, 1024 tokens: N_is_cap violated, S_rare_ratio violated; "
        "rule 0 (warn, mask_tokens)",
        "  mask_tokens: 2 token(s) left out of the loss at [(3, 40), (12, 52)]",
        "  route_to_train_kernel: sequences [1, 2, 3, 8, 12, 13] re-scored by K_train (their "
        "ratios are now 1)",
        "  tis_correct: weights min(w, 2) on 1022 tokens: mean 1.0010, max 1.4781, 0 capped",
        "  promotion: canary halted: rule 2 (halt_promotion): S_rare_ratio violated",
        "step 3: 16 sequences, 1024 tokens: N_is_cap violated, S_rare_ratio violated; "
        "rule 0 (warn, mask_tokens)",
        "  mask_tokens: 1 token(s) left out of the loss at [(11, 42)]",
        "  route_to_train_kernel: sequences [8, 11, 12, 14] re-scored by K_train (their "
        "ratios are now 1)",
        "  tis_correct: weights min(w, 2) on 1023 tokens: mean 1.0004, max 1.3490, 0 capped",
        "promotion from canary: halted",
    ]


def test_the_script_runs_from_the_command_line():
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "1", "--batch", "8"],
        cwd=ROOT / "examples",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "promotion from canary: may proceed"
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "--batch", "0"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2
    assert "argument --batch: expected a positive integer, got '0'" in bad.stderr
