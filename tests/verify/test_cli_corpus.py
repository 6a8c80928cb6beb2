"""Every malformed contract of the golden corpus, through the command line: exit 2, the golden
message on stderr naming the line and key, nothing on stdout, and no report written."""

from __future__ import annotations

import io
import pathlib
import re

import pytest

from kernel_contracts.verify.cli.commands import main

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "malformed"
CASES = sorted(p.stem for p in DATA.glob("*.yaml"))
NAMES_LINE_AND_KEY = re.compile(r"^[^:]+:[0-9]+:[0-9]+: [A-Za-z_][\w.\[\]]*: .+$")
FILE_LEVEL = re.compile(r"^[^:]+:[0-9]+:[0-9]+: .+$")


@pytest.mark.parametrize("case", CASES)
def test_malformed_contract_exits_2_with_its_message(case, monkeypatch, tmp_path):
    monkeypatch.chdir(DATA)
    report = tmp_path / "report.json"
    stdout, stderr = io.StringIO(), io.StringIO()
    code = main([f"{case}.yaml", "--json", str(report)], stdout=stdout, stderr=stderr)
    expected = (DATA / f"{case}.expected").read_text(encoding="utf-8").rstrip("\n")
    assert code == 2
    assert stderr.getvalue().rstrip("\n") == expected
    assert "Traceback" not in stderr.getvalue()
    assert stdout.getvalue() == ""
    assert not report.exists()
    for line in expected.splitlines():
        assert FILE_LEVEL.match(line), line


def test_most_messages_name_a_key():
    """Problems tied to a key say which one; only whole-document problems may omit it."""
    lines = [
        line
        for case in CASES
        for line in (DATA / f"{case}.expected").read_text(encoding="utf-8").splitlines()
    ]
    keyed = [line for line in lines if NAMES_LINE_AND_KEY.match(line)]
    assert len(keyed) >= 0.8 * len(lines)
