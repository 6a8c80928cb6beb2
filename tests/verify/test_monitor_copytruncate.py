"""Copy-truncate rotation of a followed file, caught by content and not only by size: a file
copied to ``NAME.1``, truncated, and grown past the read offset before the next poll loses no
record (single file and directory); without its copy the monitor stops with exit 2 naming the
lines it cannot read. Polls are driven by hand (``stream.read``) or by a fake clock."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest

from tests.support.cli_runner import run_cli
from tests.support.monitor_contracts import LINES, monitor_contract


def _contract(tmp_path, tokens: int = 1000) -> pathlib.Path:
    return monitor_contract(tmp_path, tokens)


def _records(first: int, last: int) -> list[bytes]:
    """Records ``first`` to ``last`` (1-based); record 200 is longer than records 1 to 100
    together, so that a reader resuming at their end in a rewritten file lands inside it."""
    out = []
    for n in range(first, last + 1):
        if n == 200:
            big = json.loads(LINES[0])
            for key in ("response_ids", "train_logprobs", "rollout_logprobs", "mask"):
                big[key] = big[key] * 120
            out.append(json.dumps(big).encode() + b"\n")
        else:
            out.append(LINES[(n - 1) % len(LINES)])
    return out


ALL = _records(1, 400)
assert len(ALL[199]) > len(b"".join(ALL[:100]))


def _append(path: pathlib.Path, records: list[bytes]) -> None:
    with path.open("ab") as f:
        f.write(b"".join(records))


def _copy_truncate(active: pathlib.Path, copy: pathlib.Path | None) -> None:
    """Records 101-199 written after the poll, the file copied (``copy``; ``None``: the copy
    goes elsewhere) and truncated, then records 200-400 written: past the old offset."""
    _append(active, ALL[100:199])
    if copy is not None:
        shutil.copyfile(active, copy)
    with active.open("r+b") as f:
        f.truncate(0)
    _append(active, ALL[199:])


def _read_all(stream) -> list:
    lines = []
    while batch := stream.read(follow=True):
        lines += batch
    return lines


def _follow(path, rotate):
    from kernel_contracts.verify.pipeline.monitor.stream import Position, open_stream

    stream = open_stream(str(path), Position())
    try:
        before = _read_all(stream)
        rotate()
        after = _read_all(stream)
        notes = stream.notes()
    finally:
        stream.close()
    return before, after, notes


def test_a_copy_truncated_file_grown_past_the_offset_loses_no_record(tmp_path):
    active = tmp_path / "live.jsonl"
    active.write_bytes(b"".join(ALL[:100]))
    before, after, notes = _follow(
        active, lambda: _copy_truncate(active, tmp_path / "live.jsonl.1")
    )
    got = before + after
    assert [x.raw for x in got] == ALL  # all 400, in order, none cut, none twice
    assert not any(x.cut or x.reason for x in got)
    assert [x.number for x in got] == list(range(1, 200)) + list(range(1, 202))
    offset = len(b"".join(ALL[:100]))
    assert notes == [
        f"{active}: the file was truncated (copy-truncate rotation): read on in {active}.1 "
        f"from byte {offset} (line 101), then {active} from its start; lines written "
        "between the copy and the truncation are in neither file"
    ]


def test_a_copy_truncated_file_in_a_directory_loses_no_record(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    active = logs / "current.jsonl"
    active.write_bytes(b"".join(ALL[:100]))
    before, after, notes = _follow(
        logs, lambda: _copy_truncate(active, logs / "current.jsonl.00001")
    )
    got = before + after
    assert [x.raw for x in got] == ALL
    assert not any(x.cut or x.reason for x in got)
    assert [x.file for x in after] == ["current.jsonl.00001"] * 99 + ["current.jsonl"] * 201
    assert notes == [
        f"{active}: the file was truncated (copy-truncate rotation?): reading it again from "
        "its start; lines written between the copy and the truncation are in neither file"
    ]


def _lost(path, offset: int, line: int) -> str:
    return (
        f"{path}: the file was truncated (copy-truncate rotation?) and no copy that begins "
        f"with the {offset} bytes read was found beside it: lines written after line {line} "
        f"(from byte {offset}) before the truncation were not read and are lost"
    )


def test_without_its_copy_a_copy_truncated_file_is_an_error_naming_what_was_lost(tmp_path):
    from kernel_contracts.verify.pipeline.monitor.stream import StreamError

    active = tmp_path / "live.jsonl"
    active.write_bytes(b"".join(ALL[:100]))
    with pytest.raises(StreamError) as err:
        _follow(active, lambda: _copy_truncate(active, None))
    assert str(err.value) == _lost(active, len(b"".join(ALL[:100])), 100)


def test_without_its_copy_a_directory_is_an_error_naming_what_was_lost(tmp_path):
    from kernel_contracts.verify.pipeline.monitor.stream import StreamError

    logs = tmp_path / "logs"
    logs.mkdir()
    active = logs / "current.jsonl"
    active.write_bytes(b"".join(ALL[:100]))
    with pytest.raises(StreamError) as err:
        _follow(logs, lambda: _copy_truncate(active, tmp_path / "elsewhere.jsonl"))
    assert str(err.value) == _lost(active, len(b"".join(ALL[:100])), 100)


def test_a_plain_truncation_with_its_copy_reads_the_copy_then_the_file(tmp_path):
    active = tmp_path / "live.jsonl"
    active.write_bytes(b"".join(ALL[:100]))

    def rotate():  # the new file stays shorter than the offset
        _append(active, ALL[100:150])
        shutil.copyfile(active, tmp_path / "live.jsonl.1")
        active.write_bytes(b"".join(ALL[150:160]))

    before, after, _ = _follow(active, rotate)
    assert [x.raw for x in before + after] == ALL[:160]


def test_a_copy_that_does_not_hold_the_bytes_read_is_not_taken(tmp_path):
    from kernel_contracts.verify.pipeline.monitor.stream import StreamError

    active = tmp_path / "live.jsonl"
    active.write_bytes(b"".join(ALL[:100]))
    # an older rotation beside it: same first records, not the bytes read after them
    (tmp_path / "live.jsonl.1").write_bytes(b"".join(ALL[:99]) + ALL[200] + b"".join(ALL[101:]))
    with pytest.raises(StreamError) as err:
        _follow(active, lambda: _copy_truncate(active, None))
    assert str(err.value) == _lost(active, len(b"".join(ALL[:100])), 100)


def test_a_rewrite_to_the_same_size_is_caught_by_its_bytes(tmp_path):
    """The new file has exactly the size read (no size change at all): a poll that finds no
    new byte still finds other bytes."""
    active = tmp_path / "live.jsonl"
    active.write_bytes(b"".join(ALL[:100]))

    size = active.stat().st_size
    new = b"".join(ALL[100:200])[: size - 1] + b"\n"  # same size, other bytes

    def rotate():
        shutil.copyfile(active, tmp_path / "live.jsonl.1")
        active.write_bytes(new)

    before, after, notes = _follow(active, rotate)
    assert [x.raw for x in before] == ALL[:100]
    assert len(notes) == 1 and "copy-truncate" in notes[0]
    assert [x.raw for x in after] == new.splitlines(keepends=True)  # from its start


class _Clock:
    """``time`` for the monitor loop: ``sleep`` advances it and runs the next rotation."""

    def __init__(self, steps):
        self.now, self.steps = 0.0, list(steps)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.steps:
            self.steps.pop(0)()


@pytest.mark.parametrize("directory", [False, True])
@pytest.mark.parametrize("copied", [True, False])
def test_the_monitor_counts_all_400_records_or_stops_with_exit_2(
    tmp_path, monkeypatch, copied, directory
):
    from kernel_contracts.verify.pipeline.monitor import command

    logs = tmp_path / "logs"
    logs.mkdir()
    active = logs / "live.jsonl"
    active.write_bytes(b"".join(ALL[:100]))
    copy = logs / "live.jsonl.1" if copied else None
    monkeypatch.setattr(command, "time", _Clock([lambda: _copy_truncate(active, copy)]))
    stream = logs if directory else active
    code, out, err = run_cli(
        "monitor", _contract(tmp_path), "--stream", stream, "--follow", "--idle-timeout", "1"
    )
    heads = [r for r in map(json.loads, out.splitlines()) if r["kind"] == "window"]
    if copied:
        assert code in (0, 1, 3)
        assert sum(h["lines"] for h in heads) == 400
        assert sum(h["malformed"]["count"] for h in heads) == 0
        assert err.startswith(f"monitor: {active}: the file was truncated (copy-truncate")
    else:
        assert code == 2
        assert err == _lost(active, len(b"".join(ALL[:100])), 100) + "\n"
        assert sum(h["lines"] for h in heads) <= 100  # nothing read from the rewritten file


def test_a_restart_after_copy_truncate_reads_the_copy_then_the_file(tmp_path):
    active, out, ck = tmp_path / "live.jsonl", tmp_path / "out.jsonl", tmp_path / "ck.json"
    active.write_bytes(b"".join(ALL[:100]))
    contract = _contract(tmp_path)
    args = [contract, "--stream", active, "--out", out, "--checkpoint", ck, "--no-follow"]
    assert run_cli("monitor", *args)[2] == ""
    _copy_truncate(active, tmp_path / "live.jsonl.1")
    code, _, err = run_cli("monitor", *args)
    assert code in (0, 1, 3), err
    heads = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    heads = [h for h in heads if h["kind"] == "window"]
    assert sum(h["lines"] for h in heads) == 400
    assert sum(h["malformed"]["count"] for h in heads) == 0
    assert os.path.exists(tmp_path / "live.jsonl.1")


def test_a_copy_seen_before_the_truncation_is_read_once(tmp_path, monkeypatch):
    """The copy appears between the end of a read and the directory scan, before the
    truncation: the copied lines are read once (from the file or from its copy, not both)."""
    from kernel_contracts.verify.pipeline.monitor.directory import DirectoryStream
    from kernel_contracts.verify.pipeline.monitor.stream import Position, open_stream

    logs = tmp_path / "logs"
    logs.mkdir()
    active, copy = logs / "current.jsonl", logs / "current.jsonl.00001"
    active.write_bytes(b"".join(ALL[:100]))
    scan, steps = DirectoryStream._scan, []

    def racing(self):
        if steps:
            steps.pop(0)()
        return scan(self)

    monkeypatch.setattr(DirectoryStream, "_scan", racing)
    stream = open_stream(str(logs), Position())
    try:
        before = _read_all(stream)
        steps.append(lambda: (_append(active, ALL[100:105]), shutil.copyfile(active, copy)))
        middle = _read_all(stream)
        with active.open("r+b") as f:
            f.truncate(0)
        _append(active, ALL[105:200])
        after = _read_all(stream)
    finally:
        stream.close()
    assert [x.raw for x in before + middle + after] == ALL[:200]


def _steps(tmp_path, steps, *, directory: bool = True) -> tuple[list, list[str]]:
    """A directory (or a single file) whose active file holds records 1-100, then each step
    of ``steps`` and a poll (``read`` until nothing comes) after it: every line read, and the
    notes."""
    from kernel_contracts.verify.pipeline.monitor.stream import Position, open_stream

    logs = tmp_path / "logs"
    logs.mkdir()
    active, copy = logs / "current.jsonl", logs / "current.jsonl.00001"
    active.write_bytes(b"".join(ALL[:100]))
    stream = open_stream(str(logs if directory else active), Position())
    try:
        got = _read_all(stream)
        for step in steps:
            step(active, copy)
            got += _read_all(stream)
        return got, stream.notes()
    finally:
        stream.close()


def _truncate_and_grow(active, copy) -> None:
    with active.open("r+b") as f:
        f.truncate(0)
    _append(active, ALL[199:])


def test_a_copy_still_being_written_when_seen_is_taken_at_the_truncation(tmp_path):
    def written(active, copy):
        _append(active, ALL[100:199])

    def copying(active, copy):  # a third of the way through: shorter than the bytes read
        data = active.read_bytes()
        copy.write_bytes(data[: len(data) // 3])

    def copied(active, copy):
        shutil.copyfile(active, copy)

    got, notes = _steps(tmp_path, [written, copying, copied, _truncate_and_grow])
    assert [x.raw for x in got] == ALL
    assert len(notes) == 1 and "neither file" in notes[0]


def test_a_copy_made_before_the_lines_read_last_is_not_read_again(tmp_path):
    """Copied, then lines appended before the truncation and read from the file: the copy
    holds no unread line, and nothing is lost that the monitor could have read."""

    def copied(active, copy):
        _append(active, ALL[100:150])
        shutil.copyfile(active, copy)

    def appended(active, copy):  # after the copy, before the truncation
        _append(active, ALL[150:199])

    got, notes = _steps(tmp_path, [copied, appended, _truncate_and_grow])
    assert [x.raw for x in got] == ALL
    assert [x.file for x in got[199:]] == ["current.jsonl"] * 201
    assert len(notes) == 1 and "neither file" in notes[0]


def test_a_single_file_copy_made_before_the_lines_read_last_is_not_read_again(tmp_path):
    from kernel_contracts.verify.pipeline.monitor.stream import Position, open_stream

    active, copy = tmp_path / "live.jsonl", tmp_path / "live.jsonl.1"
    active.write_bytes(b"".join(ALL[:100]))
    stream = open_stream(str(active), Position())
    try:
        got = _read_all(stream)
        _append(active, ALL[100:150])
        shutil.copyfile(active, copy)
        got += _read_all(stream)
        _append(active, ALL[150:199])  # after the copy, before the truncation: read
        got += _read_all(stream)
        _truncate_and_grow(active, copy)
        got += _read_all(stream)
        notes = stream.notes()
    finally:
        stream.close()
    assert [x.raw for x in got] == ALL
    assert notes == [
        f"{active}: the file was truncated (copy-truncate rotation): its copy {copy} ends at "
        f"line 150, already read; reading {active} again from its start; lines written after "
        "line 199 before the truncation are in neither file"
    ]


def test_a_position_in_the_copy_resumes_in_the_copy(tmp_path):
    """A checkpoint taken while the copy is read: a restart finds the copy by the bytes read
    and reads on there, then the file from its start."""
    from kernel_contracts.verify.pipeline.monitor.stream import Position, open_stream

    active = tmp_path / "live.jsonl"
    active.write_bytes(b"".join(ALL[:100]))
    stream = open_stream(str(active), Position())
    try:
        got = _read_all(stream)
        _copy_truncate(active, tmp_path / "live.jsonl.1")
        got += stream.read(follow=True)[:20]  # records 101-120, from the copy
        at = stream.position(got[-1])
    finally:
        stream.close()
    st = os.stat(tmp_path / "live.jsonl.1")
    assert (at.line, at.identity) == (120, (st.st_dev, st.st_ino))
    stream = open_stream(str(active), at)
    try:
        got += _read_all(stream)
    finally:
        stream.close()
    assert [x.raw for x in got] == ALL


def test_a_restart_after_a_rename_rotation_reads_the_renamed_file_on(tmp_path):
    from kernel_contracts.verify.pipeline.monitor.stream import Position, open_stream

    active = tmp_path / "live.jsonl"
    active.write_bytes(b"".join(ALL[:100]))
    stream = open_stream(str(active), Position())
    try:
        got = _read_all(stream)
        at = stream.position(None)
    finally:
        stream.close()
    _append(active, ALL[100:199])
    os.rename(active, tmp_path / "live.jsonl.1")
    active.write_bytes(b"".join(ALL[199:]))
    stream = open_stream(str(active), at)
    try:
        got += _read_all(stream)
    finally:
        stream.close()
    assert [x.raw for x in got] == ALL


@pytest.mark.parametrize("directory", [True, False])
def test_a_line_cut_by_the_truncation_is_a_counted_cut_line(tmp_path, directory):
    """The file's last line read is a partial one that no copy holds: it is handed out cut
    (a counted bad line), in a directory as for a single file."""
    half = ALL[150][:100]

    def copied(active, copy):
        _append(active, ALL[100:150])
        shutil.copyfile(active, copy)

    def appended(active, copy):  # after the copy; the writer is cut off mid-line
        _append(active, [half])

    got, _ = _steps(tmp_path, [copied, appended, _truncate_and_grow], directory=directory)
    assert [x.raw for x in got] == [*ALL[:150], half, *ALL[199:]]
    assert [x.cut for x in got].count(True) == 1 and got[150].cut
