"""The HTML report's pictures and plain words: each bound against its threshold as an inline
SVG bar (no script, no external asset), and what the verdict means for the policy gradient.

``bound_chart(o)`` draws the bound at the worst point allowed by the premises as a bar, its
outward-rounded interval as a whisker and the threshold as a dashed line, on a scale from 0 to
a little past the larger of the two; an obligation with no numeric bound has no chart.
``verdict_summary(report)`` says in a few sentences what the overall verdict means for the
gradient the learner computes from rollouts of the inference kernel.
"""

from __future__ import annotations

import html

from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import Obligation
from kernel_contracts.verify.proving.render.report import Report

__all__ = ["bound_chart", "verdict_summary"]

_W, _H, _LEFT, _RIGHT = 560, 46, 8, 8  # the picture's size and side margins (px)
_BAR = {"proved": "#1a7f37", "refuted": "#cf222e"}  # other verdicts: amber

# what each quantity bounds, in words (``bounds`` names them)
_QUANTITY = {
    "token_tv": "the total-variation distance between the two kernels' next-token laws",
    "token_log_ratio": "the log-ratio of the two kernels' probabilities of a token",
    "token_kl": "the KL divergence between the two kernels' next-token laws",
    "sequence_tv": "the total-variation distance between the two kernels' sequence laws",
    "reward_drift": "the change in expected reward from sampling with the inference kernel",
    "pg_bias": "the bias of the policy-gradient estimate (with its off-policy correction)",
    "clip_budget": "the share of tokens PPO's clip acts on because of the kernel gap alone",
}


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def bound_chart(o: Obligation) -> str:
    """One obligation's bound against its threshold as an inline SVG; ``""`` with no bound."""
    if o.bound is None:
        return ""
    threshold = float(o.threshold)
    hi = float(o.bound_interval[1]) if o.bound_interval is not None else o.bound
    top = max(hi, threshold, o.bound) * 1.15 or 1.0
    span = _W - _LEFT - _RIGHT

    def x(v: float) -> float:
        return _LEFT + span * max(0.0, min(v, top)) / top

    colour = _BAR.get(o.status.label, "#9a6700")
    label = f"{o.id}: bound {_fmt(o.bound)} against threshold {_fmt(threshold)} ({o.status.label})"
    parts = [
        f'<svg class="bound-chart" role="img" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" '
        f'data-bound="{o.bound!r}" data-threshold="{threshold!r}">',
        f"<title>{html.escape(label)}</title>",
        f'<rect x="{_LEFT}" y="8" width="{span}" height="16" fill="#f6f8fa"/>',
        f'<rect class="bound" x="{_LEFT}" y="8" width="{x(o.bound) - _LEFT:.1f}" height="16" '
        f'fill="{colour}"/>',
    ]
    if o.bound_interval is not None:
        lo = float(o.bound_interval[0])
        parts.append(
            f'<line x1="{x(lo):.1f}" x2="{x(hi):.1f}" y1="16" y2="16" stroke="#1f2328" '
            'stroke-width="1.5"/>'
        )
    tx = x(threshold)
    parts += [
        f'<line class="threshold" x1="{tx:.1f}" x2="{tx:.1f}" y1="4" y2="28" stroke="#1f2328" '
        'stroke-width="2" stroke-dasharray="4 2"/>',
        f'<text x="{_LEFT}" y="42" font-size="12" fill="#1f2328">bound {_fmt(o.bound)}</text>',
        f'<text x="{_W - _RIGHT}" y="42" font-size="12" fill="#1f2328" text-anchor="end">'
        f"threshold {_fmt(threshold)} (dashed)</text>",
        "</svg>",
    ]
    return "".join(parts)


def _gradient_words(report: Report) -> str:
    """What the guarantees bound, by quantity, in words."""
    quantities = sorted({o.quantity for o in report.obligations if o.quantity in _QUANTITY})
    if not quantities:
        return ""
    named = "; ".join(f"{_QUANTITY[q]} ({q})" for q in quantities)
    return f" The guarantees bound {named}."


def verdict_summary(report: Report) -> str:
    """What the overall verdict means for the policy gradient, in plain words (HTML-escaped)."""
    s = report.status
    failed = [o.id for o in report.obligations if o.status is Status.REFUTED]
    failed += [r.id for r in report.clauses if r.status is Status.VIOLATED]
    open_ = [o.id for o in report.obligations if o.status is Status.UNKNOWN]
    open_ += [r.id for r in report.clauses if r.status is Status.INCONCLUSIVE]
    if s is Status.INVALID:
        text = "The input could not be used, so nothing was decided."
    elif s.exit_code == 0 and not report.obligations:
        text = (
            "The evidence clauses hold. The contract states no guarantee, so nothing is "
            "claimed about the policy gradient."
        )
    elif s.exit_code == 0:
        text = (
            "Every guarantee is proved for every kernel gap the premises allow, and no evidence "
            "contradicts a premise: training on rollouts from the inference kernel moves the "
            "policy gradient by no more than each guarantee's max."
        )
    elif s.exit_code == 1:
        text = (
            f"Not safe as stated ({', '.join(failed)}): a guarantee is refuted by a confirmed "
            "counterexample or the evidence contradicts a premise, so the kernel gap can bias "
            "the policy gradient beyond a stated max. Tighten the premises, change the "
            "correction, or align the kernels before training on these rollouts."
        )
    else:
        text = (
            f"Nothing is refuted or violated, but {', '.join(open_)} is not decided: a proof "
            "ran out of budget or has no lemma, or the evidence is too thin. Until it is "
            "decided, the bound on the policy gradient's bias is not established."
        )
    return html.escape(text + _gradient_words(report))
