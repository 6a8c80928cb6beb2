"""``python -m verify monitor CONTRACT.yaml --stream PATH|-``: the contract checked online.

Reads rollout log lines (every format the log reader knows) from a file being appended to, a
directory of rotating files or standard input (``verify.monitor.stream``); cuts them into
windows from the contract's observability clause (``window_tokens``, ``sample_rate``; the
first clause, or ``--observability ID``; 100000 tokens and every token without one); decides
every numerical and statistical clause per window and slice (``verify.monitor.window``);
applies the escalation policy Π in order; and writes one JSON line per window and one per
decision to standard output or ``--out``.

``--checkpoint PATH`` makes it exactly once: after each window the lines are written and
synced, then the checkpoint (``verify.monitor.checkpoint``); a restart cuts ``--out`` back to
the length the checkpoint records and resumes where it says, so a kill at any point followed
by a restart gives the bytes of an uninterrupted run. (On standard output nothing can be cut
back: a window whose checkpoint did not land is written again after a restart.)

Exit codes: 0 every window's clauses held or skipped; 1 a clause violated in some window; 3 a
clause inconclusive and none violated (over the whole stream, restarts included); 2 unusable
input (contract, stream, checkpoint, output), with nothing written.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import dataclass

from verify.monitor.checkpoint import CheckpointError
from verify.monitor.stream import Position, StreamError
from verify.monitor.window import MonitorError, Reader, Window, decide_window
from verify.status import Status

__all__ = ["DEFAULT_WINDOW", "main", "monitor"]

DEFAULT_WINDOW = 100_000


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text}")
    return value


def _parser(out, err):
    from verify.cli.commands import _Parser

    p = _Parser(
        prog="python -m verify monitor",
        description="Check a contract's numerical and statistical clauses online, window by "
        "window, over a growing rollout log, and apply its escalation policy.",
        out=out,
        err=err,
    )
    p.add_argument("contract", metavar="CONTRACT.yaml")
    p.add_argument(
        "--stream",
        required=True,
        metavar="PATH|-",
        help="a log file, a directory of rotating log files, or - for stdin",
    )
    p.add_argument("--out", metavar="PATH", help="append the JSON lines here (default: stdout)")
    p.add_argument("--checkpoint", metavar="PATH", help="resume from and update this file")
    follow = p.add_mutually_exclusive_group()
    follow.add_argument(
        "--follow",
        dest="follow",
        action="store_true",
        default=True,
        help="at the end of the file, wait for more (the default)",
    )
    follow.add_argument(
        "--no-follow",
        "--until-eof",
        dest="follow",
        action="store_false",
        help="stop at the end of the input, deciding the last window",
    )
    p.add_argument(
        "--idle-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="stop (deciding the partial window) when no line came for this long",
    )
    p.add_argument(
        "--format",
        choices=("generic", "verl", "trl"),
        help="the log format (default: the contract's evidence.logprobs, else detected)",
    )
    p.add_argument("--observability", metavar="ID", help="the O clause that sets the windows")
    p.add_argument(
        "--poll",
        type=_seconds,
        default=0.1,
        metavar="SECONDS",
        help="how often to look for new lines when following (default 0.1)",
    )
    return p


@dataclass(frozen=True)
class Settings:
    window_tokens: int
    sample_rate: float
    observability: str | None
    format: str | None

    @property
    def max_lines(self) -> int:
        """A window also closes after this many lines (a stream of empty or bad lines)."""
        return math.ceil(self.window_tokens / self.sample_rate)


def _settings(contract, args) -> Settings:
    clauses = contract.observability
    if args.observability is not None:
        chosen = [c for c in clauses if c.id == args.observability]
        if not chosen:
            known = ", ".join(c.id for c in clauses) or "none"
            raise MonitorError(
                f"{contract.source.path}: --observability {args.observability}: no such "
                f"observability clause (the contract has: {known})"
            )
        clause = chosen[0]
    else:
        clause = clauses[0] if clauses else None
    declared = contract.evidence.logprobs
    fmt = args.format or (declared.format if declared is not None else None)
    if clause is None:
        return Settings(DEFAULT_WINDOW, 1.0, None, fmt)
    return Settings(clause.window_tokens, float(clause.sample_rate), clause.id, fmt)


class _Sink:
    """Where the lines go: a regular file (cut back to a length on restart) or a stream."""

    def __init__(self, target, length: int, stdout):
        self.target, self.length, self.stdout = target, length, stdout
        self.fd = None

    def check(self) -> None:
        """Before any work: the output holds at least what the checkpoint says was written."""
        t = self.target
        if t is None or t.how != "replace" or self.length == 0:
            return
        try:
            size = os.stat(t.where).st_size
        except FileNotFoundError:
            size = None
        if size is None or size < self.length:
            have = "is gone" if size is None else f"has {size} bytes"
            raise CheckpointError(
                f"cannot resume: --out {t.path} {have}, and the checkpoint says {self.length} "
                "bytes were written to it; give a new checkpoint path to start over"
            )

    def write(self, text: str) -> None:
        data = text.encode("utf-8")
        t = self.target
        if t is None:
            self.stdout.write(text)
            self.stdout.flush()
        elif t.how == "replace":
            if self.fd is None:
                self.fd = os.open(t.where, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, t.mode)
                os.ftruncate(self.fd, self.length)
                os.lseek(self.fd, self.length, os.SEEK_SET)
            _write_all(self.fd, data)
            os.fsync(self.fd)
        else:
            _write_all(t.fd, data)
        self.length += len(data)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Run:
    """One monitor run: the reader, the window being filled, and what a checkpoint keeps."""

    def __init__(self, contract, settings, stream, sink, checkpoint, binding, resumed):
        self.contract, self.settings, self.stream = contract, settings, stream
        self.sink, self.checkpoint, self.binding = sink, checkpoint, binding
        self.reader = Reader(
            contract, format=settings.format, rate=settings.sample_rate, label=stream.label
        )
        self.worst, index = Status.SKIPPED, 0
        if resumed is not None:
            try:
                self.reader.restore(resumed["reader"])
            except (KeyError, TypeError, ValueError, AttributeError):
                raise CheckpointError(
                    f"{checkpoint}: not a usable monitor checkpoint: its pending records "
                    "cannot be read"
                ) from None
            self.worst, index = resumed["worst"], resumed["window"]
        self.window = Window(index)
        self.decided = 0

    def close_window(self, end: Position, closed: str) -> None:
        text, status = decide_window(
            self.contract, self.reader, self.window, _shown_position(end), closed
        )
        self.sink.write(text)
        self.worst = max(self.worst, status)
        self.window = Window(self.window.index + 1)
        self.decided += 1
        if self.checkpoint:
            from verify.monitor.checkpoint import save

            save(
                self.checkpoint,
                {
                    "binding": self.binding,
                    "position": end.as_json(),
                    "window": self.window.index,
                    "worst": self.worst.label,
                    "out_length": self.sink.length,
                    "reader": self.reader.state(),
                },
            )

    def feed(self, line) -> None:
        w = self.window
        self.reader.feed(w, line)
        if w.sampled >= self.settings.window_tokens or w.lines >= self.settings.max_lines:
            self.close_window(self.stream.position(line), "size")

    def finish(self, closed: str, *, consume_tail: bool) -> None:
        if consume_tail:
            tail = self.stream.tail()
            if tail is not None:
                self.feed(tail)
            self.reader.unpair_all(self.window)
        if not self.window.empty:
            self.close_window(self.stream.position(None), closed)


def _shown_position(p: Position) -> dict:
    out = {"file": p.file} if p.file else {}
    return out | {"line": p.line, "offset": p.offset}


def monitor(run: _Run, *, follow: bool, idle_timeout: float | None, poll: float) -> str:
    """Read until the end (no follow, or standard input closed) or an idle timeout; returns
    why it stopped: ``end`` or ``idle``."""
    stream = run.stream
    last = time.monotonic()
    stdin = stream.kind == "stdin"
    while True:
        lines = stream.read(follow)
        if lines:
            for line in lines:
                run.feed(line)
            last = time.monotonic()
            continue
        if stream.ended() or (not follow and not stdin):
            run.finish("end", consume_tail=True)
            return "end"
        if idle_timeout is not None and time.monotonic() - last >= idle_timeout:
            run.finish("idle", consume_tail=False)
            return "idle"
        if not stdin:  # standard input waits in select()
            time.sleep(poll)


def _outputs(args, stream_kind: str):
    """The checked ``--out`` target (``None``: stdout); refuses outputs that are inputs or
    that lie inside a monitored directory."""
    from verify.cli import outputs

    named = [("--out", args.out), ("--checkpoint", args.checkpoint)]
    inputs = [("the contract", args.contract)]
    if stream_kind == "file":
        inputs.append(("the stream", args.stream))
    plan = outputs.prepare(named, inputs)
    try:
        targets = {t.label: t for t in plan.targets}
        ck = targets.get("--checkpoint")
        if ck is not None and ck.how != "replace":
            raise outputs.OutputError(f"cannot write {ck.path}: a checkpoint must be a file")
        if stream_kind == "directory":
            root = os.path.realpath(args.stream)
            for t in plan.targets:
                if os.path.dirname(t.where) == root or t.where.startswith(root + os.sep):
                    raise outputs.OutputError(
                        f"cannot write {t.path}: it lies in the monitored directory "
                        f"{args.stream} and would be read as a log"
                    )
    except BaseException:
        plan.close()
        raise
    return plan, targets.get("--out")


def main(argv, *, stdout, stderr, stdin_fd: int = 0) -> int:
    """Run ``monitor`` with ``argv`` (after the word ``monitor``); returns the exit code."""
    args = _parser(stdout, stderr).parse_args(argv)
    from verify.cli import outputs
    from verify.cli.commands import load_contract
    from verify.monitor import checkpoint as ck
    from verify.monitor.stream import open_stream, stream_kind

    contract = load_contract(args.contract, stderr)
    if contract is None:
        return 2
    plan = None
    try:
        if not contract.numerical and not contract.statistical:
            raise MonitorError(
                f"{contract.source.path}: no numerical or statistical clause to monitor"
            )
        settings = _settings(contract, args)
        kind = stream_kind(args.stream)
        plan, out = _outputs(args, kind)
        binding = {
            "contract_sha256": contract.source.sha256,
            "stream": os.path.abspath(args.stream) if kind != "stdin" else "-",
            "out": os.path.abspath(args.out) if args.out else None,
            "window_tokens": settings.window_tokens,
            "sample_rate": settings.sample_rate,
            "observability": settings.observability,
            "log_format": settings.format,
        }
        resumed = ck.load(args.checkpoint, binding) if args.checkpoint else None
        position = resumed["position"] if resumed else Position()
        sink = _Sink(out, resumed["out_length"] if resumed else 0, stdout)
        sink.check()
        stream = open_stream(args.stream, position, stdin_fd=stdin_fd, poll=args.poll)
        try:
            run = _Run(contract, settings, stream, sink, args.checkpoint, binding, resumed)
            why = monitor(run, follow=args.follow, idle_timeout=args.idle_timeout, poll=args.poll)
        finally:
            stream.close()
            sink.close()
    except (MonitorError, StreamError, CheckpointError) as err:
        stderr.write(f"{err}\n")
        return 2
    except outputs.OutputError as err:
        stderr.write(f"verify: {err}\n")
        return 2
    finally:
        if plan is not None:
            plan.close()
    if run.decided == 0 and resumed is None:
        if why == "idle":
            stderr.write(f"monitor: no line arrived in {args.idle_timeout:g} s\n")
            return 3
        stderr.write(f"{stream.label}: no line to monitor\n")
        return 2
    if why == "idle":
        stderr.write(
            f"monitor: no new line for {args.idle_timeout:g} s; stopped after window "
            f"{run.window.index - 1}\n"
        )
    return run.worst.exit_code
