"""The derivation cache: a warm run's report equals a cold one's (times aside) while z3 decides
every stored query again; anything changed, damaged or foreign is a miss; writers never
corrupt an entry; ``off`` and ``--no-cache`` read and write nothing; ``check`` never reads it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import NamedTuple

import pytest

from kernel_contracts import contracts
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving import cache, replay
from kernel_contracts.verify.proving import runner as run_module
from kernel_contracts.verify.proving.render import documents as render
from kernel_contracts.verify.proving.render.report import dumps
from kernel_contracts.verify.proving.solve import smt
from kernel_contracts.verify.proving.solve.budget import Budget
from tests.support.cli_runner import run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]

# every kind of obligation: a guarantee proved, one refuted (z3's model is the counterexample),
# one with no bound derived, and int8 exactness obligations (int32 proved, float32 refuted)
MIX = """\
contract: 1
name: cache-mix
policy: {temperature: 1.0}
kernels:
  train: {preset: fp32}
  inference:
    preset: a100-int8
    matmul: {inputs: int8, scaling: per_row, accumulator: {dtype: int32}, k_max: 2048}
numerical:
  - {id: N1, metric: logit_drift, max: 0.02}
  - {id: N2, metric: logit_drift, max: 0.02, slice: tail}
slices:
  tail: {token_prob: [0, 0.01]}
guarantees:
  - {id: G_proved, quantity: token_tv, max: 0.0100, from: [N1]}
  - {id: G_refuted, quantity: token_tv, max: 0.00999, from: [N1]}
  - {id: G_none, quantity: token_tv, max: 0.5, from: [N2]}
"""
STATUSES = ["proved", "refuted", "unknown", "proved", "refuted"]
# one guarantee with one quick query, for the tests of keys, misses and options
SMALL = """\
contract: 1
name: cache-small
policy: {temperature: 1.0}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
numerical:
  - {id: N1, metric: logit_drift, max: 0.02}
guarantees:
  - {id: G1, quantity: token_log_ratio, max: 0.0404, from: [N1]}
"""


def _writable(directory: pathlib.Path) -> cache.Cache:
    """A cache this test process writes: its code counts as its files' (only a ``python -m
    verify`` process writes otherwise, and not after a source was edited)."""
    return cache.Cache(directory, started=time.time() + 60)


@pytest.fixture
def where(tmp_path) -> cache.Cache:
    """An empty cache directory this process writes."""
    return _writable(tmp_path / "cache")


def _contract(tmp_path, text: str) -> contracts.Contract:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return contracts.load(path)


@pytest.fixture
def small(tmp_path) -> contracts.Contract:
    return _contract(tmp_path, SMALL)


@pytest.fixture
def hits(monkeypatch):
    """``hits(contract, where, **kw)``: whether ``run`` on ``contract`` rebuilt its obligations
    from the cache ``where`` (it derived nothing afresh)."""
    derived = []
    real = run_module._derive_and_solve
    monkeypatch.setattr(run_module, "_derive_and_solve", lambda *a: derived.append(1) or real(*a))

    def hit(contract, where, **kw) -> bool:
        before = len(derived)
        hit.report = run_module.run(contract, cache=where, **kw)
        return len(derived) == before

    return hit


def _entries(c: cache.Cache) -> list[pathlib.Path]:
    return sorted(c.directory.glob("*.json")) if c.directory.is_dir() else []


class Cold(NamedTuple):
    contract: contracts.Contract
    report: object
    entry: bytes  # the entry the cold run stored


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Cold:
    """MIX run once with an empty cache (derived, decided, stored)."""
    tmp = tmp_path_factory.mktemp("mix")
    c = _writable(tmp / "cache")
    contract = _contract(tmp, MIX)
    report = run_module.run(contract, cache=c)
    (path,) = _entries(c)
    return Cold(contract, report, path.read_bytes())


def _filled(where: cache.Cache, cold: Cold) -> pathlib.Path:
    """``where`` holding the cold run's entry; its path."""
    k = cache.key(cold.contract, budget=Budget())
    where.directory.mkdir(mode=0o700)
    path = where.directory / f"{k.digest}.json"
    path.write_bytes(cold.entry)
    return path


def _timeless(report):
    """The report with every time set to 0 (the only fields a warm run may change)."""
    obligations = tuple(
        dataclasses.replace(
            o, time_ms=0.0, queries=tuple(dataclasses.replace(q, time_ms=0.0) for q in o.queries)
        )
        for o in report.obligations
    )
    return dataclasses.replace(report, obligations=obligations, timing={})


def _texts(report) -> tuple[str, str, str]:
    r = _timeless(report)
    return dumps(r), render.to_markdown(r), render.to_html(r)


def test_warm_reports_equal_cold_ones_and_z3_decides_again(where, mixed, hits, monkeypatch):
    assert [o.status.label for o in mixed.report.obligations] == STATUSES
    _filled(where, mixed)
    calls = []
    real = smt._guarded
    monkeypatch.setattr(smt, "_guarded", lambda *a: calls.append(a[1]) or real(*a))
    assert hits(mixed.contract, where)
    warm = hits.report
    assert set(warm.timing) == set(mixed.report.timing) == {"derive", "solve", "evidence"}
    assert _texts(warm) == _texts(mixed.report)  # JSON, Markdown, HTML
    # every stored query went to z3 in the warm run, and each answer is this run's
    assert calls == [q.text for o in warm.obligations for q in o.queries] and len(calls) == 4
    assert {type(o.expr).__name__ for o in warm.obligations} == {"ExprText", "NoneType"}


def test_a_changed_contract_budget_or_source_is_a_miss(where, small, hits, tmp_path, monkeypatch):
    assert not hits(small, where)
    assert hits(small, where)
    # one byte more in the file (a comment): another entry
    changed = _contract(tmp_path, SMALL + "# a comment\n")
    assert not hits(changed, where)
    assert not hits(small, where, budget=Budget(rlimit=3_000_000))
    # the hang guard decides no verdict: it keys nothing
    assert hits(small, where, budget=Budget(hang_guard_s=60.0))
    # a source file of a keyed package changes: every key changes
    pkg = tmp_path / "pkg" / "extra_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    monkeypatch.setattr(cache, "PACKAGES", (*cache.PACKAGES, "extra_pkg"))
    first = cache.key(small, budget=Budget())
    assert not hits(small, where)
    assert hits(small, where)
    (pkg / "__init__.py").write_text("X = 2\n", encoding="utf-8")
    assert cache.key(small, budget=Budget()).digest != first.digest
    assert not hits(small, where)
    (pkg / "new.py").write_text("", encoding="utf-8")  # a new file too
    assert not hits(small, where)


def _corruptions(raw: bytes, material: dict):
    entry = json.loads(raw.partition(b"\n")[2])

    def signed(e) -> bytes:
        text = json.dumps(e).encode()
        return hashlib.sha256(text).hexdigest().encode() + b"\n" + text

    def edited(edit) -> bytes:
        e = json.loads(json.dumps(entry))
        edit(e["payload"])
        return signed(e)

    yield "truncated", raw[: len(raw) // 2]
    yield "empty", b""
    yield "a byte flipped", raw[:-10] + bytes([raw[-10] ^ 1]) + raw[-9:]
    yield "not UTF-8", signed(entry)[:70] + b"\xff\xfe" + signed(entry)[70:]
    yield "another key", signed({**entry, "key": {**material, "solver_budget": {"z3_rlimit": 1}}})
    yield "another format", signed({**entry, "format": "x"})
    yield "no payload", signed({k: v for k, v in entry.items() if k != "payload"})
    yield "a list", signed([entry])
    yield "a bad rational", edited(lambda p: p["obligations"][0].update(bound_interval=["1", "x"]))
    yield "a bad status", edited(lambda p: p["obligations"][0].update(status="held"))
    yield "no versions", edited(lambda p: p.pop("toolkit"))
    yield "no query", edited(lambda p: p["obligations"][0].update(queries=[]))
    # the refutation's stored point is not the one z3 gives now
    yield (
        "another point",
        edited(lambda p: p["obligations"][1]["counterexample"]["point"][0].__setitem__(1, "1/100")),
    )

    # well formed, but a query z3 now answers otherwise (the guarantee would be proved from a
    # query that states something else): z3 says sat, so the run derives afresh
    def drop_goal(p):
        q = p["obligations"][0]["queries"][0]
        lines = q["text"].splitlines()
        q["text"] = "\n".join(line for line in lines if not line.endswith(":named goal))"))
        assert q["text"].count("\n") == len(lines) - 2

    yield "a query answered otherwise", edited(drop_goal)


def _miss(c: cache.Cache, k: cache.Key) -> bool:
    """Whether a run would derive afresh: no payload, or one that does not replay."""
    payload = cache.load(c, k)
    if payload is None or replay.versions(payload) is None:
        return True
    return replay.replay(payload, budget=Budget()) is None


def test_a_damaged_or_foreign_entry_is_a_miss(where, mixed, hits):
    path = _filled(where, mixed)
    k = cache.key(mixed.contract, budget=Budget())
    assert not _miss(where, k)
    material = json.loads(mixed.entry.partition(b"\n")[2])["key"]
    for name, data in _corruptions(mixed.entry, material):
        path.write_bytes(data)
        assert _miss(where, k), name
    # a whole run on a damaged entry (the last: a query z3 answers otherwise) reports what a
    # cold one does, and stores a good entry in its place
    assert not hits(mixed.contract, where)
    assert _texts(hits.report) == _texts(mixed.report)
    assert not _miss(where, k)
    path.unlink()
    path.mkdir()  # not even a file
    assert _miss(where, k)


def test_a_directory_others_may_write_is_not_used(where, small, hits):
    where.directory.mkdir(mode=0o700)
    os.chmod(where.directory, 0o777)
    run_module.run(small, cache=where)
    assert _entries(where) == []
    os.chmod(where.directory, 0o700)
    run_module.run(small, cache=where)
    assert len(_entries(where)) == 1
    assert hits(small, where)
    os.chmod(where.directory, 0o770)
    assert not hits(small, where)


def test_an_unknown_verdict_is_never_stored(where, small):
    done = run_module.run(small, cache=where, budget=Budget(rlimit=1))
    assert [o.status for o in done.obligations] == [Status.UNKNOWN]
    assert _entries(where) == []


def test_code_that_may_differ_from_its_files_stores_nothing(small, tmp_path, monkeypatch):
    k = cache.key(small, budget=Budget())
    for started in (None, 0.0):  # a process that does not write; sources newer than its start
        assert not cache.store(cache.Cache(tmp_path / "c", started), k, {"x": 1})
    assert not (tmp_path / "c").exists()
    stale = dataclasses.replace(k, stamps=k.stamps[1:])  # a file changed since the key
    assert not cache.store(_writable(tmp_path / "c"), stale, {"x": 1})
    assert cache.store(_writable(tmp_path / "c"), k, {"x": 1})
    assert cache.load(cache.Cache(tmp_path / "c"), k) == {"x": 1}
    # only a `python -m verify` process writes: this one (pytest) does not
    assert cache.writer_start(time.time()) is None
    fake = type(sys)("__main__")
    fake.__spec__ = type("Spec", (), {"name": "kernel_contracts.verify.__main__"})()
    monkeypatch.setitem(sys.modules, "__main__", fake)
    began = time.time()
    assert cache.writer_start(began) <= began


_WRITER = """
import json, pathlib, sys, time
from kernel_contracts.verify.proving import cache
directory, material, stamps, tag = json.loads(sys.argv[1])
k = cache.Key("0" * 64, material, tuple(tuple(s) for s in stamps))
payload = {"writer": tag, "filler": [tag] * 5000}
c = cache.Cache(pathlib.Path(directory), started=time.time() + 60)
print(sum(cache.store(c, k, payload) for _ in range(10)))
"""


def test_concurrent_writers_leave_one_whole_entry(small, tmp_path):
    k = cache.key(small, budget=Budget())
    args = [json.dumps([str(tmp_path / "c"), k.material, k.stamps, t]) for t in range(4)]
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, a], stdout=subprocess.PIPE, cwd=ROOT)
        for a in args
    ]
    written = [int(w.communicate(timeout=120)[0]) for w in writers]
    assert written == [10] * 4
    got = cache.load(cache.Cache(tmp_path / "c"), cache.Key("0" * 64, k.material, k.stamps))
    assert got is not None and got["filler"] == [got["writer"]] * 5000
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["0" * 64 + ".json"]  # no temp left


def test_the_location_comes_from_the_environment():
    assert cache.locate({"KERNEL_CONTRACTS_CACHE": "off"}) is None
    assert cache.locate({"KERNEL_CONTRACTS_CACHE": "OFF "}) is None
    assert cache.locate({"KERNEL_CONTRACTS_CACHE": "/x/y"}) == cache.Cache(pathlib.Path("/x/y"))
    xdg = cache.locate({"XDG_CACHE_HOME": "/c"})
    assert xdg == cache.Cache(pathlib.Path("/c/kernel-contracts"))
    home = cache.locate({"XDG_CACHE_HOME": "relative"})
    assert home.directory == pathlib.Path("~/.cache/kernel-contracts").expanduser()


def _cli(*argv, env: dict, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return run_cli(*argv)


def test_off_and_no_cache_read_and_write_nothing(where, tmp_path, hits, monkeypatch):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL, encoding="utf-8")
    named = {"KERNEL_CONTRACTS_CACHE": str(where.directory)}
    code, out, _ = _cli(str(path), "--no-cache", env=named, monkeypatch=monkeypatch)
    assert code == 0 and not where.directory.exists()
    _cli(str(path), "--quiet", env={"KERNEL_CONTRACTS_CACHE": "off"}, monkeypatch=monkeypatch)
    assert not where.directory.exists()
    _cli(str(path), "--quiet", env=named, monkeypatch=monkeypatch)  # not `python -m verify`
    assert not where.directory.exists()
    monkeypatch.setattr(cache, "writer_start", lambda began: time.time() + 60)  # as if it were
    report = tmp_path / "r.json"
    code, again, _ = _cli(str(path), "--json", str(report), env=named, monkeypatch=monkeypatch)
    assert (code, again) == (0, out) and len(_entries(where)) == 1
    assert hits(contracts.load(path), where)

    def refuse(*a, **k):
        raise AssertionError("the cache was read")

    monkeypatch.setattr(cache, "load", refuse)
    code, _, err = _cli(str(path), "--no-cache", env=named, monkeypatch=monkeypatch)
    assert code == 0, err
    # check re-derives everything from the report and the contract, never from the cache
    code, out, err = _cli("check", str(report), env=named, monkeypatch=monkeypatch)
    assert code == 0, out + err


def test_a_warm_run_imports_neither_sympy_nor_the_bound_chain(where, mixed, tmp_path):
    _filled(where, mixed)
    code = (
        "import sys; from verify.cli.commands import main; "
        f"rc = main([{mixed.contract.source.path!r}, '--quiet', "
        f"'--html', {str(tmp_path / 'r.html')!r}]); "
        "print(rc, sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sympy', 'bounds', 'jax', 'mpmath', 'z3')))"
    )
    env = dict(os.environ, KERNEL_CONTRACTS_CACHE=str(where.directory))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)  # fmt: skip
    assert done.stdout.strip().splitlines()[-1] == "1 []", done.stderr
    assert '<math display="block">' in (tmp_path / "r.html").read_text()
