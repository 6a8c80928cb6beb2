"""A log read under a contract that does not declare its vocabulary, and a log with a log-prob
a hair above 0: what the reader counts and what the summary says."""

from __future__ import annotations

import json

from kernel_contracts import contracts
from kernel_contracts.contracts.canonical import canonical_json, from_canonical
from kernel_contracts.evidence.logs import read_log
from kernel_contracts.evidence.sources import log_notes

CONTRACT = """\
contract: 1
name: notes
policy: {temperature: 1.0VOCAB}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
numerical:
  - {id: N1, metric: log_ratio, max: 0.7, slice: all}
"""
QWEN = 151936


def _log(path, lines: int = 6, length: int = 40, positive_at: int | None = None):
    """A generic log of ``lines`` sequences with Qwen-sized token ids; the line
    ``positive_at`` (0-based) has one log-prob of +1e-4."""
    rows = []
    for i in range(lines):
        train = [-0.5 - 0.01 * j for j in range(length)]
        rollout = [t - 0.001 for t in train]
        if i == positive_at:
            rollout[7] = 1e-4
        ids = [(QWEN - 1 - 37 * (i * length + j)) for j in range(length)]
        rows.append({"prompt_id": f"p{i}", "sample_id": 0, "response_ids": ids,
                     "train_logprobs": train, "rollout_logprobs": rollout})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _contract(vocab: str = ""):
    return contracts.loads(CONTRACT.replace("VOCAB", vocab))


def test_an_undeclared_vocabulary_reads_every_line_and_says_the_largest_id(tmp_path):
    c = _contract()
    assert c.policy.vocab_size is None
    text = canonical_json(c)
    assert '"vocab_size"' not in text and from_canonical(text).policy == c.policy
    table = read_log(_log(tmp_path / "q.jsonl"), vocab_size=c.policy.vocab_size)
    assert table.malformed_count == 0 and table.tokens == 240
    (note,) = log_notes(c, [table])
    assert note == (
        f"policy.vocab_size is not declared: token ids were checked to be ≥ 0 only; the largest "
        f"id in the log is {QWEN - 1}, so the vocabulary has at least {QWEN} tokens (declare "
        "policy.vocab_size to check every id against it)"
    )


def test_a_declared_vocabulary_still_refuses_ids_beyond_it(tmp_path):
    c = _contract(
        ", vocab_size: 151000"
    )  # the first line's first id is 151935, the second's all lower
    table = read_log(_log(tmp_path / "q.jsonl", lines=2), vocab_size=c.policy.vocab_size)
    assert (table.malformed_count, table.malformed_tokens, table.tokens) == (1, 40, 40)
    assert table.malformed[0].reason == (
        "'response_ids'[0] = 151935 is not a token id of the vocabulary (vocab_size 151000)"
    )
    assert log_notes(c, [table]) == [
        "malformed lines held 40 tokens, left out of the 80 the log holds (50.0%)"
    ]


def test_a_log_prob_a_hair_above_zero_is_kept_counted_and_said(tmp_path, cli):
    log = _log(tmp_path / "p.jsonl", positive_at=2)
    table = read_log(log, vocab_size=QWEN)
    assert (table.malformed_count, table.tokens) == (0, 240)
    path = tmp_path / "c.yaml"
    path.write_text(CONTRACT.replace("VOCAB", f", vocab_size: {QWEN}"), encoding="utf-8")
    code, out, err = cli(path, "--evidence", log)
    assert (code, err) == (3, ""), out  # a log cannot show a vocabulary-wide clause holds
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: 1 log-probability above 0 (+0.0001, within the tolerance of +0.001 taken as "
        "rounding) read as 0 for the lower bounds of the full-vocabulary metrics"
    ]
    code, out, _ = cli(path, "--evidence", log, "--quiet")
    assert "note:" not in out
