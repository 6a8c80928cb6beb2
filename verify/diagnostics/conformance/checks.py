"""The interchangeability checks of the conformance suite, as pure functions of observations.

Each check compares what an implementation under test produced (``Observed``) with what the
declared spec's reference produced on the same operands (``Baseline``, built once per spec by
``verify.diagnostics.conformance.suite``) and says whether it *fires* (finds a difference it is
about), with the number it measured. A check that cannot run on a spec (no boundary probes, no int8
accumulator, no model) is not applicable (``fired is None``).

==========================  ================================================================
``bit_identity``            random and extreme probes: every output has the reference's bits
                            (the NumPy reference of ``kernels._matmul``, the written definition)
``max_ulp``                 random and extreme probes: at most ``MAX_ULP`` ulp of the output
                            format from the reference (``kernels.numerics.ulp``, at the reference)
``rounding_boundaries``     boundary and ties probes (``probes``: operands on rounding
                            boundaries of the output, and weights on ties of the input cast):
                            every output has the reference's bits
``rounding_bias``           among all differing outputs, as many move toward zero as away: a
                            two-sided sign test fires at p < ``BIAS_P`` (at least
                            ``BIAS_MIN`` differing outputs)
``batch_invariance``        each of the first ``ALONE`` rows of the random, extreme and
                            exactness probes, computed alone (batch 1, its split-K), equals its
                            output within the whole probe batch, wherever the reference's does
``apriori_bound``           random and extreme probes: |y − y*| ≤ θ·Σ|terms| for every output,
                            θ from ``bounds.apriori.matmul_error`` of the declared spec (int8:
                            y* = ŝx·ŝw·S against the dequantized operands, the epilogue-only
                            θ; float: y* the exact product of the float operands)
``int8_exactness``          int8: the declared ``k_max`` keeps every sum in int32
                            (k_max·127² ≤ 2**31 − 1, ``bounds.intexact``), and at K = k_max
                            operands with the largest sums, near output rounding boundaries
                            (``probes.exactness_operands``), give the epilogue of the exact
                            integer sums
``top1_agreement``          the model's teacher-forced top-1 token equals the reference
                            kernel's at every position
==========================  ================================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from kernel_contracts.kernels.numerics.ulp import identical, ulp_distance

__all__ = [
    "ALONE",
    "BIAS_MIN",
    "BIAS_P",
    "CHECKS",
    "MAX_ULP",
    "Baseline",
    "Check",
    "Observed",
    "Verdict",
    "sign_test",
]

MAX_ULP = 1.0
BIAS_P, BIAS_MIN = 1e-6, 10
ALONE = 8


class Observed(NamedTuple):
    """What one implementation produced on the probes (``None``: not run)."""

    random: np.ndarray
    extreme: np.ndarray | None
    boundary: np.ndarray | None  # one output per boundary pair
    ties: np.ndarray | None  # on the random probe's x and the tie weights
    # (output, the epilogue of the exact sums) on largest-sum operands at the candidate's k_max
    exactness: tuple[np.ndarray, np.ndarray] | None
    k_max_in_range: bool | None  # the candidate's k_max keeps int32 sums exact
    logits: np.ndarray | None
    # per probe: (outputs in the whole batch, the same outputs with their row alone, where the
    # reference's are equal both ways)
    batch: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]


class Baseline(NamedTuple):
    """The reference's outputs and what the a-priori check needs, per probe."""

    fmt: str  # the output format
    random: np.ndarray  # NumPy reference
    extreme: np.ndarray | None
    boundary: np.ndarray | None
    ties: np.ndarray | None
    random_invariant: np.ndarray  # where the JAX reference's rows alone equal them batched
    extreme_invariant: np.ndarray | None
    bound_random: tuple[np.ndarray, np.ndarray, np.ndarray]  # (y*, θ·Σ|terms|, slack)
    bound_extreme: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    logits: np.ndarray | None


class Verdict(NamedTuple):
    fired: bool | None  # None: not applicable
    value: float | None
    detail: str


class Check(NamedTuple):
    name: str
    run: Callable[[Observed, Baseline], Verdict]


def _pairs(o: Observed, b: Baseline):
    yield o.random, b.random
    if b.extreme is not None and o.extreme is not None:
        yield o.extreme, b.extreme


def _bit_identity(o: Observed, b: Baseline) -> Verdict:
    same = np.concatenate([identical(r, y).ravel() for y, r in _pairs(o, b)])
    n = int((~same).sum())
    return Verdict(n > 0, float(same.mean()), f"{n} of {same.size} outputs differ")


def _max_ulp(o: Observed, b: Baseline) -> Verdict:
    worst = max(float(ulp_distance(r, y, b.fmt).max()) for y, r in _pairs(o, b))
    return Verdict(worst > MAX_ULP, worst, f"max {worst:.4g} ulp of {b.fmt} (limit {MAX_ULP:g})")


def _edges(o: Observed, b: Baseline):
    for got, ref in ((o.boundary, b.boundary), (o.ties, b.ties)):
        if got is not None and ref is not None:
            yield got, ref


def _boundaries(o: Observed, b: Baseline) -> Verdict:
    pairs = list(_edges(o, b))
    if not pairs:
        return Verdict(None, None, "no boundary or ties probes (nothing to place exactly)")
    same = np.concatenate([identical(r, y).ravel() for y, r in pairs])
    n = int((~same).sum())
    return Verdict(n > 0, float(same.mean()), f"{n} of {same.size} boundary and tie outputs differ")


def sign_test(k: int, n: int) -> float:
    """Two-sided p-value of ``k`` successes in ``n`` fair coin flips (exact)."""
    if n == 0:
        return 1.0
    low = min(k, n - k)
    tail = sum(math.comb(n, i) for i in range(low + 1))
    return min(1.0, 2 * tail / 2**n)


def _bias(o: Observed, b: Baseline) -> Verdict:
    pairs = list(_pairs(o, b)) + list(_edges(o, b))
    toward = away = 0
    for y, r in pairs:
        y, r = np.asarray(y, np.float64).ravel(), np.asarray(r, np.float64).ravel()
        ok = np.isfinite(y) & np.isfinite(r) & (np.abs(y) != np.abs(r))
        toward += int((np.abs(y[ok]) < np.abs(r[ok])).sum())
        away += int((np.abs(y[ok]) > np.abs(r[ok])).sum())
    n = toward + away
    p = sign_test(toward, n)
    fired = n >= BIAS_MIN and p < BIAS_P
    return Verdict(fired, p, f"{toward} of {n} differing outputs toward zero (p = {p:.3g})")


def _batch(o: Observed, b: Baseline) -> Verdict:
    bad = total = 0
    for batched, alone, invariant in o.batch:
        same = identical(batched, alone)
        bad += int((~same & invariant).sum())
        total += int(invariant.sum())
    return Verdict(bad > 0, float(bad), f"{bad} of {total} batch-invariant outputs change alone")


def _apriori(o: Observed, b: Baseline) -> Verdict:
    worst, over, total = 0.0, 0, 0
    for y, bound in ((o.random, b.bound_random), (o.extreme, b.bound_extreme)):
        if y is None or bound is None:
            continue
        star, limit, slack = bound
        err = np.abs(np.asarray(y, np.float64) - star)
        err = np.where(np.isnan(err), np.inf, err)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(limit > 0, err / limit, np.where(err > slack, np.inf, 0.0))
        worst = max(worst, float(ratio.max()))
        over += int((err > limit + slack).sum())
        total += err.size
    detail = f"{over} of {total} outputs beyond θ·Σ|terms| (worst at {worst:.3g} of it)"
    return Verdict(over > 0, worst, detail)


def _exactness(o: Observed, b: Baseline) -> Verdict:
    if o.exactness is None:
        return Verdict(None, None, "not an int8 kernel")
    same = identical(o.exactness[1], o.exactness[0])
    n = int((~same).sum())
    ok = bool(o.k_max_in_range)
    why = [] if ok else ["k_max·127² > 2^31 − 1"]
    if n:
        why.append(f"{n} of {same.size} largest-sum outputs differ from the exact sums' epilogue")
    return Verdict(bool(why), float(n), "; ".join(why) or "exact at K = k_max")


def _top1(o: Observed, b: Baseline) -> Verdict:
    if b.logits is None or o.logits is None:
        return Verdict(None, None, "no model")
    a, c = np.asarray(b.logits), np.asarray(o.logits)
    agree = float((a.argmax(-1) == c.argmax(-1)).mean())
    flips = int((a.argmax(-1) != c.argmax(-1)).sum())
    return Verdict(flips > 0, agree, f"{flips} top-1 flips in {a.shape[0] * a.shape[1]} positions")


CHECKS = (
    Check("bit_identity", _bit_identity),
    Check("max_ulp", _max_ulp),
    Check("rounding_boundaries", _boundaries),
    Check("rounding_bias", _bias),
    Check("batch_invariance", _batch),
    Check("apriori_bound", _apriori),
    Check("int8_exactness", _exactness),
    Check("top1_agreement", _top1),
)
