"""The command line: ``python -m verify CONTRACT.yaml | check | synth | schema | monitor``, and
``export``, ``localize``, ``conformance``.

``main(argv, *, stdout, stderr) -> int`` never exits and never lets a traceback reach the
user: usage errors exit 2 with the usage line; an unexpected exception is reported as one
``verify: internal error: ...`` line and exit 2. Exit codes (``EXIT_CODES``): 0 all proved
and held; 1 something refuted or violated; 2 unusable input (nothing written); 3 something
unknown or inconclusive and nothing refuted or violated. With evidence, every guarantee's
premises count (``verify.support``): a premise the evidence violates is exit 1, one it left
unchecked exit 3, so exit 0 means the evidence held every premise of every proved guarantee.

The words ``check``, ``synth``, ``schema``, ``monitor`` and ``export`` are reserved as the first
argument: a contract file with one of those names is given with a directory, e.g. ``./check``.
So are ``localize`` and ``conformance``.

Files: the contract, a ``--evidence`` file and ``check``'s report must be regular files (a
FIFO, a device or a directory is refused with exit 2, never read from). Report paths
(``--json``, ``--markdown``, ``--html``) are checked before any work, and refused with exit 2
when one names the contract, an evidence file or another report's file (however spelt:
relative or absolute, a symbolic link, a hard link), a directory, a socket or a block device,
a read-only file or a directory that does not exist. Reports are written only after every
obligation and clause is decided, all or nothing: each file report goes to a temporary file
beside its target, and only when all of them are complete are they moved into place; a
failure before that leaves every old file untouched. A symbolic link is followed (the file it
points to is replaced); a replaced file keeps its permission bits, a new one gets 0666 less
the umask. A character device (``/dev/null``) or a FIFO that has a reader is written through,
not replaced; ``/dev/stdout``, ``/dev/stderr`` and ``/dev/fd/N`` write to that descriptor.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

from contracts import KernelContractsError

__all__ = ["SUBCOMMANDS", "main"]

SUBCOMMANDS = ("check", "synth", "schema", "monitor", "export", "localize", "conformance")


class _Stop(KernelContractsError):
    def __init__(self, code: int):
        self.code = code


class _Parser(argparse.ArgumentParser):
    """An argument parser that writes to the given streams and raises instead of exiting."""

    def __init__(self, *args, out, err, **kwargs):
        super().__init__(*args, **kwargs)
        self._out, self._err = out, err

    def _print_message(self, message, file=None):
        if message:
            (self._err if file is sys.stderr else self._out).write(message)

    def exit(self, status=0, message=None):
        if message:
            self._err.write(message)
        raise _Stop(status)

    def error(self, message):
        self._err.write(self.format_usage())
        self._err.write(f"{self.prog}: error: {message}\n")
        raise _Stop(2)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return value


def count(text: str) -> int:
    """An argparse type: a non-negative integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {value}")
    return value


def _traffic_share(text: str):
    from verify.promotion.stage import traffic_share  # imported only when the option is given

    return traffic_share(text)


EXIT_CODES = (
    "exit codes: 0 every guarantee proved and every clause held (skipped ones say why); with "
    "evidence (an evidence: section or --evidence), also every premise of every guarantee held "
    "by that evidence. 1 something refuted or violated, including a premise the evidence "
    "contradicts. 2 unusable input; no report written. 3 nothing refuted or violated, but "
    "something unknown or inconclusive, or a guarantee resting on a premise the given evidence "
    "did not decide (listed under 'premises unchecked' and in the report's support[])."
)


def _main_parser(out, err) -> _Parser:
    p = _Parser(
        prog="python -m verify",
        description="Prove a kernel contract's guarantees and check its clauses. "
        "Other commands: check REPORT.json | synth CONTRACT.yaml | schema | monitor ... | "
        "export CONTRACT.yaml --to verl|nemo-rl|trl|skyrl | localize CONTRACT.yaml | "
        "conformance CONTRACT.yaml",
        epilog=EXIT_CODES,
        out=out,
        err=err,
    )
    p.add_argument("contract", metavar="CONTRACT.yaml")
    p.add_argument("--json", metavar="PATH", help="write the JSON report here")
    p.add_argument("--markdown", metavar="PATH", help="write the Markdown report here")
    p.add_argument("--html", metavar="PATH", help="write the HTML report here")
    p.add_argument("--evidence", metavar="PATH", nargs="+", action="extend", default=[])
    p.add_argument("--timeout-ms", type=_positive, default=5000, metavar="N",
                   help="time budget per obligation (default 5000)")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="print only the overall verdict")
    p.add_argument("--no-cache", action="store_true",
                   help="derive every obligation afresh; neither read nor write the derivation "
                   "cache (KERNEL_CONTRACTS_CACHE: its directory, or off)")  # fmt: skip
    from contracts.fields import STAGES

    p.add_argument("--stage", choices=STAGES, help="run this promotion stage")
    p.add_argument("--promotion-dir", metavar="DIR", help="where stage records are kept")
    p.add_argument("--traffic", type=_traffic_share, metavar="SHARE",
                   help="share of production traffic the evidence comes from")  # fmt: skip
    return p


_SUPPORT = {"violated": "violated", "inconclusive": "unchecked"}


def _support_counts(support) -> list[tuple[str, int]]:
    counts = {}
    for p in support:
        if p.status.label in _SUPPORT:
            counts[_SUPPORT[p.status.label]] = counts.get(_SUPPORT[p.status.label], 0) + 1
    return sorted(counts.items())


def summary_text(report, quiet: bool) -> str:
    from verify.obligations import decimal

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


def evidence_problem(path: str, shown: str) -> str | None:
    """Why the evidence file ``path`` cannot be read, when it is no regular file (a FIFO
    would block the run); a missing file is left to the evidence reader to name."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    from contracts import file_kind

    return f"{shown}: is {file_kind(mode)}, not a log file"


def _declared_evidence(contract) -> tuple[str, str] | None:
    """The contract's own ``evidence.logprobs`` path, and how messages name it."""
    declared = contract.evidence.logprobs
    if declared is None:
        return None
    where = contract.source.where("evidence.logprobs.path")
    prefix = f"{contract.source.path}:{where[0]}:{where[1]}: " if where else ""
    return declared.path, f"{prefix}evidence.logprobs.path: {declared.path}"


def declared_evidence_problem(contract, plan) -> str | None:
    """What is wrong with the evidence file the contract itself names (unreadable, or one of
    the outputs), as one line; ``None`` when it names none or nothing is wrong."""
    from verify.cli import outputs

    declared = _declared_evidence(contract)
    if not declared:
        return None
    problem = evidence_problem(*declared)
    try:
        outputs.refuse_inputs(plan, [("an evidence file", declared[0])])
    except outputs.OutputError as err:
        problem = problem or f"verify: {err}"
    return problem


def _cache(cache, t_start: float):
    """The derivation cache the environment names; written only by a ``python -m verify``
    process (``verify.cache.writer_start``; ``t_start`` is when ``main`` began)."""
    began = time.time() - (time.perf_counter() - t_start)
    return cache.locate(started=cache.writer_start(began))


def run_and_render(contract, args, stderr, t_start: float, t_import: float):
    """Verify ``contract`` and render its report: ``(report, texts)`` with the texts keyed by
    the output options (``--json``, ``--markdown``, ``--html``), or exit code 2 for unusable
    evidence (its message written)."""
    from verify import _run as run
    from verify import cache
    from verify.render.report import dumps

    try:
        report = run.run(
            contract, evidence_paths=args.evidence, timeout_ms=args.timeout_ms,
            quiet=args.quiet, stderr=stderr,
            cache=None if getattr(args, "no_cache", False) else _cache(cache, t_start),
        )  # fmt: skip
    except Exception as err:
        if type(err).__name__ == "EvidenceError":
            stderr.write(f"{err}\n")
            return 2
        raise
    t_render = time.perf_counter()
    texts = {}
    if args.markdown is not None or args.html is not None:  # rendered only when asked for
        from verify.render import documents as render

        if args.markdown is not None:
            texts["--markdown"] = render.to_markdown(report)
        if args.html is not None:
            texts["--html"] = render.to_html(report)
    timing = {"import": round((t_import - t_start) * 1000, 3), **report.timing}
    timing["render"] = round((time.perf_counter() - t_render) * 1000, 3)
    report = replace(report, timing=timing)
    texts["--json"] = dumps(report)
    return report, texts


def prepare_outputs(named, inputs, stderr):
    """The output plan of a command writing the ``named`` (label, path) targets and reading the
    ``inputs`` (label, path); ``None`` (the reason written to ``stderr``) when a target is
    unusable."""
    from verify.cli import outputs

    try:
        return outputs.prepare(named, inputs)
    except outputs.OutputError as err:
        stderr.write(f"verify: {err}\n")
        return None


def run_inputs(args) -> list[tuple[str, str]]:
    """What a verification run reads: the contract and every ``--evidence`` file."""
    return [("the contract", args.contract)] + [("an evidence file", e) for e in args.evidence]


def load_contract(path: str, stderr):
    """The contract at ``path``, or ``None`` with every problem written to ``stderr``."""
    import contracts

    try:
        return contracts.load(path)
    except contracts.ContractError as err:
        stderr.write(f"{err}\n")
        return None


def _verify(args, stdout, stderr, t_start: float) -> int:
    from verify.cli import outputs

    for path in args.evidence:
        problem = evidence_problem(path, f"--evidence {path}")
        if problem:
            stderr.write(f"{problem}\n")
            return 2
    named = [("--json", args.json), ("--markdown", args.markdown), ("--html", args.html)]
    plan = prepare_outputs(named, run_inputs(args), stderr)
    if plan is None:
        return 2
    with plan:
        t_import = time.perf_counter()
        contract = load_contract(args.contract, stderr)
        if contract is None:
            return 2
        problem = None if args.evidence else declared_evidence_problem(contract, plan)
        if problem:
            stderr.write(f"{problem}\n")
            return 2
        done = run_and_render(contract, args, stderr, t_start, t_import)
        if isinstance(done, int):
            return done
        report, texts = done
        try:
            plan.write([texts[t.label] for t in plan.targets])
        except outputs.OutputError as err:
            stderr.write(f"verify: {err}\n")
            return 2
    stdout.write(summary_text(report, args.quiet))
    return report.exit_code


def _sub_parser(name: str, out, err, what: str | None) -> _Parser:
    p = _Parser(prog=f"python -m verify {name}", out=out, err=err)
    if what:
        p.add_argument(what.split(".")[0].lower(), metavar=what)
    return p


def _dispatch(argv: list[str], stdout, stderr, t_start: float) -> int:
    if argv and argv[0] in SUBCOMMANDS:
        name, rest = argv[0], argv[1:]
        if name == "check":
            args = _sub_parser(name, stdout, stderr, "REPORT.json").parse_args(rest)
            from verify.check.recheck import check_main

            return check_main(args.report, stdout=stdout, stderr=stderr)
        if name == "synth":
            p = _sub_parser(name, stdout, stderr, "CONTRACT.yaml")
            p.add_argument("--timeout-ms", type=_positive, default=5000, metavar="N")
            args = p.parse_args(rest)
            from verify.synth import synth_main

            return synth_main(args.contract, args.timeout_ms, stdout=stdout, stderr=stderr)
        if name == "schema":
            _sub_parser(name, stdout, stderr, None).parse_args(rest)
            import contracts

            stdout.write(json.dumps(contracts.json_schema(), indent=2) + "\n")
            return 0
        if name == "export":
            from verify.export import export_main

            return export_main(rest, stdout=stdout, stderr=stderr)
        if name == "localize":
            from verify.localize.command import localize_main

            return localize_main(rest, stdout=stdout, stderr=stderr)
        if name == "conformance":
            from verify.conformance.command import conformance_main

            return conformance_main(rest, stdout=stdout, stderr=stderr)
        try:
            from verify import monitor
        except ImportError:
            stderr.write("verify: monitor is not available in this build\n")
            return 2
        return monitor.main(rest, stdout=stdout, stderr=stderr)
    from verify.solve import smt

    smt.prestart()  # the solver process imports z3 while this one reads the contract
    args = _main_parser(stdout, stderr).parse_args(argv)
    if args.stage or args.promotion_dir is not None or args.traffic is not None:
        from verify.promotion import stage_main

        return stage_main(args, stdout, stderr, t_start)
    return _verify(args, stdout, stderr, t_start)


def main(argv: Sequence[str] | None = None, *, stdout=None, stderr=None) -> int:
    """Run the command line on ``argv``; returns the exit code."""
    t_start = time.perf_counter()
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _dispatch(argv, stdout, stderr, t_start)
    except _Stop as stop:
        return stop.code
    except KeyboardInterrupt:
        stderr.write("verify: interrupted\n")
        return 2
    except Exception as err:  # the documented last resort: one line, never a traceback
        stderr.write(f"verify: internal error: {type(err).__name__}: {err}\n")
        return 2
