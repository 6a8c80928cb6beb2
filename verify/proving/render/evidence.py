"""The report's evidence section for people: per source, its counts and notes, and every table
of numbers it carries, found by shape rather than by name.

A source's entry (``report.evidence["sources"][i]``, docs/report-schema.md) is rendered
generically: ``notes`` as a list, with the entries of each key that maps names to texts (the
estimators a log cannot weigh, say); each key whose value maps names to numbers (the frameworks'
dashboard metrics, ``framework_metrics``) as a two-column table; each key whose value maps
names to such mappings (one row per estimator of the weight diagnostics, say) as one table with
a column per number's name. Anything else (files, the runtime envelope, the support-shift test)
stays in the JSON report. A new section of either shape is rendered with no change here.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["NumberTable", "evidence_html", "evidence_markdown", "name_html", "number_tables"]

# the counts shown on a source's first line, when present, in this order
_COUNTS = (
    ("tokens", "tokens"),
    ("sequences", "sequences"),
    ("malformed_lines", "malformed lines"),
    ("token_id_mismatches", "token-id mismatches"),
    ("unpaired_records", "unpaired records"),
)


def _is_number(v) -> bool:
    return v is None or (isinstance(v, int | float) and not isinstance(v, bool))


def _flat(v) -> bool:
    return isinstance(v, Mapping) and bool(v) and all(_is_number(x) for x in v.values())


def _texts(v) -> bool:
    return isinstance(v, Mapping) and bool(v) and all(isinstance(x, str) for x in v.values())


def _nested(v) -> bool:
    return isinstance(v, Mapping) and bool(v) and all(_flat(x) for x in v.values())


@dataclass(frozen=True)
class NumberTable:
    """One table of a source: its key, its column names, and one ``(name, cells)`` per row."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, tuple], ...]


def number_tables(source: Mapping) -> list[NumberTable]:
    """Every table of numbers in ``source``, in its key order."""
    out = []
    for key, value in source.items():
        if _flat(value):
            rows = tuple((str(k), (v,)) for k, v in value.items())
            out.append(NumberTable(key, ("value",), rows))
        elif _nested(value):
            columns: list[str] = []
            for inner in value.values():
                columns += [str(k) for k in inner if str(k) not in columns]
            rows = tuple(
                (str(k), tuple(inner.get(c) for c in columns)) for k, inner in value.items()
            )
            out.append(NumberTable(key, tuple(columns), rows))
    return out


def _number(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, int):
        return str(v)
    return f"{v:.6g}" if math.isfinite(v) else str(v)


def _title(source: Mapping, i: int) -> str:
    label = source.get("label") or f"source {i}"
    return f"{label} ({source['kind']})" if "kind" in source else str(label)


def _counts(source: Mapping) -> str:
    return ", ".join(
        f"{source[k]} {words}" for k, words in _COUNTS if isinstance(source.get(k), int)
    )


def _notes(source: Mapping) -> list[str]:
    """The source's notes, then each name -> text mapping's entries as ``key: name: text``."""
    notes = source.get("notes")
    out = [str(n) for n in notes] if isinstance(notes, list | tuple) else []
    for key, value in source.items():
        if _texts(value):
            out += [f"{key}: {name}: {text}" for name, text in value.items()]
    return out


def evidence_markdown(evidence: Mapping | None) -> list[str]:
    """The ``## Evidence`` section's lines."""
    out = ["## Evidence", ""]
    if not evidence or not evidence.get("sources"):
        return [*out, "No evidence was given."]
    for i, source in enumerate(evidence["sources"]):
        out += [f"### {_cell(_title(source, i))}", ""]
        if counts := _counts(source):
            out += [counts, ""]
        if notes := _notes(source):
            out += [f"- note: {_cell(n)}" for n in notes] + [""]
        for t in number_tables(source):
            out += [f"**{_cell(t.title)}**", ""]
            out.append("| name | " + " | ".join(_cell(c) for c in t.columns) + " |")
            out.append("|---" * (len(t.columns) + 1) + "|")
            for name, cells in t.rows:
                out.append(f"| {_cell(name)} | " + " | ".join(map(_number, cells)) + " |")
            out.append("")
    return out


def evidence_html(evidence: Mapping | None) -> list[str]:
    """The evidence section as HTML lines (each table in a box that scrolls on its own)."""
    e = html.escape
    out = ["<h2>Evidence</h2>"]
    if not evidence or not evidence.get("sources"):
        return [*out, "<p>No evidence was given.</p>"]
    for i, source in enumerate(evidence["sources"]):
        out.append(f"<h3>{e(_title(source, i))}</h3>")
        if counts := _counts(source):
            out.append(f"<p>{e(counts)}</p>")
        if notes := _notes(source):
            out.append("<ul>" + "".join(f"<li>note: {e(n)}</li>" for n in notes) + "</ul>")
        for t in number_tables(source):
            head = "".join(f"<th>{name_html(c)}</th>" for c in t.columns)
            out.append(f'<h4>{e(t.title)}</h4><div class="wide"><table><tr><th>name</th>{head}')
            out.append("</tr>")
            for name, cells in t.rows:
                row = "".join(f'<td class="n">{_number(v)}</td>' for v in cells)
                out.append(f"<tr><td>{name_html(name)}</td>{row}</tr>")
            out.append("</table></div>")
    return out


def name_html(text: str) -> str:
    """A name for a table cell, escaped: it may wrap after an underscore or a slash
    (``rollout_corr/rollout_is_mean``), never inside a word or a number."""
    out = html.escape(text)
    for mark in ("_", "/"):
        out = out.replace(mark, f"{mark}<wbr>")
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
