"""Report paths and input files: checked before any work, inputs never overwritten, reports
written all or nothing, devices and FIFOs neither replaced nor blocking the run."""

from __future__ import annotations

import io
import json
import os
import pathlib
import select
import socket
import stat
import subprocess
import sys
import threading
import time

import pytest

from kernel_contracts import contracts
from kernel_contracts.verify.cli.commands import main
from kernel_contracts.verify.common import outputs
from kernel_contracts.verify.proving import runner as run_module

ROOT = pathlib.Path(__file__).resolve().parents[2]

CONTRACT = """\
contract: 1
name: outputs
policy: {temperature: 1.0}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
numerical:
  - {id: N1, metric: logit_drift, max: 0.02}
guarantees:
  - {id: G1, quantity: token_tv, max: 0.0100, from: [N1]}
"""

LOG_LINE = (
    '{"prompt_id": "p0", "sample_id": 0, "response_ids": [1, 2], '
    '"train_logprobs": [-1.0, -2.0], "rollout_logprobs": [-1.0, -2.0]}\n'
)

pytestmark = pytest.mark.skipif(os.name != "posix", reason="FIFOs, devices and links are POSIX")


@pytest.fixture(autouse=True)
def _replace_only_in_tmp_path(tmp_path, monkeypatch):
    """Whatever the code under test does, it replaces files only below ``tmp_path``: a
    regression must fail these tests, never turn ``/dev/null`` into a regular file."""
    root = str(tmp_path.resolve()) + os.sep
    for name in ("replace", "rename"):
        real = getattr(os, name)

        def guarded(src, dst, *a, _real=real, **k):
            if not os.path.realpath(dst).startswith(root):
                raise AssertionError(f"{dst} would be replaced, outside the test's directory")
            return _real(src, dst, *a, **k)

        monkeypatch.setattr(os, name, guarded)


def _bounded(*argv, cwd=None, seconds=20):
    """``main(argv)`` in a thread that must finish within ``seconds`` (a FIFO must not hang)."""
    out, err, result = io.StringIO(), io.StringIO(), []
    old = os.getcwd()
    if cwd:
        os.chdir(cwd)
    try:
        worker = threading.Thread(
            target=lambda: result.append(main(list(argv), stdout=out, stderr=err)), daemon=True
        )
        worker.start()
        worker.join(seconds)
    finally:
        os.chdir(old)
    assert result, f"python -m verify {' '.join(argv)} did not finish in {seconds} s"
    return result[0], out.getvalue(), err.getvalue()


def _snapshot(directory: pathlib.Path) -> dict:
    """Every entry of ``directory``: its kind, and a regular file's bytes and mode."""
    out = {}
    for p in sorted(directory.iterdir()):
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[p.name] = ("link", os.readlink(p))
        elif stat.S_ISREG(st.st_mode):
            out[p.name] = ("file", p.read_bytes(), stat.S_IMODE(st.st_mode))
        else:
            out[p.name] = ("other", stat.S_IFMT(st.st_mode))
    return out


@pytest.fixture
def work(tmp_path):
    """A directory holding the contract ``c.yaml``, a report ``old.json`` and a log file; the
    run must never start when the outputs are refused."""
    (tmp_path / "c.yaml").write_text(CONTRACT, encoding="utf-8")
    (tmp_path / "old.json").write_text("the previous report\n", encoding="utf-8")
    (tmp_path / "log.jsonl").write_text(LOG_LINE, encoding="utf-8")
    return tmp_path


@pytest.fixture
def no_run(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the run started although an output was refused")

    monkeypatch.setattr(run_module, "run", refuse)


# --- an output that is an input -----------------------------------------------------------


@pytest.mark.parametrize("spelling", ["same", "absolute", "dotted", "symlink", "hardlink"])
def test_a_report_never_overwrites_the_contract(work, no_run, spelling):
    if spelling == "symlink":
        (work / "link.yaml").symlink_to("c.yaml")
    if spelling == "hardlink":
        os.link(work / "c.yaml", work / "hard.yaml")
    target = {
        "same": "c.yaml",
        "absolute": str(work / "c.yaml"),
        "dotted": "./sub/../c.yaml",
        "symlink": "link.yaml",
        "hardlink": "hard.yaml",
    }[spelling]
    if spelling == "dotted":
        (work / "sub").mkdir()
    before = _snapshot(work)
    for option in ("--json", "--markdown", "--html"):
        code, out, err = _bounded("c.yaml", option, target, cwd=work)
        assert (code, out) == (2, "")
        assert err == (
            f"verify: cannot write {target}: it is the contract (c.yaml); "
            "a report never overwrites its input\n"
        )
    assert _snapshot(work) == before


def test_a_report_never_overwrites_an_evidence_file(work, no_run):
    before = _snapshot(work)
    code, _, err = _bounded("c.yaml", "--evidence", "log.jsonl", "--html", "./log.jsonl",
                            cwd=work)  # fmt: skip
    assert code == 2
    assert err == (
        "verify: cannot write ./log.jsonl: it is an evidence file (log.jsonl); "
        "a report never overwrites its input\n"
    )
    assert _snapshot(work) == before


def test_a_report_never_overwrites_the_contracts_own_evidence(work, no_run):
    (work / "c.yaml").write_text(CONTRACT + "evidence:\n  logprobs: {path: log.jsonl}\n")
    before = _snapshot(work)
    code, _, err = _bounded("c.yaml", "--json", "log.jsonl", cwd=work)
    assert code == 2
    assert err == (
        f"verify: cannot write log.jsonl: it is an evidence file ({work / 'log.jsonl'}); "
        "a report never overwrites its input\n"
    )
    assert _snapshot(work) == before


# --- two reports, one file ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("out.x", "out.x"),  # a new file, named twice
        ("out.x", "./out.x"),
        ("old.json", os.path.join("..", "{name}", "old.json")),
        ("old.json", "alias.json"),  # a symbolic link to old.json
        ("old.json", "hard.json"),  # a hard link to old.json
        ("new.json", "dangling.json"),  # a symbolic link to the not yet written new.json
    ],
)
def test_two_reports_to_one_file_are_refused(work, no_run, first, second):
    (work / "alias.json").symlink_to("old.json")
    (work / "dangling.json").symlink_to("new.json")
    os.link(work / "old.json", work / "hard.json")
    second = second.format(name=work.name)
    before = _snapshot(work)
    code, out, err = _bounded("c.yaml", "--json", first, "--markdown", second, cwd=work)
    assert (code, out) == (2, "")
    assert err == (
        f"verify: cannot write {second}: --json {first} is the same file; "
        "each report needs a file of its own\n"
    )
    assert _snapshot(work) == before


# --- what a report path may name ----------------------------------------------------------


def test_a_directory_socket_or_missing_directory_is_refused(work, no_run):
    (work / "adir").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    old = os.getcwd()
    os.chdir(work)  # a relative name: a tmp_path can exceed the 108 bytes of an AF_UNIX path
    try:
        sock.bind("sock")
    finally:
        os.chdir(old)
    before = _snapshot(work)
    cases = {
        "adir": "is a directory",
        "adir/": "is a directory",
        "new/": "names a directory",
        "sock": "is a socket",
        "no/such/r.json": "no such directory",
    }
    try:
        for path, why in cases.items():
            code, _, err = _bounded("c.yaml", "--json", "ok.json", "--html", path, cwd=work)
            assert (code, err) == (2, f"verify: cannot write {path}: {why}\n")
    finally:
        sock.close()
    assert _snapshot(work) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any file")
def test_read_only_targets_are_refused_up_front(work, no_run):
    (work / "old.json").chmod(0o444)
    locked = work / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        code, _, err = _bounded("c.yaml", "--json", "old.json", cwd=work)
        assert (code, err) == (2, "verify: cannot write old.json: the file is read-only\n")
        code, _, err = _bounded("c.yaml", "--json", "locked/r.json", cwd=work)
        assert code == 2
        assert (
            err == f"verify: cannot write locked/r.json: the directory {locked} is not writable\n"
        )
    finally:
        locked.chmod(0o755)
    assert (work / "old.json").read_text() == "the previous report\n"


def test_a_symbolic_link_is_followed_and_the_mode_kept(work):
    (work / "old.json").chmod(0o640)
    (work / "link.json").symlink_to("old.json")
    code, _, _ = _bounded("c.yaml", "--json", "link.json", "--quiet", cwd=work)
    assert code == 0
    assert os.readlink(work / "link.json") == "old.json"
    assert json.loads((work / "old.json").read_text())["status"] == "proved"
    assert stat.S_IMODE((work / "old.json").stat().st_mode) == 0o640
    assert sorted(p.name for p in work.iterdir()) == ["c.yaml", "link.json", "log.jsonl",
                                                      "old.json"]  # fmt: skip


def test_dev_null_is_written_through_not_replaced(work):
    before = os.stat("/dev/null")
    code, _, err = _bounded("c.yaml", "--json", "/dev/null", "--quiet", cwd=work)
    assert (code, err) == (0, "")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


def test_dev_stdout_writes_to_the_descriptor(work, capfd):
    code, out, _ = _bounded("c.yaml", "--json", "/dev/stdout", "--quiet", cwd=work)
    assert code == 0 and out.startswith("verdict: proved")
    assert json.loads(capfd.readouterr().out)["status"] == "proved"


def test_a_fifo_without_a_reader_is_refused(work, no_run):
    os.mkfifo(work / "pipe")
    code, _, err = _bounded("c.yaml", "--json", "pipe", cwd=work)
    assert (code, err) == (2, "verify: cannot write pipe: a FIFO (named pipe) with no reader\n")
    assert stat.S_ISFIFO((work / "pipe").lstat().st_mode)


def test_a_fifo_with_a_reader_gets_the_report(work):
    os.mkfifo(work / "pipe")
    fd = os.open(work / "pipe", os.O_RDONLY | os.O_NONBLOCK)
    got: list[bytes] = []

    def drain():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            select.select([fd], [], [], 0.05)
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if chunk:
                got.append(chunk)
            elif got:
                return  # the writer has closed its end
            else:
                time.sleep(0.01)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        code, _, err = _bounded("c.yaml", "--json", "pipe", "--quiet", cwd=work)
        reader.join(20)
    finally:
        os.close(fd)
    assert (code, err) == (0, "")
    assert json.loads(b"".join(got))["status"] == "proved"
    assert stat.S_ISFIFO((work / "pipe").lstat().st_mode)


# --- all or nothing -----------------------------------------------------------------------


def _three(work):
    for name in ("r.json", "r.md", "r.html"):
        (work / name).write_text(f"previous {name}\n")
    return ("c.yaml", "--json", "r.json", "--markdown", "r.md", "--html", "r.html", "--quiet")


def test_a_failed_later_write_leaves_every_report_as_it_was(work, monkeypatch):
    argv = _three(work)
    before = _snapshot(work)
    real_fdopen, opened = os.fdopen, []

    def fdopen(fd, *a, **k):
        opened.append(fd)
        if len(opened) == 3:  # the first two reports' temporaries are complete
            raise OSError(28, "No space left on device")
        return real_fdopen(fd, *a, **k)

    monkeypatch.setattr(outputs.os, "fdopen", fdopen)
    code, out, err = _bounded(*argv, cwd=work)
    assert (code, out) == (2, "")
    assert err == "verify: cannot write r.html: No space left on device\n"
    assert _snapshot(work) == before  # no report replaced, no temporary left


def test_a_failed_replace_leaves_every_report_as_it_was(work, monkeypatch):
    argv = _three(work)
    before = _snapshot(work)

    def replace(src, dst):
        raise OSError(16, "Device or resource busy")

    monkeypatch.setattr(outputs.os, "replace", replace)
    code, _, err = _bounded(*argv, cwd=work)
    assert (code, err) == (2, "verify: cannot write r.json: Device or resource busy\n")
    assert _snapshot(work) == before


def test_a_failed_stream_write_replaces_no_file(work, monkeypatch):
    argv = (*_three(work)[:-3], "--html", "/dev/null", "--quiet")
    before = _snapshot(work)

    def write(fd, data):
        raise OSError(32, "Broken pipe")

    monkeypatch.setattr(outputs.os, "write", write)
    code, _, err = _bounded(*argv, cwd=work)
    assert (code, err) == (2, "verify: cannot write /dev/null: Broken pipe\n")
    assert _snapshot(work) == before


def test_all_reports_are_written_together(work):
    code, _, _ = _bounded(*_three(work), cwd=work)
    assert code == 0
    assert json.loads((work / "r.json").read_text())["status"] == "proved"
    assert (work / "r.md").read_text().startswith("#")
    assert "<html" in (work / "r.html").read_text().lower()
    assert sorted(p.name for p in work.iterdir()) == ["c.yaml", "log.jsonl", "old.json",
                                                      "r.html", "r.json", "r.md"]  # fmt: skip


# --- inputs that are not regular files ----------------------------------------------------


def test_a_fifo_contract_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "c.yaml")
    done = subprocess.run([sys.executable, "-m", "verify", "c.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=20,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "c.yaml: is a FIFO (named pipe), not a contract file\n"


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda p: os.mkfifo(p), "a FIFO (named pipe)"),
        (lambda p: p.symlink_to("/dev/zero"), "a character device"),
        (lambda p: p.mkdir(), "a directory"),
    ],
)
def test_non_regular_inputs_are_refused(tmp_path, make, kind):
    make(tmp_path / "x")
    (tmp_path / "c.yaml").write_text(CONTRACT, encoding="utf-8")
    code, _, err = _bounded("x", "--json", "r.json", cwd=tmp_path)
    assert (code, err) == (2, f"x: is {kind}, not a contract file\n")
    code, _, err = _bounded("check", "x", cwd=tmp_path)
    assert (code, err) == (2, f"x: cannot read: is {kind}, not a regular file\n")
    code, _, err = _bounded("synth", "x", cwd=tmp_path)
    assert (code, err) == (2, f"x: is {kind}, not a contract file\n")
    code, _, err = _bounded("c.yaml", "--evidence", "x", "--json", "r.json", cwd=tmp_path)
    assert (code, err) == (2, f"--evidence x: is {kind}, not a log file\n")
    (tmp_path / "d.yaml").write_text(CONTRACT + "evidence:\n  logprobs: {path: x}\n")
    code, _, err = _bounded("d.yaml", "--json", "r.json", cwd=tmp_path)
    assert code == 2
    assert (
        err
        == f"d.yaml:10:14: evidence.logprobs.path: {tmp_path / 'x'}: is {kind}, not a log file\n"
    )
    assert not (tmp_path / "r.json").exists()


def test_the_loader_reads_only_regular_files(tmp_path):
    os.mkfifo(tmp_path / "p.yaml")
    result = []
    worker = threading.Thread(target=lambda: result.append(_load_error(tmp_path / "p.yaml")),
                              daemon=True)  # fmt: skip
    worker.start()
    worker.join(20)
    assert result == [f"{tmp_path / 'p.yaml'}: is a FIFO (named pipe), not a contract file"]


def _load_error(path) -> str:
    try:
        contracts.load(path)
    except contracts.ContractError as err:
        return str(err)
    return "loaded"
