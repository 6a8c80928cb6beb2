"""One runner of the command line, in process, for every test that drives it."""

from __future__ import annotations

import io
import os
import pathlib

from kernel_contracts.verify.cli.commands import main

MALFORMED = pathlib.Path(__file__).resolve().parents[1] / "data" / "malformed"


def run_cli(*argv, cwd=None) -> tuple[int, str, str]:
    """Run ``python -m verify *argv`` (each argument as ``str``) in ``cwd``; return the exit code,
    stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    try:
        if cwd:
            os.chdir(cwd)
        code = main([str(a) for a in argv], stdout=out, stderr=err)
    finally:
        os.chdir(old)
    return code, out.getvalue(), err.getvalue()


def malformed_contract() -> tuple[pathlib.Path, str]:
    """A contract with several problems, and the lines every command prints for it (each
    command loads a contract the same way)."""
    path = MALFORMED / "pg_bias_fields.yaml"
    expected = (MALFORMED / "pg_bias_fields.expected").read_text()
    expected = expected.replace("pg_bias_fields.yaml", str(path))
    return path, expected if expected.endswith("\n") else expected + "\n"
