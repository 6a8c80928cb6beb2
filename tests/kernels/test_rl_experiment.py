"""examples/rl_experiment.py: the tables, the rollout logs and the online monitor's verdicts of
a tiny run (the shapes of test_rl_loop.py, so the compiled kernels are shared), and bad
arguments refused with exit code 2 before anything is written."""

from __future__ import annotations

import importlib.util
import io
import json
import pathlib

import jax
import numpy as np
import pytest

from kernel_contracts import contracts
from kernel_contracts.evidence.logs import read_log

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = [
    "--groups", "2", "--group-size", "2", "--prompt-len", "4", "--new-tokens", "4",
    "--lr", "0.003",
]  # fmt: skip


def _example():
    spec = importlib.util.spec_from_file_location(
        "rl_experiment", ROOT / "examples/rl_experiment.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    out = tmp_path_factory.mktemp("rl") / "out"
    stdout = io.StringIO()
    args = ["--out", str(out), "--presets", "fp32", "h100-fp8", "--steps", "2", *TINY]
    with jax.numpy_dtype_promotion("standard"):  # optax's Adam: a Python float to an int32
        code = _example().main(args, stdout=stdout)
    return code, out, stdout.getvalue()


@pytest.mark.slow
def test_experiment_writes_tables_logs_and_monitor_verdicts(experiment):
    code, out, text = experiment
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    md = (out / "results.md").read_text()
    assert md in text and "## Online monitor against degradation" in md
    cells = {(c["preset"], c["estimator"]): c for c in results["cells"]}
    assert set(cells) == {
        ("fp32", "plain"),
        ("fp32", "tis"),
        ("h100-fp8", "plain"),
        ("h100-fp8", "tis"),
    }
    assert results["settings"]["estimators"] == {"plain": {}, "tis": {"cap": 2.0}}
    cap = contracts.load(out / "monitor" / "h100-fp8.yaml").numerical[0].max
    for run in results["runs"]:
        name = f"{run['preset']}-{run['estimator']}-seed{run['seed']}"
        records = run["records"]
        assert [r["step"] for r in records] == [0, 1]
        # the log holds every rollout: 4 sequences of 4 tokens per step, both log-probs
        table = read_log(str(out / "rollouts" / f"{name}.jsonl"), "generic", vocab_size=256)
        c = table.columns
        assert table.sequences == 8 and len(c["token"]) == 32
        assert set(c["position"].tolist()) == {4, 5, 6, 7}  # after the 4-byte prompt
        per_step = np.abs(c["train_logprob"] - c["rollout_logprob"]).reshape(2, 16).max(axis=1)
        np.testing.assert_allclose(per_step, [r["abs_log_ratio_max"] for r in records], atol=1e-4)
        # the monitor decided one window per step; N_is_cap is violated where a ratio leaves
        # [1/2, 2] (otherwise undecided: sampled tokens cannot show that every token is within)
        decisions = (out / "monitor" / f"{name}.decisions.jsonl").read_text(encoding="utf-8")
        lines = [json.loads(x) for x in decisions.splitlines()]
        windows = [x for x in lines if x["kind"] == "window"]
        assert [w["tokens"] for w in windows] == [16, 16]
        assert [w["verdict"] for w in windows] == run["monitor_window_verdicts"]
        for step, value in enumerate(per_step):
            cap_line = next(
                x for x in lines if x.get("clause") == "N_is_cap" and x["window"] == step
            )
            assert cap_line["verdict"] == ("violated" if value > cap else "inconclusive")
        if run["preset"] == "fp32":
            assert per_step.max() < 1e-3
    for (preset, est), cell in cells.items():
        assert len(cell["reward_curve"]) == 2
        if preset == "fp32":  # the baseline cannot degrade against itself
            assert cell["degraded_steps"] == [] and cell["monitor_violated_steps"] == []
        runs = [x for x in results["runs"] if (x["preset"], x["estimator"]) == (preset, est)]
        assert [x["seed"] for x in runs] == [0, 1]
        drift = np.array([[r["logit_drift_max"] for r in x["records"]] for x in runs]).max(0)
        assert cell["n1_violated_steps"] == [i for i, d in enumerate(drift) if d > 0.02]
        rewards = np.array([[r["reward_mean"] for r in x["records"]] for x in runs]).mean(0)
        np.testing.assert_allclose(cell["reward_curve"], rewards)
    assert "| h100-fp8 | tis |" in md and "reward start" in md


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--presets", "h200"], "invalid choice: 'h200'"),
        (["--steps", "0"], "expected a positive integer, got '0'"),
        (["--correction", "nope"], "invalid choice: 'nope'"),
        (["--lr", "2"], "expected a number in (0, 1), got '2'"),
        (["--task", "poetry"], "unknown task 'poetry'"),
        (["--prompt-len", "120", "--new-tokens", "20"], "exceeds the context 128"),
    ],
)
def test_bad_arguments_exit_2_and_write_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        _example().main(["--out", str(out), *args], stdout=io.StringIO())
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("keep")
    with pytest.raises(SystemExit) as exc:
        _example().main(["--out", str(target), "--quick"], stdout=io.StringIO())
    assert exc.value.code == 2 and "exists and is not a directory" in capsys.readouterr().err
    assert target.read_text() == "keep"
