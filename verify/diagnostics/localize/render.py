"""Text and JSON renderings of a localization (``kernels.diagnose.localization``)."""

from __future__ import annotations

import json
import math
from typing import Any

from kernel_contracts.kernels.diagnose.localization import Localization, Replay, SiteDivergence

__all__ = ["to_json", "to_text"]


def _layer(layer: tuple[int, ...]) -> str:
    return ".".join(str(i) for i in layer) if layer else "-"


def _pct(share: float | None) -> str:
    """A percentage that reads 0% or 100% only when it is exactly that."""
    if share is None:
        return "-"
    if share in (0.0, 1.0):
        return f"{100 * share:.0f}%"
    digits = 2
    while digits < 8 and round(100 * share, digits) in (0.0, 100.0):
        digits += 1
    return f"{100 * share:.{digits}f}%"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.3g}" if x < 1e4 else f"{x:.3e}"


def _site_row(s: SiteDivergence) -> str:
    t = s.site
    shape = f"{t.m}x{t.k}.{t.n}"
    return (
        f"{t.index:>4} {_layer(t.layer):>5} {t.label:<18.18} {shape:>14} "
        f"{_pct(s.identical):>9} {_num(s.ulp_p50):>8} {_num(s.ulp_p99):>8} {_num(s.ulp_max):>9} | "
        f"{_pct(s.pow2_identical):>9} {_num(s.pow2_ulp_p50):>8} {_num(s.pow2_ulp_p99):>8} "
        f"{_num(s.pow2_ulp_max):>9}"
    )


def to_text(loc: Localization, rep: Replay | None, meta: dict) -> str:
    """The tables ``python -m verify localize`` prints."""
    lines = [
        f"localize {meta['contract']}: kernel A = {loc.kernel_a} (train), kernel B = "
        f"{loc.kernel_b} (inference), model {meta['model']}",
        f"shared operands: {meta['sequences']} sequences x {meta['length']} tokens "
        f"({meta['tokens']}); every matmul of B is fed the operands A computed there (errors "
        "do not compound)",
        f"ulps of {loc.fmt} at A's output; pow2: both kernels' scales rounded up to powers of two",
        "",
        f"{'site':>4} {'layer':>5} {'matmul':<18} {'MxK.N':>14} {'identical':>9} {'ulp p50':>8} "
        f"{'ulp p99':>8} {'ulp max':>9} | {'pow2 id.':>9} {'p50':>8} {'p99':>8} {'max':>9}",
    ]
    lines += [_site_row(s) for s in loc.sites]
    first = loc.first_divergent
    lines.append("")
    if first is None:
        lines.append("first divergent site: none (every output bit-identical)")
    else:
        t = first.site
        lines.append(f"first divergent site: {t.index} (layer {_layer(t.layer)}, {t.label})")
    lines += ["", f"{'layer':>5} {'sites':>5} {'identical':>9} {'ulp max':>9} {'worst p99':>9} | "
              f"{'pow2 id.':>9} {'ulp max':>9}"]  # fmt: skip
    for g in loc.layers():
        lines.append(
            f"{_layer(g.layer):>5} {g.sites:>5} {_pct(g.identical):>9} {_num(g.ulp_max):>9} "
            f"{_num(g.ulp_p99):>9} | {_pct(g.pow2_identical):>9} {_num(g.pow2_ulp_max):>9}"
        )
    if rep is not None:
        p = rep.prediction
        flips = f"{p.flips} flips in {p.positions} positions"
        lines += [
            "",
            f"replay (teacher-forced, errors compounding): {rep.sequences} sequences x "
            f"{rep.length} tokens: top-1 agreement {_pct(rep.agreement)} ({flips}); logit "
            f"drift max {_num(rep.logit_drift_max)}, p99 {_num(rep.logit_drift_p99)}",
            f"margin of A as flip predictor: ROC-AUC {_num(p.auc)} over all positions; Brier "
            f"{_num(p.brier)} on the odd sequences ({p.test_positions} positions) of a logistic "
            f"map on log margin fitted on the even ones (constant flip rate: "
            f"{_num(p.brier_constant)})",
        ]
    return "\n".join(lines) + "\n"


def _plain(value: Any) -> Any:
    """JSON-ready values: records as objects, tuples as lists, non-finite floats as text."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def to_json(loc: Localization, rep: Replay | None, meta: dict) -> str:
    """Every number of the run, as one JSON object."""
    first = loc.first_divergent
    doc = {
        **meta,
        "kernel_a": loc.kernel_a,
        "kernel_b": loc.kernel_b,
        "ulp_format": loc.fmt,
        "batch_size": loc.batch_size,
        "sites": _plain(loc.sites),
        "first_divergent": None if first is None else first.site.index,
        "layers": _plain(loc.layers()),
        "replay": _plain(rep),
    }
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"
