"""No emulation entry point uses an operation whose result depends on the backend.

XLA computes transcendental functions with each backend's own approximations, compiles a
float32 division on a GPU to an instruction that is not correctly rounded, and leaves the order
of float reductions and contractions to each backend's library: a program that uses any of
them gives other bits on a GPU than on the CPU. Each entry point is lowered on the CPU and
linted with :func:`kernels.numerics.portlint.backend_dependent`; the first tests show that the lint
finds each kind, and that :func:`kernels.numerics.portlint.order_free` excuses only an order.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from kernel_contracts.kernels.numerics.portlint import backend_dependent, order_free
from tests.support.emulation_programs import every_program


def lint(fn, *args):
    return backend_dependent(jax.jit(fn).lower(*args).as_text(debug_info=True))


def kinds(fn, *args):
    return [(f.kind, f.op.split(".")[-1], f.element) for f in lint(fn, *args)]


V = jnp.ones((4,), jnp.float32)


# ---------------------------------------------------------------------------------------------
# the lint finds what it should


@pytest.mark.parametrize(
    "fn, found",
    [
        (jnp.exp, [("implementation", "exponential", "f32")]),
        (jnp.log1p, [("implementation", "log_plus_one", "f32")]),
        (jnp.tanh, [("implementation", "tanh", "f32")]),
        (lax.rsqrt, [("implementation", "rsqrt", "f32")]),
        (lax.cos, [("implementation", "cosine", "f32")]),
        (jax.scipy.special.erf, [("implementation", "erf", "f32")]),
        (lambda x: x / x[0], [("rounding", "divide", "f32")]),
        (jnp.sqrt, [("rounding", "sqrt", "f32")]),
        (lambda x: x.astype(jnp.bfloat16) / 3, [("rounding", "divide", "bf16")]),
        (jnp.sum, [("order", "reduce", "f32")]),
        (lambda x: jnp.cumsum(x), [("order", "reduce_window", "f32")]),
        (lambda x: jnp.zeros(4).at[jnp.array([0, 0, 1, 1])].add(x), [("order", "scatter", "f32")]),
        (lambda x: x @ x, [("order", "dot_general", "f32")]),
        (  # a reduction with a written-out combiner, in a nested function
            lambda x: jax.jit(lambda y: lax.reduce(y, 0.0, lambda a, b: a + 2 * b, (0,)))(x),
            [("order", "reduce", "f32")],
        ),
        (  # an order-free scope excuses the order, never the implementation
            lambda x: _scoped(lambda: jnp.exp(x).sum()),
            [("implementation", "exponential", "f32")],
        ),
        (  # inside a loop and a branch
            lambda x: lax.fori_loop(0, 2, lambda i, c: lax.cond(i > 0, jnp.tanh, jnp.abs, c), x),
            [("implementation", "tanh", "f32")],
        ),
    ],
)
def test_the_lint_finds_backend_dependent_operations(fn, found):
    assert kinds(fn, V) == found


def _scoped(thunk):
    with order_free():
        return thunk()


def test_the_lint_leaves_portable_operations_alone():
    def fn(x):
        with jax.enable_x64(True):
            d = x.astype(jnp.float64)
            exact = (d / 3.0, jnp.sqrt(d))  # binary64: correctly rounded everywhere
        bits = lax.bitcast_convert_type(x, jnp.int32)
        return (
            *exact,
            x + x * x,
            jnp.max(x),
            jnp.argmax(x),
            jnp.sum(bits),  # integers: any order gives the same sum
            jnp.where(x > 0, x, -x),
            jnp.floor(x),
            jnp.fmod(x, 3.0),  # exact in IEEE arithmetic
        )

    assert lint(fn, V) == ()


def test_an_order_free_scope_excuses_a_sum_and_a_dot():
    def fn(x):
        with order_free():
            return jnp.sum(x), x @ x

    assert lint(fn, V) == ()
    assert len(lint(lambda x: (jnp.sum(x), x @ x), V)) == 2


def test_without_locations_every_order_is_reported():
    def fn(x):
        with order_free():
            return jnp.sum(x)

    text = jax.jit(fn).lower(V).as_text()  # no debug_info: the scopes are not in the text
    assert [f.op for f in backend_dependent(text)] == ["stablehlo.reduce"]


# ---------------------------------------------------------------------------------------------
# every emulation entry point is portable


@pytest.mark.parametrize("program", every_program(), ids=lambda p: p.id)
def test_the_emulation_is_backend_independent(program):
    found = lint(program.fn, *program.args)
    assert found == (), "\n".join(str(f) for f in found[:5]) + f"\n({len(found)} in all)"
