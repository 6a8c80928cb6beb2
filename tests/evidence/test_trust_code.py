"""Code a contract names runs only with the user's consent.

A contract whose ``evidence.emulate.model`` is ``package.module:function`` makes ``python -m
verify`` (and ``localize`` / ``conformance``, which run the contract's model) import Python from
the contract's folder. Without ``--trust-code`` or ``KERNEL_CONTRACTS_TRUST_CODE=1`` the command
exits 2 with one line saying what would be imported and run, and the module is never imported
(it would leave a marker file behind); with either, it is imported.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from kernel_contracts.verify.common.consent import TRUST_ENV, trusted
from tests.support.cli_runner import run_cli

MODULE = """
import pathlib

pathlib.Path(__file__).with_name("imported.marker").write_text("imported")


def logits(params, tokens):
    raise RuntimeError("this model only says it was imported")
"""


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.delenv(TRUST_ENV, raising=False)
    name = f"consent_probe_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    np.savez(tmp_path / "params.npz", w=np.zeros((2, 2), np.float32))
    (tmp_path / "c.yaml").write_text(
        "contract: 1\nname: consent\nkernels:\n  train: {preset: fp32}\n"
        "  inference: {preset: fp32}\nnumerical:\n  - {id: N1, metric: logit_drift, max: 1.0}\n"
        f'evidence:\n  emulate:\n    model: "{name}:logits"\n    params: params.npz\n'
        "    prompts: 2\n    max_new_tokens: 2\n"
    )
    yield tmp_path, name
    for key in [k for k in sys.modules if k == name]:
        del sys.modules[key]


def _refusal(folder, name) -> str:
    return (
        f"{folder / 'c.yaml'}:10:5: evidence.emulate.model: names code to run: it "
        f"would import module {name!r} (searched first in {folder}) and call logits; pass "
        f"--trust-code (or set {TRUST_ENV}=1) to allow it\n"
    )


@pytest.mark.parametrize("command", [(), ("localize",), ("conformance",)])
def test_without_consent_nothing_is_imported_and_the_command_exits_2(folder, command):
    folder, name = folder
    report = folder / "report.json"
    code, out, err = run_cli(*command, folder / "c.yaml", "--json", report)
    assert (code, out) == (2, "")
    assert err == _refusal(folder, name)
    assert not (folder / "imported.marker").exists() and not report.exists()
    assert name not in sys.modules


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_with_consent_the_module_is_imported(folder, how, monkeypatch):
    folder, _ = folder
    args = [folder / "c.yaml", "--quiet"]
    if how == "flag":
        args.append("--trust-code")
    else:
        monkeypatch.setenv(TRUST_ENV, "1")
    code, _, err = run_cli(*args)
    assert (folder / "imported.marker").read_text() == "imported"
    assert code == 2 and "this model only says it was imported" in err


def test_only_the_value_1_consents():
    assert trusted(False, {TRUST_ENV: "1"}) and trusted(True, {})
    assert not any(trusted(False, {TRUST_ENV: v}) for v in ("", "0", "yes", "true"))
