"""The command line: ``python -m verify CONTRACT.yaml | check | synth | schema | monitor``.

``main(argv, *, stdout, stderr) -> int`` never exits and never lets a traceback reach the
user: usage errors exit 2 with the usage line; an unexpected exception is reported as one
``verify: internal error: ...`` line and exit 2. Exit codes: 0 all proved and held; 1
something refuted or violated; 2 unusable input (nothing written); 3 something unknown or
inconclusive and nothing refuted or violated.

The words ``check``, ``synth``, ``schema`` and ``monitor`` are reserved as the first argument:
a contract file with one of those names is given with a directory, e.g. ``./check``.
Reports are written only after every obligation and clause is decided, each one atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

__all__ = ["SUBCOMMANDS", "main"]

SUBCOMMANDS = ("check", "synth", "schema", "monitor")


class _Stop(Exception):
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


def _main_parser(out, err) -> _Parser:
    p = _Parser(
        prog="python -m verify",
        description="Prove a kernel contract's guarantees and check its clauses. "
        "Other commands: check REPORT.json | synth CONTRACT.yaml | schema | monitor ...",
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
    return p


def _summary(report, quiet: bool) -> str:
    lines = []
    if not quiet:
        for o in report.obligations:
            detail = (
                f"bound {o.bound:.6g} vs max {float(o.threshold):.6g}"
                if o.bound is not None
                else o.reason
            )
            if o.status.label == "unknown" and o.bound is not None:
                detail += f" ({o.reason})"
            lines.append(f"{o.id:<14} {o.quantity:<16} {o.status.label:<12} {detail}")
        for c in report.clauses:
            what = f"{c.id}[{c.slice}]"
            detail = c.reason or (f"{c.statistic} bound {c.bound:.6g}" if c.bound else "")
            lines.append(f"{what:<14} {c.family:<16} {c.status.label:<12} {detail}")
    s = report.status
    lines.append(
        f"verdict: {s.label} (exit {s.exit_code}): {len(report.obligations)} obligations, "
        f"{len(report.clauses)} clause verdicts"
    )
    return "\n".join(lines) + "\n"


def _verify(args, stdout, stderr, t_start: float) -> int:
    import contracts
    from verify import render, run
    from verify.report import dumps, write_atomic

    targets = [(args.json, "json"), (args.markdown, "markdown"), (args.html, "html")]
    for path, _ in targets:
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            stderr.write(f"verify: cannot write {path}: no such directory\n")
            return 2
    t_import = time.perf_counter()
    try:
        contract = contracts.load(args.contract)
    except contracts.ContractError as err:
        stderr.write(f"{err}\n")
        return 2
    try:
        report = run.run(
            contract, evidence_paths=args.evidence, timeout_ms=args.timeout_ms,
            quiet=args.quiet, stderr=stderr,
        )  # fmt: skip
    except Exception as err:
        if type(err).__name__ == "EvidenceError":
            stderr.write(f"{err}\n")
            return 2
        raise
    t_render = time.perf_counter()
    texts = {"markdown": render.to_markdown(report), "html": render.to_html(report)}
    timing = {"import": round((t_import - t_start) * 1000, 3), **report.timing}
    timing["render"] = round((time.perf_counter() - t_render) * 1000, 3)
    from dataclasses import replace

    report = replace(report, timing=timing)
    texts["json"] = dumps(report)
    for path, kind in targets:
        if path:
            try:
                write_atomic(path, texts[kind])
            except OSError as err:
                stderr.write(f"verify: cannot write {path}: {err.strerror or err}\n")
                return 2
    stdout.write(_summary(report, args.quiet))
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
            from verify.check import check_main

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
        try:
            from verify import monitor
        except ImportError:
            stderr.write("verify: monitor is not available in this build\n")
            return 2
        return monitor.main(rest, stdout=stdout, stderr=stderr)
    args = _main_parser(stdout, stderr).parse_args(argv)
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
