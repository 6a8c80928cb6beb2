"""The docs table of what ``verify export`` writes for each estimator and framework.

``export_table`` maps one request per driving estimator (``SAMPLE``: the parameters the RL page
names) through each framework's ``settings`` and renders the result as a Markdown table: the
keys and values written, or, where the mapping refuses, the framework's own feature
(``Framework.features``) marked "not exported" with the refusal's reason, or "–" where the
framework has no such feature. ``docs/rl.md`` holds the table and a test keeps the two equal,
so the page cannot name a counterpart the export does not write.
"""

from __future__ import annotations

from fractions import Fraction

from kernel_contracts.verify.pipeline.export.request import (
    DRIVING,
    Framework,
    NoCounterpart,
    Request,
)
from kernel_contracts.verify.pipeline.export.scalars import scalar

__all__ = ["SAMPLE", "export_table", "sample_request"]

# the parameters of each row's request: c = 2, [lo, hi] = [0.5, 2], τ = 0.05, ε = 0.2, and
# kl_reject's token_k1 band "0.5_2.0", vespo's (k, λ) pairs (2, 3) and (3, 2) (TRL's defaults)
SAMPLE = {
    "cap": Fraction(2),
    "band": (Fraction(1, 2), Fraction(2)),
    "threshold": Fraction(1, 20),
    "clip_epsilon": Fraction(1, 5),
    "reject": "token_k1",
    "reject_threshold": "0.5_2.0",
    "gamma": (Fraction(2), Fraction(3), Fraction(3), Fraction(2)),
}


def sample_request(what: str) -> Request:
    """The request of the table's row for ``what`` (an estimator, or ``clip_budget``)."""
    if what == "clip_budget":
        return Request("G", what, clip_epsilon=SAMPLE["clip_epsilon"])
    return Request("G", what, **SAMPLE)


def _cell(framework: Framework, what: str) -> str:
    try:
        pairs = framework.settings(sample_request(what))
    except NoCounterpart as why:
        feature = framework.features.get(what)
        return "–" if feature is None else f"{feature}: not exported ({why})"
    shown = [f"`{key.rsplit('.', 1)[-1]}: {scalar(value)}`" for key, value in pairs
             if value is not None and value is not False]  # fmt: skip
    first = framework.since.get(what)
    since = f" ({framework.name} {first[0]} on)" if first else ""
    if first and first[0] == "main":
        since = f" ({framework.name} main only)"
    return ", ".join(shown) + since


def export_table(frameworks: tuple[Framework, ...]) -> str:
    """The Markdown table: one row per estimator that some framework exports or has, one
    column per framework of ``frameworks``."""
    lines = [
        "| estimator | " + " | ".join(f.name for f in frameworks) + " |",
        "|---" * (1 + len(frameworks)) + "|",
    ]
    for what in DRIVING:
        cells = [_cell(f, what) for f in frameworks]
        if any(c != "–" for c in cells):
            lines.append(f"| `{what}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
