"""One runner of the command line, in process, for every test that drives it."""

from __future__ import annotations

import io
import os

from verify.cli.commands import main


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
