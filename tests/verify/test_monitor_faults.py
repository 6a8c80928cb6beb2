"""Faults that must never lose or double-count a record: a line of several megabytes, two
monitors on one checkpoint, rotations that keep a fixed active name inside a monitored
directory (renaming and copy-truncate), a full disk, a closed standard output, an existing
``--out``, a file rewritten in place behind a checkpoint, and a deleted checkpoint."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

from tests.support.cli_runner import run_cli
from tests.support.monitor_contracts import LINES, ROOT, SAMPLE, monitor_contract


def _contract(tmp_path, tokens: int = 1000) -> pathlib.Path:
    return monitor_contract(tmp_path, tokens)


def _monitor(*args):
    return run_cli("monitor", *args)


def _command(contract, *args) -> list[str]:
    return [sys.executable, "-m", "verify", "monitor", str(contract), *map(str, args)]


def _heads(text: str) -> list[dict]:
    return [r for r in map(json.loads, text.splitlines()) if r["kind"] == "window"]


def _lines(n: int, start: int = 0) -> bytes:
    return b"".join(LINES[(start + i) % len(LINES)] for i in range(n))


def test_a_line_of_several_megabytes_is_read_in_full_and_the_rest_of_the_file_too(tmp_path):
    big = json.loads(LINES[0])
    for key in ("response_ids", "train_logprobs", "rollout_logprobs", "mask"):
        big[key] = big[key] * 2400  # 153600 tokens
    big_line = json.dumps(big).encode() + b"\n"
    assert len(big_line) > 4_000_000
    stream = tmp_path / "log.jsonl"
    stream.write_bytes(_lines(10) + big_line + _lines(10, 10))
    code, out, err = _monitor(_contract(tmp_path), "--stream", stream, "--no-follow")
    heads = _heads(out)
    assert err == "" and code in (0, 1, 3)
    assert sum(h["lines"] for h in heads) == 21
    assert sum(h["sequences"] for h in heads) == 21
    assert sum(h["tokens"] for h in heads) == 20 * 64 + 153600
    assert sum(h["malformed"]["count"] for h in heads) == 0
    assert heads[-1]["to"] == {"line": 21, "offset": stream.stat().st_size}


def test_a_line_over_the_limit_is_one_counted_bad_line_and_reading_goes_on(tmp_path, monkeypatch):
    import kernel_contracts.verify.pipeline.monitor.lines as lines_module
    import kernel_contracts.verify.pipeline.monitor.stream as stream_module

    monkeypatch.setattr(lines_module, "MAX_LINE", 1 << 20)
    monkeypatch.setattr(stream_module, "_CHUNK", 1 << 16)
    long_line = b'{"x": "' + b"a" * (3 << 20) + b'"}\n'
    stream = tmp_path / "log.jsonl"
    stream.write_bytes(_lines(10) + long_line + _lines(10, 10))
    code, out, err = _monitor(_contract(tmp_path), "--stream", stream, "--no-follow")
    heads = _heads(out)
    assert err == "" and code in (0, 1, 3)
    assert sum(h["lines"] for h in heads) == 21
    assert sum(h["sequences"] for h in heads) == 20
    bad = [m for h in heads for m in h["malformed"]["first"]]
    assert bad == [
        {
            "line": 11,
            "offset": len(_lines(10)),
            "reason": f"line longer than {1 << 20} bytes ({len(long_line)} bytes), not read",
        }
    ]


def test_a_second_monitor_on_the_same_checkpoint_is_refused(tmp_path):
    contract = _contract(tmp_path)
    stream, out, ck = tmp_path / "log.jsonl", tmp_path / "out.jsonl", tmp_path / "ck.json"
    stream.write_bytes(_lines(64))
    first = subprocess.Popen(
        _command(
            contract,
            "--stream",
            stream,
            "--out",
            out,
            "--checkpoint",
            ck,
            "--idle-timeout",
            60,
            "--poll",
            0.05,
        ),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while first.poll() is None and time.monotonic() < deadline:
            if out.exists() and out.read_bytes().count(b'"kind": "window"') == 4:
                break  # all 64 lines decided; the first monitor waits for more
            time.sleep(0.02)
        second = subprocess.run(
            _command(contract, "--stream", stream, "--out", out, "--checkpoint", ck, "--no-follow"),
            cwd=ROOT,
            capture_output=True,
            timeout=120,
        )
        assert first.poll() is None  # still following
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    assert second.returncode == 2
    assert second.stderr.decode() == (
        f"cannot use --checkpoint {ck}: another monitor (pid {first.pid}) is using it\n"
    )
    assert second.stdout == b""
    heads = _heads(out.read_text(encoding="utf-8"))  # every line whole, each window once
    assert [h["window"] for h in heads] == list(range(len(heads)))
    assert sum(h["lines"] for h in heads) == 64
    rerun = _monitor(contract, "--stream", stream, "--out", out, "--checkpoint", ck, "--no-follow")
    assert rerun[2] == ""  # the lock went with the killed process
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


def _read_all(stream) -> list:
    lines = []
    while batch := stream.read(follow=True):
        lines += batch
    return lines


def test_a_directory_follows_a_rotation_that_renames_the_active_file(tmp_path):
    from kernel_contracts.verify.pipeline.monitor.stream import Position, open_stream

    logs = tmp_path / "logs"
    logs.mkdir()
    active = logs / "current.jsonl"
    active.write_bytes(_lines(100))
    stream = open_stream(str(logs), Position())
    try:
        before = _read_all(stream)
        os.rename(active, logs / "current.jsonl.00001")
        active.write_bytes(_lines(92, 100))
        after = _read_all(stream)
    finally:
        stream.close()
    assert len(before) == 100 and len(after) == 92
    assert [x.raw for x in before + after] == _lines(192).splitlines(keepends=True)
    assert {x.file for x in after} == {"current.jsonl"}


def test_a_restart_after_a_rotation_in_a_directory_counts_every_line_once(tmp_path):
    logs, out, ck = tmp_path / "logs", tmp_path / "out.jsonl", tmp_path / "ck.json"
    logs.mkdir()
    active = logs / "current.jsonl"
    active.write_bytes(_lines(100))
    contract = _contract(tmp_path)
    args = [contract, "--stream", logs, "--out", out, "--checkpoint", ck, "--no-follow"]
    assert _monitor(*args)[2] == ""
    os.rename(active, logs / "current.jsonl.00001")
    active.write_bytes(_lines(92, 100))
    code, _, err = _monitor(*args)
    assert (code in (0, 1, 3), err) == (True, "")
    heads = _heads(out.read_text(encoding="utf-8"))
    assert sum(h["lines"] for h in heads) == 192
    assert sum(h["malformed"]["count"] for h in heads) == 0


def test_a_directory_follows_copy_truncate_without_counting_twice(tmp_path):
    from kernel_contracts.verify.pipeline.monitor.stream import Position, open_stream

    logs = tmp_path / "logs"
    logs.mkdir()
    active = logs / "current.jsonl"
    active.write_bytes(_lines(100))
    stream = open_stream(str(logs), Position())
    try:
        before = _read_all(stream)
        with active.open("ab") as f:  # written after the last read, before the copy
            f.write(_lines(5, 100))
        shutil.copyfile(active, logs / "current.jsonl.00001")
        with active.open("r+b") as f:
            f.truncate(0)
        with active.open("ab") as f:
            f.write(_lines(92, 105))
        after = _read_all(stream)
        notes = stream.notes()
    finally:
        stream.close()
    assert len(before) == 100
    assert [x.raw for x in before + after] == _lines(197).splitlines(keepends=True)
    assert [x.file for x in after] == ["current.jsonl.00001"] * 5 + ["current.jsonl"] * 92
    assert notes == [
        f"{active}: the file was truncated (copy-truncate rotation?): reading it again from "
        "its start; lines written between the copy and the truncation are in neither file"
    ]


def test_a_full_disk_is_one_line_naming_the_output(tmp_path):
    proc = subprocess.run(
        _command(_contract(tmp_path), "--stream", SAMPLE, "--no-follow", "--out", "/dev/full"),
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stdout) == (2, b"")
    assert proc.stderr.decode() == "verify: cannot write /dev/full: No space left on device\n"


def test_a_closed_standard_output_ends_the_monitor_quietly(tmp_path):
    stream = tmp_path / "log.jsonl"
    stream.write_bytes(_lines(640))
    proc = subprocess.Popen(
        _command(_contract(tmp_path, 100), "--stream", stream, "--no-follow"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first = proc.stdout.readline()  # what `| head -1` reads, then it goes away
    proc.stdout.close()
    err = proc.stderr.read()
    proc.stderr.close()
    proc.wait(timeout=120)
    assert json.loads(first)["kind"] == "window"
    assert (proc.returncode, err) == (141, b"")


def test_out_without_a_checkpoint_is_appended_to(tmp_path):
    contract = _contract(tmp_path)
    out = tmp_path / "out.jsonl"
    _, reference, _ = _monitor(contract, "--stream", SAMPLE, "--no-follow")
    out.write_bytes(b'{"kind": "earlier"}\n')
    for _ in range(2):
        code, text, err = _monitor(contract, "--stream", SAMPLE, "--no-follow", "--out", out)
        assert (code, text, err) == (1, "", "")
    assert out.read_text(encoding="utf-8") == '{"kind": "earlier"}\n' + reference * 2


def test_a_file_rewritten_in_place_behind_a_checkpoint_is_refused(tmp_path):
    contract = _contract(tmp_path)
    stream, out, ck = tmp_path / "log.jsonl", tmp_path / "out.jsonl", tmp_path / "ck.json"
    stream.write_bytes(_lines(40))
    args = [contract, "--stream", stream, "--out", out, "--checkpoint", ck, "--no-follow"]
    assert _monitor(*args)[2] == ""
    kept = _lines(3)
    assert len(kept) > 4096
    with stream.open("r+b") as f:  # same inode, same first lines, other records after them
        f.write(kept + _lines(60, 20))
    before = out.read_bytes(), ck.read_bytes()
    code, text, err = _monitor(*args)
    assert (code, text, err) == (
        2,
        "",
        f"{stream}: the file was rewritten since the checkpoint was written (the "
        f"{len(_lines(40))} bytes already read differ); its rest cannot be read (start with "
        "a new checkpoint)\n",
    )
    assert (out.read_bytes(), ck.read_bytes()) == before


def test_a_deleted_checkpoint_never_cuts_the_output(tmp_path):
    contract = _contract(tmp_path)
    out, ck = tmp_path / "out.jsonl", tmp_path / "ck.json"
    args = [contract, "--stream", SAMPLE, "--out", out, "--checkpoint", ck, "--no-follow"]
    assert _monitor(*args)[2] == ""
    written = out.read_bytes()
    ck.unlink()
    code, text, err = _monitor(*args)
    assert (code, text, err) == (
        2,
        "",
        f"cannot start: --out {out} holds {len(written)} bytes but the checkpoint {ck} does "
        "not exist (deleted?); starting over would repeat the stream's windows: remove --out "
        "or give another --out path\n",
    )
    assert out.read_bytes() == written and not ck.exists()
