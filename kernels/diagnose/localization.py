"""Where two kernels diverge: every matmul of a model compared on shared operands.

``localize(fn, params, tokens, spec_a, spec_b)`` runs ``fn(params, tokens)`` once, eagerly,
on kernel A (``kernels.diagnose.sites.walk``). At every matmul site s, with (x_s, w_s) the operands
that kernel A's run computed at s (**shared operands**), it evaluates both
``A(x_s, w_s)`` and ``B(x_s, w_s)`` and compares them; the run then continues with
``A(x_s, w_s)`` and kernel B's output is dropped. So kernel B never sees its own upstream
errors: what is reported at a site is the divergence that this one matmul adds, not the
divergence compounded by every earlier one (that is what :func:`replay` measures at the
logits). Softmax attention runs in float32 in both kernels (as ``on_kernel(...,
attention="float32")`` does) and is not a site; norms, activations and residual adds are
kernel A's float32 ones.

Per site: the share of outputs that are bit-identical; the distance in ulps of the coarser
of the two output formats (``kernels.numerics.ulp``: measured at kernel A's output), as max, median
and 99th percentile; the largest absolute difference; and the same share and ulps with both
kernels' scales rounded up to powers of two (``kernels.diagnose.rescale``, on the same shared
operands): if the divergence vanishes there, it came from the scale arithmetic (epilogue order,
fused or not, scale products), otherwise from what power-of-two scales leave in place (input
casts, accumulation). The *first divergent site* is the first one in execution order whose
outputs are not all bit-identical; its ``layer`` is the iteration of the model's layer loop.

Each kernel's reduction splits come from its own ``batching`` and ``batch_size`` (the number
of sequences by default), as in ``kernels.ops``.

``replay(fn, params, tokens, spec_a, spec_b)`` is the end-to-end view: teacher-forced logits of
the whole sequences through each kernel (``kernel_logits``: every matmul on that kernel, as
``on_kernel`` computes them, errors compounding), kernel A's margin
at each position as the predictor of a top-1 flip (``kernels.measurement.flipstats``), the logistic
map fitted on the even-numbered sequences and scored on the odd ones.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Int

from kernel_contracts.contracts.model import KernelSpec
from kernel_contracts.kernels._matmul import matmul
from kernel_contracts.kernels.batching import reduction_splits
from kernel_contracts.kernels.diagnose.rescale import rescaled_matmul
from kernel_contracts.kernels.diagnose.sites import Site, as_batched, walk
from kernel_contracts.kernels.diagnose.transform import resolve_spec
from kernel_contracts.kernels.measurement.flipstats import FlipPrediction, predict_flips
from kernel_contracts.kernels.numerics.ulp import coarser, identical, ulp_distance, ulp_summary

__all__ = [
    "LayerDivergence",
    "Localization",
    "Replay",
    "SiteDivergence",
    "kernel_logits",
    "localize",
    "replay",
    "shipped_model",
]


class SiteDivergence(NamedTuple):
    """Kernel B against kernel A at one matmul site, on A's operands (module docstring)."""

    site: Site
    outputs: int
    identical: float  # share of outputs with equal bits
    ulp_max: float
    ulp_p50: float
    ulp_p99: float
    abs_max: float
    pow2_identical: float | None  # the same with power-of-two scales (None: not measured)
    pow2_ulp_max: float | None
    pow2_ulp_p50: float | None
    pow2_ulp_p99: float | None


class LayerDivergence(NamedTuple):
    """The sites of one layer together: pooled identical share, worst site's ulps."""

    layer: tuple[int, ...]
    sites: int
    identical: float
    ulp_max: float
    ulp_p99: float  # the largest per-site 99th percentile
    pow2_identical: float | None
    pow2_ulp_max: float | None


class Localization(NamedTuple):
    """Every matmul site of one run, in execution order."""

    kernel_a: str
    kernel_b: str
    fmt: str  # the output format the ulps are counted in
    batch_size: int
    sites: tuple[SiteDivergence, ...]

    @property
    def first_divergent(self) -> SiteDivergence | None:
        """The first site whose outputs are not all bit-identical."""
        return next((s for s in self.sites if s.identical < 1.0), None)

    def layers(self) -> tuple[LayerDivergence, ...]:
        """One summary per layer (per value of ``Site.layer``), in order of first execution."""
        groups: dict[tuple[int, ...], list[SiteDivergence]] = {}
        for s in self.sites:
            groups.setdefault(s.site.layer, []).append(s)
        out = []
        for layer, group in groups.items():
            n = sum(s.outputs for s in group)
            pooled = sum(s.identical * s.outputs for s in group) / n if n else 1.0
            pow2 = None if group[0].pow2_identical is None else group
            out.append(
                LayerDivergence(
                    layer,
                    len(group),
                    pooled,
                    max(s.ulp_max for s in group),
                    max(s.ulp_p99 for s in group),
                    None if pow2 is None else sum(s.pow2_identical * s.outputs for s in group) / n,
                    None if pow2 is None else max(s.pow2_ulp_max for s in group),
                )
            )
        return tuple(out)


def _stack(fn, x, w) -> Array:
    return jnp.stack([jnp.asarray(fn(x[i], w[i])) for i in range(x.shape[0])])


def localize(
    fn,
    params: Any,
    tokens: Int[ArrayLike, "batch seq"],
    spec_a: KernelSpec | str,
    spec_b: KernelSpec | str,
    *,
    batch_size: int | None = None,
    attention: Literal["float32", "matmul"] = "float32",
    pow2: bool = True,
) -> Localization:
    """Kernel B against kernel A at every matmul site of ``fn(params, tokens)``, on shared
    operands (module docstring). ``pow2=False`` skips the power-of-two-scale comparison."""
    a, b = resolve_spec(spec_a), resolve_spec(spec_b)
    batch = int(jnp.shape(tokens)[0]) if batch_size is None else batch_size
    if batch < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch}")
    fmt = coarser(a.matmul.output, b.matmul.output)
    found: list[SiteDivergence] = []

    def on_dot(site: Site, lhs, rhs, dims, dtype):
        x, w, back = as_batched(lhs, rhs, dims)
        k = int(x.shape[2])
        sa = reduction_splits(batch, k, a.batching) if k else 1
        sb = reduction_splits(batch, k, b.batching) if k else 1
        ya = _stack(lambda u, v: matmul(u, v, a.matmul, splits=sa), x, w)
        yb = _stack(lambda u, v: matmul(u, v, b.matmul, splits=sb), x, w)
        na, nb = np.asarray(ya), np.asarray(yb)
        same = identical(na, nb)
        d = ulp_distance(na, nb, fmt)
        u = ulp_summary(d)
        with np.errstate(invalid="ignore"):
            diff = np.abs(na.astype(np.float64) - nb.astype(np.float64))
        abs_max = float(np.nanmax(np.where(same, 0.0, diff))) if diff.size else 0.0
        p = (None,) * 4
        if pow2:
            pa = _stack(lambda u, v: rescaled_matmul(u, v, a.matmul, "pow2", splits=sa), x, w)
            pb = _stack(lambda u, v: rescaled_matmul(u, v, b.matmul, "pow2", splits=sb), x, w)
            pa, pb = np.asarray(pa), np.asarray(pb)
            pu = ulp_summary(ulp_distance(pa, pb, fmt))
            share = float(identical(pa, pb).mean()) if pa.size else 1.0
            p = (share, pu["max"], pu["p50"], pu["p99"])
        found.append(
            SiteDivergence(
                site,
                int(na.size),
                float(same.mean()) if same.size else 1.0,
                u["max"],
                u["p50"],
                u["p99"],
                abs_max,
                *p,
            )
        )
        return back(ya)

    walk(fn, on_dot, params, jnp.asarray(tokens), attention=attention)
    return Localization(a.preset, b.preset, fmt, batch, tuple(found))


class Replay(NamedTuple):
    """Teacher-forced logits of whole sequences through both kernels (errors compounding)."""

    sequences: int
    length: int
    agreement: float  # share of positions where both kernels' top-1 token agree
    logit_drift_max: float  # max over positions of ‖z_B − z_A‖∞
    logit_drift_p99: float
    prediction: FlipPrediction


def replay(
    fn,
    params: Any,
    tokens: Int[ArrayLike, "batch seq"],
    spec_a: KernelSpec | str,
    spec_b: KernelSpec | str,
    *,
    batch_size: int | None = None,
    attention: Literal["float32", "matmul"] = "float32",
) -> Replay:
    """Kernel A's logit margin as a predictor of kernel B's top-1 flips on ``tokens``
    (teacher-forced); the calibrated map is fitted on even sequences, scored on odd ones."""
    tokens = jnp.asarray(tokens)
    batch = int(tokens.shape[0]) if batch_size is None else batch_size
    za = kernel_logits(fn, params, tokens, spec_a, batch_size=batch, attention=attention)
    zb = kernel_logits(fn, params, tokens, spec_b, batch_size=batch, attention=attention)
    za = np.asarray(za, np.float64)
    zb = np.asarray(zb, np.float64)
    if za.ndim != 3 or za.shape != zb.shape or za.shape[:2] != tuple(tokens.shape):
        raise ValueError(
            f"fn must return logits of shape (batch, seq, vocab) for tokens {tuple(tokens.shape)}"
            f"; got {za.shape}"
        )
    top2 = np.sort(za, axis=-1)[..., -2:]
    margin = (top2[..., 1] - top2[..., 0]).ravel()
    flip = (za.argmax(-1) != zb.argmax(-1)).ravel()
    fit = np.repeat(np.arange(za.shape[0]) % 2 == 0, za.shape[1])
    drift = np.abs(zb - za).max(axis=-1).ravel()
    return Replay(
        sequences=int(za.shape[0]),
        length=int(za.shape[1]),
        agreement=float(1.0 - flip.mean()),
        logit_drift_max=float(drift.max()),
        logit_drift_p99=float(np.quantile(drift, 0.99, method="inverted_cdf")),
        prediction=predict_flips(margin, flip, fit),
    )


def kernel_logits(
    fn,
    params: Any,
    tokens: Int[ArrayLike, "batch seq"],
    spec: KernelSpec | str,
    *,
    batch_size: int | None = None,
    attention: Literal["float32", "matmul"] = "float32",
):
    """``fn(params, tokens)`` with every matmul on ``spec``'s emulated matmul, evaluated
    eagerly (``kernels.diagnose.sites.walk``): what ``on_kernel`` computes, for every spec including
    int8 ones."""
    k = resolve_spec(spec)
    batch = int(jnp.shape(tokens)[0]) if batch_size is None else batch_size

    def on_dot(site: Site, lhs, rhs, dims, dtype):
        x, w, back = as_batched(lhs, rhs, dims)
        s = reduction_splits(batch, int(x.shape[2]), k.batching) if x.shape[2] else 1
        return back(_stack(lambda u, v: matmul(u, v, k.matmul, splits=s), x, w))

    return walk(fn, on_dot, params, jnp.asarray(tokens), attention=attention)


def shipped_model(name: str = "tiny-lm"):
    """``(fn, params, windows)`` of a shipped checkpoint: ``fn(params, tokens)`` its
    teacher-forced logits on plain float32 ops, and its held-out token windows."""
    from flax import nnx

    from kernel_contracts.kernels.model.tinylm import load_pretrained, pretrained_extra

    model = load_pretrained(name)
    graphdef, state = nnx.split(model)

    def fn(state, tokens):
        return nnx.merge(graphdef, state)(tokens)

    windows = np.asarray(pretrained_extra(name)["heldout_windows"], np.int32)
    return fn, state, windows
