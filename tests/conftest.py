"""Test-wide settings: strict JAX dtype promotion, the hypothesis profiles and the CLI runner.

Every test and fixture runs under strict dtype promotion (``jax_numpy_dtype_promotion`` is
``"strict"`` for the session: a mixed-dtype operation must cast explicitly) except the tests
marked ``standard_promotion``: they train through optax, whose Adam raises a Python float to
an int32 step count.

Hypothesis profiles: ``quick`` (the default) and ``thorough``, ten times the examples, chosen by
``KERNEL_CONTRACTS_HYPOTHESIS=thorough``. A test asks for its share with
``strategies.examples(n)``: ``n`` examples under ``quick``.

Rank promotion is strict too (``jax_numpy_rank_promotion`` is ``"raise"``): an operation
between arrays of different ranks must broadcast explicitly (a scalar may still meet any array).

Shape checks: every module of the five packages that annotates array shapes (imports
``jaxtyping``) is imported through jaxtyping's import hook with beartype, so each call of its
functions and each construction of its dataclasses checks the annotated dtypes and shapes, and
that the named dimensions agree across the arguments and the result of one call.
``KERNEL_CONTRACTS_SHAPE_CHECKS=0`` turns the checks off (for timing a test without them).

Compilation cache: the test processes (pytest-xdist's workers, the notebooks' kernels and any
subprocess they start) share one JAX persistent compilation cache in a temporary directory made
for the run and removed after it, so a program that several tests build (the same HLO from a new
``jit``, in the same process or another) is compiled once per run. Every run starts empty. A
``JAX_COMPILATION_CACHE_DIR`` already set is used as it is, with the user's settings, and kept.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import jax
import jaxtyping
import pytest
from hypothesis import settings
from jaxtyping import install_import_hook

from tests.support.shape_checks import SHAPE_CHECKS, shape_annotated_modules

if SHAPE_CHECKS:
    # before any test (or the CLI runner below) imports the packages
    install_import_hook(shape_annotated_modules(), "tests.support.shape_checks.typechecker")

from tests.support.cli_runner import run_cli

settings.register_profile("quick", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("KERNEL_CONTRACTS_HYPOTHESIS", "quick"))


@pytest.fixture
def cli():
    """``cli(*argv, cwd=None)``: exit code, stdout and stderr of ``python -m verify``."""
    return run_cli


# set for the whole session, not per test: a module-scoped fixture then compiles under the same
# settings as its tests (the settings are part of every jit cache key, so a fixture run outside
# them compiled each of its programs twice)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

# the run's compilation cache; the first process of the run (pytest-xdist's controller) makes it
# and sets it here, and every process started after (workers, notebook kernels, subprocesses)
# inherits the variables, which JAX reads when it is imported. A cache with a maximum size takes
# a file lock for each read and write, so two workers never read an entry the other is writing.
# A cache directory the user set is left as it is, with the user's settings (no size cap that
# could evict the user's entries).
CACHE_OWNER = "KERNEL_CONTRACTS_TEST_CACHE_OWNER"
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    RUN_CACHE = {
        "jax_compilation_cache_dir": tempfile.mkdtemp(prefix="kernel-contracts-jax-"),
        "jax_persistent_cache_min_compile_time_secs": 0.1,
        "jax_compilation_cache_max_size": 16 << 30,
    }
    os.environ.update({k.upper(): str(v) for k, v in RUN_CACHE.items()})
    os.environ[CACHE_OWNER] = str(os.getpid())
    for option, value in RUN_CACHE.items():
        jax.config.update(option, value)


def pytest_unconfigure(config):
    """The process that made the run's compilation cache removes it."""
    if os.environ.get(CACHE_OWNER) == str(os.getpid()):
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


@pytest.fixture(autouse=True)
def _standard_promotion(request):
    """A test marked ``standard_promotion`` runs under JAX's default promotion rules."""
    if not request.node.get_closest_marker("standard_promotion"):
        yield
        return
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        yield


@pytest.fixture(autouse=True)
def _shape_checks(request):
    """A test marked ``no_shape_checks`` feeds a function mis-shaped or mistyped input on
    purpose, to test the function's own error: the shape checks (which would raise first) are
    off for it."""
    if not request.node.get_closest_marker("no_shape_checks"):
        yield
        return
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)


def pytest_collection_modifyitems(config, items):
    """The tests marked ``slow`` (each over 10 s, some minutes) run first, in their collected
    order: a long test that starts last keeps one process busy while the others wait (each
    process collects the same order, as pytest-xdist requires)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
