"""Emulation evidence compiled once: a contract's emulation sweep cold and warm.

    python bench/bench_emulate_compile.py [--contract contracts/examples/fp8-emulated.yaml]
        [--sweeps before,own,shared] [--no-verify] [--before CHECKOUT]

Every measurement runs in a fresh Python process, one after another in this run, so load
from other processes hits all alike:

- ``sweep``: the contract's emulation sweep alone (``evidence.emulate.sweep`` and
  ``emulate_contract`` per setting, as ``python -m verify`` runs it), five ways:
  ``one call a batch, no cache`` (each setting in its own shape, one call for each batch, no
  persistent cache: the path before batches shared a call and before the cache: the
  baseline), ``own shapes`` (what ``python -m verify`` does: the batches of a setting
  ``CALL_ROWS`` rows to a call) with an empty and then a filled persistent compilation cache,
  and ``shared`` (``shared=True``: the settings padded to one program per kernel) cold and
  warm (``--sweeps`` picks some of ``before``, ``own`` and ``shared``).
  Each prints its wall time, the programs traced (``kernels.model.decode.TRACES``), the XLA
  compilations and the persistent-cache hits (JAX's monitoring events), and a digest of the
  token tables: they must agree bit for bit;
- ``verify`` (``--no-verify`` leaves it out): the whole command, ``python -m verify CONTRACT
  --quiet``, with ``--jax-cache off``, then cold and warm on a new cache directory (the
  derivation cache off, so the proofs are derived afresh each time); the three reports must be
  the same apart from their times (``timing``, every ``time_ms``);
- ``--before CHECKOUT``: first the same command in another checkout (an earlier commit, with
  its own ``.venv``), as it ran there: the baseline of the verify rows, its clauses' measured
  values compared with this tree's.

Each prints wall and CPU seconds (user + system, all threads: less sensitive than the wall time
to load from other processes); ratios are against ``one call a batch, no cache`` and ``verify,
--jax-cache off`` of the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "contracts" / "examples" / "fp8-emulated.yaml"


def _child(contract: str, shared: bool, grouped: bool) -> None:
    """One sweep in this process, the compilation cache set as ``python -m verify`` sets it
    (``grouped`` false: one call for each batch, as before batches shared a call); prints one
    JSON line."""
    from kernel_contracts.verify.common import compile_cache

    compile_cache.configure(compile_cache.locate())
    import jax
    import numpy as np

    from kernel_contracts import contracts
    from kernel_contracts.evidence import emulate as emulation
    from kernel_contracts.evidence.emulate import emulate_contract, sweep

    if not grouped:
        emulation.CALL_ROWS = 1  # every call serves one batch
    from kernel_contracts.kernels.model.decode import TRACES

    events = {"compiles": 0, "hits": 0}

    def on_duration(name, _secs, **_):
        if name == "/jax/core/compile/backend_compile_duration":
            events["compiles"] += 1

    def on_event(name, **_):
        if name == "/jax/compilation_cache/cache_hits":
            events["hits"] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
    start = time.perf_counter()
    c = contracts.load(contract)
    h = hashlib.sha256()
    for b, length in sweep(c):
        table = emulate_contract(c, batch_size=b, sequence_length=length, shared=shared)
        for name in sorted(table):
            h.update(name.encode() + np.ascontiguousarray(table[name]).tobytes())
    wall = time.perf_counter() - start
    out = {"wall_s": wall, "traces": dict(TRACES), **events, "digest": h.hexdigest()[:16]}
    print(json.dumps(out))


def _env(cache: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env["KERNEL_CONTRACTS_CACHE"] = "off"  # the derivation cache
    env["KERNEL_CONTRACTS_JAX_CACHE"] = cache or "off"
    return env


def _cpu() -> float:
    """CPU seconds (user + system, every thread) of the finished child processes so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _sweep(contract: str, shared: bool, grouped: bool, cache: str | None) -> dict:
    """A child process's sweep; with a cache, set as ``python -m verify`` sets it."""
    command = [sys.executable, __file__, "--child", contract, "--shared", str(shared)]
    command += ["--grouped", str(grouped)]
    cpu = _cpu()
    out = subprocess.run(command, cwd=ROOT, env=_env(cache), capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr)
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "cpu_s": _cpu() - cpu}


def _verify(
    contract: str, cache: str | None, report: Path, checkout: Path | None = None
) -> tuple[float, float, dict]:
    """Wall and CPU seconds of ``python -m verify``, and its JSON report less its times; with
    ``checkout``, run there with its own interpreter as that commit ran it (no cache option)."""
    start, cpu = time.perf_counter(), _cpu()
    python, cwd, option = sys.executable, ROOT, ["--jax-cache", cache or "off"]
    if checkout is not None:
        python, cwd, option = str(checkout / ".venv" / "bin" / "python"), checkout, []
        contract = str(Path(contract).resolve().relative_to(ROOT))
    subprocess.run(
        [python, "-m", "verify", contract, "--quiet", *option, "--json", str(report)], cwd=cwd,
        env=_env(cache), capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - start
    return wall, _cpu() - cpu, _without_times(json.loads(report.read_text(encoding="utf-8")))


def _measured(report: dict) -> list:
    """Each clause's id, verdict and measured values: what two versions must agree on."""
    return [
        (c.get("id"), c.get("slice"), c.get("status"), c.get("value"), c.get("samples"))
        for c in report.get("clauses", [])
    ]


def _without_times(data):
    """A report less what the clock decides: ``timing`` and every ``time_ms``."""
    if isinstance(data, dict):
        return {k: _without_times(v) for k, v in data.items() if k not in ("timing", "time_ms")}
    if isinstance(data, list):
        return [_without_times(v) for v in data]
    return data


SWEEPS = (  # label, shared, grouped, which cache (None: none)
    ("sweep, one call a batch, no cache", False, False, None),
    ("sweep, own shapes, cold cache", False, True, "own"),
    ("sweep, own shapes, warm cache", False, True, "own"),
    ("sweep, shared, cold cache", True, True, "shared"),
    ("sweep, shared, warm cache", True, True, "shared"),
)
BASE = SWEEPS[0][0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--contract", default=str(EXAMPLE))
    p.add_argument("--reports", help="keep the three verify reports in this directory")
    p.add_argument(
        "--sweeps",
        default="before,own,shared",
        help="which sweeps to run, of before (the baseline), own and shared (default: all)",
    )
    p.add_argument("--no-verify", action="store_true", help="leave out the verify runs")
    p.add_argument("--before", type=Path, help="a checkout (with .venv) for the baseline verify")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--shared", help=argparse.SUPPRESS)
    p.add_argument("--grouped", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child(args.child, args.shared == "True", args.grouped == "True")
        return
    print(f"{Path(args.contract).name}; load average {os.getloadavg()[0]:.2f}")
    rows = []
    with (
        tempfile.TemporaryDirectory() as own,
        tempfile.TemporaryDirectory() as shared_cache,
        tempfile.TemporaryDirectory() as v_cache,
    ):
        caches = {None: None, "own": own, "shared": shared_cache}
        chosen = set(args.sweeps.split(","))
        for label, shared, grouped, cache in SWEEPS:
            if (cache or "before") not in chosen:
                continue
            r = _sweep(args.contract, shared, grouped, caches[cache])
            rows.append((label, r["wall_s"], r["cpu_s"]))
            print(
                f"{label:36s} {r['wall_s']:7.1f} s wall {r['cpu_s']:7.1f} s CPU  "
                f"traced {r['traces']}  compiles {r['compiles']}  cache hits {r['hits']}  "
                f"tables {r['digest']}",
                flush=True,
            )
        reports, before = [], None
        if args.before and not args.no_verify:
            report = Path(args.reports or v_cache) / "report-before.json"
            wall, cpu, before = _verify(args.contract, None, report, args.before)
            rows.append(("verify, before", wall, cpu))
            print(f"{'verify, before':36s} {wall:7.1f} s wall {cpu:7.1f} s CPU", flush=True)
        runs = (
            ("verify, --jax-cache off", None),
            ("verify, cold cache", v_cache),
            ("verify, warm cache", v_cache),
        )
        for i, (label, cache) in enumerate(() if args.no_verify else runs):
            report = Path(args.reports or v_cache) / f"report-{i}.json"
            wall, cpu, data = _verify(args.contract, cache, report)
            reports.append(data)
            rows.append((label, wall, cpu))
            print(f"{label:36s} {wall:7.1f} s wall {cpu:7.1f} s CPU", flush=True)
        if reports:
            same = reports[0] == reports[1] == reports[2]
            print(f"the three reports are the same apart from their timing: {same}")
        if reports and before is not None:
            agree = _measured(before) == _measured(reports[0])
            print(f"the clauses' measured values agree with the baseline's: {agree}")
    base = {label: (wall, cpu) for label, wall, cpu in rows}
    print("\n| run | wall s | ratio | CPU s | ratio |\n|---|---:|---:|---:|---:|")
    for label, wall, cpu in rows:
        first = "verify, before" if args.before else "verify, --jax-cache off"
        w, c = base.get(BASE if "sweep" in label else first, (None, None))
        ratios = f"| – | {cpu:.1f} | – |"
        if w is not None:
            ratios = f"| {wall / w:.2f} | {cpu:.1f} | {cpu / c:.2f} |"
        print(f"| {label} | {wall:.1f} {ratios}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
