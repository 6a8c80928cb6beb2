"""Regenerate the sample log ``contracts/examples/rollout-sample.jsonl`` from the shipped model.

The shipped ``tiny-lm`` checkpoint generates continuations of held-out prompts with the
``h100-fp8`` inference kernel (emulated FP8 matmuls, paged e4m3 KV cache, dynamic batching) at
T = 1 over the full vocabulary, and the fp32 training kernel scores the same tokens
teacher-forced: exactly what an RL stack logs as rollout and training log-probs. Each sequence
becomes one line of the generic JSONL schema (docs/evidence-schema.md):
``train_logprobs`` = log π_train(y), ``rollout_logprobs`` = log π_inf(y) = log π_train(y) −
log w(y), with ``position_offset`` the prompt length.

Run: ``python bench/make_sample_log.py [--prompts 64] [--tokens 64] [--out PATH]``
(deterministic for a given seed; a few minutes on two CPU cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kernel_contracts import contracts
from kernel_contracts.evidence.emulate import emulate_contract
from kernel_contracts.evidence.logs import LoggedSequence, read_log, write_log

CONTRACT = """contract: 1
name: sample-log-generator
policy: {{temperature: 1.0, top_p: 1.0, top_k: 0, logprobs: full_vocab, vocab_size: 256,
         max_new_tokens: {tokens}}}
kernels: {{train: {{preset: fp32}}, inference: {{preset: {preset}}}}}
runtime:
  - {{id: R1, batch_size: [1, 32], sequence_length: [1, 128]}}
evidence:
  emulate: {{model: tiny-lm, prompts: {prompts}, max_new_tokens: {tokens}, seed: {seed}}}
"""


def sequences(table: dict[str, np.ndarray]) -> list[LoggedSequence]:
    """One logged sequence per prompt of an emulated token table."""
    train = np.log(np.asarray(table["token_prob"], dtype=np.float64))
    rollout = train - np.asarray(table["log_ratio"], dtype=np.float64)
    out = []
    for p in np.unique(table["prompt"]):
        rows = np.flatnonzero(table["prompt"] == p)
        rows = rows[np.argsort(table["position"][rows], kind="stable")]
        out.append(
            LoggedSequence(
                prompt_id=f"heldout-{int(p):03d}",
                sample_id=0,
                ids=table["token"][rows].tolist(),
                train=np.round(train[rows], 7),
                rollout=np.minimum(np.round(rollout[rows], 7), 0.0),
                position_offset=int(table["position"][rows[0]]),
            )
        )
    return out


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "contracts", "examples", "rollout-sample.jsonl")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--preset", default="h100-fp8")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.normpath(default))
    args = p.parse_args(argv)
    contract = contracts.loads(
        CONTRACT.format(
            prompts=args.prompts, tokens=args.tokens, preset=args.preset, seed=args.seed
        )
    )
    t0 = time.perf_counter()

    def progress(done, total):
        print(f"\rprompts {done}/{total}", end="", file=sys.stderr, flush=True)

    table = emulate_contract(contract, progress=progress)
    print(file=sys.stderr)
    seqs = sequences(table)
    write_log(args.out, seqs)
    check = read_log(args.out)
    assert check.tokens == len(table["token"]) and check.malformed_count == 0
    size = os.path.getsize(args.out)
    print(
        f"wrote {args.out}: {check.sequences} sequences, {check.tokens} tokens, {size} bytes, "
        f"sha256 {check.sha256} ({time.perf_counter() - t0:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
