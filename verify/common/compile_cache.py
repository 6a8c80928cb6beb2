"""The JAX persistent compilation cache of a command that compiles (emulation evidence, the
diagnostics): where it lives, and setting it before the first compilation.

Where, first match wins:

- ``--jax-cache DIR`` (or ``off``) on the command line;
- ``KERNEL_CONTRACTS_JAX_CACHE``: a directory, or ``off``;
- ``JAX_COMPILATION_CACHE_DIR``, JAX's own variable: a cache the user already set up is used
  as it is, with the user's settings (this module changes nothing);
- otherwise ``$XDG_CACHE_HOME/kernel-contracts/jax`` (``~/.cache/kernel-contracts/jax``).

A directory of ours is capped at ``MAX_BYTES`` (JAX evicts the least recently used entries
beyond it) and keeps every program, however quick its compilation, so a second run of a
contract compiles nothing. A compiled program is native code: a directory that belongs to
another user or that others may write to is not used (``locate`` says why). The cache changes
no bit of any result: an entry is the program the same compilation would produce, found by a
key over the program, its compiler options, the JAX and XLA versions and the device.

``configure`` sets it: through ``jax.config`` when JAX is already imported, or else through the
variables JAX reads when it is imported, so a command that never compiles never imports JAX.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

__all__ = ["ENV", "MAX_BYTES", "Choice", "configure", "locate", "settings"]

ENV = "KERNEL_CONTRACTS_JAX_CACHE"
MAX_BYTES = 2 << 30  # the size cap of a cache directory of ours
JAX_ENV = "JAX_COMPILATION_CACHE_DIR"


@dataclass(frozen=True)
class Choice:
    """What to do with JAX's cache: use ``directory`` (``None``: turn the cache off), or leave
    JAX's own settings (``keep``); ``note`` says why a named directory is not used."""

    directory: str | None
    keep: bool = False
    note: str | None = None


def _private(directory: str) -> bool:
    """Whether ``directory`` is ours alone: owned by this user, writable by no one else (where
    ownership has a meaning)."""
    try:
        st = os.stat(directory)
    except OSError:
        return False
    if not os.path.isdir(directory):
        return False
    return not hasattr(os, "getuid") or (st.st_uid == os.getuid() and not st.st_mode & 0o022)


def _default(env: Mapping[str, str]) -> str | None:
    base = env.get("XDG_CACHE_HOME", "")
    if not base or not os.path.isabs(base):
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "kernel-contracts", "jax")


def locate(option: str | None = None, environ: Mapping[str, str] | None = None) -> Choice:
    """The cache the option (``--jax-cache``) and the environment name (module docstring).
    A directory of ours is made (private to this user) if it does not exist."""
    env = os.environ if environ is None else environ
    named = option if option is not None else env.get(ENV, "")
    if named.strip().lower() == "off":
        return Choice(None)
    if not named and env.get(JAX_ENV):
        return Choice(None, keep=True)
    directory = os.path.abspath(os.path.expanduser(named)) if named else _default(env)
    if directory is None:
        return Choice(None, note="no home directory for the JAX compilation cache: it is off")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as err:
        return Choice(None, note=f"JAX compilation cache off: cannot make {directory}: {err}")
    if not _private(directory):
        return Choice(
            None,
            note=f"JAX compilation cache off: {directory} belongs to another user or others "
            "may write to it",
        )
    return Choice(directory)


def settings(choice: Choice) -> dict[str, object]:
    """The JAX options of ``choice`` (none when JAX's own settings are kept)."""
    if choice.keep:
        return {}
    if choice.directory is None:
        return {"jax_enable_compilation_cache": False}
    return {
        "jax_enable_compilation_cache": True,
        "jax_compilation_cache_dir": choice.directory,
        "jax_compilation_cache_max_size": MAX_BYTES,
        "jax_persistent_cache_min_compile_time_secs": 0.0,
        "jax_persistent_cache_min_entry_size_bytes": 0,
    }


def configure(choice: Choice, environ: MutableMapping[str, str] | None = None) -> None:
    """Set ``choice`` before the first compilation: in ``jax.config`` when JAX is imported,
    else in the environment (``environ``, default ``os.environ``) that JAX reads on import."""
    options = settings(choice)
    if "jax" in sys.modules:
        config = sys.modules["jax"].config
        for name, value in options.items():
            config.update(name, value)
        return
    env = os.environ if environ is None else environ
    for name, value in options.items():
        env[name.upper()] = str(value).lower() if isinstance(value, bool) else str(value)
