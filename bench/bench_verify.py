"""Benchmark of ``verify``: time per obligation, and ``python -m verify`` wall and CPU time per
shipped proofs-only contract, with the derivation cache off, cold and warm.

    python bench/bench_verify.py [--runs 5] [--skip-obligations]

Targets: median time per obligation ≤ 50 ms; ``python -m verify`` on each shipped example
contract without an ``evidence:`` section ≤ 0.6 s wall (median of fresh processes) with a warm
derivation cache. Every run is a fresh process; the rounds interleave the variants so that load
from other processes falls on all of them alike:

- ``python -c pass``: the interpreter's start-up, the floor of any run;
- ``off``: ``KERNEL_CONTRACTS_CACHE=off``, everything derived in the run;
- ``cold``: an empty cache directory (derived, then stored);
- ``warm``: the cache directory the cold runs filled (z3 decides the stored queries).

CPU is user + system time of the process and its children (the solver process included). The
cache directories are temporary; the user's cache is never touched. The report's ``timing``
gives the split (import, derive: here finding and reading the entry, solve, render) of the warm
runs; a warm run that missed would have rewritten its entry, which the last line checks.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EXAMPLES = sorted((ROOT / "contracts" / "examples").glob("*.yaml"))
VARIANTS = ("off", "cold", "warm")


def per_obligation(runs: int) -> list[tuple[str, str, float, str]]:
    from kernel_contracts import bounds, contracts
    from kernel_contracts.verify.proving.obligations import discharge

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
    from kernel_contracts import contracts

    evidence = contracts.load(path).evidence
    return evidence.emulate is None and evidence.logprobs is None


def _timed(argv: list[str], env: dict, cwd: str) -> tuple[float, float, int]:
    """Wall and CPU seconds (user + system, children included) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def wall(runs: int) -> tuple[tuple, list[tuple[str, dict, dict, int]], bool]:
    """Median wall and CPU of ``python -c pass``, and of ``python -m verify`` on each proofs-only
    example per variant, with the warm runs' median timing split."""
    base = dict(os.environ, PYTHONPATH=str(ROOT))
    examples = [p for p in EXAMPLES if _proofs_only(p)]
    samples: dict = {("pass", None): []}
    splits: dict = {p.stem: [] for p in examples}
    codes: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        warm_dir = os.path.join(tmp, "warm")
        for p in examples:  # fill the warm cache once; the cold runs start from nothing
            env = dict(base, KERNEL_CONTRACTS_CACHE=warm_dir)
            _timed([sys.executable, "-m", "verify", str(p), "--quiet"], env, tmp)
        filled = _listing(warm_dir)
        for i in range(runs):
            samples[("pass", None)].append(_timed([sys.executable, "-c", "pass"], base, tmp)[:2])
            for p in examples:
                for variant in VARIANTS:
                    where = {"off": "off", "cold": os.path.join(tmp, f"cold{i}-{p.stem}"),
                             "warm": warm_dir}[variant]  # fmt: skip
                    env = dict(base, KERNEL_CONTRACTS_CACHE=where)
                    argv = [sys.executable, "-m", "verify", str(p), "--quiet", "--json", report]
                    w, c, code = _timed(argv, env, tmp)
                    samples.setdefault((p.stem, variant), []).append((w, c))
                    codes[p.stem] = code
                    if variant == "warm":
                        splits[p.stem].append(
                            json.loads(pathlib.Path(report).read_text())["timing"]
                        )
        hits = _listing(warm_dir) == filled and len(filled) == len(examples)
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for k, v in samples.items()}  # fmt: skip
    rows = []
    for p in examples:
        timings = splits[p.stem]
        keys = [k for k in timings[0] if all(k in t for t in timings)]
        split = {k: statistics.median(t[k] for t in timings) for k in keys}
        rows.append((p.stem, {v: med[(p.stem, v)] for v in VARIANTS}, split, codes[p.stem]))
    return med[("pass", None)], rows, hits


def _listing(directory: str) -> dict[str, int]:
    """Each entry of the cache directory and its mtime: a miss would store its entry again."""
    return {e.name: e.stat().st_mtime_ns for e in os.scandir(directory)}


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "n/a"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--skip-obligations", action="store_true", help="only the wall-time table")
    args = p.parse_args()
    pyc = "off" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
    print(f"{os.cpu_count()} CPUs, load average {_load()} at start; bytecode cache {pyc}")
    if not args.skip_obligations:
        rows = per_obligation(args.runs)
        decided = [ms for *_, ms, status in rows if status != "unknown" or ms > 1]
        print(f"per obligation (median of {args.runs} runs each):")
        for example, gid, ms, status in rows:
            print(f"  {example:<20} {gid:<16} {status:<8} {ms:8.1f} ms")
        print(f"  median over {len(decided)} obligations: {statistics.median(decided):.1f} ms "
              "(target ≤ 50 ms)")  # fmt: skip
    (pass_wall, pass_cpu), rows, hits = wall(args.runs)
    print(f"\npython -m verify, proofs only: median of {args.runs} fresh processes, wall s "
          "(CPU s: user + system, children included); target warm ≤ 0.6 s wall")  # fmt: skip
    print(f"  {'python -c pass':<20} {pass_wall:5.2f} ({pass_cpu:4.2f})")
    print(
        f"  {'contract':<20} {'off':>12} {'cold':>12} {'warm':>12}  warm/off  exit  warm split (ms)"
    )
    for example, by, split, code in rows:
        cells = "".join(f" {by[v][0]:5.2f} ({by[v][1]:4.2f})" for v in VARIANTS)
        parts = " ".join(f"{k} {v:.0f}" for k, v in split.items())
        ratio = by["warm"][0] / by["off"][0]
        print(f"  {example:<20}{cells}  {ratio:8.2f}  {code:>4}  [{parts}]")
    print(f"every warm run found its entry (none stored again): {'yes' if hits else 'NO'}")
    print(f"load average {_load()} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
