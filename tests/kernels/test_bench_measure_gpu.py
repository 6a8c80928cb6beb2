"""The GPU measurement benchmark (bench/bench_measure_gpu.py) rehearsed on the CPU: its
``--dry-run`` runs every step a GPU run takes (the check against float64 and the JAX path, the
read pass, the kernel, the end-to-end call) on a tiny shape with the kernel interpreted, and
without a GPU or ``--dry-run`` it measures nothing and says so."""

from __future__ import annotations

from pathlib import Path

import jax
import pytest

pytestmark = pytest.mark.skipif(
    jax.default_backend() == "gpu", reason="rehearses the CPU side; a GPU runs the real benchmark"
)


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "bench"))
    import bench_measure_gpu

    return bench_measure_gpu


def test_without_a_gpu_nothing_is_measured(bench, capsys):
    assert bench.main([]) == 0
    assert "nothing measured" in capsys.readouterr().out
    result = bench.measure_vs_read()
    assert result["measured"] is False and result["ok"] is True and result["gpu"] is False


@pytest.mark.slow  # the interpreted kernel and the JAX reference compile: ~20 CPU-seconds
def test_dry_run_rehearses_every_step_interpreted(bench, capsys):
    result = bench.measure_vs_read(dry_run=True, tokens=10**6, vocab=10**6)  # sizes ignored
    out = capsys.readouterr().out
    assert "INTERPRETED" in out and "columns agree" in out, out
    assert result["measured"] is True and result["ok"] is True, result
    assert result["shape"] == (bench.DRY_RUN["tokens"], bench.DRY_RUN["vocab"])
    assert len(result["kernel_s"]) == 1 and result["best"] in result["kernel_s"]
    assert result["read_s"] > 0 and all(s > 0 for s in result["share"].values())
    assert result["end_to_end_share"] > 0
