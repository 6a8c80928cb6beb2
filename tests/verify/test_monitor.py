"""``python -m verify monitor``: windows, sampling, the offline decision functions per window and
slice, the escalation policy in order, bad lines with their positions, files, directories and
standard input, resuming from a checkpoint, and memory that does not grow with the stream."""

from __future__ import annotations

import io
import json
import os
import pathlib
import threading
import tracemalloc

import numpy as np
import pytest

from kernel_contracts import contracts
from kernel_contracts.verify.decide import evaluate
from kernel_contracts.verify.pipeline.monitor import sample_mask
from tests.support.cli_runner import run_cli

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "contracts" / "examples"
SAMPLE = EXAMPLES / "rollout-sample.jsonl"
LINES = SAMPLE.read_bytes().splitlines(keepends=True)  # 64 lines of 64 tokens


def _contract(tmp_path, extra: str = "", name: str = "c.yaml") -> pathlib.Path:
    text = (EXAMPLES / "rollout-log.yaml").read_text(encoding="utf-8")
    text = text.replace("path: rollout-sample.jsonl", f"path: {SAMPLE}") + extra
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _window(tokens: int, rate: float = 1.0) -> str:
    return (
        "observability:\n"
        f"  - {{id: O1, log: [log_ratio], sample_rate: {rate}, window_tokens: {tokens}}}\n"
    )


def _monitor(*args, stdin_fd: int = 0):
    from kernel_contracts.verify.pipeline.monitor import main as monitor_main

    if not stdin_fd:
        return run_cli("monitor", *args)
    out, err = io.StringIO(), io.StringIO()
    code = monitor_main([str(a) for a in args], stdout=out, stderr=err, stdin_fd=stdin_fd)
    return code, out.getvalue(), err.getvalue()


def _write_and_close(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as w:
        w.write(data)


def _records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def _expected_exit(text: str) -> int:
    """The exit code the windows' verdicts give: violated 1, else inconclusive 3, else 0."""
    verdicts = {r["verdict"] for r in _records(text) if r["kind"] == "window"}
    return 1 if "violated" in verdicts else 3 if "inconclusive" in verdicts else 0


def test_one_window_over_the_sample_gives_the_offline_verdicts_values_and_bounds(tmp_path):
    contract = _contract(tmp_path)
    code, out, err = _monitor(contract, "--stream", SAMPLE, "--no-follow")
    assert (code, err) == (1, "")
    head, *decisions = _records(out)
    assert head["kind"] == "window" and head["window"] == 0 and head["closed"] == "end"
    assert (head["lines"], head["sequences"], head["tokens"], head["sampled_tokens"]) == (
        64,
        64,
        4096,
        4096,
    )
    assert (
        head["fingerprint"]
        == "sha256:" + __import__("hashlib").sha256(SAMPLE.read_bytes()).hexdigest()
    )
    assert head["verdict"] == "violated"
    offline, _ = evaluate(contracts.load(contract))
    assert len(decisions) == len(offline) == 7
    for d, c in zip(decisions, offline, strict=True):
        assert (d["clause"], d["slice"], d["verdict"]) == (c.id, c.slice, c.status.label)
        assert (d["value"], d["bound"], d["evidence"]["samples"]) == (c.value, c.bound, c.samples)
        assert (d["statistic"], d["reason"]) == (c.statistic, c.reason)


def test_windows_close_at_the_record_that_reaches_window_tokens(tmp_path):
    contract = _contract(tmp_path, _window(1000))
    code, out, _ = _monitor(contract, "--stream", SAMPLE, "--no-follow")
    heads = [r for r in _records(out) if r["kind"] == "window"]
    assert code == _expected_exit(out) == 1
    assert [h["window"] for h in heads] == [0, 1, 2, 3]
    assert [h["tokens"] for h in heads] == [1024] * 4  # 16 records of 64 tokens reach 1000
    assert [(h["from"]["line"], h["to"]["line"]) for h in heads] == [
        (1, 16),
        (17, 32),
        (33, 48),
        (49, 64),
    ]
    assert heads[1]["from"]["offset"] == heads[0]["to"]["offset"] == len(b"".join(LINES[:16]))
    assert [h["closed"] for h in heads] == ["size", "size", "size", "size"]
    decisions = [r for r in _records(out) if r["kind"] == "decision"]
    assert len(decisions) == 4 * 7
    assert {d["evidence"]["tokens"] for d in decisions} == {1024}


def test_sampling_is_a_hash_of_the_record_and_keeps_the_same_tokens_however_cut(tmp_path):
    rng = np.random.default_rng(0)
    pos = np.arange(100_000)
    keep = sample_mask(12345, pos, 0.25)
    assert abs(keep.mean() - 0.25) < 0.01
    assert (sample_mask(12345, pos, 0.25) == keep).all()
    assert (sample_mask(12346, pos, 0.25) != keep).any()
    assert not (keep & ~sample_mask(12345, pos, 0.5)).any()  # nested in larger rates
    assert sample_mask(int(rng.integers(2**63)), pos, 1.0).all()
    totals = []
    for tokens in (300, 100_000):
        contract = _contract(tmp_path, _window(tokens, 0.5), name=f"c{tokens}.yaml")
        _, out, _ = _monitor(contract, "--stream", SAMPLE, "--no-follow")
        heads = [r for r in _records(out) if r["kind"] == "window"]
        assert sum(h["tokens"] for h in heads) == 4096
        totals.append(sum(h["sampled_tokens"] for h in heads))
    assert totals[0] == totals[1]
    assert 1800 < totals[0] < 2300


def test_the_escalation_policy_applies_in_order_per_clause_and_slice(tmp_path):
    rules = (
        "escalation:\n"
        "  - {when: {clause: S_large_ratio_rate, status: [inconclusive]}, severity: warn, "
        "action: alert}\n"
        "  - {when: {clause: S_large_ratio_rate}, severity: critical, action: mask_tokens}\n"
        "  - {when: {clause: N_is_cap}, severity: critical, action: route_to_train_kernel}\n"
        "  - {when: {clause: N_is_cap}, severity: info, action: log}\n"
    )
    contract = _contract(tmp_path, rules)
    _, out, _ = _monitor(contract, "--stream", SAMPLE, "--no-follow")
    got = {
        (r["clause"], r["slice"]): (r["verdict"], r["rule"], r["severity"], r["action"])
        for r in _records(out)
        if r["kind"] == "decision"
    }
    assert got[("N_is_cap", "all")] == ("violated", 2, "critical", "route_to_train_kernel")
    assert got[("S_large_ratio_rate", "all")] == ("inconclusive", 0, "warn", "alert")
    assert got[("S_large_ratio_rate", "tail_tokens")] == ("violated", 1, "critical", "mask_tokens")
    assert got[("S_tail_ratio", "all")] == ("held", None, None, None)


def test_bad_lines_are_counted_with_their_positions(tmp_path):
    bad = [b"{not json\n", b"\xff\xfe\n", b"[1, 2]\n", b'{"response_ids": [1]}\n']
    stream = tmp_path / "log.jsonl"
    data = [*LINES[:2], bad[0], *LINES[2:3], *bad[1:], b"\n", *LINES[3:4], b'{"cut": ']
    stream.write_bytes(b"".join(data))
    offsets = np.cumsum([0] + [len(x) for x in data]).tolist()
    code, out, err = _monitor(_contract(tmp_path), "--stream", stream, "--no-follow")
    assert (code, err) == (_expected_exit(out), "")
    head = _records(out)[0]
    assert head["lines"] == 10 and head["blank_lines"] == 1 and head["sequences"] == 4
    assert head["malformed"] == {
        "count": 5,
        "first": [
            {
                "line": 3,
                "offset": offsets[2],
                "reason": "invalid JSON: Expecting property name enclosed in double quotes "
                "(column 2)",
            },
            {"line": 5, "offset": offsets[4], "reason": "not UTF-8 text (byte 0xff at column 1)"},
            {"line": 6, "offset": offsets[5], "reason": "not a JSON object (got list)"},
            {
                "line": 7,
                "offset": offsets[6],
                "reason": "missing key 'train_logprobs' (generic format)",
            },
            {
                "line": 10,
                "offset": offsets[9],
                "reason": "truncated record at end of input: Expecting value (column 9)",
            },
        ],
    }
    assert head["to"] == {"line": 10, "offset": offsets[10]}
    decisions = [r for r in _records(out) if r["kind"] == "decision"]
    assert {d["evidence"]["malformed_lines"] for d in decisions} == {5}


def test_a_directory_is_read_in_name_order_and_a_cut_rotated_file_is_a_bad_line(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "part-002.jsonl").write_bytes(b"".join(LINES[40:]))
    (logs / "part-001.jsonl").write_bytes(b"".join(LINES[16:40]) + b'{"response_ids": [')
    (logs / "part-000.jsonl").write_bytes(b"".join(LINES[:16]))
    (logs / ".part-003.jsonl.tmp").write_bytes(b"garbage\n")  # hidden: not a log
    contract = _contract(tmp_path, _window(1000))
    code, out, _ = _monitor(contract, "--stream", logs, "--no-follow")
    assert code == _expected_exit(out) == 1
    heads = [r for r in _records(out) if r["kind"] == "window"]
    assert [(h["from"], h["to"]) for h in heads[:2]] == [
        (
            {"file": "part-000.jsonl", "line": 1, "offset": 0},
            {"file": "part-000.jsonl", "line": 16, "offset": len(b"".join(LINES[:16]))},
        ),
        (
            {"file": "part-001.jsonl", "line": 1, "offset": 0},
            {"file": "part-001.jsonl", "line": 16, "offset": len(b"".join(LINES[16:32]))},
        ),
    ]
    assert heads[2]["malformed"]["first"] == [
        {
            "file": "part-001.jsonl",
            "line": 25,
            "offset": len(b"".join(LINES[16:40])),
            "reason": "truncated record at end of input: Expecting value (column 19)",
        }
    ]
    assert sum(h["tokens"] for h in heads) == 4096
    single = tmp_path / "single.jsonl"
    single.write_bytes(b"".join(LINES))
    _, whole, _ = _monitor(contract, "--stream", single, "--no-follow")
    verdicts = [(r["clause"], r["slice"], r["verdict"], r["bound"]) for r in _records(whole)[1:8]]
    assert verdicts == [
        (r["clause"], r["slice"], r["verdict"], r["bound"]) for r in _records(out)[1:8]
    ]


def test_standard_input_and_a_restart_that_skips_what_was_decided(tmp_path):
    contract = _contract(tmp_path, _window(1000))
    ck, out = tmp_path / "ck.json", tmp_path / "out.jsonl"
    _, reference, _ = _monitor(contract, "--stream", SAMPLE, "--no-follow")
    stream = tmp_path / "in.jsonl"
    stream.write_bytes(b"".join(LINES[:32]))  # two whole windows, then the rest appended
    args = ["--stream", "-", "--out", out, "--checkpoint", ck]
    for part in (LINES[:32], LINES):
        stream.write_bytes(b"".join(part))
        read, write = os.pipe()  # a pipe: the restart reads and drops what was decided
        writer = threading.Thread(target=_write_and_close, args=(write, b"".join(part)))
        writer.start()
        try:
            code, text, err = _monitor(contract, *args, stdin_fd=read)
        finally:
            writer.join()
            os.close(read)
        assert (code, text, err) == (_expected_exit(out.read_text(encoding="utf-8")), "", "")
    assert out.read_text(encoding="utf-8") == reference.replace(str(SAMPLE), "<stdin>")
    state = json.loads(ck.read_text(encoding="utf-8"))
    assert state["position"]["offset"] == len(SAMPLE.read_bytes())
    assert state["window"] == 4 and state["out_length"] == len(out.read_bytes())


def test_a_restart_cuts_the_output_back_to_the_checkpoint_and_resumes(tmp_path):
    contract = _contract(tmp_path, _window(1000))
    stream, ck, out = tmp_path / "log.jsonl", tmp_path / "ck.json", tmp_path / "out.jsonl"
    stream.write_bytes(b"".join(LINES))
    _, reference, _ = _monitor(contract, "--stream", stream, "--no-follow")
    stream.write_bytes(b"".join(LINES[:32]))
    args = [contract, "--stream", stream, "--out", out, "--checkpoint", ck, "--no-follow"]
    assert _monitor(*args)[0] in (1, 3)
    first = out.read_bytes()
    with out.open("ab") as f:  # a window written whose checkpoint never landed
        f.write(b'{"kind": "window", "window": 2, "half": tru')
    stream.write_bytes(b"".join(LINES))
    code, text, err = _monitor(*args)
    assert (text, err) == ("", "")
    assert out.read_text(encoding="utf-8") == reference
    assert out.read_bytes().startswith(first)
    assert code == 1
    again = _monitor(*args)  # nothing new: nothing written, the stream's verdict again
    assert again == (1, "", "") and out.read_text(encoding="utf-8") == reference


def test_a_truncated_last_line_waits_for_its_newline_when_following(tmp_path):
    contract = _contract(tmp_path, _window(1000))
    stream, ck, out = tmp_path / "log.jsonl", tmp_path / "ck.json", tmp_path / "out.jsonl"
    half = len(LINES[20]) // 2
    stream.write_bytes(b"".join(LINES[:20]) + LINES[20][:half])
    args = [contract, "--stream", stream, "--out", out, "--checkpoint", ck]
    code, _, err = _monitor(*args, "--idle-timeout", "0.3", "--poll", "0.05")
    assert code == _expected_exit(out.read_text(encoding="utf-8"))
    assert err == "monitor: no new line for 0.3 s; stopped after window 1\n"
    heads = [r for r in _records(out.read_text()) if r["kind"] == "window"]
    assert [(h["closed"], h["lines"], h["malformed"]["count"]) for h in heads] == [
        ("size", 16, 0),
        ("idle", 4, 0),
    ]
    assert json.loads(ck.read_text())["position"]["line"] == 20  # the partial line not read
    stream.write_bytes(b"".join(LINES[:20]) + LINES[20] + b"".join(LINES[21:]))
    _monitor(*args, "--no-follow")
    heads = [r for r in _records(out.read_text()) if r["kind"] == "window"]
    assert [h["lines"] for h in heads] == [16, 4, 16, 16, 12]
    assert sum(h["malformed"]["count"] for h in heads) == 0
    assert sum(h["tokens"] for h in heads) == 4096


def test_memory_does_not_grow_with_the_stream(tmp_path, monkeypatch):
    import kernel_contracts.verify.pipeline.monitor.stream as stream_module

    # both streams span chunks
    monkeypatch.setattr(stream_module, "_CHUNK", 1 << 16)
    contract = _contract(tmp_path, _window(2000))
    line = LINES[0]
    _monitor(contract, "--stream", SAMPLE, "--no-follow", "--out", tmp_path / "warm.jsonl")
    peaks = []
    for n in (320, 1280):
        stream = tmp_path / f"long{n}.jsonl"
        stream.write_bytes(line * n)
        out = tmp_path / f"out{n}.jsonl"
        tracemalloc.start()
        try:
            code, _, _ = _monitor(contract, "--stream", stream, "--no-follow", "--out", out)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        heads = [r for r in _records(out.read_text()) if r["kind"] == "window"]
        assert len(heads) == n // 32 and code == _expected_exit(out.read_text())
    assert peaks[1] < 1.2 * peaks[0], peaks  # 4× the stream, not 4× the memory
    assert peaks[1] < 4 * 2**20, peaks


def test_a_file_replaced_under_its_name_is_finished_then_the_new_one_read(tmp_path):
    import subprocess
    import sys
    import time

    contract = _contract(tmp_path, _window(1000))
    stream, out = tmp_path / "log.jsonl", tmp_path / "out.jsonl"
    stream.write_bytes(b"".join(LINES[:24]))
    cmd = [sys.executable, "-m", "verify", "monitor", str(contract), "--stream", str(stream)]
    cmd += ["--out", str(out), "--idle-timeout", "3", "--poll", "0.02"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while (not out.exists() or out.stat().st_size == 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        with stream.open("ab") as f:  # the old file gets its last lines, then is rotated
            f.write(b"".join(LINES[24:40]))
        os.rename(stream, tmp_path / "log.jsonl.1")
        stream.write_bytes(b"".join(LINES[40:]))
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode in (1, 3), err
    heads = [r for r in _records(out.read_text()) if r["kind"] == "window"]
    assert sum(h["tokens"] for h in heads) == 4096
    assert sum(h["malformed"]["count"] for h in heads) == 0


@pytest.mark.parametrize("fmt", ["verl", "trl"])
def test_every_log_format_the_reader_knows(tmp_path, fmt):
    from kernel_contracts.evidence.logs import record
    from kernel_contracts.evidence.logs.writer import LoggedSequence

    stream = tmp_path / f"{fmt}.jsonl"
    rows = []
    for i, raw in enumerate(LINES[:8]):
        r = json.loads(raw)
        seq = LoggedSequence(
            r["prompt_id"], i, r["response_ids"], r["train_logprobs"], r["rollout_logprobs"], 256
        )
        rows.append(json.dumps(record(seq, fmt)) + "\n")
    stream.write_text("".join(rows), encoding="utf-8")
    text = (EXAMPLES / "rollout-log.yaml").read_text(encoding="utf-8")
    text = text.replace("format: generic", f"format: {fmt}")
    contract = tmp_path / "c.yaml"
    contract.write_text(text, encoding="utf-8")
    code, out, err = _monitor(contract, "--stream", stream, "--no-follow")
    head = _records(out)[0]
    assert code == _expected_exit(out)
    assert err == "" and (head["sequences"], head["tokens"]) == (8, 512)
    assert head["malformed"]["count"] == 0


def test_a_directory_resumes_after_a_finished_file_even_when_it_was_deleted(tmp_path):
    logs, out, ck = tmp_path / "logs", tmp_path / "out.jsonl", tmp_path / "ck.json"
    logs.mkdir()
    a, b, c = logs / "a.jsonl", logs / "b.jsonl", logs / "c.jsonl"
    a.write_bytes(b"".join(LINES[:16]).rstrip(b"\n"))  # its last record has no newline
    b.write_bytes(b"".join(LINES[16:32]))
    c.write_bytes(b"".join(LINES[32:]))
    contract = _contract(tmp_path, _window(1000))
    _, reference, _ = _monitor(contract, "--stream", logs, "--no-follow")
    c.unlink()
    args = [contract, "--stream", logs, "--out", out, "--checkpoint", ck, "--no-follow"]
    _monitor(*args)
    sha = __import__("hashlib").sha256
    st_a, st_b = a.stat(), b.stat()
    assert json.loads(ck.read_text())["position"] == {
        "file": "b.jsonl",
        "offset": len(b"".join(LINES[16:32])),
        "line": 16,
        "identity": [st_b.st_dev, st_b.st_ino],
        "head": sha(b"".join(LINES[16:32])[:4096]).hexdigest(),
        "digest": sha(b"".join(LINES[16:32])).hexdigest(),
        "files": [
            {
                "name": "a.jsonl",
                "identity": [st_a.st_dev, st_a.st_ino],
                "offset": st_a.st_size,
                "line": 16,
                "head": sha(a.read_bytes()[:4096]).hexdigest(),
                "digest": sha(a.read_bytes()).hexdigest(),
            }
        ],
    }
    b.unlink()  # not finished when the checkpoint was written: its loss is an error
    code, _, err = _monitor(*args)
    assert (code, err) == (
        2,
        f"{b}: the file being read is gone (rotated files must stay until the monitor has "
        "read them)\n",
    )
    b.write_bytes(b"".join(LINES[16:32]))
    c.write_bytes(b"".join(LINES[32:]))
    _monitor(*args)
    assert out.read_text(encoding="utf-8") == reference
    heads = [r for r in _records(reference) if r["kind"] == "window"]
    assert heads[0]["to"] == {"file": "a.jsonl", "line": 16, "offset": a.stat().st_size}


def test_a_position_after_a_finished_rotated_file_resumes_at_the_next_name(tmp_path):
    from kernel_contracts.verify.pipeline.monitor.stream import Position, open_stream

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(b"".join(LINES[:3]).rstrip(b"\n"))
    b.write_bytes(b"".join(LINES[3:5]))
    stream = open_stream(str(tmp_path), Position())
    lines, after = [], []
    while batch := stream.read(follow=True):
        lines += batch
        after.append(stream.position(batch[-1]))  # where a restart after the batch resumes
    assert [(x.file, x.number, x.cut) for x in lines] == [
        ("a.jsonl", 1, False),
        ("a.jsonl", 2, False),
        ("a.jsonl", 3, True),
        ("b.jsonl", 1, False),
        ("b.jsonl", 2, False),
    ]
    after_a = after[1]  # the batch of the cut line: a finished, no file open
    assert (after_a.file, after_a.offset) == ("", 0)
    assert [(f.name, f.offset, f.line) for f in after_a.files] == [
        ("a.jsonl", a.stat().st_size, 3),
        ("b.jsonl", 0, 0),
    ]
    assert after[2].head == __import__("hashlib").sha256(b"".join(LINES[3:5])).hexdigest()
    assert [f.name for f in after[2].files] == ["a.jsonl"]
    stream.close()
    a.unlink()  # read to its end: it may go
    resumed = open_stream(str(tmp_path), after_a)
    lines = []
    while batch := resumed.read(follow=False):
        lines += batch
    assert [(x.file, x.number, x.raw) for x in lines] == [
        ("b.jsonl", 1, LINES[3]),
        ("b.jsonl", 2, LINES[4]),
    ]
    resumed.close()
