"""Markdown and self-contained HTML renderings of a report, for people.

Both render the same ``Report`` record as the JSON form. The HTML page has inline CSS and no
external assets; formulas are shown as MathML (rendered natively by browsers) beside their
plain text, every verdict carries its colour, each bound is drawn against its threshold (an
inline SVG, ``render.chart``), and a summary says what the verdict means for the policy
gradient.
"""

from __future__ import annotations

import html

from kernel_contracts.verify.proving.obligations import (
    Obligation,
    decimal,
    expr_mathml,
    expr_text,
    rational,
)
from kernel_contracts.verify.proving.render.chart import bound_chart, verdict_summary
from kernel_contracts.verify.proving.render.evidence import (
    evidence_html,
    evidence_markdown,
    name_html,
)
from kernel_contracts.verify.proving.render.report import Report

__all__ = ["to_html", "to_markdown"]

_COLOURS = {
    "proved": "#1a7f37",
    "held": "#1a7f37",
    "skipped": "#6e7781",
    "unknown": "#9a6700",
    "inconclusive": "#9a6700",
    "unchecked": "#9a6700",
    "refuted": "#cf222e",
    "violated": "#cf222e",
    "invalid": "#cf222e",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _num(v) -> str:
    return "—" if v is None else f"{float(v):.6g}"


def _interval(o: Obligation) -> str:
    if o.bound_interval is None:
        return "—"
    lo, hi = o.bound_interval
    return f"[{decimal(lo, 17)}, {decimal(hi, 17)}]"


def _cex(o: Obligation) -> str:
    c = o.counterexample
    if c is None:
        return ""
    point = ", ".join(f"{k} = {decimal(v, 12)} ({rational(v)})" for k, v in c.point)
    return f"{point}; bound there ≥ {decimal(c.value[0], 12)} ({c.source})"


def _used(o: Obligation) -> str:
    """The premises the proof used (its unsat core's premise names)."""
    return ", ".join(n[8:] for n in o.unsat_core if n.startswith("premise_")) or "—"


def _detail_lines(o: Obligation) -> list[tuple[str, str]]:
    rows = [
        ("statement", o.statement),
        ("premises", ", ".join(o.premises) or "—"),
        ("lemma chain", " → ".join(o.chain) or "—"),
        ("bound", expr_text(o.expr) if o.expr is not None else "—"),
        ("LaTeX", o.latex or "—"),
        ("bound at the worst point", f"{_num(o.bound)} ∈ {_interval(o)}"),
        ("threshold", f"{_num(o.threshold)} ({rational(o.threshold)})"),
        ("unsat core", ", ".join(o.unsat_core) or "—"),
    ]
    if o.counterexample:
        rows.append(("counterexample", _cex(o)))
    for name, formula, value in o.alternatives:
        rows.append((f"alternative: {name}", f"{formula} = {value:.6g}"))
    if o.route:
        rows.append(("route", o.route))
    rows += [("note", n) for n in o.notes]
    if o.reason:
        rows.append(("reason", o.reason))
    rows.append(("time", f"{o.time_ms:.1f} ms, {len(o.queries)} deciding queries"))
    return rows


_SUPPORT_TEXT = (
    "What the evidence says of the clauses each guarantee rests on: held (every premise held), "
    "unchecked (a premise no evidence decided: exit 3), violated (a premise the evidence "
    "contradicts: exit 1)."
)
_SUPPORT_LABEL = {"held": "held", "violated": "violated", "inconclusive": "unchecked"}


def to_markdown(report: Report) -> str:
    """The report as Markdown."""
    s = report.status
    c = report.contract
    out = [
        f"# Kernel contract report: {c.name}",
        "",
        f"**Verdict: {s.label.upper()}** (exit code {s.exit_code})",
        "",
        f"- contract: `{c.path}` (sha256 `{c.sha256}`)",
        f"- toolkit {report.toolkit}, Python {report.python}, "
        + ", ".join(f"{k} {v or 'not installed'}" for k, v in report.solvers.items()),
        "",
        "## Obligations",
        "",
        "| id | quantity | verdict | bound | threshold | premises used | time (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in report.obligations:
        out.append(
            f"| {o.id} | {o.quantity} | **{o.status.label}** | {_num(o.bound)} | "
            f"{_num(o.threshold)} | {_used(o)} | {o.time_ms:.1f} |"
        )
    for o in report.obligations:
        out += ["", f"### {o.id}: {o.quantity} — {o.status.label}", ""]
        out += [f"- **{k}**: {_cell(v)}" for k, v in _detail_lines(o)]
        for i, q in enumerate(o.queries):
            out += [
                "",
                f"<details><summary>SMT-LIB2 query {i}: expected {q.expected}, got {q.answer}"
                "</summary>",
                "",
                "```smt2",
                q.text.rstrip(),
                "```",
                "",
                "</details>",
            ]
    out += ["", "## Clauses", ""]
    out += [
        "| id | family | slice | verdict | metric | statistic | value | bound | max | samples "
        "| reason |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.clauses:
        out.append(
            f"| {r.id} | {r.family} | {r.slice} | **{r.status.label}** | {r.metric} | "
            f"{r.statistic} | {_num(r.value)} | {_num(r.bound)} | {_num(r.threshold)} | "
            f"{r.samples} | {_cell(r.reason)} |"
        )
    out += ["", "## Premises", "", _SUPPORT_TEXT, ""]
    if not report.support:
        out.append("No evidence was given: the proofs rest on the premises as stated.")
    for p in report.support:
        shown = ", ".join(f"{k}: {v.label}" for k, v in p.premises) or "none"
        out.append(f"- {p.guarantee}: **{_SUPPORT_LABEL[p.status.label]}** ({shown}): {p.reason}")
    out += ["", *evidence_markdown(report.evidence)]
    out += ["", "## Escalation", ""]
    if not report.escalation:
        out.append("No escalation rules.")
    for d in report.escalation:
        mark = "**fired**" if d.fired else "not fired"
        seen = ", ".join(d.observed) or "no verdict"
        out.append(f"- {d.clause} ({seen}): {mark} → {d.severity}: {d.action}")
    out += ["", "## Timing (ms)", ""]
    out += [f"- {k}: {v:.1f}" for k, v in report.timing.items()]
    return "\n".join(out) + "\n"


# The page never scrolls sideways: tables take the page's width and wrap their cells between
# words (a word is broken only when it alone is wider than its cell; numbers never break); a
# table or formula still too wide scrolls inside its own box (.wide), which clips nothing
# vertically and so shows a scrollbar only when the content is wider than the page. Formulas
# keep a readable size: a browser shrinks every nested script and fraction level by about 0.7,
# which makes a long bound's innermost terms a few pixels high, so here only scripts shrink,
# once per level, and never below 12px.
_CSS = """
body{font:15px/1.5 system-ui,sans-serif;max-width:70em;margin:2em auto;padding:0 1em;color:#1f2328}
h1{font-size:1.6em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em}
.wide{max-width:100%;overflow-x:auto;overflow-y:hidden}.formula{padding:.4em 0}
table{border-collapse:collapse;margin:.5em 0;width:100%}td,th{border:1px solid #d0d7de;
padding:.25em .35em;text-align:left;vertical-align:top;overflow-wrap:break-word;hyphens:none}
th{background:#f6f8fa}td.n{white-space:nowrap;font-variant-numeric:tabular-nums}
td.r{min-width:16em}table{font-size:14px}
.badge{color:#fff;border-radius:1em;padding:.05em .7em;font-weight:600;white-space:nowrap}
.verdict{font-size:1.3em}.summary{background:#f6f8fa;border-left:4px solid #d0d7de;padding:.5em 1em}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto;font-size:12px}
svg.bound-chart{display:block;max-width:100%;height:auto;margin:.3em 0}
dl{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:.2em 1em}dt{font-weight:600}
dd{margin:0;overflow-wrap:break-word}code{font-size:.92em}
math{font-size:18px;math-style:normal}math *{font-size:inherit}
msub>:not(:first-child),msup>:not(:first-child),msubsup>:not(:first-child),
munder>:not(:first-child),mover>:not(:first-child),munderover>:not(:first-child),
mmultiscripts>:not(:first-child),mroot>:last-child{font-size:max(12px,.8em)}
"""


def _badge(label: str) -> str:
    colour = _COLOURS.get(label, "#6e7781")
    return f'<span class="badge" style="background:{colour}">{html.escape(label)}</span>'


def _mathml(o: Obligation) -> str:
    body = expr_mathml(o.expr) if o.expr is not None else None
    if body is None:
        return ""
    return f'<div class="wide formula"><math display="block">{body}</math></div>'


def to_html(report: Report) -> str:
    """The report as one self-contained HTML page."""
    e = html.escape
    s = report.status
    c = report.contract
    solvers = ", ".join(f"{k} {v or 'not installed'}" for k, v in report.solvers.items())
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(c.name)}: {s.label}</title><style>{_CSS}</style></head><body>",
        f"<h1>Kernel contract report: {e(c.name)}</h1>",
        f'<p class="verdict">Verdict: {_badge(s.label)} (exit code {s.exit_code})</p>',
        f'<p class="summary">{verdict_summary(report)}</p>',
        f"<p>contract <code>{e(c.path)}</code>, sha256 <code>{e(c.sha256)}</code><br>",
        f"toolkit {e(report.toolkit)}, Python {e(report.python)}, {e(solvers)}</p>",
        '<h2>Obligations</h2><div class="wide"><table><tr><th>id</th><th>quantity</th>',
        "<th>verdict</th>",
        "<th>bound</th><th>threshold</th><th>premises used</th><th>time (ms)</th></tr>",
    ]
    for o in report.obligations:
        out.append(
            f"<tr><td>{name_html(o.id)}</td><td>{name_html(o.quantity)}</td>"
            f"<td>{_badge(o.status.label)}</td>"
            f'<td class="n">{_num(o.bound)}</td><td class="n">{_num(o.threshold)}</td>'
            f'<td>{e(_used(o))}</td><td class="n">{o.time_ms:.1f}</td></tr>'
        )
    out.append("</table></div>")
    for o in report.obligations:
        out.append(f"<h3>{e(o.id)}: {e(o.quantity)} {_badge(o.status.label)}</h3>")
        out.append(bound_chart(o))
        out.append(_mathml(o))
        out.append("<dl>")
        out += [f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in _detail_lines(o)]
        out.append("</dl>")
        for i, q in enumerate(o.queries):
            out.append(
                f"<details><summary>SMT-LIB2 query {i}: expected {e(q.expected)}, got "
                f"{e(q.answer)}</summary><pre>{e(q.text)}</pre></details>"
            )
    out.append(
        '<h2>Clauses</h2><div class="wide"><table><tr><th>id</th><th>family</th><th>slice</th>'
    )
    out.append("<th>verdict</th><th>metric</th><th>statistic</th><th>value</th><th>bound</th>")
    out.append("<th>max</th><th>samples</th><th>reason</th></tr>")
    for r in report.clauses:
        out.append(
            f"<tr><td>{name_html(r.id)}</td><td>{e(r.family)}</td><td>{name_html(r.slice)}</td>"
            f"<td>{_badge(r.status.label)}</td><td>{name_html(r.metric)}</td>"
            f"<td>{name_html(r.statistic)}</td>"
            f'<td class="n">{_num(r.value)}</td><td class="n">{_num(r.bound)}</td>'
            f'<td class="n">{_num(r.threshold)}</td><td class="n">{r.samples}</td>'
            f'<td class="r">{e(r.reason)}</td></tr>'
        )
    out.append(f"</table></div><h2>Premises</h2><p>{e(_SUPPORT_TEXT)}</p><ul>")
    if not report.support:
        out.append("<li>No evidence was given: the proofs rest on the premises as stated.</li>")
    for p in report.support:
        shown = ", ".join(f"{k}: {v.label}" for k, v in p.premises) or "none"
        out.append(f"<li>{e(p.guarantee)}: {_badge(_SUPPORT_LABEL[p.status.label])} "
                   f"({e(shown)}): {e(p.reason)}</li>")  # fmt: skip
    out.append("</ul>")
    out += evidence_html(report.evidence)
    out.append("<h2>Escalation</h2><ul>")
    if not report.escalation:
        out.append("<li>No escalation rules.</li>")
    for d in report.escalation:
        fired = _badge("fired") if d.fired else "not fired"
        seen = ", ".join(d.observed) or "no verdict"
        out.append(f"<li>{e(d.clause)} ({e(seen)}): {fired} → {e(d.severity)}: {e(d.action)}</li>")
    out.append("</ul><h2>Timing (ms)</h2><ul>")
    out += [f"<li>{e(k)}: {v:.1f}</li>" for k, v in report.timing.items()]
    out.append("</ul></body></html>")
    return "\n".join(out) + "\n"
