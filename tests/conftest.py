"""Test-wide settings: strict JAX dtype promotion, the hypothesis profiles and the CLI runner.

Every test runs under ``jax.numpy_dtype_promotion("strict")`` (a mixed-dtype operation must
cast explicitly) except those marked ``standard_promotion``: they train through optax, whose
Adam raises a Python float to an int32 step count.

Hypothesis profiles: ``quick`` (the default) and ``thorough``, ten times the examples, chosen by
``KERNEL_CONTRACTS_HYPOTHESIS=thorough``. A test asks for its share with
``strategies.examples(n)``: ``n`` examples under ``quick``.
"""

from __future__ import annotations

import os
import pathlib
import sys

import jax
import pytest
from hypothesis import settings

TESTS = pathlib.Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.append(str(TESTS))  # shared helpers (strategies, cli_runner) from any sub-folder

from cli_runner import run_cli  # noqa: E402

settings.register_profile("quick", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("KERNEL_CONTRACTS_HYPOTHESIS", "quick"))


@pytest.fixture
def cli():
    """``cli(*argv, cwd=None)``: exit code, stdout and stderr of ``python -m verify``."""
    return run_cli


@pytest.fixture(autouse=True)
def _strict_dtype_promotion(request):
    if request.node.get_closest_marker("standard_promotion"):
        yield
        return
    with jax.numpy_dtype_promotion("strict"):
        yield
