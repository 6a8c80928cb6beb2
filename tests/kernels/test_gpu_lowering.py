"""The GPU kernels compile for CUDA as far as a machine without a GPU can take them.

Interpret mode (``interpret=True``, how every other Pallas test runs) evaluates a kernel body as
ordinary JAX, so it accepts operations that the Pallas-to-Triton lowering has no rule for, or
constants a kernel captures. Lowering with ``lowering_platforms=("cuda",)`` runs that Triton
lowering on the CPU: each kernel is lowered here as a GPU would compile it (``interpret=False``,
Triton compiler parameters), for every variant a plan allows, on aligned and ragged shapes, with
split-K, and for the fused measurement under several block settings. The lowered programs must
hold one Triton call per kernel launch and pass both emulation lints, so the XLA code around
each kernel is checked in its GPU form too. Nothing here runs a kernel; running them needs a GPU
(``bench/gpu_check.py``).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from kernel_contracts.contracts import preset
from kernel_contracts.kernels._matmul import make_plan, matmul
from kernel_contracts.kernels._matmul.pallas_gpu import (
    allowed_variants,
    reduce_quantized_pallas_gpu,
)
from kernel_contracts.kernels.measurement.measure_pallas import GPU_OPTIONS, measure_rows
from kernel_contracts.kernels.numerics.castlint import erasable_casts
from kernel_contracts.kernels.numerics.formats import cast_output
from kernel_contracts.kernels.numerics.portlint import backend_dependent
from kernel_contracts.kernels.numerics.scaling import quantize_rows
from tests.kernels.test_matmul_pallas_gpu import PRESETS

SHAPES = {"aligned": ((256, 1024, 256), 1), "ragged": ((200, 300, 130), 3)}
TRITON_CALL = "__gpu$xla.gpu.triton"
_LAUNCH = re.compile(
    r"grid_x = (\d+).*?grid_y = (\d+).*?name = \"([^\"]*)\".*?num_stages = (\d+).*?"
    r"num_warps = (\d+)",
    re.S,
)


def cuda_text(fn, *shapes) -> str:
    """``fn``'s program lowered for CUDA, as StableHLO text."""
    lowered = jax.jit(fn).trace(*shapes).lower(lowering_platforms=("cuda",))
    return lowered.as_text()


def _doubles(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def _cuda_lowering_missing() -> str | None:
    """Why this JAX cannot lower a trivial Triton kernel for CUDA here, or ``None``."""
    call = pl.pallas_call(
        _doubles,
        out_shape=jax.ShapeDtypeStruct((128,), jnp.float32),
        compiler_params=pl_triton.CompilerParams(num_warps=4),
    )
    try:
        text = cuda_text(call, jax.ShapeDtypeStruct((128,), jnp.float32))
    except Exception as err:  # any failure: the platform is not available here
        return f"this JAX cannot lower a Pallas kernel for CUDA ({type(err).__name__}: {err})"
    return None if TRITON_CALL in text else "a lowered Pallas kernel holds no Triton call"


pytestmark = pytest.mark.skipif(
    (missing := _cuda_lowering_missing()) is not None, reason=str(missing)
)


def launches(text: str) -> list[tuple[str, tuple[int, int], int, int]]:
    """Each Triton call's kernel name, grid (x, y), warps and stages, in program order."""
    found = [
        (name, (int(gx), int(gy)), int(warps), int(stages))
        for gx, gy, name, stages, warps in _LAUNCH.findall(text)
    ]
    assert len(found) == text.count(TRITON_CALL)
    return found


def assert_portable(text: str) -> None:
    chains, findings = erasable_casts(text), backend_dependent(text)
    assert chains == (), "\n".join(str(c) for c in chains[:5])
    assert findings == (), "\n".join(str(f) for f in findings[:5])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", PRESETS)
def test_every_variant_of_the_gpu_matmul_lowers_to_triton(name, shape):
    (m, k, n), splits = SHAPES[shape]
    spec = preset(name).matmul
    plan = make_plan(spec, k, splits)
    variants = allowed_variants(plan)
    assert "fma64" in variants and (name != "h100-fp8" or "dot" in variants)
    for variant in variants:

        def f(x, w, variant=variant):
            xq, sx = quantize_rows(x, plan.inputs, plan.scaling)
            wq, sw = quantize_rows(w.T, plan.inputs, plan.scaling)
            total = reduce_quantized_pallas_gpu(
                xq, sx, wq, sw, plan, variant=variant, interpret=False
            )
            return cast_output(total, plan.output)

        with jax.enable_x64(True):
            text = cuda_text(
                f,
                jax.ShapeDtypeStruct((m, k), jnp.float32),
                jax.ShapeDtypeStruct((k, n), jnp.float32),
            )
        # fma32 out of range (bfloat16) sits behind its data check, with fma64 as the fallback
        checked = variant == "fma32" and not plan.in_range
        want = {"fma32", "fma64"} if checked else {variant}
        found = launches(text)
        assert sorted(kernel for kernel, *_ in found) == [
            f"emulated_matmul_{v}" for v in sorted(want)
        ]
        assert all(gx * gy > 1 for _, (gx, gy), _, _ in found)  # tiled, not one block
        assert_portable(text)


@pytest.mark.parametrize("name", PRESETS)
def test_matmul_entry_point_lowers_to_triton(name):
    """``matmul(impl="pallas_gpu")`` as a caller runs it: the variant it chooses (bfloat16:
    both of its variants, behind the data check)."""
    spec = preset(name).matmul
    x = jax.ShapeDtypeStruct((64, 512), jnp.float32)
    w = jax.ShapeDtypeStruct((512, 96), jnp.float32)
    text = cuda_text(lambda a, b: matmul(a, b, spec, impl="pallas_gpu", interpret=False), x, w)
    kernels = sorted(kernel for kernel, *_ in launches(text))
    if name == "bf16":
        assert kernels == ["emulated_matmul_fma32", "emulated_matmul_fma64"]
    else:
        assert len(kernels) == 1
    assert_portable(text)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"block_rows": 4, "chunk": 512, "programs": 2, "num_warps": 4, "num_stages": 3},
        {"block_rows": 2, "chunk": 4096},
    ],
    ids=["defaults", "blocked", "wide-chunk"],
)
@pytest.mark.parametrize("vocab", [1000, 4096])
def test_fused_measurement_lowers_to_triton(options, vocab):
    z = jax.ShapeDtypeStruct((24, vocab), jnp.float32)
    y = jax.ShapeDtypeStruct((24,), jnp.int32)
    text = cuda_text(
        lambda a, b, c: measure_rows(a, b, c, 1.0, interpret=False, **options), z, z, y
    )
    chosen = {**GPU_OPTIONS, **options}
    block_rows = chosen["block_rows"]
    programs = 24 // block_rows if chosen["programs"] is None else chosen["programs"]
    assert launches(text) == [("measure", (programs, 1), chosen["num_warps"], chosen["num_stages"])]


def test_a_kernel_triton_cannot_lower_fails_here():
    """The check has teeth: an operation without a Triton rule, which interpret mode runs."""

    def sorts(x_ref, o_ref):
        o_ref[...] = jnp.sort(x_ref[...])

    shape = jax.ShapeDtypeStruct((128,), jnp.float32)
    call = pl.pallas_call(
        sorts, out_shape=shape, compiler_params=pl_triton.CompilerParams(num_warps=4)
    )
    x = jnp.arange(128, 0, -1, dtype=jnp.float32)
    interpreted = pl.pallas_call(sorts, out_shape=shape, interpret=True)
    assert jnp.array_equal(interpreted(x), jnp.sort(x))
    with pytest.raises(NotImplementedError, match="sort"):
        cuda_text(call, shape)
