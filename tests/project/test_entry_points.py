"""The suite and the command line start the ways the README says: plain ``pytest`` from the
root (the tests are a package, so ``tests/contracts`` is never taken for ``contracts``), and
``python -m verify`` from the root, which runs the folder ``verify/`` forwarding to the
installed namespace."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_plain_pytest_runs_from_the_root():
    script = shutil.which("pytest", path=str(pathlib.Path(sys.executable).parent))
    if script is None:
        pytest.skip("no pytest script beside this interpreter")
    done = subprocess.run(
        [script, "-q", "-n", "0", "-p", "no:cacheprovider", "tests/contracts/test_load.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]


def test_python_m_verify_from_the_root_is_the_namespace_command_line():
    code = (
        "import runpy, sys\n"
        "sys.argv = ['verify', 'schema']\n"
        "try:\n"
        "    runpy.run_module('verify', run_name='__main__')\n"
        "except SystemExit as stop:\n"
        "    assert stop.code == 0, stop.code\n"
        "import verify\n"
        "print(verify.__file__)\n"
        "print(sorted(m for m in sys.modules if m.startswith('verify.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    *schema, where, loaded = done.stdout.splitlines()
    assert json.loads("\n".join(schema))["type"] == "object"
    assert pathlib.Path(where) == ROOT / "verify" / "__init__.py"  # the folder, from the root
    # no module of the folder is loaded a second time under the bare name: the entry forwards
    # to kernel_contracts.verify, where the command line's modules live
    assert loaded == "[]"
