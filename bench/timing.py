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
