"""The README stays a true front door: CI runs its test command, its first command prints what it
shows, its ten-line contract is valid, its Python example runs as described, and every page it
points to exists. What moved into ``docs/`` is tested by ``test_docs.py``."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

from kernel_contracts import contracts
from tests.support.cli_runner import run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _setup_commands() -> list[str]:
    return [body.strip() for lang, body in FENCE.findall(_section("Set up")) if not lang]


def test_exactly_two_setup_commands():
    commands = _setup_commands()
    assert len(commands) == 2
    assert "python -m verify contracts/examples/" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert _setup_commands()[1] in ci


def test_ci_prints_the_durations_table_the_benchmarks_page_shows():
    # docs/benchmarks.md, "The test suite's time": the command CI runs, its slowest tests listed
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python -m pytest -q --durations=30" in ci


def test_ci_builds_the_docs_strictly():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "mkdocs build --strict" in ci


def test_the_main_job_prints_what_the_readme_shows(tmp_path, monkeypatch):
    (shown,) = [body for lang, body in FENCE.findall(_section("Set up")) if lang == "text"]
    argv = _setup_commands()[0].split("python -m verify ", 1)[1].split()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    code, out, _ = run_cli(ROOT / argv[0], *argv[1:])
    assert (code, out) == (0, shown)
    assert {p.name for p in (tmp_path / "out").iterdir()} == {
        "report.json",
        "report.md",
        "report.html",
    }


def test_ten_line_contract_is_valid():
    (excerpt,) = re.findall(r"```yaml\n(.*?)```", README, re.S)
    assert len(excerpt.splitlines()) == 10
    contract = contracts.loads(excerpt, path="README.md")
    assert contract.kernels.inference.matmul.promote_every == 256


def test_python_example_runs_as_described(tmp_path, monkeypatch):
    (code,) = re.findall(r"```python\n(.*?)```", README, re.S)
    (tmp_path / "contracts").symlink_to(ROOT / "contracts", target_is_directory=True)
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {})
    described = re.findall(r"`([^`]*)`", _section("From Python").split("```", 2)[2])[:3]
    assert printed.getvalue().splitlines() == described


def test_pages_it_points_to_exist():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert links
    for link in links:
        assert (ROOT / link).is_file(), link


def test_it_is_a_front_door():
    assert len(README.splitlines()) < 200


def test_license_matches_the_declared_one():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    declared = re.search(r'^license = "(.+)"$', pyproject, re.M)  # an SPDX expression
    assert declared and declared.group(1) == "Apache-2.0"
    assert re.search(r'^license-files = \["LICENSE"\]$', pyproject, re.M)
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_pre_commit_runs_the_style_checks_ci_runs():
    import yaml

    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert all(repo["repo"] == "local" for repo in config["repos"])
    assert {hook["entry"] for hook in hooks} == {"ruff check", "ruff format --check"}
    style = next(TESTS.rglob("test_style.py")).read_text(encoding="utf-8")
    assert '"check"' in style and '"--check"' in style
