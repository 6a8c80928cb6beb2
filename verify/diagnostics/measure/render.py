"""The drift table as text, CSV and JSON, the per-token table as CSV, and the progress bar."""

from __future__ import annotations

import csv
import io
import json
import math

__all__ = ["TOKEN_COLUMNS", "ProgressBar", "table_csv", "to_json", "to_text", "tokens_csv"]

_TEXT = (  # (column, header, format)
    ("preset", "preset", "{:<20}"),
    ("batch", "batch", "{:>5}"),
    ("length", "length", "{:>9}"),
    ("tokens", "tokens", "{:>6}"),
    ("drift_mean", "drift mean", "{:>10.3g}"),
    ("drift_max", "drift max", "{:>10.3g}"),
    ("tv_mean", "TV mean", "{:>9.3g}"),
    ("tv_max", "TV max", "{:>9.3g}"),
    ("abs_log_w_q50", "|log w| p50", "{:>11.3g}"),
    ("abs_log_w_q90", "p90", "{:>9.3g}"),
    ("abs_log_w_q99", "p99", "{:>9.3g}"),
    ("abs_log_w_max", "max", "{:>9.3g}"),
    ("top1_flip_rate", "flip rate", "{:>9.3g}"),
)


def _rows(result) -> list[dict]:
    """The table's rows, presets in the order they were asked for."""
    from kernel_contracts.evidence.drift import table_rows

    order = {p: i for i, p in enumerate(result["meta"]["presets"])}
    return sorted(table_rows(result["table"]), key=lambda r: order[r["preset"]])


def to_text(result) -> str:
    meta = result["meta"]
    head = (
        f"drift table: {meta['model']}, K_train {meta['train']}, {meta['prompts']} "
        f"({meta['prompt_tokens']} tokens each) + {meta['new_tokens']} generated, "
        f"T = {meta['temperature']}, seed {meta['seed']}, {meta['devices']} device(s)\n"
    )
    widths = [len(fmt.format(0 if "g" in fmt else "")) for _, _, fmt in _TEXT]
    headers = [h for _, h, _ in _TEXT]
    lines = [
        " ".join(
            h.rjust(w) if i else h.ljust(w)
            for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        )
    ]
    for row in _rows(result):
        row = dict(row, length=f"{row['length_lo']}-{row['length_hi']}")
        cells = []
        for key, _, fmt in _TEXT:
            value = row[key]
            cells.append(fmt.format(value) if not _nan(value) else fmt.format("-"))
        line = " ".join(cells)
        if row["nonfinite"]:
            line += f"  ({row['nonfinite']} non-finite)"
        lines.append(line)
    return head + "\n".join(lines) + "\n"


def _nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def table_csv(result) -> str:
    from kernel_contracts.evidence.drift import ROW_COLUMNS

    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(ROW_COLUMNS), lineterminator="\n")
    w.writeheader()
    for row in _rows(result):
        w.writerow({k: "" if _nan(v) else v for k, v in row.items()})
    return out.getvalue()


def to_json(result) -> str:
    from kernel_contracts.evidence.drift import ROW_COLUMNS

    rows = [{k: None if _nan(v) else v for k, v in row.items()} for row in _rows(result)]
    doc = {"settings": result["meta"], "columns": list(ROW_COLUMNS), "rows": rows}
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


TOKEN_COLUMNS = ("preset", "batch", "position")


def tokens_csv(result) -> str:
    from kernel_contracts.kernels.measurement.columns import MEASURED_COLUMNS

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([*TOKEN_COLUMNS, *MEASURED_COLUMNS])
    for preset, batch, cols in result["tokens"]:
        values = [cols["position"].tolist(), *(cols[k].tolist() for k in MEASURED_COLUMNS)]
        for rest in zip(*values, strict=True):
            w.writerow([preset, batch, *(repr(float(v)) if isinstance(v, float) else v
                                         for v in rest)])  # fmt: skip
    return out.getvalue()


class ProgressBar:
    """A progress bar of ``total`` rows on ``stream``, drawn only when it is a terminal."""

    WIDTH = 30

    def __init__(self, stream, total: int):
        self.stream, self.total, self.rows, self.label = stream, total, 0, ""
        isatty = getattr(stream, "isatty", None)
        self.on = bool(isatty and isatty())

    def advance(self, rows: int) -> None:
        """``rows`` more rows are done."""
        self.rows += rows
        if self.on:
            filled = self.WIDTH * self.rows // max(self.total, 1)
            bar = "#" * filled + "." * (self.WIDTH - filled)
            self.stream.write(f"\rmeasure [{bar}] {self.rows}/{self.total} {self.label:<28}")
            self.stream.flush()

    def done(self) -> None:
        """End the bar's line."""
        if self.on:
            self.stream.write("\n")
