"""The operands a conformance check runs a kernel on: random, extreme and rounding-boundary.

* **random**: one batch of ``ROWS`` rows, K = ``RANDOM_K`` (at most the spec's ``k_max``),
  ``COLS`` columns: normal values, every row and column with its own magnitude 2**U(−4, 4),
  and 1% outliers 16 times larger (activations and weights with outlier channels).
* **extreme** (int8 kernels): K = the spec's ``k_max``, operands that make the int32
  accumulator's sums as large as the spec allows (``extreme_operands``): row 0 and column 0
  all ones (every product 127·127), row 1 and column 1 alternating ±1 (products ±127²), rows
  2–31 and columns 2–7 positive values in [0.5, 1] (quantized to [64, 127]: sums near the
  largest, with arbitrary low bits), the other rows and columns ±1 with random signs.
* **boundary**: ``BOUNDARY_PAIRS`` pairs (a row of x, a column of w), K = ``BOUNDARY_K``, chosen
  from 2**21 random pairs because the value the kernel's output rounding receives (the exact
  epilogue product a·ŝx·ŝw of an int8 kernel; the float32 total of a float kernel, from the
  spec with a float32 output) lies within ``BOUNDARY_ULPS`` ulps of the output format from a
  rounding boundary (a midpoint between two outputs when the output rounds to nearest, an
  output value when it rounds toward zero). Tiny changes of the arithmetic (the order of two
  float32 roundings, one rounding instead of two, a scale one ulp off) move such values across
  the boundary and change the output's bits; on random operands they do so about once in
  2**15 outputs. Pairs are searched with per-row scales; a per-tensor spec evaluates each pair
  as its own 1×K by K×1 product, where the tensor is the row.

* **ties** (kernels whose input cast can be hit exactly: unscaled bfloat16/float16 inputs, or
  FP8 with power-of-two MX scales): the random probe's x with every weight on a rounding tie of
  the input cast (a midpoint of two input values, after the scale; each MX block's largest
  value is 1.5·2**emax of the format, so its scale stays put). A weight one float32 ulp off
  leaves the tie and rounds the other way half of the time; elsewhere the cast absorbs it.
* **exactness** (int8 kernels, ``exactness_operands``): at K = a given ``k_max``, the rows and
  columns 0 and 1 of the extreme probe against each other, and ``EXACT_PAIRS`` constructed
  pairs (fewer when K > 2**20 / EXACT_PAIRS): mostly positive products (sums near the
  largest, arbitrary low bits), both scales equal, and the exact integer sum S chosen so that
  fl32(S)·ŝx·ŝw is (within a float32 step of S) a rounding boundary of the output. An
  accumulator that loses a few units of a sum near 2**26 moves the output's input by ~2**-17
  of an output ulp, which only such outputs show.

Every probe is drawn from ``numpy.random.default_rng(seed)``; the same seed gives the same
operands.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from kernel_contracts.contracts import MatmulSpec
from kernel_contracts.kernels.numerics.formats import format_info, min_normal_exponent
from kernel_contracts.kernels.numerics.scaling import quantize_rows_int8_np

__all__ = [
    "BOUNDARY_K",
    "BOUNDARY_PAIRS",
    "BOUNDARY_ULPS",
    "COLS",
    "RANDOM_K",
    "ROWS",
    "Probes",
    "boundary_position",
    "exactness_operands",
    "extreme_operands",
    "probes",
    "tie_weights",
]

ROWS, COLS, RANDOM_K = 64, 16, 64
BOUNDARY_K, BOUNDARY_PAIRS, BOUNDARY_ULPS = 64, 128, 2.0**-15
_SEARCH = (2048, 1024)  # rows and columns searched: 2**21 pairs
EXACT_PAIRS = 60


class Probes(NamedTuple):
    """Operands for one spec (module docstring); ``boundary_x`` row i pairs with column i of
    ``boundary_w``."""

    random_x: np.ndarray
    random_w: np.ndarray
    extreme_x: np.ndarray | None
    extreme_w: np.ndarray | None
    boundary_x: np.ndarray | None
    boundary_w: np.ndarray | None
    ties_w: np.ndarray | None  # pairs with random_x


def _operand(rng, rows: int, k: int) -> np.ndarray:
    a = rng.standard_normal((rows, k)) * np.exp2(rng.uniform(-4, 4, (rows, 1)))
    a = np.where(rng.random((rows, k)) < 0.01, 16 * a, a)
    return a.astype(np.float32)


def extreme_operands(rng, rows: int, k: int, cols: int, near: tuple[int, int]):
    """(x, w) of ``rows``×K and K×``cols``: row/column 0 all ones, 1 alternating ±1, rows
    [2, near[0]) and columns [2, near[1]) positive in [0.5, 1], the rest random ±1."""
    x = rng.choice(np.float32([-1, 1]), (rows, k))
    w = rng.choice(np.float32([-1, 1]), (cols, k))
    alt = np.where(np.arange(k) % 2 == 0, 1, -1).astype(np.float32)
    for a, n in ((x, near[0]), (w, near[1])):
        a[0], a[1] = 1, alt[: a.shape[1]]
        a[2:n] = rng.uniform(0.5, 1.0, (max(n - 2, 0), k))
    return x, w.T.copy()


def boundary_position(v: np.ndarray, fmt: str, toward_zero: bool) -> np.ndarray:
    """Distance of ``v`` (float64) from the nearest rounding boundary of ``fmt``, in ulps of
    ``fmt`` (a midpoint to nearest, a representable value toward zero)."""
    v = np.abs(np.asarray(v, np.float64))
    p = format_info(fmt).mantissa_bits
    _, e = np.frexp(np.where(v > 0, v, 1.0))
    e = np.maximum(e - 1, min_normal_exponent(fmt))
    t = np.ldexp(v, p - e)  # v in ulps of its binade
    frac = t - np.floor(t)
    d = np.minimum(frac, 1 - frac) if toward_zero else np.abs(frac - 0.5)
    return np.where(v > 0, d, np.inf)


def _int8_targets(x: np.ndarray, w: np.ndarray, spec: MatmulSpec) -> np.ndarray:
    """The exact epilogue product a·ŝx·ŝw of every output (float64: error ≤ 2**-52 relative)."""
    xq, sx = quantize_rows_int8_np(x, False, spec.epilogue.scales)
    wq, sw = quantize_rows_int8_np(w.T, False, spec.epilogue.scales)
    s = xq.astype(np.float64) @ wq.astype(np.float64).T  # exact integers below 2**53
    a = s.astype(np.float32).astype(np.float64)  # the int32 → float32 conversion
    return a * sx.astype(np.float64) * sw.astype(np.float64).T


def _float_targets(x: np.ndarray, w: np.ndarray, spec: MatmulSpec) -> np.ndarray:
    from kernel_contracts.kernels import matmul

    search = spec if spec.scaling.kind != "per_tensor" else replace(spec, scaling="per_row")
    return np.asarray(matmul(x, w, replace(search, output="float32")), np.float64)


def _boundary(rng, spec: MatmulSpec) -> tuple[np.ndarray, np.ndarray] | None:
    int8 = spec.is_int8
    if not int8 and spec.output == "float32":
        return None  # a float32 output is the total itself: no output rounding to probe
    k = min(BOUNDARY_K, spec.k_max or BOUNDARY_K)
    x, w = _operand(rng, _SEARCH[0], k), _operand(rng, _SEARCH[1], k).T.copy()
    targets = (_int8_targets if int8 else _float_targets)(x, w, spec)
    toward_zero = int8 and spec.epilogue.rounding == "toward_zero"
    d = boundary_position(targets, spec.output, toward_zero)
    rows, cols = np.nonzero(d < BOUNDARY_ULPS)
    if rows.size == 0:
        return None
    pick = rng.permutation(rows.size)[:BOUNDARY_PAIRS]
    return x[rows[pick]], w[:, cols[pick]]


def _values(fmt: str) -> np.ndarray:
    """Every positive finite value of an 8-bit format, ascending."""
    v = np.arange(256, dtype=np.uint8).view(format_info(fmt).dtype).astype(np.float64)
    return np.unique(v[np.isfinite(v) & (v > 0)])


def tie_weights(rng, spec: MatmulSpec, k: int, cols: int) -> np.ndarray | None:
    """A K×``cols`` weight operand whose every value is a rounding tie of the spec's input cast
    (module docstring), or ``None`` when the cast's ties cannot be placed exactly."""
    if spec.is_int8:
        return None
    info = format_info(spec.inputs)
    if spec.inputs == "float32" or (info.is_fp8 and spec.scaling.kind != "mx"):
        return None
    sign = rng.choice([-1.0, 1.0], (cols, k))
    if not info.is_fp8:  # midpoints of two neighbours in the format's normal range
        lo, hi = min_normal_exponent(spec.inputs) + 1, min(info.emax, 8)
        e = rng.integers(lo, hi, (cols, k)).astype(np.float64)
        frac = rng.integers(0, 2**info.mantissa_bits, (cols, k))
        mid = (1 + (frac + 0.5) / 2**info.mantissa_bits) * np.exp2(e)
        return (sign * mid).T.astype(np.float32)
    block = spec.scaling.block
    top = 1.5 * 2.0**info.emax  # each block's largest value, exact in the format
    values = _values(spec.inputs)
    below = values[values < top]
    mids = (below[:-1] + below[1:]) / 2
    scaled = sign * rng.choice(mids, (cols, k))
    scaled[:, ::block] = top  # the first value of every block sets its (power-of-two) scale
    scale = np.exp2(rng.integers(-8, 8, (cols, -(-k // block)))).repeat(block, axis=1)[:, :k]
    return (scaled * scale / 2.0**info.emax).T.astype(np.float32)


def probes(spec: MatmulSpec, seed: int = 0) -> Probes:
    """The probes of ``spec`` (module docstring)."""
    rng = np.random.default_rng(seed)
    k = min(RANDOM_K, spec.k_max or RANDOM_K)
    rx, rw = _operand(rng, ROWS, k), _operand(rng, COLS, k).T.copy()
    ex = ew = None
    if spec.is_int8:
        ex, ew = extreme_operands(rng, ROWS, int(spec.k_max), COLS, (32, 8))
    found = _boundary(rng, spec)
    bx, bw = (None, None) if found is None else found
    return Probes(rx, rw, ex, ew, bx, bw, tie_weights(rng, spec, k, COLS))


def _unit_scale(spec: MatmulSpec) -> float:
    """The stored scale of a run whose largest magnitude is 1."""
    pt = spec.scaling.kind == "per_tensor"
    return float(
        quantize_rows_int8_np(np.ones((1, 1), np.float32), pt, spec.epilogue.scales)[1][0, 0]
    )


def _on_boundary(rng, spec: MatmulSpec, k: int, c: float):
    """One pair (x row, w column) of length ``k`` (module docstring, exactness): quantized
    values q_x (q_x[0] = 127, the rest within ±126) and q_w (127, then 126, the last 1), so
    both scales are ``c`` and the exact sum S = Σ q_x·q_w is an integer chosen so that
    fl32(S)·c² lies on a rounding boundary of the output; ``(x, w, q_x, q_w)``, or ``None`` if
    the sum cannot be reached."""
    qw = np.full(k, 126, np.int64)
    qw[0], qw[-1] = 127, 1
    qx = rng.integers(64, 127, k).astype(np.int64)
    qx[0], qx[-1] = 127, 0
    s0 = int(qx @ qw)
    fmt, rz = spec.output, spec.epilogue.rounding == "toward_zero"
    p = format_info(fmt).mantissa_bits
    v0 = float(np.float32(s0)) * c * c
    ulp = 2.0 ** (math.floor(math.log2(v0)) - p)
    edge = (math.floor(v0 / ulp) + int(rng.integers(-2, 3)) + (0.0 if rz else 0.5)) * ulp
    a = np.float32(edge / (c * c))
    near = np.array([np.float32(a), np.nextafter(a, np.float32(0)), np.nextafter(a, np.inf)])
    d = boundary_position(near.astype(np.float64) * c * c, fmt, rz)
    target = int(near[int(np.argmin(d))])
    rest = target - s0
    for j in rng.integers(1, k - 1, 4 * k):  # entries of weight 126 (repeats are harmless)
        if abs(rest) <= 63:
            break
        step = int(np.clip(round(rest / 126), -(qx[j] + 126), 126 - qx[j]))
        qx[j] += step
        rest -= 126 * step
    if abs(rest) > 126:
        return None
    qx[-1] = rest
    x = (qx * np.float64(c)).astype(np.float32)
    w = (qw * np.float64(c)).astype(np.float32)
    x[0] = w[0] = 1.0
    return x, w, qx, qw


def exactness_operands(spec: MatmulSpec, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(x, w)`` of the exactness probe at K = ``k`` (module docstring), as pairs: output i is
    ``x[i] @ w[:, i]``. The first four pairs are all ones and alternating ±1 against each
    other; the others have sums near the largest, placed on output rounding boundaries."""
    rng = np.random.default_rng(seed)
    x, w = extreme_operands(rng, 2, k, 2, (2, 2))
    rows, cols = [x[0], x[0], x[1], x[1]], [w[:, 0], w[:, 1], w[:, 0], w[:, 1]]
    c = _unit_scale(spec)
    count = min(EXACT_PAIRS, 2**20 // k) if k >= 3 else 0  # at most ~2**20 values per side
    pairs = [p for p in (_on_boundary(rng, spec, k, c) for _ in range(count)) if p is not None]
    if pairs:  # keep the pairs the quantizer reads as built
        pt, scales = spec.scaling.kind == "per_tensor", spec.epilogue.scales
        qx = quantize_rows_int8_np(np.stack([p[0] for p in pairs]), pt, scales)[0]
        qw = quantize_rows_int8_np(np.stack([p[1] for p in pairs]), pt, scales)[0]
        for i, (px, pw, want_x, want_w) in enumerate(pairs):
            if np.array_equal(qx[i], want_x) and np.array_equal(qw[i], want_w):
                rows.append(px)
                cols.append(pw)
    return np.stack(rows), np.stack(cols, axis=1)
