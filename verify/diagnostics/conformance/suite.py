"""The conformance suite with its positive controls: every fault against every check.

``run_suite(kernel)`` builds the probes of the kernel's matmul spec (``probes``), the
reference's outputs on them (``Baseline``: the NumPy reference of ``kernels._matmul`` for the
outputs, the JAX implementation for batch invariance and the model's logits), then, for every
fault of ``kernels.diagnose.faults`` that applies to the spec, injects it into the JAX
implementation, runs the implementation on the same probes (``Observed``) and every check on the
pair. The result is a :class:`Table` of verdicts computed from those runs, nothing written by hand:

* the **null** fault (the unmodified implementation) must be detected by no check: a check
  that fires on it is a false alarm (or the implementation does not conform);
* every other fault must be detected by the check designed for it
  (``kernels.diagnose.faults.designed_check``);
* a check that fires on no fault is flagged (it adds no detection power against this fault
  set), and so is a fault that no check detects.

``model`` (optional) adds the model-level check: teacher-forced logits of ``fn(params,
tokens)`` with every matmul on the implementation (``kernels.diagnose.sites.walk``), against the
reference implementation's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from kernel_contracts.bounds.apriori import matmul_error
from kernel_contracts.bounds.intexact import INT32_MAX, QMAX, largest_k
from kernel_contracts.contracts import KernelSpec, MatmulSpec
from kernel_contracts.kernels import epilogue_np, matmul
from kernel_contracts.kernels.batching import reduction_splits
from kernel_contracts.kernels.diagnose.faults import (
    FAULTS,
    Candidate,
    applies,
    designed_check,
    inject,
    reference,
)
from kernel_contracts.kernels.diagnose.sites import as_batched, walk
from kernel_contracts.kernels.numerics.scaling import quantize_rows_int8_np
from kernel_contracts.kernels.numerics.ulp import identical
from kernel_contracts.verify.diagnostics.conformance.checks import (
    ALONE,
    CHECKS,
    Baseline,
    Observed,
    Verdict,
)
from kernel_contracts.verify.diagnostics.conformance.probes import (
    COLS,
    ROWS,
    Probes,
    exactness_operands,
    probes,
)

__all__ = ["Model", "Row", "Table", "run_suite"]


class Model(NamedTuple):
    """A model for the top-1 check: ``fn(params, tokens)`` returns logits."""

    fn: Any
    params: Any
    tokens: Any


class Row(NamedTuple):
    fault: str
    description: str
    applies: bool
    designed: str  # the check designed to detect it ("" for the null fault)
    verdicts: tuple[Verdict, ...]  # one per check, in CHECKS order (empty when not applicable)


class Table(NamedTuple):
    """Which check detects which fault, for one kernel."""

    kernel: str
    checks: tuple[str, ...]
    rows: tuple[Row, ...]
    seed: int

    def fired(self, fault: str, check: str) -> bool | None:
        row = next(r for r in self.rows if r.fault == fault)
        return row.verdicts[self.checks.index(check)].fired if row.applies else None

    def _faults(self) -> list[Row]:
        return [r for r in self.rows if r.applies and r.fault != "null"]

    @property
    def false_alarms(self) -> tuple[str, ...]:
        """Checks that fire on the null fault."""
        null = next(r for r in self.rows if r.fault == "null")
        return tuple(c for c, v in zip(self.checks, null.verdicts, strict=True) if v.fired)

    @property
    def missed(self) -> tuple[str, ...]:
        """Faults whose designed check did not fire."""
        return tuple(r.fault for r in self._faults() if not self.fired(r.fault, r.designed))

    @property
    def silent_checks(self) -> tuple[str, ...]:
        """Checks that run on some fault but fire on none (null aside)."""
        faults = self._faults()
        return tuple(
            c
            for c in self.checks
            if any(self.fired(r.fault, c) is not None for r in faults)
            and not any(self.fired(r.fault, c) for r in faults)
        )

    @property
    def inapplicable(self) -> tuple[str, ...]:
        """Checks that cannot run on this kernel (no int8 accumulator, no model, ...)."""
        return tuple(
            c for c in self.checks if all(self.fired(r.fault, c) is None for r in self._faults())
        )

    @property
    def undetected(self) -> tuple[str, ...]:
        """Faults that no check detects."""
        return tuple(
            r.fault for r in self._faults() if not any(self.fired(r.fault, c) for c in self.checks)
        )

    @property
    def ok(self) -> bool:
        """No false alarm and every fault detected by its designed check."""
        return not self.false_alarms and not self.missed


# ----------------------------------------------------------------------------- running


def _splits(batching: str, batch: int, k: int) -> int:
    return reduction_splits(batch, k, batching) if k else 1


def _run(impl, batching: str, x, w, batch: int) -> np.ndarray:
    return np.asarray(impl(jnp.asarray(x), jnp.asarray(w), _splits(batching, batch, x.shape[1])))


def _only(x: np.ndarray, i: int) -> np.ndarray:
    """``x`` with every row but row ``i`` zero."""
    z = np.zeros_like(x)
    z[i] = x[i]
    return z


def _alone(impl, batching: str, x, w) -> np.ndarray:
    """The first ``ALONE`` rows of ``x @ w``, each computed alone: as a batch of one (its
    split-K) with no other row's values (the other rows zero, which change no scale and no
    other sum; the product keeps its shape, so nothing is compiled again)."""
    return np.stack([_run(impl, batching, _only(x, i), w, 1)[i] for i in range(ALONE)])


def _paged(x: np.ndarray, w: np.ndarray, start: int, count: int = COLS):
    """Pairs ``start`` .. ``start + count`` (at most ``COLS``) of a pair probe as one ROWS×K by
    K×COLS product (zero rows and columns around them), and how many pairs it holds; pair i is
    output (i, i). Zeros raise no scale (per row, per column, per block or per tensor)."""
    n = min(count, COLS, x.shape[0] - start)
    px = np.zeros((ROWS, x.shape[1]), np.float32)
    pw = np.zeros((x.shape[1], COLS), np.float32)
    px[:n], pw[:, :n] = x[start : start + n], w[:, start : start + n]
    return px, pw, n


def _pairs(impl, spec: MatmulSpec, batching: str, x, w) -> np.ndarray:
    """Output i of ``x[i] @ w[:, i]`` for every pair, computed in batches of ``ROWS`` rows; a
    per-tensor spec computes each pair alone (its scales would see the other rows)."""
    if spec.scaling.kind == "per_tensor":
        return _pairs_alone(impl, batching, x, w, x.shape[0])
    out = []
    for start in range(0, x.shape[0], COLS):
        px, pw, n = _paged(x, w, start)
        out.append(np.diagonal(_run(impl, batching, px, pw, ROWS))[:n])
    return np.concatenate(out)


def _pairs_alone(impl, batching: str, x, w, count: int) -> np.ndarray:
    """Output i of the first ``count`` pairs, each computed alone (as ``_alone`` does, with the
    pair's column the only one)."""
    out = []
    for i in range(count):
        px, pw, _ = _paged(x, w, i, 1)
        out.append(_run(impl, batching, px, pw, 1)[0, 0])
    return np.array(out, np.float32)


def _logits(impl, batching: str, model: Model | None) -> np.ndarray | None:
    if model is None:
        return None
    batch = int(np.shape(model.tokens)[0])

    def on_dot(site, lhs, rhs, dims, dtype):
        x, w, back = as_batched(lhs, rhs, dims)
        s = _splits(batching, batch, int(x.shape[2]))
        return back(jnp.stack([jnp.asarray(impl(x[i], w[i], s)) for i in range(x.shape[0])]))

    return np.asarray(walk(model.fn, on_dot, model.params, jnp.asarray(model.tokens)))


def _exact_epilogue(spec: MatmulSpec, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The epilogue of the exact (never wrapped) integer sum of every pair."""
    pt = spec.scaling.kind == "per_tensor"
    xq, sx = quantize_rows_int8_np(x, pt, spec.epilogue.scales)
    wq, sw = quantize_rows_int8_np(w.T, pt, spec.epilogue.scales)
    sums = [int(xq[i].astype(np.int64) @ wq[i].astype(np.int64)) for i in range(x.shape[0])]
    return np.array(
        [epilogue_np(s, float(sx[i, 0]), float(sw[i, 0]), spec.epilogue, spec.output)
         for i, s in enumerate(sums)], np.float32,
    )  # fmt: skip


class _Exactness:
    """The exactness probe of each K, its expected outputs and where the reference's rows
    alone equal them batched (computed once per K)."""

    def __init__(self, spec: MatmulSpec, batching: str, seed: int):
        self.spec, self.batching, self.seed, self.cache = spec, batching, seed, {}

    def __call__(self, k: int):
        if k not in self.cache:
            x, w = exactness_operands(self.spec, k, self.seed)
            ref = reference(replace(self.spec, k_max=max(k, self.spec.k_max)))
            n = min(ALONE, x.shape[0])
            batched = _pairs(ref, self.spec, self.batching, x, w)[:n]
            invariant = identical(batched, _pairs_alone(ref, self.batching, x, w, n))
            self.cache[k] = (x, w, _exact_epilogue(self.spec, x, w), invariant)
        return self.cache[k]


def _observe(cand: Candidate, base: Baseline, batching: str, pr: Probes, model,
             exactness: _Exactness | None) -> Observed:  # fmt: skip
    impl, spec = cand.matmul, cand.spec
    random = _run(impl, batching, pr.random_x, pr.random_w, ROWS)
    batch = [(random[:ALONE], _alone(impl, batching, pr.random_x, pr.random_w),
              base.random_invariant)]  # fmt: skip
    extreme = exact = in_range = None
    if pr.extreme_x is not None:
        extreme = _run(impl, batching, pr.extreme_x, pr.extreme_w, ROWS)
        alone = _alone(impl, batching, pr.extreme_x, pr.extreme_w)
        batch.append((extreme[:ALONE], alone, base.extreme_invariant))
    if exactness is not None:
        k = int(spec.k_max)
        x, w, expected, invariant = exactness(k)
        got = _pairs(impl, spec, batching, x, w)
        exact = (got, expected)
        n = invariant.size
        batch.append((got[:n], _pairs_alone(impl, batching, x, w, n), invariant))
        in_range = k <= largest_k(QMAX, QMAX, INT32_MAX)
    boundary = ties = None
    if pr.boundary_x is not None:
        boundary = _pairs(impl, spec, batching, pr.boundary_x, pr.boundary_w)
    if pr.ties_w is not None:
        ties = _run(impl, batching, pr.random_x, pr.ties_w, ROWS)
    return Observed(
        random=random,
        extreme=extreme,
        boundary=boundary,
        ties=ties,
        exactness=exact,
        k_max_in_range=in_range,
        logits=_logits(impl, batching, model),
        batch=tuple(batch),
    )


def _bound(spec: MatmulSpec, x: np.ndarray, w: np.ndarray, splits: int):
    """(y*, θ·Σ|terms|, slack) of every output (checks docstring, ``apriori_bound``)."""
    k = x.shape[1]
    if spec.is_int8:
        pt = spec.scaling.kind == "per_tensor"
        xq, sx = quantize_rows_int8_np(x, pt, spec.epilogue.scales)
        wq, sw = quantize_rows_int8_np(w.T, pt, spec.epilogue.scales)
        scale = sx.astype(np.float64) * sw.astype(np.float64).T
        star = (xq.astype(np.float64) @ wq.astype(np.float64).T) * scale
        total = (np.abs(xq).astype(np.float64) @ np.abs(wq).astype(np.float64).T) * scale
        theta = matmul_error(spec, k).relative
        return star, theta * total, 2.0**-40 * total
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    total = np.abs(x64) @ np.abs(w64)
    theta = matmul_error(spec, k, splits=splits).relative
    return x64 @ w64, theta * total, k * 2.0**-52 * total


def _invariant(impl, batching: str, x, w) -> np.ndarray:
    """The rows the reference computes with the same bits alone and in the batch (a whole row:
    a single output can coincide by chance where the row's scale or split-K differs)."""
    same = identical(_run(impl, batching, x, w, ROWS)[:ALONE], _alone(impl, batching, x, w))
    return np.broadcast_to(same.all(axis=1, keepdims=True), same.shape)


def _baseline(spec: MatmulSpec, batching: str, pr: Probes, model: Model | None) -> Baseline:
    ref = reference(spec)

    def numpy_ref(x, w, batch):
        s = _splits(batching, batch, x.shape[1])
        return np.asarray(matmul(x, w, spec, impl="numpy", splits=s))

    boundary = None
    if pr.boundary_x is not None:  # each pair alone: the batch splits only K ≥ 256
        bx, bw = pr.boundary_x, pr.boundary_w
        boundary = np.array([numpy_ref(bx[i : i + 1], bw[:, i : i + 1], 1)[0, 0]
                             for i in range(bx.shape[0])], np.float32)  # fmt: skip
    ties = None if pr.ties_w is None else numpy_ref(pr.random_x, pr.ties_w, ROWS)
    ext = pr.extreme_x is not None
    rows_splits = _splits(batching, ROWS, pr.random_x.shape[1])
    return Baseline(
        fmt=spec.output,
        random=numpy_ref(pr.random_x, pr.random_w, ROWS),
        extreme=numpy_ref(pr.extreme_x, pr.extreme_w, ROWS) if ext else None,
        boundary=boundary,
        ties=ties,
        random_invariant=_invariant(ref, batching, pr.random_x, pr.random_w),
        extreme_invariant=_invariant(ref, batching, pr.extreme_x, pr.extreme_w) if ext else None,
        bound_random=_bound(spec, pr.random_x, pr.random_w, rows_splits),
        bound_extreme=(
            _bound(spec, pr.extreme_x, pr.extreme_w, _splits(batching, ROWS, pr.extreme_x.shape[1]))
            if ext
            else None
        ),
        logits=_logits(ref, batching, model),
    )


def run_suite(kernel: KernelSpec, *, seed: int = 0, model: Model | None = None) -> Table:
    """Every applicable fault of ``kernels.diagnose.faults`` injected into ``kernel``'s matmul,
    every check run on it (module docstring)."""
    spec, batching = kernel.matmul, kernel.batching
    pr = probes(spec, seed)
    base = _baseline(spec, batching, pr, model)
    exactness = _Exactness(spec, batching, seed) if spec.is_int8 else None
    rows = []
    for fault in FAULTS:
        if not applies(fault.name, spec):
            rows.append(Row(fault.name, fault.description, False, "", ()))
            continue
        obs = _observe(inject(fault.name, spec), base, batching, pr, model, exactness)
        verdicts = tuple(check.run(obs, base) for check in CHECKS)
        rows.append(
            Row(fault.name, fault.description, True, designed_check(fault.name, spec), verdicts)
        )
    return Table(kernel.preset, tuple(c.name for c in CHECKS), tuple(rows), seed)
