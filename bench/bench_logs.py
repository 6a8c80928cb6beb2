"""Log ingestion throughput: ``read_log`` against a plain ``json.loads`` loop, same file, same run.

Generates a JSONL log of ``--tokens`` tokens (default 10^6) in a temporary directory, in the
generic format (``--format`` for verl/trl), then times, best of ``--repeat`` runs interleaved
(so machine load hits every reader alike), wall and CPU seconds:

- baseline: ``for line in file: json.loads(line)`` (parsing only, no validation, no arrays);
- ``read_log``: parse, validate every field, build the token table, hash the file;
- ``evaluate`` path: ``read_log`` plus the per-token metrics, framework metrics and summaries
  of one statistical clause on two slices;
- ``evaluate``: ``verify.decide.evaluate`` of the shipped ``rollout-log.yaml`` contract (three
  clauses on three slices, confidence bounds included) on the generated log.

Run: ``python bench/bench_logs.py [--tokens 1000000] [--seq-len 256] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from timing import interleaved

from kernel_contracts.evidence.logs import (
    LoggedSequence,
    framework_metrics,
    read_log,
    token_metrics,
    write_log,
)
from kernel_contracts.evidence.summary import select, summarize


def _generate(path: str, tokens: int, seq_len: int, fmt: str, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)

    def sequences():
        done = 0
        s = 0
        while done < tokens:
            n = min(seq_len, tokens - done)
            train = -rng.exponential(1.0, n)
            rollout = np.minimum(train + rng.normal(0, 0.01, n), 0.0)
            ids = rng.integers(0, 32000, n).tolist()
            yield LoggedSequence(f"p{s // 8}", s % 8, ids, train, rollout, 64)
            done += n
            s += 1

    return write_log(path, sequences(), fmt)


def _baseline(path: str) -> int:
    n = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            json.loads(line)
            n += 1
    return n


def _evaluate_path(path: str, fmt: str):
    from kernel_contracts.contracts.model import Slice

    table = read_log(path, fmt)
    c = table.columns
    m = token_metrics(c["train_logprob"], c["rollout_logprob"])
    framework_metrics(c["train_logprob"], c["rollout_logprob"], c["sequence"])
    cols = {"token_prob": np.exp(c["train_logprob"]), "position": c["position"]}
    for sl in (Slice("all"), Slice("tail", token_prob=(0.0, 0.01))):
        summarize(m["abs_log_ratio"][select(cols, sl)], thresholds=(0.05,))
    return table


def _evaluate_contract(path: str):
    """``verify.decide.evaluate`` of the shipped rollout-log contract on this log."""
    import dataclasses

    from kernel_contracts import contracts
    from kernel_contracts.verify.decide import evaluate

    here = os.path.dirname(os.path.abspath(__file__))
    c = contracts.load(os.path.join(here, "..", "contracts", "examples", "rollout-log.yaml"))
    logprobs = dataclasses.replace(c.evidence.logprobs, path=path)
    policy = dataclasses.replace(c.policy, vocab_size=32000)  # the generated token ids' range
    c = dataclasses.replace(
        c, policy=policy, evidence=dataclasses.replace(c.evidence, logprobs=logprobs)
    )
    return evaluate(c)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=1_000_000)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--format", default="generic", choices=("generic", "verl", "trl"))
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.jsonl")
        t0 = time.perf_counter()
        lines = _generate(path, args.tokens, args.seq_len, args.format)
        gen = time.perf_counter() - t0
        size = os.path.getsize(path)
        fns = {
            "json.loads loop (baseline)": lambda: _baseline(path),
            "read_log": lambda: read_log(path, args.format),
            "read_log + metrics + summaries": lambda: _evaluate_path(path, args.format),
            "evaluate(rollout-log.yaml)": lambda: _evaluate_contract(path),
        }
        wall, cpu, out = interleaved(fns, args.repeat)
    table = out["read_log"]
    assert table.tokens == args.tokens and table.malformed_count == 0
    mb = size / 1e6
    print(f"machine: {platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()}")
    print(
        f"log: {args.tokens} tokens, {lines} lines of {args.seq_len} tokens, {mb:.1f} MB, "
        f"format {args.format} (generated in {gen:.1f} s); best of {args.repeat}, interleaved"
    )
    base = "json.loads loop (baseline)"
    print(f"{'reader':<34}{'wall s':>8}{'cpu s':>8}{'tokens/s (cpu)':>16}{'vs json.loads':>15}")
    for name in fns:
        print(
            f"{name:<34}{wall[name]:>8.3f}{cpu[name]:>8.3f}{args.tokens / cpu[name]:>16,.0f}"
            f"{cpu[base] / cpu[name]:>14.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
