"""Benchmark of ``verify``: time per obligation, and ``python -m verify`` wall time per example.

    python bench/bench_verify.py [--runs 5]

Targets: median time per obligation ≤ 50 ms; ``python -m verify`` on each shipped example
contract without evidence ≤ 2 s wall (median of the runs), split into import, derive, solve and
render as the report's ``timing`` records them.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EXAMPLES = sorted((ROOT / "contracts" / "examples").glob("*.yaml"))


def per_obligation(runs: int) -> list[tuple[str, str, float, str]]:
    import bounds
    import contracts
    from verify.obligations import discharge

    rows = []
    for path in EXAMPLES:
        contract = contracts.load(path)
        for d in bounds.derive(contract):
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                ob = discharge(d)
                times.append((time.perf_counter() - t) * 1000)
            rows.append((path.stem, d.guarantee, statistics.median(times), ob.status.label))
    return rows


def _proofs_only(path: pathlib.Path) -> bool:
    import contracts

    evidence = contracts.load(path).evidence
    return evidence.emulate is None and evidence.logprobs is None


def wall(runs: int) -> list[tuple[str, float, dict, int]]:
    """``python -m verify`` on each example without an ``evidence:`` section."""
    rows = []
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        for path in filter(_proofs_only, EXAMPLES):
            walls, timings, code = [], [], 0
            for _ in range(runs):
                t = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "verify", str(path), "--quiet", "--json", report],
                    capture_output=True, text=True, env=env, cwd=tmp,
                )  # fmt: skip
                walls.append(time.perf_counter() - t)
                code = done.returncode
                timings.append(json.loads(pathlib.Path(report).read_text())["timing"])
            split = {k: statistics.median(t[k] for t in timings) for k in timings[0]}
            rows.append((path.stem, statistics.median(walls), split, code))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    rows = per_obligation(args.runs)
    decided = [ms for *_, ms, status in rows if status != "unknown" or ms > 1]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{os.cpu_count()} CPUs, load average {load:.1f} at start")
    print(f"per obligation (median of {args.runs} runs each):")
    for example, gid, ms, status in rows:
        print(f"  {example:<20} {gid:<14} {status:<8} {ms:8.1f} ms")
    print(f"  median over {len(decided)} obligations: {statistics.median(decided):.1f} ms "
          "(target ≤ 50 ms)")  # fmt: skip
    print(f"\npython -m verify, no evidence (median of {args.runs} runs; ms split from timing):")
    for example, seconds, split, code in wall(args.runs):
        parts = "  ".join(f"{k} {v:.0f}" for k, v in split.items())
        print(f"  {example:<20} {seconds:5.2f} s  exit {code}  [{parts}]  (target ≤ 2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
