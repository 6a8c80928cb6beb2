"""The portable float32 functions of ``kernels.numerics.portable`` against NumPy float64, and their
programs against the backend lint.

Accuracy: each unary function is compared on one sweep of float32 inputs (every ``2**14``-th
bit pattern, random patterns, dense grids over the interesting ranges, the thresholds and their
neighbours, the special values) with NumPy's float64 function of the same (flushed) input.
``sin`` and ``cos`` also on their own sweep (dense grids, random angles up to ``2**24``, rotary
angles, and the float32 values nearest to multiples of ``π/2``, where the reduction cancels
most), with NaN beyond their domain ``|x| <= 2**24``.
The assertion is tighter than the contract (within 1 ulp for ``exp``, ``log`` and ``rsqrt``,
2 ulp for ``tanh`` and ``gelu_tanh``): every result lies within ``0.5 + 2**-8`` ulp of the
float64 value, so it is the correctly rounded float32 value except where the float64 value
lies within ``2**-8`` ulp of a midpoint (on these sweeps, none is off). ``divide`` is compared
bit for bit with NumPy's correctly rounded float32 division, ``ordered_sum`` and ``dot`` bit
for bit with their trees written here in NumPy. Results below ``2**-126`` are +0, and float32
subnormal inputs are read as +0 (``kernels.numerics.formats``), in the references too.

Structure: every function's lowered program is free of backend-dependent operations
(:func:`kernels.numerics.portlint.backend_dependent`: transcendentals, float32 divisions and square
roots, float reductions and contractions).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.kernels.numerics import portable
from kernel_contracts.kernels.numerics.formats import flush_np
from kernel_contracts.kernels.numerics.portlint import backend_dependent
from tests.support.bits import same_bits

TINY = 2.0**-126
CLOSE = 0.5 + 2.0**-8  # ulps from the float64 value (module docstring)


def around(*values) -> np.ndarray:
    """The float32 values and their two neighbours each."""
    v = np.float32(values)
    with np.errstate(over="ignore"):  # the largest finite value's upper neighbour is inf
        return np.concatenate([v, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, -np.inf)])


@functools.cache
def sweep() -> np.ndarray:
    strided = np.arange(0, 2**32, 2**14, dtype=np.uint64).astype(np.uint32).view(np.float32)
    rng = np.random.default_rng(7)
    random = rng.integers(0, 2**32, 2**16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    dense = [
        np.linspace(-110, 100, 2**16, dtype=np.float32),  # exp's range, tanh, gelu
        np.linspace(-13, 13, 2**16, dtype=np.float32),
        np.linspace(0.5, 2, 2**16, dtype=np.float32),  # log around 1
        np.linspace(-(2.0**-7), 2.0**-7, 2**14, dtype=np.float32),  # small arguments
    ]
    edges = np.float32([0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, TINY, -TINY])
    edges = np.concatenate(
        [
            edges,
            around(88.72283, 88.7229, -87.33655, -103.97, 89, -104),  # exp's thresholds
            around(1, 2.0**-10, 2.0**-12, 9.0, 9.1, -10.4, 3.4028235e38, -3.4028235e38),
        ]
    )
    return np.concatenate([strided, random, *dense, edges]).astype(np.float32)


def rounded(ref64: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return flush_np(ref64.astype(np.float32))


def assert_close(got, ref64: np.ndarray, bound: float = CLOSE, x=None) -> float:
    """Results within ``bound`` ulps of the float64 ``ref64`` where that is a normal float32
    value; elsewhere (zeros, flushed, overflowing, inf, NaN) the bits of its rounding.
    Returns the largest error in ulps (``x``: the inputs, for the message; the sweep)."""
    got = np.asarray(got, np.float32)
    want = rounded(ref64)
    normal = np.isfinite(ref64) & (np.abs(ref64) >= TINY) & np.isfinite(want)
    assert same_bits(got[~normal], want[~normal])
    ref = ref64[normal]
    _, e = np.frexp(np.abs(ref))
    ulps = np.abs(got[normal].astype(np.float64) - ref) / np.ldexp(1.0, e - 1 - 23)
    worst = float(ulps.max())
    assert worst <= bound, (worst, (sweep() if x is None else x)[normal][np.argmax(ulps)])
    return worst


def inputs64(x=None) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return flush_np(sweep() if x is None else x).astype(np.float64)


def gelu64(x: np.ndarray) -> np.ndarray:
    """The tanh GELU in float64, as ``x/(1 + e**-t)`` (``0.5·(1 + tanh(t/2))`` cancels in
    float64 too, for ``x < -5``); −inf gives NaN as in JAX."""
    t = 2 * np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(np.isneginf(x), np.nan, x / (1 + np.exp(-t)))


def silu64(x: np.ndarray) -> np.ndarray:
    """``x/(1 + e**-x)`` in float64; −inf gives NaN as in JAX (``−inf·0``)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(np.isneginf(x), np.nan, x / (1 + np.exp(-x)))


TRIG_MAX = 2.0**24  # sin and cos: NaN beyond


def trig(f):
    """``f`` (NumPy's float64 ``sin`` or ``cos``) within the domain, NaN beyond."""
    return lambda x: np.where(np.abs(x) <= TRIG_MAX, f(x), np.nan)


@functools.cache
def near_quarter_turns(count: int = 256) -> np.ndarray:
    """The ``count`` float32 values nearest to ``k·π/2`` for ``1 <= k <= 2**24·2/π``, and their
    neighbours: ``float32(k·π/2)``, ranked by ``|x − k·π/2|`` (π/2 in two float64 parts, the
    first times ``k`` exact)."""
    k = np.arange(1, int(TRIG_MAX * 2 / np.pi) + 1, dtype=np.float64)
    pi = Fraction("3.14159265358979323846264338327950288419716939937510582097494459")
    hi = math.floor(pi / 2 * 2**26) / 2**26
    lo = float(pi / 2 - Fraction(hi))
    x = (k * (np.pi / 2)).astype(np.float32)
    r = np.abs((x - k * hi) - k * lo)
    return around(*x[np.argpartition(r, count)[:count]])


@functools.cache
def trig_sweep() -> np.ndarray:
    """The sweep, and angles: dense and random, rotary ``p·f`` (positions up to 2**20 with a
    Llama 3 band of frequencies), the hardest reductions, the domain's edge."""
    rng = np.random.default_rng(13)
    positions = rng.integers(0, 2**20, 2**12).astype(np.float32)
    inv_freq = np.float32(500000.0) ** -(np.arange(0, 128, 2, dtype=np.float32) / np.float32(128))
    hard = near_quarter_turns()
    return np.concatenate(
        [
            sweep(),
            np.linspace(-20, 20, 2**16, dtype=np.float32),
            rng.uniform(-TRIG_MAX, TRIG_MAX, 2**16).astype(np.float32),
            (positions[:, None] * inv_freq[None, :]).ravel(),
            hard,
            -hard,
            around(TRIG_MAX, -TRIG_MAX, np.pi / 4, np.pi / 2, np.pi, 2.0**20),
        ]
    )


REFERENCES = {
    "exp": np.exp,
    "log": np.log,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh,
    "gelu_tanh": gelu64,
    "silu": silu64,
    "sin": trig(np.sin),
    "cos": trig(np.cos),
}
SWEEPS = {"sin": trig_sweep, "cos": trig_sweep}  # the others: sweep()


@pytest.mark.parametrize("name", list(REFERENCES))
def test_unary_functions_are_correctly_rounded_on_the_sweep(name):
    x = SWEEPS.get(name, sweep)()
    with np.errstate(all="ignore"):
        ref = REFERENCES[name](inputs64(x))
    assert_close(getattr(portable, name)(x), ref, x=x)


def test_divide_is_the_correctly_rounded_division():
    rng = np.random.default_rng(3)
    a = sweep()
    b = rng.permutation(a)
    # quotients around 2**-126, where a double rounding could go wrong
    c = (rng.uniform(0.5, 2, 2**14) * TINY).astype(np.float32)
    d = rng.uniform(0.5, 2, 2**14).astype(np.float32)
    specials = np.float32([0, 0, 1, -1, 1, np.inf, np.inf, 3, np.nan, -5, 1e-45])
    over = np.float32([0, -0.0, 0, -0.0, -0.0, np.inf, 1, np.inf, 1, 1e-45, 2])
    a, b = np.concatenate([a, c, specials]), np.concatenate([b, d, over])
    with np.errstate(all="ignore"):
        want = flush_np(flush_np(a) / flush_np(b))
    assert same_bits(portable.divide(a, b), want)
    edge = np.asarray(portable.divide(specials, over))
    assert np.isnan(edge[[0, 1, 5, 8]]).all()
    assert same_bits(edge[[2, 3, 4, 6, 7, 9, 10]], [np.inf, -np.inf, np.inf, np.inf, 0, -np.inf, 0])
    # broadcasting between equal ranks
    m = rng.normal(size=(3, 4)).astype(np.float32)
    row = rng.normal(size=(1, 4)).astype(np.float32)
    assert same_bits(portable.divide(m, row), m / row)


def test_special_values():
    nan, inf = np.nan, np.inf
    x = np.float32([0, -0.0, 1e-45, -1e-45, inf, -inf, nan, 1, -1])
    assert same_bits(portable.exp(x), [1, 1, 1, 1, inf, 0, nan, np.e, 1 / np.e])
    assert same_bits(portable.log(x), [-inf, -inf, -inf, -inf, inf, nan, nan, 0, nan])
    assert same_bits(portable.rsqrt(x), [inf, inf, inf, inf, 0, nan, nan, 1, nan])
    assert same_bits(portable.tanh(x), [0, 0, 0, 0, 1, -1, nan, np.tanh(1), -np.tanh(1)])
    assert same_bits(portable.gelu_tanh(x)[:7], [0, 0, 0, 0, inf, nan, nan])
    # the thresholds
    assert same_bits(portable.exp(np.float32([89, 1e30, -88, -104, -1e30])), [inf, inf, 0, 0, 0])
    assert same_bits(portable.tanh(np.float32([9.2, -1e30, 2.0**-20])), [1, -1, 2.0**-20])
    assert same_bits(portable.gelu_tanh(np.float32([-11, -1e30, 1e30])), [0, 0, 1e30])
    # every zero result is +0
    zeros = np.concatenate(
        [
            np.asarray(f(np.float32([-0.0, -1e-45, -inf, -200])))
            for f in (portable.exp, portable.tanh, portable.gelu_tanh)
        ]
    )
    assert not np.any((zeros == 0) & np.signbit(zeros))


def test_sin_cos_and_silu_special_values():
    nan, inf = np.nan, np.inf
    edge = np.nextafter(np.float32(TRIG_MAX), np.float32(inf))  # 2**24 + 2: beyond the domain
    tiny = [2.0**-126, -(2.0**-100), 2.0**-20]
    x = np.float32([0, -0.0, 1e-45, -1e-45, inf, -inf, nan, TRIG_MAX, -TRIG_MAX, edge, *tiny])
    s, c = np.sin(TRIG_MAX), np.cos(TRIG_MAX)
    cos, sin = portable.cos_sin(x)
    assert same_bits(sin, [0, 0, 0, 0, nan, nan, nan, s, -s, nan, *tiny])
    assert same_bits(cos, [1, 1, 1, 1, nan, nan, nan, c, c, nan, 1, 1, 1])
    assert same_bits(portable.sin(x), sin) and same_bits(portable.cos(x), cos)
    y = np.float32(
        [0, -0.0, 1e-45, -1e-45, inf, -inf, nan, 121, -121, -95, 1e30, -1e30, -1.5 * TINY]
    )
    silu = np.asarray(portable.silu(y))
    assert same_bits(silu, [0, 0, 0, 0, inf, nan, nan, 121, 0, 0, 1e30, 0, 0])
    zeros = np.concatenate([silu, sin])
    # every zero result is +0, silu(−1.5·2**-126) too
    assert not np.any((zeros == 0) & np.signbit(zeros))


def test_sin_is_odd_and_cos_even():
    x = trig_sweep()
    x = x[(np.abs(x) >= TINY) & (np.abs(x) <= TRIG_MAX)]
    assert same_bits(portable.sin(-x), -np.asarray(portable.sin(x)))
    assert same_bits(portable.cos(-x), portable.cos(x))


def test_sin_cos_and_silu_are_jaxs_within_a_few_ulps():
    """On moderate arguments JAX's float32 ``sin``, ``cos`` and ``silu`` (on the CPU) are
    accurate too."""
    x = np.linspace(-30, 30, 4097, dtype=np.float32)
    for ours, theirs in (
        (portable.sin, jnp.sin),
        (portable.cos, jnp.cos),
        (portable.silu, jax.nn.silu),
    ):
        a = np.asarray(ours(x), np.float64)
        b = np.asarray(theirs(jnp.asarray(x)), np.float64)
        ulp = np.spacing(np.abs(a).astype(np.float32)).astype(np.float64)
        assert np.all(np.abs(a - b) <= 4 * ulp + 2 * TINY)


def test_tanh_is_odd():
    x = sweep()
    x = x[np.abs(x) >= TINY]
    assert same_bits(portable.tanh(-x), -np.asarray(portable.tanh(x)))


def test_gelu_tanh_is_jaxs_where_jaxs_float32_formula_is_accurate():
    """JAX's float32 GELU rounds ``√(2/π)`` and ``0.044715`` to float32 and cancels in
    ``1 + tanh`` for ``x < 0``: it agrees to a few ulps for ``x >= -1``."""
    x = np.linspace(-1, 10, 4097, dtype=np.float32)
    ours = np.asarray(portable.gelu_tanh(x), np.float64)
    theirs = np.asarray(jax.nn.gelu(jnp.asarray(x), approximate=True), np.float64)
    ulp = np.spacing(np.abs(ours).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(ours - theirs) <= 4 * ulp + 2 * TINY)


def tree_sum_np(x: np.ndarray) -> np.ndarray:
    """The float32 pairwise tree along the last axis: padded with +0 to a power of two, the
    first half added to the second half at each level, every sum flushed."""
    v = flush_np(x)
    n = v.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()
    v = np.concatenate([v, np.zeros((*v.shape[:-1], width - n), np.float32)], axis=-1)
    with np.errstate(over="ignore", invalid="ignore"):
        while width > 1:
            width //= 2
            v = flush_np(v[..., :width] + v[..., width:])
    return v[..., 0]


def wide_values(rng, shape) -> np.ndarray:
    """Float32 values over a wide exponent range, with some subnormals and near-cancellations."""
    v = rng.normal(size=shape) * np.exp2(rng.integers(-30, 30, size=shape))
    v = v.astype(np.float32)
    v.flat[::7] = np.float32(3e-39)  # a subnormal, read as +0
    return v


@pytest.mark.parametrize("n", [0, 1, 2, 5, 8, 33, 100])
def test_ordered_sum_is_the_pairwise_tree(n):
    rng = np.random.default_rng(n)
    x = wide_values(rng, (3, 2, n))
    assert same_bits(portable.ordered_sum(x), tree_sum_np(x))
    assert same_bits(portable.ordered_sum(x, axis=0), tree_sum_np(np.moveaxis(x, 0, -1)))
    with np.errstate(invalid="ignore"):
        mean = flush_np(tree_sum_np(x) / np.float32(n))
    assert same_bits(portable.ordered_mean(x), mean)


def test_ordered_sum_specials_and_flushes():
    inf, nan = np.inf, np.nan
    x = np.float32(
        [
            [1, -1, 1e-45, -0.0],  # +0, never −0
            [inf, 1, 2, 3],
            [inf, -inf, 0, 0],
            [nan, 1, 1, 1],
            [3.4e38, 3.4e38, 0, 0],  # overflow
            [1.5 * TINY, -TINY, 0, 0],  # a subnormal sum, flushed
        ]
    )
    got = np.asarray(portable.ordered_sum(x))
    assert same_bits(got, [0, inf, nan, nan, inf, 0])
    assert not np.signbit(got[[0, 5]]).any()


def dot_np(x: np.ndarray, y: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """Exact float64 products, summed in float64 by the pairwise tree, times ``scale``,
    rounded once."""
    a, b = flush_np(x).astype(np.float64), flush_np(y).astype(np.float64)
    with np.errstate(invalid="ignore"):
        v = np.swapaxes(a[..., :, None] * b, -1, -2)  # (..., n, k)
    k = v.shape[-1]
    width = 1 << max(k - 1, 0).bit_length()
    v = np.concatenate([v, np.zeros((*v.shape[:-1], width - k))], axis=-1)
    with np.errstate(invalid="ignore"):
        while width > 1:
            width //= 2
            v = v[..., :width] + v[..., width:]
    return rounded(v[..., 0] * scale)


@pytest.mark.parametrize("k", [0, 1, 7, 64])
def test_dot_sums_exact_products_by_the_tree(k):
    rng = np.random.default_rng(k)
    x = wide_values(rng, (2, 3, k))
    y = wide_values(rng, (k, 5))
    assert same_bits(portable.dot(x, y), dot_np(x, y))
    if k:
        close = np.asarray(portable.dot(x, y), np.float64)
        exact = flush_np(x).astype(np.float64) @ flush_np(y).astype(np.float64)
        scale = np.abs(flush_np(x).astype(np.float64)) @ np.abs(flush_np(y).astype(np.float64))
        assert np.all(np.abs(close - exact) <= 2.0**-40 * scale + 2.0**-24 * np.abs(exact) + TINY)


def test_sum_products_broadcasts_scales_and_rounds_once():
    rng = np.random.default_rng(5)
    q = wide_values(rng, (3, 4, 1, 7))
    k = wide_values(rng, (3, 1, 5, 7))
    scale = 1 / np.sqrt(7.0)
    got = portable.sum_products(q, k, scale)
    assert got.shape == (3, 4, 5)
    want = np.stack([dot_np(q[h, :, 0], k[h, 0].T, scale) for h in range(3)])
    assert same_bits(got, want)
    assert not same_bits(got, portable.sum_products(q, k))  # the scale is applied


def test_dot_specials():
    x = np.float32([[np.inf, 1], [1, 1e-45], [np.nan, 0]])
    y = np.float32([[0, 1], [1, 1]])
    assert same_bits(portable.dot(x, y), [[np.nan, np.inf], [0, 1], [np.nan, np.nan]])


def test_softmax_matches_float64_and_jax():
    rng = np.random.default_rng(11)
    n = 64
    x = (rng.normal(size=(8, n)) * 6).astype(np.float32)
    got = np.asarray(portable.softmax(x), np.float64)
    # float64 softmax of the float32 differences (JAX's x − max is rounded to float32 too)
    d = flush_np(x - x.max(axis=-1, keepdims=True)).astype(np.float64)
    e = np.exp(d)
    want = e / e.sum(axis=-1, keepdims=True)
    # exp's rounding, log2(n) rounded additions in the tree and the division
    assert np.all(np.abs(got - want) <= (2 + np.log2(n)) * 2.0**-24 * want + TINY)
    theirs = np.asarray(jax.nn.softmax(jnp.asarray(x)), np.float64)
    assert np.all(np.abs(got - theirs) <= (4 + np.log2(n)) * 2.0**-24 * want + TINY)
    assert same_bits(portable.softmax(x.T, axis=0), np.asarray(portable.softmax(x)).T)


def test_softmax_special_rows_are_jaxs():
    inf = np.inf
    x = np.float32(
        [[-inf, -inf, -inf], [inf, 1, 2], [np.nan, 1, 2], [-inf, 0, 0], [1, 2, 3]],
    )
    got = np.asarray(portable.softmax(x))
    assert np.isnan(got[:3]).all()
    assert same_bits(got[3], [0, 0.5, 0.5])
    assert np.isnan(np.asarray(jax.nn.softmax(jnp.asarray(x)))[:3]).all()


def test_callers_need_no_64_bit_types_and_jit_gives_the_same_bits():
    assert not jax.config.jax_enable_x64
    x = jnp.asarray(sweep()[:4096])
    for f in (
        portable.exp,
        portable.log,
        portable.tanh,
        portable.gelu_tanh,
        portable.rsqrt,
        portable.sin,
        portable.cos,
        portable.silu,
    ):
        assert same_bits(jax.jit(f)(x), f(x))
        assert f(x).dtype == jnp.float32
    assert not jax.config.jax_enable_x64
    assert same_bits(portable.exp(np.float32(1)), np.float32(np.e))  # NumPy scalars too
    assert same_bits(portable.divide(np.float32([1, 2]), 3.0), [1 / 3, 2 / 3])


V = np.linspace(-3, 3, 20, dtype=np.float32).reshape(4, 5)
W = np.linspace(-1, 2, 15, dtype=np.float32).reshape(5, 3)
PROGRAMS = {
    "exp": (portable.exp, V),
    "log": (portable.log, V),
    "rsqrt": (portable.rsqrt, V),
    "divide": (portable.divide, V, V[:1]),
    "tanh": (portable.tanh, V),
    "gelu_tanh": (portable.gelu_tanh, V),
    "ordered_sum": (portable.ordered_sum, V),
    "ordered_mean": (functools.partial(portable.ordered_mean, axis=0), V),
    "softmax": (portable.softmax, V),
    "dot": (portable.dot, V, W),
    "sin": (portable.sin, V),
    "cos": (portable.cos, V),
    "cos_sin": (portable.cos_sin, V),
    "silu": (portable.silu, V),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_programs_use_no_backend_dependent_operation(name):
    fn, *args = PROGRAMS[name]
    text = jax.jit(fn).lower(*args).as_text(debug_info=True)
    assert backend_dependent(text) == ()
    assert "f64" in text  # the lint sees the real program, traced with 64-bit types


# -- the binary64 building blocks of kernels.measurement.measure_portable --------------------------

_ULPS64 = {"exp64": 2, "expm1_64": 4, "phi64": 8, "log64": 4, "log1p64": 6}


def _mp_reference(name: str, x: np.ndarray) -> np.ndarray:
    import mpmath as mp

    with mp.workdps(400):  # φ cancels to u²/2 down to u = 1e-150
        f = {
            "exp64": mp.exp,
            "expm1_64": mp.expm1,
            "phi64": lambda v: mp.expm1(v) - v,
            "log64": mp.log,
            "log1p64": mp.log1p,
        }[name]
        return np.array([float(f(mp.mpf(float(v)))) for v in x])


def _sweep64(name: str) -> np.ndarray:
    rng = np.random.default_rng(11)
    if name in ("log64", "log1p64"):
        wide = np.exp(rng.uniform(-700, 700, 1500))
        near = rng.uniform(0.5, 2.0, 1500) if name == "log64" else rng.uniform(-0.99, 1.0, 1500)
        tiny = np.exp(rng.uniform(-600, -5, 500))
        return np.concatenate([wide, near, tiny, [1.0, 2.0, 0.5, np.sqrt(2.0)]])
    return np.concatenate(
        [
            rng.uniform(-250, 250, 1500),
            rng.uniform(-0.6, 0.6, 1500),  # both sides of the series' threshold ½
            rng.normal(size=500) * 1e-6,
            np.exp(rng.uniform(-340, -20, 500)),  # tiny arguments (φ down to 2**-969)
            [0.5, -0.5, np.nextafter(0.5, 0), 1.0, -1.0],
        ]
    )


@pytest.mark.parametrize("name", list(_ULPS64))
def test_binary64_functions_are_within_a_few_ulps(name):
    """Each binary64 function against 400-digit arithmetic, in units of the float64 spacing
    of the exact value; φ's values below 2**-969 are sealed to +0 (tiny arguments)."""
    x = _sweep64(name)
    with jax.enable_x64(True):
        got = np.asarray(jax.jit(getattr(portable, name))(jnp.asarray(x, jnp.float64)))
    want = _mp_reference(name, x)
    sealed = (np.abs(want) < 2.0**-969) & (name == "phi64")
    assert np.all(got[sealed] == 0.0)
    ulps = np.abs(got - want)[~sealed] / np.spacing(np.abs(want[~sealed]))
    assert ulps.max() <= _ULPS64[name], (name, ulps.max(), x[~sealed][np.argmax(ulps)])


def test_binary64_special_values():
    inf, nan = np.inf, np.nan
    x = np.array([0.0, -0.0, inf, -inf, nan, 251.0, -251.0, 5e-320, -1.0, -2.0])
    want = {
        "exp64": [1, 1, inf, 0, nan, inf, 0, 1, np.exp(-1), np.exp(-2)],
        "expm1_64": [0, 0, inf, -1, nan, inf, -1, 0, np.expm1(-1), np.expm1(-2)],
        "phi64": [0, 0, inf, inf, nan, inf, 250, 0, np.exp(-1), np.exp(-2) + 1],
        "log64": [-inf, -inf, inf, nan, nan, np.log(251), nan, -inf, nan, nan],
        "log1p64": [0, 0, inf, nan, nan, np.log(252), nan, 5e-320, -inf, nan],
    }
    with jax.enable_x64(True):
        for name, values in want.items():
            got = np.asarray(jax.jit(getattr(portable, name))(jnp.asarray(x)))
            np.testing.assert_allclose(got, values, rtol=4e-16, atol=0, err_msg=name)
        assert float(portable.log64(jnp.float64(1.0))) == 0.0


def test_seal_clears_the_last_bit_and_flushes_below_2_to_the_minus_969():
    v = np.array([1.0 + 2.0**-52, -(1.0 + 2.0**-52), 2.0**-969, 2.0**-970, -1e-300, np.inf])
    with jax.enable_x64(True):
        got = np.asarray(jax.jit(portable.seal)(jnp.asarray(v)))
    np.testing.assert_array_equal(got, [1.0, -1.0, 2.0**-969, 0.0, 0.0, np.inf])
    assert not np.signbit(got[4])


def test_sum64_is_the_unrounded_pairwise_tree():
    rng = np.random.default_rng(3)
    v = rng.normal(size=(3, 13)) * np.exp(rng.uniform(-30, 30, (3, 13)))
    want = np.pad(v, ((0, 0), (0, 3)))
    while want.shape[1] > 1:
        half = want.shape[1] // 2
        want = want[:, :half] + want[:, half:]
    with jax.enable_x64(True):
        got = np.asarray(jax.jit(portable.sum64)(jnp.asarray(v)))
    np.testing.assert_array_equal(got, want[:, 0])


@pytest.mark.parametrize("name", ["exp64", "expm1_64", "phi64", "log64", "log1p64", "sum64"])
def test_binary64_programs_use_no_backend_dependent_operation(name):
    with jax.enable_x64(True):
        lowered = jax.jit(getattr(portable, name)).lower(jnp.zeros((4, 8), jnp.float64))
    assert not backend_dependent(lowered.as_text(debug_info=True))
