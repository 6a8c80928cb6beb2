"""The monitor's window lines carry the weight diagnostics of the window's own tokens."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from kernel_contracts import contracts
from kernel_contracts.evidence.logs import read_log
from kernel_contracts.evidence.weights import estimators_of, weight_diagnostics
from tests.support.cli_runner import run_cli

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "contracts" / "examples"
SAMPLE = EXAMPLES / "rollout-sample.jsonl"  # 64 lines of 64 tokens
GUARANTEES = """
guarantees:
  - id: G_tis
    quantity: pg_bias
    score_norm: 5.0
    advantage: 1.0
    estimator: tis
    cap: 1.0
    max: 0.5
    from: [N_is_cap]
  - id: G_kl_mask
    quantity: pg_bias
    score_norm: 5.0
    advantage: 1.0
    estimator: kl_mask
    threshold: 0.01
    max: 0.5
    from: [N_is_cap]
observability:
  - {id: O1, log: [log_ratio], sample_rate: 1.0, window_tokens: 1024}
"""


def test_each_window_line_weighs_its_own_tokens(tmp_path):
    text = (EXAMPLES / "rollout-log.yaml").read_text(encoding="utf-8")
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("path: rollout-sample.jsonl", f"path: {SAMPLE}") + GUARANTEES)
    code, out, err = run_cli("monitor", path, "--stream", SAMPLE, "--no-follow")
    assert code in (1, 3) and err == ""
    windows = [r for r in map(json.loads, out.splitlines()) if r["kind"] == "window"]
    assert len(windows) == 4  # 16 lines of 64 tokens each
    table = read_log(str(SAMPLE), None, vocab_size=256)
    c = table.columns
    log_w = c["train_logprob"] - c["rollout_logprob"]
    ests = estimators_of(contracts.load(str(path)))
    for i, window in enumerate(windows):
        pick = (c["sequence"] >= 16 * i) & (c["sequence"] < 16 * (i + 1))
        numbers, skipped = weight_diagnostics(
            ests, log_w[pick], c["rollout_logprob"][pick], c["sequence"][pick]
        )
        assert set(window["weight_diagnostics"]) == {"tis(cap=1.0)"} == set(numbers)
        assert window["weight_diagnostics_skipped"] == skipped
        assert set(skipped) == {"kl_mask(threshold=0.01)"}
        got = window["weight_diagnostics"]["tis(cap=1.0)"]
        assert got == pytest.approx(numbers["tis(cap=1.0)"], rel=1e-12)
        assert 0 < got["clip_fraction"] < 1
    ess = [w["weight_diagnostics"]["tis(cap=1.0)"]["ess"] for w in windows]
    assert len(set(np.round(ess, 6))) == 4  # four windows, four different sets of tokens
