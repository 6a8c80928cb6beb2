"""Timing helpers shared by the benchmark scripts (run as ``python bench/NAME.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def best(fn: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` wall-clock runs of ``fn()``, in seconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def median_ready(f: Callable, *args, repeats: int) -> float:
    """The median wall time of ``f(*args)`` once compiled, waiting for JAX's asynchronous result."""
    import jax

    jax.block_until_ready(f(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(fns: dict, repeat: int) -> tuple[dict, dict, dict]:
    """Best wall and CPU seconds of each function, the runs interleaved so load hits all alike;
    and each function's last result."""
    wall = dict.fromkeys(fns, float("inf"))
    cpu = dict.fromkeys(fns, float("inf"))
    out = {}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            out[name] = fn()
            wall[name] = min(wall[name], time.perf_counter() - t0)
            cpu[name] = min(cpu[name], time.process_time() - c0)
    return wall, cpu, out
