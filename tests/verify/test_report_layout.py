"""The Markdown and HTML reports show the evidence's tables of numbers (the frameworks'
dashboard metrics, and any section of the same shapes), and the HTML page fits its window with
readable formulas in a real headless browser (Chromium; skipped, with the reason, where none is
installed)."""

from __future__ import annotations

import json
import pathlib
import shutil
import struct
import subprocess

import pytest

from kernel_contracts.verify.proving.render.evidence import (
    evidence_html,
    evidence_markdown,
    name_html,
    number_tables,
)
from tests.support.cli_runner import run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOG = ROOT / "contracts" / "examples" / "rollout-sample.jsonl"
# a long formula (sequence TV at L = 4,096 through Pinsker) and a clauses table with long reasons
CONTRACT = f"""\
contract: 1
name: layout
policy: {{temperature: 1.0, vocab_size: 256, max_new_tokens: 4096}}
kernels: {{train: {{preset: fp32}}, inference: {{preset: h100-fp8}}}}
numerical:
  - {{id: N_is_cap, metric: log_ratio, max: 0.6931, slice: all}}
  - {{id: N_drift, metric: logit_drift, max: 0.02, slice: all}}
statistical:
  - {{id: S_tv, metric: tv, statistic: quantile, q: 0.9, max: 0.05, confidence: 0.95,
     slices: [all, tail_tokens]}}
slices:
  tail_tokens: {{token_prob: [0, 0.05]}}
guarantees:
  - {{id: G_seq, quantity: sequence_tv, max: 0.1, from: [N_drift]}}
  - {{id: G_tis, quantity: pg_bias, score_norm: 5.0, advantage: 1.0, estimator: tis, cap: 2.0,
     max: 0.5, from: [N_drift]}}
  - {{id: G_ice, quantity: pg_bias, score_norm: 5.0, advantage: 1.0, estimator: icepop,
     band: [0.5, 2.0], max: 0.5, from: [N_drift]}}
evidence:
  logprobs: {{path: {json.dumps(str(LOG))}, format: generic}}
"""
READABLE_PX = 12  # no glyph of a formula smaller than this
WIDTHS = (640, 1200)  # narrower than the page's widest table and formula; a desktop window


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("layout")
    (root / "c.yaml").write_text(CONTRACT, encoding="utf-8")
    paths = {k: root / f"r.{k}" for k in ("json", "md", "html")}
    code, _, err = run_cli(
        root / "c.yaml", "--quiet", "--json", paths["json"], "--markdown", paths["md"],
        "--html", paths["html"],
    )  # fmt: skip
    assert code in (1, 3) and err == "", err
    return {k: p.read_text(encoding="utf-8") if k != "html" else p for k, p in paths.items()}


def _shown(v) -> str:
    return "—" if v is None else str(v) if isinstance(v, int) else f"{v:.6g}"


def test_both_documents_show_every_framework_metric(reports):
    (source,) = json.loads(reports["json"])["evidence"]["sources"]
    metrics = source["framework_metrics"]
    assert len(metrics) > 10
    page = reports["html"].read_text(encoding="utf-8")
    for name, value in metrics.items():
        assert f"| {name} | {_shown(value)} |" in reports["md"]
        assert f'<tr><td>{name_html(name)}</td><td class="n">{_shown(value)}</td></tr>' in page
    assert "4096 tokens, 64 sequences, 0 malformed lines" in reports["md"]


def test_both_documents_show_the_weight_diagnostics_of_every_estimator(reports):
    (source,) = json.loads(reports["json"])["evidence"]["sources"]
    weights = source["weight_diagnostics"]
    assert len(weights) == 2  # tis and icepop, one row each
    page = reports["html"].read_text(encoding="utf-8")
    columns = list(dict.fromkeys(k for row in weights.values() for k in row))
    assert "| name | " + " | ".join(columns) + " |" in reports["md"]
    for estimator, row in weights.items():
        cells = [_shown(row.get(c)) for c in columns]
        assert f"| {estimator} | " + " | ".join(cells) + " |" in reports["md"]
        row = "".join(f'<td class="n">{c}</td>' for c in cells)
        assert f"<tr><td>{name_html(estimator)}</td>{row}" in page


def test_any_table_of_numbers_is_rendered_whatever_its_name():
    # the shapes a source's sections take: name -> number, and name -> (name -> number)
    source = {
        "kind": "logprobs",
        "label": "run.jsonl",
        "tokens": 10,
        "notes": ["policy.vocab_size not given"],
        "per_estimator": {
            "tis": {"ess": 0.9, "clip_fraction": 0.01, "weight_max": 2.0},
            "icepop": {"ess": 0.8, "mask_fraction": 0.05, "weight_max": 1.5},
        },
        "flat": {"a/b": 1, "c": None},
        "not_numbers": {"x": "text", "y": 1},
        "flags": {"detected": False},
        "skipped": {"seq_is": "needs whole sequences"},
    }
    tables = number_tables(source)
    assert [t.title for t in tables] == ["per_estimator", "flat"]
    assert tables[0].columns == ("ess", "clip_fraction", "weight_max", "mask_fraction")
    assert tables[0].rows[1] == ("icepop", (0.8, None, 1.5, 0.05))
    md = "\n".join(evidence_markdown({"sources": [source]}))
    assert "| name | ess | clip_fraction | weight_max | mask_fraction |" in md
    assert "| tis | 0.9 | 0.01 | 2 | — |" in md
    assert "| a/b | 1 |" in md and "| c | — |" in md
    assert "- note: policy.vocab_size not given" in md and "text" not in md
    assert "- note: skipped: seq_is: needs whole sequences" in md
    page = "\n".join(evidence_html({"sources": [source]}))
    cells = "".join(f'<td class="n">{v}</td>' for v in ("0.8", "—", "1.5", "0.05"))
    assert f"<tr><td>icepop</td>{cells}</tr>" in page
    assert evidence_markdown(None)[-1] == "No evidence was given."


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if found := shutil.which(name):
            return found
    return None


# measures the laid-out page and appends the numbers as JSON in a <pre> for --dump-dom
_MEASURE = """<script>
window.addEventListener('load', () => {
  const leaves = [...document.querySelectorAll('math *')].filter(
    e => e.children.length === 0 && e.textContent.trim() !== '');
  const pre = document.createElement('pre');
  pre.id = 'layout';
  pre.textContent = JSON.stringify({
    width: window.innerWidth,
    scrollWidth: document.documentElement.scrollWidth,
    glyphs: leaves.map(e => parseFloat(getComputedStyle(e).fontSize)),
    tables: [...document.querySelectorAll('table')].map(t => t.getBoundingClientRect().right),
    boxes: [...document.querySelectorAll('.wide')].map(b => b.getBoundingClientRect().right),
    formulas: [...document.querySelectorAll('.formula')].map(
      b => [b.scrollWidth - b.clientWidth, b.scrollHeight - b.clientHeight]),
  });
  document.body.appendChild(pre);
});
</script>"""


def _run(browser, tmp_path, width, *args) -> str:
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},900", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_page_fits_its_window_with_readable_formulas(reports, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium installed (the OS package chromium): the layout is not checked")
    page = reports["html"].read_text(encoding="utf-8")
    measured = tmp_path / "measured.html"
    measured.write_text(page.replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    for width in WIDTHS:
        dom = _run(browser, tmp_path, width, "--virtual-time-budget=5000", "--dump-dom",
                   measured.as_uri())  # fmt: skip
        text = dom.split('<pre id="layout">', 1)[1].split("</pre>", 1)[0]
        got = json.loads(text.replace("&quot;", '"'))
        assert got["width"] == width
        assert got["scrollWidth"] <= width, got  # no horizontal overflow of the page
        # a table wider than the window (words are never broken to fit) scrolls in its box
        assert len(got["tables"]) == 4 and max(got["boxes"]) <= width, got
        if width >= 1200:  # on a desktop window the obligations and clauses fit, and no
            assert max(got["tables"][:2]) <= width, got  # formula box needs a scrollbar
            assert got["formulas"] and all(f == [0, 0] for f in got["formulas"]), got
        assert len(got["glyphs"]) > 50 and min(got["glyphs"]) >= READABLE_PX, got
    shot = tmp_path / "shot.png"  # the narrowest window, as a person would see it
    _run(browser, tmp_path, WIDTHS[0], f"--screenshot={shot}", reports["html"].as_uri())
    head = shot.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (WIDTHS[0], 900)


def test_the_html_page_has_its_chart_summary_and_premises_column(reports):
    """Words break only between words, the obligations table has the Markdown's column of
    premises used, each bound has its chart against its threshold, and the verdict is said in
    words for the policy gradient."""
    page = reports["html"].read_text(encoding="utf-8")
    doc = json.loads(reports["json"])
    css = page.split("<style>", 1)[1].split("</style>", 1)[0]
    assert "anywhere" not in css and "break-all" not in css  # no mid-word break
    assert "overflow-wrap:break-word" in css and "td.n{white-space:nowrap" in css
    head = page.split("<h2>Obligations</h2>", 1)[1].split("</tr>", 1)[0]
    assert "<th>premises used</th>" in head
    bounded = [o for o in doc["obligations"] if o["bound"] is not None]
    charts = page.split('<svg class="bound-chart"')[1:]
    assert len(bounded) == len(doc["obligations"]) == 3 and len(charts) == 3
    for o, chart in zip(bounded, charts, strict=True):
        assert f'data-bound="{o["bound"]!r}"' in chart and "</svg>" in chart
        assert 'class="threshold"' in chart and 'class="bound"' in chart
        assert f"<title>{o['id']}: bound" in chart
    assert "<script" not in page and "http://" not in page  # an inline SVG needs no xmlns
    summary = page.split('<p class="summary">', 1)[1].split("</p>", 1)[0]
    assert doc["status"] in ("violated", "inconclusive", "unknown", "refuted")
    assert "policy gradient" in summary and "pg_bias" in summary and "sequence_tv" in summary
