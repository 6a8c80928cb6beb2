"""The shipped rollout log and a contract that monitors it, for the monitor's tests."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "contracts" / "examples"
SAMPLE = EXAMPLES / "rollout-sample.jsonl"
LINES = SAMPLE.read_bytes().splitlines(keepends=True)  # 64 lines of 64 tokens


def monitor_contract(tmp_path: pathlib.Path, tokens: int) -> pathlib.Path:
    """``c.yaml`` in ``tmp_path``: the shipped log contract with one observability clause that
    logs ``log_ratio`` in windows of ``tokens`` tokens."""
    text = (EXAMPLES / "rollout-log.yaml").read_text(encoding="utf-8")
    text = text.replace("path: rollout-sample.jsonl", f"path: {SAMPLE}")
    text += f"observability:\n  - {{id: O1, log: [log_ratio], window_tokens: {tokens}}}\n"
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return path
