"""No subcommand imports the code a contract names without consent.

A contract's ``evidence.emulate.model: "module:function"`` names a module beside it that writes
a marker file when it is imported. Every subcommand that can run the contract's evidence (the
main run, a promotion stage, ``export``, which checks premises by running the evidence,
``localize`` and ``conformance``, with the contract's model or one ``--model`` names) exits 2
with one line naming what would be imported, writes nothing and never imports the module;
with ``--trust-code`` each of them imports it. The subcommands that take the contract but run
no evidence (``synth``, ``monitor``, which reads a log) never import it either. Below them, the
loader itself refuses without consent, whoever calls it.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

from kernel_contracts.verify.common.consent import TRUST_ENV
from tests.support.cli_runner import run_cli

SAMPLE = pathlib.Path(__file__).resolve().parents[2] / "contracts/examples/rollout-sample.jsonl"

MODULE = """
import pathlib

pathlib.Path(__file__).with_name("imported.marker").write_text("imported")


def logits(params, tokens):
    raise RuntimeError("this model only says it was imported")
"""

CONTRACT = """\
contract: 1
name: consent-paths
kernels:
  train: {{preset: fp32}}
  inference: {{preset: fp32}}
numerical:
  - {{id: N1, metric: logit_drift, max: 0.01}}
guarantees:
  - {{id: G1, quantity: clip_budget, clip_epsilon: 0.2, max: 0.2, from: [N1]}}
promotion:
  offline_ci: {{}}
evidence:
  emulate:
    model: "{name}:logits"
    params: params.npz
    prompts: 2
    max_new_tokens: 2
"""

MODEL_LINE, MODEL_COL = 14, 5  # where evidence.emulate.model stands in CONTRACT

# the subcommands that run the contract's evidence, as (name, arguments after the contract)
RUNNERS = {
    "main": ((), ("--json", "{out}/report.json")),
    "stage": ((), ("--stage", "offline_ci", "--promotion-dir", "{out}/stages")),
    "export": (("export",), ("--to", "verl", "--out", "{out}/verl.yaml")),
    "localize": (("localize",), ("--json", "{out}/localize.json")),
    "conformance": (("conformance",), ("--json", "{out}/conformance.json")),
}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.delenv(TRUST_ENV, raising=False)
    name = f"consent_paths_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    np.savez(tmp_path / "params.npz", w=np.zeros((2, 2), np.float32))
    (tmp_path / "c.yaml").write_text(CONTRACT.format(name=name))
    (tmp_path / "out").mkdir()
    yield tmp_path, name
    for key in [k for k in sys.modules if k == name]:
        del sys.modules[key]


def _argv(folder, runner: str, *extra: str) -> list[str]:
    before, after = RUNNERS[runner]
    out = str(folder / "out")
    return [*before, str(folder / "c.yaml"), *(a.format(out=out) for a in after), *extra]


def _refusal(folder, name: str, key: str) -> str:
    return (
        f"{key}: names code to run: it would import module {name!r} (searched first in "
        f"{folder}) and call logits; pass --trust-code (or set {TRUST_ENV}=1) to allow it\n"
    )


def _untouched(folder, name: str) -> None:
    assert not (folder / "imported.marker").exists()
    assert name not in sys.modules
    # nothing anywhere: a stage's --promotion-dir, made before the contract is read, is gone
    assert not (folder / "out" / "stages").exists()
    assert [p for p in (folder / "out").rglob("*") if not p.is_dir()] == []


@pytest.mark.parametrize("runner", list(RUNNERS))
def test_without_consent_every_runner_exits_2_and_imports_nothing(folder, runner):
    folder, name = folder
    code, out, err = run_cli(*_argv(folder, runner))
    at = f"{folder / 'c.yaml'}:{MODEL_LINE}:{MODEL_COL}: evidence.emulate.model"
    assert (code, out, err) == (2, "", _refusal(folder, name, at))
    _untouched(folder, name)


@pytest.mark.parametrize("runner", ["localize", "conformance"])
def test_a_model_named_on_the_command_line_needs_consent_too(folder, runner):
    """``--model module:function`` is imported from the contract's folder first: the same
    consent is asked for."""
    folder, name = folder
    argv = _argv(folder, runner, "--model", f"{name}:logits", "--params", folder / "params.npz")
    code, out, err = run_cli(*argv)
    assert (code, out, err) == (2, "", _refusal(folder, name, "--model"))
    _untouched(folder, name)


@pytest.mark.parametrize("runner", list(RUNNERS))
def test_with_consent_every_runner_imports_the_module(folder, runner):
    folder, _ = folder
    code, _, err = run_cli(*_argv(folder, runner, "--trust-code"))
    assert (folder / "imported.marker").read_text() == "imported"
    assert code == 2 and "this model only says it was imported" in err, err


def test_subcommands_that_run_no_evidence_never_import_it(folder):
    folder, name = folder
    contract = folder / "c.yaml"
    log = folder / "log.jsonl"
    log.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:3]))
    code, out, _ = run_cli("synth", contract)
    assert code == 0 and "G1" in out
    code, out, err = run_cli(
        "monitor", contract, "--stream", log, "--no-follow", "--format", "generic"
    )
    assert code in (0, 1, 3) and '"kind": "window"' in out, err
    assert not (folder / "imported.marker").exists() and name not in sys.modules


def test_the_loader_refuses_without_consent(folder):
    """Whoever calls the loader, and whatever a command checked before, the import itself needs
    ``trust_code=True``."""
    from kernel_contracts.kernels.model.user_model import (
        UserModelError,
        load_entry,
        load_user_model,
    )

    folder, name = folder
    model, params = f"{name}:logits", str(folder / "params.npz")
    calls = [
        lambda: load_user_model(model, params, str(folder), trust_code=False),
        lambda: load_entry(model, str(folder), trust_code=False),
        lambda: load_entry(model, str(folder), trust_code=1),  # only True consents
    ]
    for call in calls:
        with pytest.raises(UserModelError) as info:
            call()
        assert f"{info.value}\n" == _refusal(folder, name, "evidence.emulate.model")
        assert info.value.key == "evidence.emulate.model"
    with pytest.raises(TypeError):  # consent is never implied
        load_entry(model, str(folder))  # type: ignore[call-arg]
    _untouched(folder, name)


def test_evidence_measured_below_the_command_line_refuses_without_consent(folder):
    """The library's entry to the evidence, called as a notebook would, without consent."""
    from kernel_contracts import contracts
    from kernel_contracts.verify.decide import EvidenceError, evaluate

    folder, name = folder
    contract = contracts.load(str(folder / "c.yaml"))
    with pytest.raises(EvidenceError) as info:
        evaluate(contract)
    at = f"{folder / 'c.yaml'}:{MODEL_LINE}:{MODEL_COL}: evidence.emulate.model"
    assert f"{info.value}\n" == _refusal(folder, name, at)
    _untouched(folder, name)
