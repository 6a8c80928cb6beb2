"""The suite's own guards are on: shape checks on the annotated modules (see conftest.py), and
strict dtype and rank promotion."""

from __future__ import annotations

import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

from kernel_contracts.contracts.presets import PRESETS
from kernel_contracts.kernels import matmul
from tests.support.shape_checks import SHAPE_CHECKS, shape_annotated_modules

needs_checks = pytest.mark.skipif(not SHAPE_CHECKS, reason="KERNEL_CONTRACTS_SHAPE_CHECKS=0")


def test_the_annotated_modules_are_found():
    found = shape_annotated_modules()
    for name in (
        "kernel_contracts.kernels._matmul.api",
        "kernel_contracts.kernels.model.tinylm",
        "kernel_contracts.kernels.model.hf.decoder",
        "kernel_contracts.kernels.rl.bias",
    ):
        assert name in found
    assert (
        "kernel_contracts.kernels.measurement.measure_cpu" not in found
    )  # compiled by Numba: left unwrapped


@needs_checks
def test_a_dimension_that_disagrees_across_arguments_is_refused():
    spec = PRESETS["h100-fp8"].matmul
    with pytest.raises(jaxtyping.TypeCheckError, match="matmul"):
        matmul(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32), spec)


@needs_checks
@pytest.mark.no_shape_checks
def test_the_marker_turns_the_checks_off():
    spec = PRESETS["h100-fp8"].matmul
    with pytest.raises(ValueError) as err:  # the function's own error, not the checker's
        matmul(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32), spec)
    assert not isinstance(err.value, jaxtyping.TypeCheckError)


def test_rank_and_dtype_promotion_are_strict():
    with pytest.raises(ValueError, match="rank_promotion"):
        jnp.ones((2, 3)) + jnp.ones(3)
    with pytest.raises(Exception, match="promotion"):
        jnp.ones(3, jnp.float32) + jnp.ones(3, jnp.int32)
