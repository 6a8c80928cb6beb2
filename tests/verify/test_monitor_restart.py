"""Exactly once: ``kill -9`` of the monitor at random points, then restarts from its checkpoint,
give the bytes of an uninterrupted run (several seeds, bounded time)."""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "contracts" / "examples"
SAMPLE = EXAMPLES / "rollout-sample.jsonl"
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("restart")
    text = (EXAMPLES / "rollout-log.yaml").read_text(encoding="utf-8")
    text = text.replace("path: rollout-sample.jsonl", f"path: {SAMPLE}")
    text += "observability:\n  - {id: O1, log: [log_ratio], sample_rate: 0.5, window_tokens: 100}\n"
    contract = tmp / "c.yaml"
    contract.write_text(text, encoding="utf-8")
    stream = tmp / "log.jsonl"
    lines = SAMPLE.read_bytes().splitlines(keepends=True)
    # a bad line and a split train/rollout pair that straddle windows, then the sample 30×
    extra = [
        b'{"prompt_id": "s", "sample_id": 0, "side": "rollout", "response_ids": [1, 2], '
        b'"logprobs": [-0.5, -0.25]}\n',
        b"{not json\n",
        *lines[:5],
        b'{"prompt_id": "s", "sample_id": 0, "side": "train", "response_ids": [1, 2], '
        b'"logprobs": [-0.5, -0.3]}\n',
    ]
    stream.write_bytes(b"".join(extra) + b"".join(lines) * 30)
    reference = tmp / "reference.jsonl"
    proc = _monitor(contract, stream, reference, None)
    proc.communicate(timeout=120)
    assert (
        proc.returncode == 3
    )  # inconclusive windows (too few tokens for min_samples), none violated
    return tmp, contract, stream, reference.read_bytes()


def _monitor(contract, stream, out, checkpoint) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "verify", "monitor", str(contract), "--stream", str(stream)]
    cmd += ["--no-follow", "--out", str(out)]
    if checkpoint is not None:
        cmd += ["--checkpoint", str(checkpoint)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _kill_when(proc: subprocess.Popen, out: pathlib.Path, size: int, delay: float) -> None:
    """SIGKILL ``proc`` once ``out`` holds ``size`` bytes (or after ``delay`` s when size is 0)."""
    deadline = time.monotonic() + (delay if size == 0 else 60)
    while proc.poll() is None and time.monotonic() < deadline:
        if size and out.exists() and out.stat().st_size >= size:
            break
        time.sleep(0.0005)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)  # waits, and closes the pipe


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kill_9_at_random_points_then_restart_gives_the_uninterrupted_bytes(setup, seed):
    tmp, contract, stream, reference = setup
    rng = random.Random(seed)
    out, ck = tmp / f"out{seed}.jsonl", tmp / f"ck{seed}.json"
    cut_midway = 0
    for attempt in range(3):
        proc = _monitor(contract, stream, out, ck)
        if attempt == 0:  # at a random moment: start-up, reading, writing or checkpointing
            _kill_when(proc, out, 0, rng.uniform(0.2, 1.5))
        else:  # once the output reaches a random length in its first three quarters: the
            # last quarter takes long enough to read that the kill lands before the run ends
            # even on a loaded machine (a length near the end could lose that race)
            _kill_when(proc, out, rng.randrange(1, len(reference) * 3 // 4), 0)
        written = out.read_bytes() if out.exists() else b""
        assert reference.startswith(written)  # what a kill leaves is a prefix of the run
        if ck.exists():
            assert json.loads(ck.read_text(encoding="utf-8"))["out_length"] <= len(written)
        cut_midway += proc.returncode == -signal.SIGKILL and 0 < len(written) < len(reference)
    proc = _monitor(contract, stream, out, ck)
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (3, b"")
    assert out.read_bytes() == reference
    assert cut_midway >= 1
    assert not [p.name for p in tmp.iterdir() if p.name.endswith(".part")]
