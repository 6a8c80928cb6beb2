"""Golden error messages: every malformed contract is rejected with exactly the expected lines.

Time limits use the CPU time of the test's own thread (``thread_time``: the parse runs in it),
with the garbage collector paused while it runs, so neither a busy machine, nor another thread
of the process, nor a collection of an earlier test's garbage fails them (``process_time``
counts every thread: a full run once counted 2.5 s for a case whose parse takes 0.01 s alone).
The collector is paused rather than run first: in a test process that has already run the slow
tests, one full collection walks over a million objects, about 2 s, which a full run paid for
each of the cases below.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pathlib
import re
import time
import tracemalloc

import pytest

from kernel_contracts import contracts
from kernel_contracts.contracts import ContractError, Problem

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "malformed"
CASES = sorted(p.stem for p in DATA.glob("*.yaml"))
LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>[0-9]+):(?P<col>[0-9]+): (?P<rest>.+)$")


@contextlib.contextmanager
def _collector_paused():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def test_corpus_is_large_and_complete():
    assert len(CASES) >= 45
    missing = [c for c in CASES if not (DATA / f"{c}.expected").is_file()]
    assert missing == []


@pytest.mark.parametrize("case", CASES)
def test_golden_message(case, monkeypatch):
    monkeypatch.chdir(DATA)
    expected = (DATA / f"{case}.expected").read_text(encoding="utf-8").rstrip("\n")
    with _collector_paused():
        start = time.thread_time()
        with pytest.raises(ContractError) as info:
            contracts.load(f"{case}.yaml")
        elapsed = time.thread_time() - start
    assert str(info.value) == expected
    assert "\n".join(str(p) for p in info.value.problems) == expected
    assert elapsed < 2.0, f"{case} took {elapsed:.2f} s"
    for line in expected.splitlines():  # each names the file, a line and a column
        match = LINE.match(line)
        assert match is not None, line
        assert match["file"] == f"{case}.yaml"
    positions = [(p.line, p.col) for p in info.value.problems]
    assert positions == sorted(positions)


def test_alias_bomb_is_fast_and_small(monkeypatch):
    monkeypatch.chdir(DATA)
    tracemalloc.start()
    try:
        with _collector_paused():
            start = time.thread_time()
            with pytest.raises(ContractError, match="aliases may not multiply content"):
                contracts.load("alias_bomb.yaml")
            elapsed = time.thread_time() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 2.0
    assert peak < 64 * 2**20


def test_several_problems_are_all_reported(monkeypatch):
    monkeypatch.chdir(DATA)
    with pytest.raises(ContractError) as info:
        contracts.load("several_problems.yaml")
    keys = {p.key for p in info.value.problems}
    assert len(info.value.problems) == 10
    assert {"name", "policy.temperature", "kernels.train.preset", "guarantees[0].from[0]"} <= keys


def test_missing_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ContractError) as info:
        contracts.load("nowhere.yaml")
    assert str(info.value) == "nowhere.yaml: no such file"
    assert info.value.problems == (Problem("nowhere.yaml", None, None, "", "no such file"),)


def test_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    with pytest.raises(ContractError) as info:
        contracts.load("adir")
    assert str(info.value) == "adir: is a directory, not a contract file"
    with pytest.raises(ContractError, match="is a directory"):
        contracts.load(pathlib.Path("adir"))


def test_huge_file_is_refused_without_parsing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"contract: 1\nname: big\ndescription: '" + b"x" * (1 << 20) + b"'\n")
    with _collector_paused():
        start = time.thread_time()
        with pytest.raises(ContractError) as info:
            contracts.load("big.yaml")
        elapsed = time.thread_time() - start
    assert elapsed < 1.0
    assert str(info.value) == (
        "big.yaml:1:1: the file is larger than 1048576 bytes (1 MiB), the limit for a contract"
    )
    with pytest.raises(ContractError, match="larger than 1048576 bytes"):
        contracts.loads("description: " + "y" * (1 << 20))


def test_many_values_are_refused_fast():
    # 400000 values in 800 kB: parsing them all takes several seconds; the cap stops early
    text = "contract: 1\nname: n\ndescription: [" + ",".join(["1"] * 400_000) + "]\n"
    with _collector_paused():
        start = time.thread_time()
        with pytest.raises(ContractError, match="holds more than 20000 values"):
            contracts.loads(text, path="many.yaml")
        elapsed = time.thread_time() - start
    assert elapsed < 4.0


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    locked = tmp_path / "locked.yaml"
    locked.write_text("contract: 1\n", encoding="utf-8")
    locked.chmod(0)
    with pytest.raises(ContractError) as info:
        contracts.load("locked.yaml")
    assert str(info.value) == "locked.yaml: cannot read the file: Permission denied"


def test_loads_reports_string_path_and_bytes():
    with pytest.raises(ContractError) as info:
        contracts.loads(b"contract: 1\nname: x\nkernels: {train: {preset: fp32}}\n")
    assert str(info.value) == "<string>:3:1: kernels.inference: missing required key"
    with pytest.raises(ContractError) as info:
        contracts.loads("\ufeffcontract: true\n", path="c.yaml")
    assert str(info.value).splitlines() == [
        "c.yaml:1:1: name: missing required key",
        "c.yaml:1:1: kernels: missing required key",
        "c.yaml:1:1: contract: expected an integer, got boolean true",
    ]


def test_contract_error_api():
    late = Problem("c.yaml", 9, 2, "policy.top_p", "must be in (0, 1], got 1.5")
    early = Problem("c.yaml", 3, 1, "", "the document nests deeper than 64 levels")
    err = ContractError([late, early, late])
    assert err.problems == (early, late)
    assert str(err) == (
        "c.yaml:3:1: the document nests deeper than 64 levels\n"
        "c.yaml:9:2: policy.top_p: must be in (0, 1], got 1.5"
    )
    assert str(Problem("x.yaml", None, None, "", "no such file")) == "x.yaml: no such file"
    assert isinstance(err, Exception)
    with pytest.raises(ValueError):
        ContractError([])
