"""The derivation cache: what a proofs run derived, kept on disk for the next run of the same
contract with the same code.

An entry holds derivations and their texts (statements, bound forms, rational intervals, the
SMT-LIB2 text of every deciding query), never a verdict: a run that finds an entry still has z3
decide every query in that run (``verify.proving.replay``). An entry is found by a key over
everything its content depends on:

- the contract file's bytes (sha256) and its canonical form, and the solver budget (z3's and
  cvc5's resource units; the wall-clock hang guard decides no verdict, so it is left out);
- the bytes of every Python source file of the packages that derive it (``contracts``,
  ``bounds``, ``verify``), with their names;
- the interpreter (version, build, implementation, platform) and the installed versions of the
  libraries the derivation and the solver rest on (sympy, mpmath, numpy, gmpy2, z3, cvc5) and of
  this toolkit.

Where: ``KERNEL_CONTRACTS_CACHE`` names the directory, or is ``off``; unset, it is
``$XDG_CACHE_HOME/kernel-contracts`` (``~/.cache/kernel-contracts``). A directory that belongs
to another user or that others may write to is not used. The entries are as trusted as the
installed code: whoever can write them can make a run prove what its code would not.

Reading never fails a run: a missing, partial, corrupt, foreign or unreadable entry is a miss.
Writing is atomic (a temporary file in the directory, then a rename), so concurrent writers
leave one whole entry. Only a ``python -m verify`` process writes (``writer_start``): another
process (a test, a notebook, a script) may have imported the code before its files changed, or
patched it in memory, so it reads the cache but never writes it; and a write is skipped when a
source file changed while the run used it or since the process started.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ENV", "FORMAT", "Cache", "Key", "key", "load", "locate", "store", "writer_start"]

ENV = "KERNEL_CONTRACTS_CACHE"
FORMAT = "kernel-contracts/verify-cache/1"
# the packages whose sources key an entry, by their installed names
PACKAGES = ("kernel_contracts.contracts", "kernel_contracts.bounds", "kernel_contracts.verify")
# the installed distributions an entry rests on (their .dist-info names carry the versions) and
# the modules they install (whose files are stamped too)
DISTRIBUTIONS = ("sympy", "mpmath", "numpy", "gmpy2", "z3_solver", "cvc5", "kernel_contracts")
# the module names `python -m verify` runs as: the folder verify/ from the repository root, the
# installed launcher module, and the package itself
ENTRIES = ("verify.__main__", "verify", "kernel_contracts.verify.__main__")
MODULES = ("sympy", "mpmath", "numpy", "gmpy2", "z3", "cvc5")
MAX_ENTRIES = 256  # beyond this many entries a write removes the oldest
MAX_BYTES = 64 << 20  # a larger file is no entry of ours
_MARGIN_S = 2.0  # slack on the process's start time (its clock has 10 ms ticks)


@dataclass(frozen=True)
class Cache:
    """A cache directory (it may not exist yet). ``started``: the time (seconds since the
    epoch) from which this process runs the code its files hold, or ``None``: it never writes."""

    directory: pathlib.Path
    started: float | None = None


@dataclass(frozen=True)
class Key:
    """An entry's name (``digest``), what it was computed from, and the source files' stamps
    (path, size, mtime in ns) when it was."""

    digest: str
    material: Mapping[str, object]
    stamps: tuple[tuple[str, int, int], ...]


def locate(environ: Mapping[str, str] | None = None, *, started: float | None = None):
    """The cache named by the environment (module docstring), or ``None`` when it is off;
    ``started`` as in ``Cache`` (``writer_start``'s for a command-line run)."""
    env = os.environ if environ is None else environ
    named = env.get(ENV, "")
    if named.strip().lower() == "off":
        return None
    if named:
        return Cache(pathlib.Path(os.path.abspath(os.path.expanduser(named))), started)
    base = env.get("XDG_CACHE_HOME", "")
    if not base or not os.path.isabs(base):
        home = os.path.expanduser("~")  # unchanged where no home is known
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return Cache(pathlib.Path(base) / "kernel-contracts", started)


def _package_files(name: str) -> list[pathlib.Path]:
    from importlib.util import find_spec

    spec = find_spec(name)
    roots = list(spec.submodule_search_locations or ()) if spec else []
    if len(roots) != 1:
        raise LookupError(f"cannot locate the sources of package {name!r}")
    root = pathlib.Path(roots[0])
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [pathlib.Path(folder, n) for n in sorted(names) if n.endswith(".py")]
    return files


def _sources() -> tuple[str, tuple[tuple[str, int, int], ...]]:
    """The sha256 over the packages' source files (names and bytes), and their stamps."""
    h = hashlib.sha256()
    stamps = []
    for name in PACKAGES:
        files = _package_files(name)
        root = files[0].parent if files else None
        for path in files:
            st = path.stat()
            data = path.read_bytes()
            rel = f"{name}/{path.relative_to(root).as_posix()}"
            h.update(f"{rel}\0{len(data)}\0".encode())
            h.update(data)
            stamps.append((str(path), st.st_size, st.st_mtime_ns))
    return h.hexdigest(), tuple(stamps)


def _installed() -> dict[str, list]:
    """The installed versions, cheaply (no package metadata is parsed): every ``.dist-info``
    directory of ``DISTRIBUTIONS`` on ``sys.path`` (its name holds the version), and the path,
    size and mtime of each module of ``MODULES`` as the import system finds it."""
    from importlib.util import find_spec

    wanted = set(DISTRIBUTIONS)
    dists = []
    for entry in dict.fromkeys(sys.path):
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist = name.split("-", 1)[0].lower().replace("-", "_").replace(".", "_")
                if dist in wanted:
                    dists.append(os.path.join(os.path.abspath(entry or "."), name))
    modules = []
    for name in MODULES:
        spec = find_spec(name)
        origin = spec.origin if spec else None
        st = os.stat(origin) if origin and os.path.isfile(origin) else None
        modules.append([name, origin, st and st.st_size, st and st.st_mtime_ns])
    return {"distributions": sorted(dists), "modules": modules}


def key(contract, *, budget) -> Key:
    """The key of ``contract``'s entry for a run with ``budget`` (a
    ``verify.proving.solve.budget.Budget``)."""
    sources, stamps = _sources()
    canonical = contract.source.canonical.encode("utf-8")
    material = {
        "format": FORMAT,
        "contract_sha256": contract.source.sha256,
        "canonical_sha256": hashlib.sha256(canonical).hexdigest(),
        "solver_budget": {"z3_rlimit": budget.rlimit, "cvc5_rlimit_per": budget.cvc5_rlimit},
        "sources_sha256": sources,
        "python": [sys.version, sys.implementation.cache_tag, sys.platform, sys.byteorder],
        "installed": _installed(),
    }
    text = json.dumps(material, sort_keys=True, ensure_ascii=True)
    return Key(hashlib.sha256(text.encode("ascii")).hexdigest(), material, stamps)


def _usable(directory: pathlib.Path) -> bool:
    """Whether ``directory`` is ours alone: a directory owned by this user that no one else
    may write to (where ownership has a meaning)."""
    try:
        st = os.stat(directory)
    except OSError:
        return False
    if not os.path.isdir(directory):
        return False
    return not hasattr(os, "getuid") or (st.st_uid == os.getuid() and not st.st_mode & 0o022)


def _entry_path(cache: Cache, k: Key) -> pathlib.Path:
    return cache.directory / f"{k.digest}.json"


def load(cache: Cache, k: Key) -> Mapping[str, object] | None:
    """The payload stored under ``k``, or ``None`` (any problem at all is a miss)."""
    try:
        if not _usable(cache.directory):
            return None
        path = _entry_path(cache, k)
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            return None
        digest, _, body = raw.partition(b"\n")
        if hashlib.sha256(body).hexdigest().encode("ascii") != digest:
            return None
        entry = json.loads(body.decode("utf-8"))
        if not isinstance(entry, dict) or entry.get("format") != FORMAT:
            return None
        if entry.get("key") != json.loads(json.dumps(k.material)):
            return None
        payload = entry.get("payload")
        return payload if isinstance(payload, dict) else None
    except Exception:  # unreadable, truncated, not UTF-8, not JSON: a miss
        return None


def writer_start(main_began: float) -> float | None:
    """For a ``python -m verify`` process, the time it started (where the system says; else
    ``main_began``, when its ``main`` began, less the margin): its code is its files' code if
    none changed since. ``None`` for any other process: it never writes."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(spec, "name", None) not in ENTRIES:
        return None
    started = process_start()
    return main_began if started is None else min(started, main_began)


def process_start() -> float | None:
    """When this process started (seconds since the epoch), where the system says; else
    ``None``."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        ticks = os.sysconf("SC_CLK_TCK")
        started_ago = uptime - int(fields[19]) / ticks  # field 22 of stat: start time in ticks
        return time.time() - started_ago
    except (OSError, ValueError, IndexError):
        return None


def _code_is_current(k: Key, started: float | None) -> bool:
    """Whether the code this process runs is the code ``k`` hashed: no source file changed
    since the key was made, and none since the process started (a module imported before the
    change would differ from its file)."""
    if started is None:
        return False
    try:
        sources, stamps = _sources()
    except (OSError, LookupError):
        return False
    if sources != k.material["sources_sha256"] or stamps != k.stamps:
        return False
    return all(mtime_ns / 1e9 < started - _MARGIN_S for _, _, mtime_ns in stamps)


def store(cache: Cache, k: Key, payload: Mapping[str, object]) -> bool:
    """Write ``payload`` under ``k``, atomically; ``False`` (and nothing written) when this
    process does not write (``cache.started`` is ``None``), the code may have changed under the
    run (``_code_is_current``) or the directory is unusable."""
    if not _code_is_current(k, cache.started):
        return False
    body = json.dumps({"format": FORMAT, "key": k.material, "payload": payload}, sort_keys=True)
    data = body.encode("utf-8")
    data = hashlib.sha256(data).hexdigest().encode("ascii") + b"\n" + data
    tmp = None
    try:
        cache.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _usable(cache.directory):
            return False
        import tempfile

        fd, tmp = tempfile.mkstemp(dir=cache.directory, prefix=".tmp-", suffix=".json")
        os.close(fd)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, _entry_path(cache, k))
        tmp = None
        _prune(cache)
        return True
    except Exception:  # a full disk or a read-only directory costs the next run time, no more
        return False
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _prune(cache: Cache) -> None:
    """Keep the newest ``MAX_ENTRIES`` entries (and no temporary file older than an hour)."""
    entries, now = [], time.time()
    for e in os.scandir(cache.directory):
        try:
            mtime = e.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if e.name.startswith(".tmp-") and now - mtime > 3600:
            with contextlib.suppress(OSError):
                os.unlink(e.path)
        elif e.name.endswith(".json") and not e.name.startswith("."):
            entries.append((mtime, e.path))
    for _, path in sorted(entries)[: max(0, len(entries) - MAX_ENTRIES)]:
        with contextlib.suppress(OSError):
            os.unlink(path)
