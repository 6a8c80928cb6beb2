"""Monitor throughput: ``python -m verify monitor`` against the offline ``evaluate``, same data,
same run.

Replays the shipped sample log (``contracts/examples/rollout-sample.jsonl``, 64 sequences of 64
tokens) ``--replay`` times (default 100) into one temporary file and times, best of ``--repeat``
runs interleaved (so machine load hits both alike), wall and CPU seconds:

- offline: ``verify.decide.evaluate`` of ``contracts/examples/rollout-log.yaml`` on the file
  (read the whole log, summarise, decide every clause and slice once);
- monitor: ``verify monitor`` of the same contract on the same file, ``--no-follow``, windows of
  ``--window`` tokens (default: the contract's, 100000 without an observability clause), each
  window decided and written to a file, with a checkpoint after every window (``fsync``);
- monitor without a checkpoint.

The ratio is the monitor's tokens/s over the offline tokens/s (target ≥ 0.8).

Run: ``python bench/bench_monitor.py [--replay 100] [--repeat 3] [--window N]``
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from timing import interleaved

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "contracts", "examples")


def _offline(contract_path: str, log: str):
    from kernel_contracts import contracts
    from kernel_contracts.verify.decide import evaluate

    _, info = evaluate(contracts.load(contract_path), paths=(log,))
    return info["sources"][0]["tokens"]


def _monitor(contract_path: str, log: str, tmp: str, checkpoint: bool) -> int:
    from kernel_contracts.verify.pipeline.monitor import main

    out, ck = os.path.join(tmp, "out.jsonl"), os.path.join(tmp, "ck.json")
    for path in (out, ck):
        if os.path.exists(path):
            os.unlink(path)
    args = [contract_path, "--stream", log, "--no-follow", "--out", out]
    if checkpoint:
        args += ["--checkpoint", ck]
    err = io.StringIO()
    code = main(args, stdout=io.StringIO(), stderr=err)
    if code not in (0, 1, 3):
        raise SystemExit(f"monitor failed: {err.getvalue()}")
    import json

    with open(out, encoding="utf-8") as f:
        return sum(r["tokens"] for r in map(json.loads, f) if r["kind"] == "window")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replay", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--window", type=int, help="window_tokens (default: the contract's)")
    args = p.parse_args(argv)
    with open(os.path.join(EXAMPLES, "rollout-sample.jsonl"), "rb") as f:
        sample = f.read()
    with open(os.path.join(EXAMPLES, "rollout-log.yaml"), encoding="utf-8") as f:
        text = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "replayed.jsonl")
        with open(log, "wb") as f:
            f.write(sample * args.replay)
        text = text.replace("path: rollout-sample.jsonl", f"path: {log}")
        if args.window:
            text += (
                f"observability:\n  - {{id: O1, log: [log_ratio], window_tokens: {args.window}}}\n"
            )
        contract = os.path.join(tmp, "rollout-log.yaml")
        with open(contract, "w", encoding="utf-8") as f:
            f.write(text)
        fns = {
            "offline evaluate": lambda: _offline(contract, log),
            "monitor + checkpoint": lambda: _monitor(contract, log, tmp, True),
            "monitor, no checkpoint": lambda: _monitor(contract, log, tmp, False),
        }
        wall, cpu, out = interleaved(fns, args.repeat)
        size = os.path.getsize(log)
    tokens = out["offline evaluate"]
    assert all(v == tokens for v in out.values()), out
    window = args.window or 100_000
    print(f"machine: {platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()}")
    print(
        f"log: rollout-sample.jsonl x{args.replay}: {tokens} tokens, {64 * args.replay} lines, "
        f"{size / 1e6:.1f} MB; windows of {window} tokens; best of {args.repeat}, interleaved"
    )
    base = "offline evaluate"
    print(f"{'run':<24}{'wall s':>8}{'cpu s':>8}{'tokens/s (wall)':>17}{'vs offline':>12}")
    for name in fns:
        print(
            f"{name:<24}{wall[name]:>8.3f}{cpu[name]:>8.3f}{tokens / wall[name]:>17,.0f}"
            f"{wall[base] / wall[name]:>11.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
