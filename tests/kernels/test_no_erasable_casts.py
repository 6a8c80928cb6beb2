"""No emulation entry point lowers to a float conversion that a compiler may erase.

XLA's GPU compiler collapses chains of float converts (``SimplifyFPConversions``), so a rounding
written as ``x.astype(narrow).astype(jnp.float32)`` does nothing there. Each entry point below
is lowered to StableHLO on the CPU (lowering, not running: small shapes, a few seconds) and
linted with :func:`kernels.numerics.castlint.erasable_casts`. The first tests show that the lint
finds such chains, also when a move, a call, a loop or a branch separates the two converts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from kernel_contracts.kernels.numerics.castlint import erasable_casts
from tests.support.emulation_programs import every_program


def lint(fn, *args, x64=False):
    """The chains in ``fn``'s program. The entry points enable 64-bit types where they need
    them, so they are lowered as callers run them: without ``x64``."""
    with jax.enable_x64(x64):
        text = jax.jit(fn).lower(*args).as_text()
    return erasable_casts(text)


def assert_clean(fn, *args):
    chains = lint(fn, *args)
    assert chains == (), "\n".join(str(c) for c in chains[:5]) + f"\n({len(chains)} in all)"


# ---------------------------------------------------------------------------------------------
# the lint finds what it should


def _bf16_round_trip(x):
    return x.astype(jnp.bfloat16).astype(jnp.float32)


@pytest.mark.parametrize(
    "fn, types",
    [
        (_bf16_round_trip, ("f32", "bf16", "f32")),
        (lambda x: x.astype(jnp.float8_e4m3fn).astype(jnp.float32), ("f32", "f8E4M3FN", "f32")),
        (  # through moves: a reshape, a transpose and a select
            lambda x: jnp.where(x > 0, x.astype(jnp.float16).T.reshape(-1), 0).astype(jnp.float32),
            ("f32", "f16", "f32"),
        ),
        (  # through a call: the narrowing in a nested jit, the widening in the caller
            lambda x: jax.jit(lambda y: y.astype(jnp.bfloat16))(x).astype(jnp.float32),
            ("f32", "bf16", "f32"),
        ),
        (  # two roundings collapse into one: f64 -> f32 -> bf16 becomes f64 -> bf16
            lambda x: x.astype(jnp.float64).sum().astype(jnp.float32).astype(jnp.bfloat16),
            ("f64", "f32", "bf16"),
        ),
        (  # through a while loop's carry
            lambda x: lax.fori_loop(
                0, 3, lambda i, c: c.astype(jnp.bfloat16).astype(jnp.float32) + 1.0, x
            ),
            ("f32", "bf16", "f32"),
        ),
        (  # out of a branch of lax.cond
            lambda x: lax.cond(
                x[0] > 0, lambda y: y.astype(jnp.bfloat16), lambda y: -y.astype(jnp.bfloat16), x
            ).astype(jnp.float32),
            ("f32", "bf16", "f32"),
        ),
    ],
)
def test_the_lint_finds_erasable_chains(fn, types):
    chains = lint(fn, jnp.ones((3,), jnp.float32), x64=True)
    assert chains, "the lint missed a chain"
    assert {c.types for c in chains} == {types}


def test_the_lint_leaves_exact_conversions_alone():
    def fn(x, h):
        wide = x.astype(jnp.bfloat16).astype(jnp.float32)  # the one chain
        up = h.astype(jnp.float32).astype(jnp.float64)  # widening only
        bits = lax.bitcast_convert_type(x, jnp.int32)
        return wide, up, bits.astype(jnp.float32), x.astype(jnp.int32).astype(jnp.float32)

    chains = lint(fn, jnp.ones((3,), jnp.float32), jnp.ones((3,), jnp.float16), x64=True)
    assert [c.types for c in chains] == [("f32", "bf16", "f32")]


def test_sibling_regions_reuse_names_without_confusing_the_lint():
    # the printed names of the two branches repeat; only the second branch narrows
    def fn(x):
        y = lax.cond(
            x[0] > 0, lambda y: y * 2.0, lambda y: y.astype(jnp.bfloat16).astype(y.dtype), x
        )
        return y.astype(jnp.float64)

    chains = lint(fn, jnp.ones((3,), jnp.float32), x64=True)
    assert [c.types for c in chains] == [("f32", "bf16", "f32")]


# ---------------------------------------------------------------------------------------------
# every emulation entry point is clean


@pytest.mark.parametrize("program", every_program(), ids=lambda p: p.id)
def test_the_emulation_lowers_without_erasable_casts(program):
    assert_clean(program.fn, *program.args)
