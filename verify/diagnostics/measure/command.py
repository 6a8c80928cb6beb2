"""``python -m verify measure``: the drift table of a model's kernel pairs, per preset and slice.

For each inference preset (``--presets``, default the five float presets) at each serving batch
(``--batch``, default 1 and 16), K_inf generates ``--new-tokens`` tokens after each prompt and
K_train (``--train``, default fp32) teacher-forces them (``verify.diagnostics.measure.run``).
Every generated token is measured over the full vocabulary and the tokens are cut into slices
by the sequence length at which they were generated. Each row of the table (one preset, batch
and length slice) gives the token count, the mean and max logit drift ‖Δ‖∞, the mean and max
TV, the 50/90/99 % quantiles and max of |log w| and the top-1 flip rate
(``evidence.drift``: mergeable cells, so tables of several runs or hosts combine exactly).

The model is the shipped ``tiny-lm`` (default), a Hugging Face checkpoint folder, ``--model
hf:FOLDER`` (its ``config.json`` checked before JAX is imported), or a GGUF file, ``--model
gguf:FILE``; prompts come from ``--prompts FILE`` (UTF-8, one per non-blank line, cut to the
shortest with a warning that counts the prompts cut; with ``--chat-template`` each line is a
user message rendered through the GGUF file's chat template and served whole, and the rendered
prompts must encode to one length) or ``--count`` windows: the shipped model's
held-out text, or tokens drawn uniformly (seeded) from a checkpoint's vocabulary, which needs no
tokenizer (``verify.diagnostics.measure.prompts``). A progress bar is drawn on standard error
when it is a terminal.

Outputs: the table on standard output; ``--csv PATH`` the same table as CSV, ``--json PATH``
the table with the run's settings, ``--tokens PATH`` one CSV row per generated token (preset,
batch, and every measured column: the per-token table the notebooks plot). Paths are checked
before any work and written all or nothing. Exit codes: 0 done; 2 unusable input (a missing
or unreadable prompt file, an unknown preset or model, a bad checkpoint, lengths the model
cannot run, an unusable output path), nothing written.
"""

from __future__ import annotations

import math

__all__ = ["measure_main"]

DEFAULT_PRESETS = ("fp32", "bf16", "h100-fp8", "h100-fp8-fast-accum", "mxfp8")


def measure_main(argv: list[str], *, stdout, stderr) -> int:
    """The ``measure`` command on ``argv`` (the words after ``measure``)."""
    from kernel_contracts import contracts
    from kernel_contracts.contracts.checks import VALUE_CUTOFF, did_you_mean
    from kernel_contracts.contracts.sections import GGUF_PREFIX
    from kernel_contracts.verify.common import outputs
    from kernel_contracts.verify.common.arguments import measure_parser
    from kernel_contracts.verify.common.inputs import prepare_outputs
    from kernel_contracts.verify.diagnostics.measure.prompts import MeasureError, read_prompts
    from kernel_contracts.verify.diagnostics.measure.run import check_model

    args = measure_parser(stdout, stderr).parse_args(argv)
    presets = args.presets or list(DEFAULT_PRESETS)
    unknown = [p for p in [*presets, args.train] if p not in contracts.PRESETS]
    if unknown:
        hint = did_you_mean(unknown[0], contracts.PRESETS, VALUE_CUTOFF)
        stderr.write(f"verify measure: unknown preset {unknown[0]!r}{hint}; known: "
                     f"{', '.join(contracts.PRESETS)}\n")  # fmt: skip
        return 2
    if not math.isfinite(args.temperature) or args.temperature <= 0:
        stderr.write(f"verify measure: --temperature must be positive, got {args.temperature}\n")
        return 2
    named = [("--csv", args.csv), ("--json", args.json), ("--tokens", args.tokens)]
    inputs = [("the prompt file", args.prompts)] if args.prompts else []
    target = prepare_outputs(named, inputs, stderr)
    if target is None:
        return 2
    with target:
        try:
            check_model(args.model)  # a bad folder is refused before JAX is imported
            if args.chat_template and args.prompts is None:
                raise MeasureError("--chat-template needs --prompts FILE (one user message a line)")
            if args.chat_template and not args.model.startswith(GGUF_PREFIX):
                raise MeasureError(f"--chat-template needs a gguf: model, got --model {args.model}")
            if args.prompts is not None:
                read_prompts(args.prompts)  # a bad file is refused before any model loads
            result = _run(args, presets, stderr)
        except MeasureError as err:
            stderr.write(f"verify measure: {err}\n")
            return 2
        texts = _outputs(args, result)
        if texts:
            try:
                target.write(texts)
            except outputs.OutputError as err:
                stderr.write(f"verify: {err}\n")
                return 2
    from kernel_contracts.verify.diagnostics.measure.render import to_text

    stdout.write(to_text(result))
    return 0


def _run(args, presets: list[str], stderr) -> dict:
    """Every (preset, batch) setting measured: the drift table and the token rows."""
    import jax

    from kernel_contracts.evidence.drift import drift_cell
    from kernel_contracts.verify.diagnostics.measure.prompts import cut_warning, prompt_rows
    from kernel_contracts.verify.diagnostics.measure.render import ProgressBar
    from kernel_contracts.verify.diagnostics.measure.run import (
        length_slices,
        load_model,
        measure_setting,
    )

    loaded = load_model(args.model)
    made = prompt_rows(
        loaded, args.prompts, args.count, args.new_tokens, args.seed, chat=args.chat_template
    )
    warning = cut_warning(made)
    if warning is not None:
        stderr.write(f"verify measure: warning: {warning}\n")
    prompts = made.rows
    bar = ProgressBar(stderr, len(presets) * len(args.batch) * len(prompts))
    table, tokens = {}, []
    for preset in presets:
        for batch in args.batch:
            bar.label = f"{preset} @ {batch}"
            cols = measure_setting(
                loaded, prompts, train=args.train, preset=preset, batch=batch,
                new_tokens=args.new_tokens, temperature=args.temperature, seed=args.seed,
                progress=bar.advance,
            )  # fmt: skip
            for (lo, hi), keep in length_slices(cols["position"]).items():
                table[(preset, batch, lo, hi)] = drift_cell(
                    cols["logit_drift"][keep], cols["tv"][keep], cols["log_ratio"][keep],
                    cols["top1_flip"][keep],
                )  # fmt: skip
            tokens.append((preset, batch, cols))
    bar.done()
    meta = {
        "model": args.model,
        "prompts": made.source,
        "prompt_tokens": int(prompts.shape[1]),
        "prompts_cut": made.cut,
        "chat_template": args.chat_template,
        "presets": presets,
        "train": args.train,
        "new_tokens": args.new_tokens,
        "temperature": args.temperature,
        "seed": args.seed,
        "devices": len(jax.local_devices()),
    }
    return {"meta": meta, "table": table, "tokens": tokens}


def _outputs(args, result) -> list[str]:
    from kernel_contracts.verify.diagnostics.measure.render import table_csv, to_json, tokens_csv

    texts = []
    if args.csv is not None:
        texts.append(table_csv(result))
    if args.json is not None:
        texts.append(to_json(result))
    if args.tokens is not None:
        texts.append(tokens_csv(result))
    return texts
