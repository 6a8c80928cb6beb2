"""The JAX persistent compilation cache of ``python -m verify``: where it lives (the option,
``KERNEL_CONTRACTS_JAX_CACHE``, JAX's own variable, the per-user default), that it is set
before JAX is imported, that an unusable directory turns it off with a note, and that a run
with a cold, a warm or no cache writes the same report apart from its times."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_contracts.verify.common import compile_cache
from kernel_contracts.verify.common.compile_cache import ENV, MAX_BYTES, Choice, locate, settings

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "contracts" / "examples" / "fp8-emulated.yaml"


def test_the_option_comes_first(tmp_path):
    env = {ENV: str(tmp_path / "env"), "JAX_COMPILATION_CACHE_DIR": "/elsewhere"}
    assert locate(str(tmp_path / "opt"), env) == Choice(str(tmp_path / "opt"))
    assert (tmp_path / "opt").is_dir() and not (tmp_path / "env").exists()
    assert locate("off", env) == Choice(None)
    assert locate(" OFF ", env) == Choice(None)


def test_then_our_variable_then_jax_own(tmp_path):
    assert locate(None, {ENV: str(tmp_path / "c")}) == Choice(str(tmp_path / "c"))
    assert locate(None, {ENV: "off", "JAX_COMPILATION_CACHE_DIR": "/x"}) == Choice(None)
    # a cache the user set up for JAX is kept as it is, settings and all
    kept = locate(None, {"JAX_COMPILATION_CACHE_DIR": "/x"})
    assert kept == Choice(None, keep=True) and settings(kept) == {}


def test_the_default_is_per_user(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    assert locate(None, env) == Choice(str(tmp_path / "kernel-contracts" / "jax"))
    assert (tmp_path / "kernel-contracts" / "jax").stat().st_mode & 0o077 == 0


def test_a_directory_others_may_write_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    choice = locate(str(shared), {})
    assert choice.directory is None and not choice.keep
    assert str(shared) in choice.note and "others may write" in choice.note
    assert settings(choice) == {"jax_enable_compilation_cache": False}


def test_a_file_is_no_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    choice = locate(str(f), {})
    assert choice.directory is None and f"cannot make {f}" in choice.note


def test_a_directory_of_ours_is_capped_and_keeps_every_program(tmp_path):
    assert settings(Choice(str(tmp_path))) == {
        "jax_enable_compilation_cache": True,
        "jax_compilation_cache_dir": str(tmp_path),
        "jax_compilation_cache_max_size": MAX_BYTES,
        "jax_persistent_cache_min_compile_time_secs": 0.0,
        "jax_persistent_cache_min_entry_size_bytes": 0,
    }


def test_set_before_jax_is_imported(tmp_path):
    """Without JAX imported, ``configure`` sets the variables JAX reads when it is imported
    (and imports no JAX itself)."""
    code = (
        "import sys\n"
        "from kernel_contracts.verify.common import compile_cache as c\n"
        f"c.configure(c.locate({str(tmp_path)!r}, {{}}))\n"
        "assert 'jax' not in sys.modules\n"
        "import jax\n"
        "print(jax.config.jax_compilation_cache_dir, jax.config.jax_compilation_cache_max_size,"
        " jax.config.jax_persistent_cache_min_compile_time_secs)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [str(tmp_path), str(MAX_BYTES), "0.0"]


def test_configure_leaves_a_kept_cache_alone():
    env: dict[str, str] = {}
    compile_cache.configure(Choice(None, keep=True), env)
    assert env == {}


def _small_contract(tmp_path: Path) -> Path:
    text = EXAMPLE.read_text(encoding="utf-8")
    text = re.sub(r"runtime:\n(  .*\n|    .*\n)+\n", "", text)  # one setting: a quick run
    text = text.replace("prompts: 16, max_new_tokens: 32", "prompts: 2, max_new_tokens: 4")
    assert "runtime:" not in text and "prompts: 2" in text
    path = tmp_path / "small.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _verify(contract: Path, report: Path, *cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_") and k != ENV}
    env["KERNEL_CONTRACTS_CACHE"] = "off"  # the derivation cache: every run derives afresh
    subprocess.run(
        [sys.executable, "-m", "verify", str(contract), "--json", str(report), "--quiet", *cache],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return _without_times(json.loads(report.read_text(encoding="utf-8")))


def _without_times(data):
    """A report less what the clock decides: ``timing`` and every ``time_ms``."""
    if isinstance(data, dict):
        return {k: _without_times(v) for k, v in data.items() if k not in ("timing", "time_ms")}
    if isinstance(data, list):
        return [_without_times(v) for v in data]
    return data


@pytest.mark.slow  # three runs of python -m verify that emulate (about 15 s each on 2 cores)
def test_a_cache_changes_no_bit_of_the_report(tmp_path):
    contract, cache = _small_contract(tmp_path), tmp_path / "jax"
    cold = _verify(contract, tmp_path / "cold.json", "--jax-cache", str(cache))
    entries = sorted(p.name for p in cache.iterdir())
    assert entries  # the cold run filled it
    warm = _verify(contract, tmp_path / "warm.json", "--jax-cache", str(cache))
    assert sorted(p.name for p in cache.iterdir()) == entries  # the warm run compiled nothing
    off = _verify(contract, tmp_path / "off.json", "--jax-cache", "off")
    assert cold["evidence"] == warm["evidence"] == off["evidence"]
    assert cold == warm == off
