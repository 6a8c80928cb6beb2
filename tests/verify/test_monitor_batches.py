"""Hook batches in the monitor (``evidence.logs.batches``): a record of a framed batch is data
only once its whole batch has arrived in order; a batch cut short (by another batch, by a record
without a frame, by the end of a finished file) is left out and counted as malformed lines with
the offline reader's reasons; a batch still being written at the end of a followed file is held,
across polls and across a restart from a checkpoint taken while it is held."""

from __future__ import annotations

import io
import json
import pathlib

import pytest

from kernel_contracts.evidence.logs.batches import frame
from kernel_contracts.evidence.logs.reader import read_jsonl_log
from tests.support.cli_runner import run_cli
from tests.support.monitor_contracts import LINES, monitor_contract


def _contract(tmp_path, tokens: int = 100_000) -> pathlib.Path:
    return monitor_contract(tmp_path, tokens)


def _batch(lines: list[bytes]) -> list[bytes]:
    """``lines`` framed as one hook batch, one JSON line each."""
    return [json.dumps(r).encode() + b"\n" for r in frame(json.loads(x) for x in lines)]


def _heads(text: str) -> list[dict]:
    return [r for r in map(json.loads, text.splitlines()) if r["kind"] == "window"]


def _cut(got: int, size: int, why: str) -> str:
    return (
        f"part of a hook batch cut short ({got} of its {size} records read; {why}): "
        "the whole batch is left out"
    )


def _malformed(heads: list[dict]) -> list[tuple[int, str]]:
    return [(p["line"], p["reason"]) for h in heads for p in h["malformed"]["first"]]


def test_a_batch_cut_short_at_the_end_of_a_finished_file_is_left_out_and_counted(tmp_path):
    stream = tmp_path / "log.jsonl"
    stream.write_bytes(b"".join(LINES[:8] + _batch(LINES[8:12])[:3]))  # killed in the append
    _code, out, err = run_cli("monitor", _contract(tmp_path), "--stream", stream, "--no-follow")
    assert err == ""
    (head,) = _heads(out)
    assert (head["lines"], head["sequences"], head["tokens"]) == (11, 8, 8 * 64)
    assert head["malformed"]["count"] == 3
    assert _malformed([head]) == [(n, _cut(3, 4, "the file ends first")) for n in (9, 10, 11)]


@pytest.mark.parametrize("newline", [True, False])
def test_a_directory_file_finished_mid_batch_drops_it_and_a_whole_last_batch_is_kept(
    tmp_path, newline
):
    logs = tmp_path / "logs"
    logs.mkdir()
    whole = b"".join(_batch(LINES[:4]))  # a.jsonl: one whole batch (its last line maybe cut)
    (logs / "a.jsonl").write_bytes(whole if newline else whole.rstrip(b"\n"))
    (logs / "b.jsonl").write_bytes(b"".join(_batch(LINES[4:10])[:5]))  # b: 5 of 6, finished
    (logs / "c.jsonl").write_bytes(b"".join(LINES[10:12]))  # unframed
    _code, out, err = run_cli("monitor", _contract(tmp_path), "--stream", logs, "--no-follow")
    assert err == ""
    (head,) = _heads(out)
    assert (head["lines"], head["sequences"]) == (11, 6)
    assert [(p["file"], p["line"], p["reason"]) for p in head["malformed"]["first"]] == [
        ("b.jsonl", n, _cut(5, 6, "the file ends first")) for n in range(1, 6)
    ]


def test_a_batch_interrupted_by_the_next_batch_is_left_out_and_counted(tmp_path):
    stream = tmp_path / "log.jsonl"
    first, second = _batch(LINES[:3]), _batch(LINES[3:6])
    stream.write_bytes(b"".join(first[:2] + second + LINES[6:8]))
    _code, out, err = run_cli("monitor", _contract(tmp_path), "--stream", stream, "--no-follow")
    assert err == ""
    (head,) = _heads(out)
    assert (head["lines"], head["sequences"], head["malformed"]["count"]) == (7, 5, 2)
    assert _malformed([head]) == [(n, _cut(2, 3, "another batch follows")) for n in (1, 2)]


class _Clock:
    """``time`` for the monitor loop: ``sleep`` advances it and runs the next step."""

    def __init__(self, steps):
        self.now, self.steps = 0.0, list(steps)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.steps:
            self.steps.pop(0)()


def test_a_batch_completed_across_two_polls_is_kept_whole_in_one_window(tmp_path, monkeypatch):
    from kernel_contracts.verify.pipeline.monitor import command

    stream = tmp_path / "log.jsonl"
    batch = _batch(LINES[14:18])
    stream.write_bytes(b"".join(LINES[:14] + batch[:2]))  # the hook is writing the batch

    def rest():
        with stream.open("ab") as f:
            f.write(b"".join(batch[2:] + LINES[18:20]))

    monkeypatch.setattr(command, "time", _Clock([rest]))
    args = ["--stream", stream, "--follow", "--idle-timeout", "1", "--poll", "0.1"]
    _code, out, err = run_cli("monitor", _contract(tmp_path, 1000), *args)
    assert err == "monitor: no new line for 1 s; stopped after window 1\n"
    heads = _heads(out)
    # 14 records, then the batch's 4 at once: 18 sequences close the window of 1000 tokens
    assert [(h["lines"], h["sequences"], h["closed"]) for h in heads] == [
        (18, 18, "size"),
        (2, 2, "idle"),
    ]
    assert sum(h["malformed"]["count"] for h in heads) == 0


def test_a_batch_held_when_the_followed_file_is_rotated_away_is_left_out(tmp_path, monkeypatch):
    from kernel_contracts.verify.pipeline.monitor import command

    live = tmp_path / "live.jsonl"
    live.write_bytes(b"".join(LINES[:2] + _batch(LINES[2:6])[:3]))  # killed in the append

    def rotate():
        live.rename(tmp_path / "live.jsonl.1")
        live.write_bytes(b"".join(_batch(LINES[6:8])))  # the restarted writer's first batch

    monkeypatch.setattr(command, "time", _Clock([rotate]))
    args = ["--stream", live, "--follow", "--idle-timeout", "1", "--poll", "0.1"]
    _, out, err = run_cli("monitor", _contract(tmp_path), *args)
    assert err == "monitor: no new line for 1 s; stopped after window 0\n"
    (head,) = _heads(out)
    assert (head["lines"], head["sequences"], head["malformed"]["count"]) == (7, 4, 3)
    assert _malformed([head]) == [(n, _cut(3, 4, "the file ends first")) for n in (3, 4, 5)]


class _Killed(BaseException):
    """A ``kill -9`` just after a checkpoint landed."""


def test_a_restart_from_a_checkpoint_taken_mid_batch_gives_the_uninterrupted_bytes(
    tmp_path, monkeypatch
):
    from kernel_contracts.verify.pipeline.monitor import command, main

    # windows of 8 tokens: each data record closes one, and 8 held lines close one too
    contract = _contract(tmp_path, 8)
    stream, out, ck = tmp_path / "log.jsonl", tmp_path / "out.jsonl", tmp_path / "ck.json"
    stream.write_bytes(b"".join(LINES[:2] + _batch(LINES[2:22]) + LINES[22:24]))
    expected, reference, err = run_cli("monitor", contract, "--stream", stream, "--no-follow")
    assert err == ""
    heads = _heads(reference)
    assert [(h["lines"], h["sequences"]) for h in heads] == [
        (1, 1),
        (1, 1),
        (8, 0),  # held: no data yet
        (8, 0),
        (4, 20),  # the batch whole, in the window of its last line
        (1, 1),
        (1, 1),
    ]
    saved, real = [], command._Run.save

    def save(run, end):
        real(run, end)
        saved.append(json.loads(ck.read_text(encoding="utf-8")))
        if len(saved) == 4:  # the first run's, then windows 0, 1 and 2 (8 held records)
            raise _Killed()

    monkeypatch.setattr(command._Run, "save", save)
    args = [str(a) for a in (contract, "--stream", stream, "--out", out, "--checkpoint", ck)]
    with pytest.raises(_Killed):
        main([*args, "--no-follow"], stdout=io.StringIO(), stderr=io.StringIO())
    assert saved[-1]["position"]["line"] == 10  # taken while the batch was held
    assert [h["line"] for h in saved[-1]["reader"]["held"]] == list(range(3, 11))
    with out.open("ab") as f:  # a window written whose checkpoint never landed
        f.write(b'{"kind": "window", "window": 3, "hal')
    monkeypatch.setattr(command._Run, "save", real)
    code, text, err = run_cli("monitor", *args, "--no-follow")
    assert (code, text, err) == (expected, "", "")
    assert out.read_text(encoding="utf-8") == reference


def test_a_checkpoint_with_an_unreadable_held_batch_is_refused(tmp_path, monkeypatch):
    contract = _contract(tmp_path, 8)
    stream, out, ck = tmp_path / "log.jsonl", tmp_path / "out.jsonl", tmp_path / "ck.json"
    stream.write_bytes(b"".join(_batch(LINES[:12])[:10]))
    args = [contract, "--stream", stream, "--out", out, "--checkpoint", ck]
    from kernel_contracts.verify.pipeline.monitor import command

    monkeypatch.setattr(command, "time", _Clock([]))
    run_cli("monitor", *args, "--follow", "--idle-timeout", "1")
    state = json.loads(ck.read_text(encoding="utf-8"))
    held = state["reader"]["held"]
    assert [h["line"] for h in held] == list(range(1, 11))  # the idle window's checkpoint
    held[3]["text"] = LINES[0].decode()  # a record without its frame: not a held batch
    ck.write_text(json.dumps(state), encoding="utf-8")
    code, _, err = run_cli("monitor", *args, "--no-follow")
    assert (code, err) == (
        2,
        f"{ck}: not a usable monitor checkpoint: its pending records cannot be read\n",
    )


def test_a_framed_log_gives_the_offline_readers_counts(tmp_path):
    stream = tmp_path / "log.jsonl"
    a, b, c, d = _batch(LINES[:3]), _batch(LINES[3:7]), _batch(LINES[7:9]), _batch(LINES[9:13])
    bad = json.loads(c[0])
    bad["hook_batch"]["index"] = 5  # outside [0, size)
    parts = [
        *a[:2],  # cut short by b
        *b,  # whole
        *c[:1],
        LINES[20],  # an unframed record cuts c short
        json.dumps(bad).encode() + b"\n",  # an unusable frame
        b"{not json\n",  # a bad line does not cut a batch
        *a,  # whole
        *d[:1],
        *d[2:],  # a record of d is missing
        *_batch(LINES[30:33])[:2],  # the file ends first
    ]
    stream.write_bytes(b"".join(parts))
    _code, out, err = run_cli("monitor", _contract(tmp_path), "--stream", stream, "--no-follow")
    assert err == ""
    (head,) = _heads(out)
    offline = read_jsonl_log(stream, vocab_size=None)
    assert offline.partial_batches == 4
    assert (
        (head["sequences"], head["malformed"]["count"])
        == (
            offline.sequences,
            offline.malformed_count,
        )
        == (8, 10)
    )
    assert _malformed([head]) == [(p.line, p.reason) for p in offline.malformed]
