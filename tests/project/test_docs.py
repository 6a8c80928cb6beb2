"""The documentation site builds strictly, its DSL excerpt is a valid contract, and every command
its pages show is run: the cheap ones here, in one process, and the expensive ones (emulation,
training, benchmarks) by the test named for each, or, for a benchmark script, checked to exist
and to declare every option the page passes it."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import shlex
import shutil

import pytest

from kernel_contracts import contracts
from kernel_contracts.verify.cli.commands import SUBCOMMANDS
from tests.support.cli_runner import run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TESTS = ROOT / "tests"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
SHELL = ("", "bash", "sh", "console")


def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _shell_blocks() -> list[tuple[str, str]]:
    """(page, block) for every fenced block in a shell language (no language, or bash)."""
    return [
        (p.name, body)
        for p in sorted(DOCS.glob("*.md"))
        for lang, body in FENCE.findall(p.read_text(encoding="utf-8"))
        if lang in SHELL
    ]


def _lines(block: str) -> list[str]:
    """The block's commands: continued lines joined, comments and here-documents left out."""
    joined = re.sub(r"\\\n\s*", " ", block)
    lines, end = [], None
    for line in joined.splitlines():
        if end is not None:
            end = None if line.strip() == end else end
            continue
        if heredoc := re.search(r"<<'(\w+)'", line):
            end = heredoc.group(1)
        text = re.sub(r"\s+#.*$", "", line).strip()
        if text and line[0].isspace() and lines:  # a usage line continued without a backslash
            lines[-1] += " " + text
        elif text:
            lines.append(text)
    return lines


def _commands() -> list[str]:
    return [line for _, block in _shell_blocks() for line in _lines(block)]


def _is_synopsis(command: str) -> bool:
    """A usage line (upper-case placeholders, options in brackets), not a command to run."""
    return bool(re.search(r"\b[A-Z][A-Z_]+\b|\[--|\|", command.split("#")[0]))


# Commands run by this file (in `test_cheap_commands_run`, `test_promotion_demo_runs` and
# `test_shards_command_runs`), exactly as shown.
RUN_HERE = {
    "python -m verify schema",
    "python -m verify contracts/examples/fp8-rollout.yaml --json fp8.json",
    "python -m verify check fp8.json",
    "python -m verify contracts/examples/rollout-log.yaml",
    "python -m verify export contracts/examples/fp8-rollout.yaml --to verl",
    "python -m verify export contracts/examples/rl-corrections.yaml --to nemo-rl --guarantee "
    "G_geo_mask",
    "python -m verify export contracts/examples/fp8-rollout.yaml --to trl --check-version 1.9",
    "python -m verify contract.yaml --evidence a.jsonl b.jsonl",
}

# Expensive commands, each run by another test: command -> (test file, strings that test holds
# and that show it runs the command).
RUN_BY_TESTS = {
    "python -m verify contracts/examples/fp8-emulated.yaml": (
        "test_examples.py",
        ['"fp8-emulated.yaml"'],
    ),
    "python -m verify contracts/examples/smollm2-fp8.yaml": (
        "test_smollm2_contract.py",
        ['"smollm2-fp8.yaml"', '"check"'],
    ),
    "python examples/routing_loop.py": ("test_routing_example.py", ['"routing_loop.py"']),
    "python -m pytest -q --durations=30": (  # the suite, as CI runs it
        "test_readme.py",
        ['"python -m pytest -q --durations=30" in ci'],
    ),
    "python examples/rl_experiment.py --quick": (
        "test_rl_experiment.py",
        ['"examples/rl_experiment.py"', '"--quick"'],
    ),
    "python examples/rl_experiment.py --out rl-experiment": (
        "test_rl_experiment.py",
        ['"examples/rl_experiment.py"', '"--out"'],
    ),
    "jupytext --to notebook notebooks/*.py": ("test_notebooks.py", ["jupytext.read("]),
    "python -m verify contract.yaml --evidence rollouts.jsonl": (
        "test_framework_logs_page.py",
        ['"rollouts.jsonl"', "for command in SHELL"],
    ),
    "python -m verify init --framework verl --vocab 151936 --temperature 1.0 --preset h100-fp8 "
    "--estimator tis -o contract.yaml": (
        "test_init.py",
        ['"--framework", "verl", "--vocab", "151936", "--temperature", "1.0", "--preset"'],
    ),
    "python -m verify contract.yaml --evidence rollouts.parquet": (
        "test_framework_logs_page.py",
        ['"rollouts.parquet"', "for command in SHELL"],
    ),
}

# Long runs that no test repeats: the script exists and declares every option shown.
DECLARED_ONLY = ("python bench/", "python examples/routing_loop.py --source")

# Shell demonstrations run as a whole: the promotion pipeline here; the monitor's crash and
# restart by the test that kills the monitor at random points and compares the bytes.
DEMOS = {
    "mkdir -p out/promo": None,
    "cp contracts/examples/rollout-log.yaml demo.yaml": (
        "test_monitor_restart.py",
        ['"--checkpoint"', "signal.SIGKILL"],
    ),
}


def _test_file(name: str) -> pathlib.Path:
    found = sorted(TESTS.rglob(name))
    assert found, f"no test file {name} under tests/"
    return found[0]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A directory that sees the repository's contracts and examples, as the pages assume."""
    for name in ("contracts", "examples"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the test extra installs it)")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(tmp_path / "site"), strict=True)
    build(config)
    assert (tmp_path / "site" / "index.html").is_file()


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {p.name for p in DOCS.glob("*.md")}
    assert pages == set(re.findall(r":\s+(\S+\.md)$", nav, re.M))


def test_every_command_shown_is_run_or_matched():
    demos = [block for _, block in _shell_blocks() if _lines(block)[0].startswith(tuple(DEMOS))]
    in_demos = {line for block in demos for line in _lines(block)}
    for command in _commands():
        if command in in_demos or _is_synopsis(command):
            continue
        assert (
            command in RUN_HERE or command in RUN_BY_TESTS or command.startswith(DECLARED_ONLY)
        ), f"a command in docs/ that no test runs: {command}"
    assert {line for line in _commands()} >= RUN_HERE | set(RUN_BY_TESTS)


@pytest.mark.parametrize("command", sorted(RUN_BY_TESTS))
def test_expensive_commands_are_run_by_their_test(command):
    name, needles = RUN_BY_TESTS[command]
    source = _test_file(name).read_text(encoding="utf-8")
    for needle in needles:
        assert needle in source, (name, needle)


def test_long_runs_declare_every_option_shown():
    for command in _commands():
        if not command.startswith(DECLARED_ONLY):
            continue
        words = shlex.split(command)
        script = ROOT / words[1]
        assert script.is_file(), command
        source = script.read_text(encoding="utf-8")
        for option in (w for w in words[2:] if w.startswith("--")):
            assert f'"{option}"' in source, (command, option)
        positional = [w for w in words[2:3] if not w.startswith("-")]
        for word in positional:
            assert f'"{word}"' in source, (command, word)


def test_synopses_name_only_options_their_command_takes():
    for command in filter(_is_synopsis, _commands()):
        words = command.split("#")[0].split()
        if words[:3] != ["python", "-m", "verify"]:
            continue
        sub = words[3] if words[3] in SUBCOMMANDS else None
        code, usage, _ = run_cli(*([sub, "--help"] if sub else ["--help"]))
        assert code == 0, command
        for option in re.findall(r"--[\w-]+", command):
            assert option in usage, (command, option)


def test_cheap_commands_run(workdir):
    expected = {
        "python -m verify schema": 0,
        "python -m verify contracts/examples/fp8-rollout.yaml --json fp8.json": 0,
        "python -m verify check fp8.json": 0,
        "python -m verify contracts/examples/rollout-log.yaml": 1,
        "python -m verify export contracts/examples/fp8-rollout.yaml --to verl": 0,
        "python -m verify export contracts/examples/rl-corrections.yaml --to nemo-rl --guarantee "
        "G_geo_mask": 0,
        "python -m verify export contracts/examples/fp8-rollout.yaml --to trl --check-version "
        "1.9": 0,
    }
    shown = _commands()
    for command, code in expected.items():  # in order: check reads the report written before
        assert command in shown, command
        assert run_cli(*shlex.split(command)[3:])[0] == code, command


def test_shards_command_runs(workdir):
    """`contract.yaml --evidence a.jsonl b.jsonl` on the shipped log cut in two shards gives the
    verdicts of the whole log."""
    shutil.copy(ROOT / "contracts/examples/rollout-log.yaml", "contract.yaml")
    lines = (ROOT / "contracts/examples/rollout-sample.jsonl").read_text().splitlines(True)
    pathlib.Path("a.jsonl").write_text("".join(lines[:20]))
    pathlib.Path("b.jsonl").write_text("".join(lines[20:]))
    command = "python -m verify contract.yaml --evidence a.jsonl b.jsonl"
    assert command in _commands()
    code, out, _ = run_cli(*shlex.split(command)[3:])
    whole = run_cli("contracts/examples/rollout-log.yaml")
    assert (code, out.splitlines()[-1]) == (whole[0], whole[1].splitlines()[-1])


def test_promotion_demo_runs(workdir):
    """The promotion pipeline as the page shows it, each command in order; every stage passes
    and the last record re-checks."""
    (block,) = [b for _, b in _shell_blocks() if b.startswith("mkdir -p out/promo")]
    heredoc = re.search(r"cat > (\S+) <<'END'\n(.*?)\nEND\n", block, re.S)
    env = {}
    for line in _lines(block):
        if line.startswith("mkdir -p out/promo && cat >"):
            pathlib.Path("out/promo").mkdir(parents=True)
            pathlib.Path(heredoc.group(1)).write_text(heredoc.group(2) + "\n")
        elif m := re.fullmatch(r"(\w+)=(\S+)", line):
            env[m.group(1)] = m.group(2)
        else:
            words = [env.get(w[1:], w) if w.startswith("$") else w for w in shlex.split(line)]
            assert words[:3] == ["python", "-m", "verify"], line
            code, out, err = run_cli(*words[3:])
            assert code == 0, (line, out, err)
    assert pathlib.Path("out/promo/full.json").is_file()


def test_monitor_demo_is_run_by_the_restart_test():
    (block,) = [b for _, b in _shell_blocks() if b.startswith("cp contracts/examples/rollout")]
    name, needles = DEMOS["cp contracts/examples/rollout-log.yaml demo.yaml"]
    source = _test_file(name).read_text(encoding="utf-8")
    assert "kill -9" in block and all(n in source for n in needles)


def test_dsl_excerpt_is_a_valid_contract():
    excerpt = re.search(r"```yaml\n(contract: 1\n.*?)```", _page("dsl.md"), re.S).group(1)
    contract = contracts.loads(excerpt, path="docs/dsl.md")
    assert contract.kernels.inference.matmul.promote_every == 256


def test_listed_examples_exist():
    listed = set(re.findall(r"`([\w-]+\.yaml)`", _page("dsl.md")))
    shipped = {p.name for p in (ROOT / "contracts" / "examples").glob("*.yaml")}
    assert shipped, "no shipped examples found"
    assert shipped <= listed, sorted(shipped - listed)


PACKAGES = ("contracts", "kernels", "evidence", "bounds", "verify")
# keys of the report and of a contract, named like a module
REPORT_KEYS = {"evidence.sweep", "evidence.emulate.model"}


def _module_file(dotted: list[str]) -> pathlib.Path | None:
    base = ROOT.joinpath(*dotted)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _names_in(path: pathlib.Path, name: str) -> bool:
    pattern = rf"^(?:def |class |async def )?{re.escape(name)}\b|['\"]{re.escape(name)}['\"]"
    return bool(re.search(pattern, path.read_text(encoding="utf-8"), re.M))


def test_every_path_and_module_named_exists():
    # the DSL key reference names key paths (kernels.train.preset), generated from the schema
    pages = [ROOT / "README.md", *sorted(p for p in DOCS.glob("*.md") if p.name != "dsl-keys.md")]
    missing = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        tops = "|".join((*PACKAGES, "tests", "bench", "examples", "notebooks"))
        for path in set(re.findall(rf"`((?:{tops})/[\w/.-]*\w/?)`", text)):
            if not (ROOT / path).exists():
                missing.append(f"{page.name}: {path}")
        for dotted in set(re.findall(rf"\b((?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+)", text)):
            parts = dotted.split(".")
            if dotted in REPORT_KEYS or parts[-1] in {"md", "py", "yaml", "json"}:
                continue
            k = max(k for k in range(1, len(parts) + 1) if _module_file(parts[:k]))
            rest = parts[k:]
            if rest and not _names_in(_module_file(parts[:k]), rest[0]):
                missing.append(f"{page.name}: {dotted}")
    assert not missing, missing


def test_the_dsl_key_reference_is_current():
    """docs/dsl-keys.md is what docs/hooks/dsl_keys.py writes from the schema today (run it
    after changing the schema), and it lists every key the schema knows."""
    spec = importlib.util.spec_from_file_location("dsl_keys", DOCS / "hooks" / "dsl_keys.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (DOCS / "dsl-keys.md").read_text(encoding="utf-8")
    assert page == module.render(), "run: python docs/hooks/dsl_keys.py"
    for key in ("policy.temperature", "guarantees[].estimator", "runtime[].batch_invariant",
                "evidence.emulate.model", "slices.<name>.token_prob"):  # fmt: skip
        assert f"| `{key}` |" in page, key
