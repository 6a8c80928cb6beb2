"""The main command's body, written once: ``python -m verify CONTRACT.yaml`` and, with a
``Stage``, a promotion stage (``verify.pipeline.promotion.stage``).

Every evidence file and output path is checked before any work; the contract is loaded and
verified (``verify.proving.runner``); the reports are rendered and written all or nothing
(``verify.common.outputs``), then the summary is printed. A stage adds its own usage check, two
files to the plan, a check once the contract is loaded, and its exit code.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Protocol

from kernel_contracts.verify.common.inputs import (
    declared_evidence_problem,
    given_evidence_problem,
    load_contract,
    prepare_outputs,
    run_inputs,
)

__all__ = ["Stage", "run_and_render", "summary_text", "verify_main"]

_SUPPORT = {"violated": "violated", "inconclusive": "unchecked"}


class Stage(Protocol):
    """What a promotion stage adds to a run."""

    written: bool  # set once the run has written the reports and the stage's files

    def usage(self) -> str | None:
        """Why the stage's options are unusable (before anything is read), or ``None``."""

    def targets(self) -> list[tuple[str, str]]:
        """The (label, path) files the stage writes beside the reports."""

    def refuse(self, contract) -> str | None:
        """Why the stage cannot run on ``contract`` (a whole line), or ``None``."""

    def texts(self, contract, report_text: str) -> dict[str, str]:
        """The stage's files' texts, keyed by their labels, from the JSON report's text."""

    def finish(self, stdout) -> int:
        """Write the stage's lines after the summary; returns the exit code."""

    def abandon(self) -> None:
        """Undo what ``usage`` made (a new directory, still empty): the run wrote nothing."""


def _support_counts(support) -> list[tuple[str, int]]:
    counts = {}
    for p in support:
        if p.status.label in _SUPPORT:
            counts[_SUPPORT[p.status.label]] = counts.get(_SUPPORT[p.status.label], 0) + 1
    return sorted(counts.items())


def summary_text(report, quiet: bool) -> str:
    """The summary a run prints: one row per obligation, clause and unsupported guarantee and
    the evidence's notes (none when ``quiet``), then the verdict line."""
    from kernel_contracts.verify.proving.obligations import decimal

    rows = []
    if not quiet:
        for o in report.obligations:
            has_bound = o.bound_interval is not None
            detail = (
                f"bound {decimal(sum(o.bound_interval) / 2)} vs max {decimal(o.threshold)}"
                if has_bound
                else o.reason
            )
            if o.status.label == "unknown" and has_bound:
                detail += f" ({o.reason})"
            rows.append((o.id, o.quantity, o.status.label, detail))
        for c in report.clauses:
            what = f"{c.id}[{c.slice}]"
            if "@" in c.source:  # one setting of an emulation sweep
                what += "@" + c.source.split("@", 1)[1]
            detail = c.reason or (f"{c.statistic} bound {c.bound:.6g}" if c.bound else "")
            rows.append((what, c.family, c.status.label, detail))
        for p in report.support:
            if p.status.label != "held":
                rows.append((p.guarantee, "premises", _SUPPORT[p.status.label], p.reason))
    # the first column as wide as its longest entry (at least 14), so every row lines up
    width = max([14, *(len(r[0]) for r in rows)])
    lines = [f"{a:<{width}} {b:<16} {s:<12} {d}" for a, b, s, d in rows]
    if not quiet:  # how the evidence was read, where a reader must know it
        sources = (report.evidence or {}).get("sources", ())
        lines += [f"note: {n}" for source in sources for n in source.get("notes", ())]
    s = report.status
    lines.append(
        f"verdict: {s.label} (exit {s.exit_code}): {len(report.obligations)} obligations, "
        f"{len(report.clauses)} clause verdicts"
        + "".join(
            f", {n} guarantee(s) with {label} premises"
            for label, n in _support_counts(report.support)
        )
    )
    return "\n".join(lines) + "\n"


def _cache(cache, t_start: float):
    """The derivation cache the environment names; written only by a ``python -m verify``
    process (``verify.proving.cache.writer_start``; ``t_start`` is when ``main`` began)."""
    began = time.time() - (time.perf_counter() - t_start)
    return cache.locate(started=cache.writer_start(began))


def run_and_render(contract, args, stderr, t_start: float, t_import: float, *, trust_code: bool):
    """Verify ``contract`` and render its report: ``(report, texts)`` with the texts keyed by
    the output options (``--json``, ``--markdown``, ``--html``), or exit code 2 for unusable
    evidence (its message written). ``trust_code``: the consent to import a user model's
    module (``verify.common.consent``)."""
    from kernel_contracts.verify.proving import cache
    from kernel_contracts.verify.proving import runner as run
    from kernel_contracts.verify.proving.render.report import dumps
    from kernel_contracts.verify.proving.solve.budget import from_args

    try:
        report = run.run(
            contract, evidence_paths=args.evidence, budget=from_args(args),
            quiet=args.quiet, stderr=stderr,
            cache=None if getattr(args, "no_cache", False) else _cache(cache, t_start),
            trust_code=trust_code,
        )  # fmt: skip
    except Exception as err:
        if type(err).__name__ == "EvidenceError":
            stderr.write(f"{err}\n")
            return 2
        raise
    t_render = time.perf_counter()
    texts = {}
    if args.markdown is not None or args.html is not None:  # rendered only when asked for
        from kernel_contracts.verify.proving.render import documents as render

        if args.markdown is not None:
            texts["--markdown"] = render.to_markdown(report)
        if args.html is not None:
            texts["--html"] = render.to_html(report)
    timing = {"import": round((t_import - t_start) * 1000, 3), **report.timing}
    timing["render"] = round((time.perf_counter() - t_render) * 1000, 3)
    report = replace(report, timing=timing)
    texts["--json"] = dumps(report)
    return report, texts


def verify_main(args, stdout, stderr, t_start: float, *, stage: Stage | None = None) -> int:
    """Verify the contract ``args`` name and write its reports (and ``stage``'s files);
    returns the exit code (the stage's, when one is given)."""
    if stage is None:
        return _verify(args, stdout, stderr, t_start, None)
    try:
        code = _verify(args, stdout, stderr, t_start, stage)
    finally:
        if not stage.written:
            stage.abandon()
    return code


def _verify(args, stdout, stderr, t_start: float, stage: Stage | None) -> int:
    """``verify_main`` without the stage's clean-up."""
    from kernel_contracts.verify.common import outputs
    from kernel_contracts.verify.common.consent import consent_problem, trusted

    problem = stage.usage() if stage is not None else None
    problem = problem or given_evidence_problem(args.evidence)
    if problem:
        stderr.write(f"verify: {problem}\n" if stage is not None else f"{problem}\n")
        return 2
    named = [("--json", args.json), ("--markdown", args.markdown), ("--html", args.html)]
    if stage is not None:
        named += stage.targets()
    plan = prepare_outputs(named, run_inputs(args), stderr)
    if plan is None:
        return 2
    with plan:
        t_import = time.perf_counter()
        contract = load_contract(args.contract, stderr)
        if contract is None:
            return 2
        problem = stage.refuse(contract) if stage is not None else None
        problem = problem or (None if args.evidence else declared_evidence_problem(contract, plan))
        trust_code = trusted(args.trust_code)
        problem = problem or consent_problem(contract, trust_code)
        if problem:
            stderr.write(f"{problem}\n")
            return 2
        done = run_and_render(contract, args, stderr, t_start, t_import, trust_code=trust_code)
        if isinstance(done, int):
            return done
        report, texts = done
        if stage is not None:
            texts |= stage.texts(contract, texts["--json"])
        try:
            plan.write([texts[t.label] for t in plan.targets])
            if stage is not None:
                stage.written = True
        except outputs.OutputError as err:
            stderr.write(f"verify: {err}\n")
            return 2
    stdout.write(summary_text(report, args.quiet))
    return stage.finish(stdout) if stage is not None else report.exit_code
