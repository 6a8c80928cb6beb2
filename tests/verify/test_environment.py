"""A package named ``kernels`` from another project, found before this toolkit's, is named as
the cause when the emulated kernels cannot load (verify.common.environment)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from verify.common.environment import OURS, foreign_kernels

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_this_checkout_finds_its_own_kernels():
    assert OURS == ROOT / "kernels" / "__init__.py"
    assert foreign_kernels() is None


def test_another_kernels_first_on_the_path_is_named(tmp_path):
    other = tmp_path / "site" / "kernels"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text('"""Another project\'s kernels."""\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])}
    contract = ROOT / "contracts" / "examples" / "fp8-emulated.yaml"
    run = subprocess.run(
        [sys.executable, "-m", "verify", str(contract)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    lines = run.stderr.splitlines()
    assert lines[0].startswith("verify: internal error: ")
    assert lines[1] == (
        f"verify: 'import kernels' finds {other}, another project's package named kernels (the "
        "PyPI project 'kernels', which transformers 5 requires), before this toolkit's "
        f"{ROOT / 'kernels'}: run from {ROOT}, or use an environment without it"
    )
    assert "Traceback" not in run.stderr and run.stdout == ""
