"""The README's commands and examples stay true: CI runs its test command, its DSL excerpt is a
valid contract, and every shipped example it lists exists."""

from __future__ import annotations

import pathlib
import re

import contracts

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _setup_commands() -> list[str]:
    section = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```\n(.*?)\n```", section, re.S)


def test_exactly_two_setup_commands():
    commands = _setup_commands()
    assert len(commands) == 2
    assert "python -m verify contracts/examples/" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert _setup_commands()[1] in ci


def test_dsl_excerpt_is_a_valid_contract():
    excerpt = re.search(r"```yaml\n(.*?)```", README, re.S).group(1)
    contract = contracts.loads(excerpt, path="README.md")
    assert contract.kernels.inference.matmul.promote_every == 256


def test_listed_examples_exist():
    listed = set(re.findall(r"`([\w-]+\.yaml)`", README))
    shipped = {p.name for p in (ROOT / "contracts" / "examples").glob("*.yaml")}
    assert shipped, "no shipped examples found"
    assert shipped <= listed, sorted(shipped - listed)
