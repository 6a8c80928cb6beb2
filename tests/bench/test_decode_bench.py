"""The decoding benchmark (``bench/bench_decode.py``) runs and checks its bits against a
reference file (the CPU-to-GPU comparison of its docstring)."""

from __future__ import annotations

import io
import json

from tests.bench.support import bench_module

bench = bench_module("bench_decode")
ARGS = ["--batch", "2", "--prompt", "3", "--new-tokens", "2", "--repeats", "1"]


def test_it_decodes_and_a_reference_checks_the_bits(tmp_path):
    ref = tmp_path / "ref.json"
    out = io.StringIO()
    assert bench.main([*ARGS, "--presets", "h100-fp8", "--write-reference", str(ref)],
                      stdout=out) == 0  # fmt: skip
    assert "| h100-fp8 (emulated) |" in out.getvalue()
    out = io.StringIO()
    assert bench.main([*ARGS, "--presets", "h100-fp8", "--reference", str(ref)], stdout=out) == 0
    assert "emulated logits: same bits" in out.getvalue()
    data = json.loads(ref.read_text(encoding="utf-8"))
    data["logits_sha256"]["h100-fp8"] = "0" * 64  # another machine's bits
    ref.write_text(json.dumps(data), encoding="utf-8")
    out = io.StringIO()
    assert bench.main([*ARGS, "--presets", "h100-fp8", "--reference", str(ref)], stdout=out) == 1
    assert "DIFFER for ['h100-fp8']" in out.getvalue()
