"""``python -m verify monitor CONTRACT.yaml --stream PATH|-``: the contract checked online.

Reads rollout log lines (every format the log reader knows) from a file being appended to, a
directory of rotating files or standard input (``verify.pipeline.monitor.stream``); cuts them into
windows from the contract's observability clause (``window_tokens``, ``sample_rate``; the
first clause, or ``--observability ID``; 100000 tokens and every token without one); decides
every numerical and statistical clause per window and slice (``verify.pipeline.monitor.window``);
applies the escalation policy Π in order; and writes one JSON line per window and one per
decision to standard output or ``--out``.

``--checkpoint PATH`` makes it exactly once: after each window the lines are written and
synced, then the checkpoint (``verify.pipeline.monitor.checkpoint``); a restart cuts ``--out`` back
to the length the checkpoint records and resumes where it says, so a kill at any point followed
by a restart gives the bytes of an uninterrupted run. (On standard output nothing can be cut
back: a window whose checkpoint did not land is written again after a restart.)

``--out`` is appended to. With ``--checkpoint`` a first run writes the checkpoint before any
output, so an ``--out`` that holds bytes while its checkpoint does not exist (deleted) is
refused rather than cut back or repeated. One monitor at a time uses a checkpoint (a lock).

Exit codes: 0 every window's clauses held or skipped; 1 a clause violated in some window; 3 a
clause inconclusive and none violated (over the whole stream, restarts included); 2 unusable
input (contract, stream, checkpoint, output) or an output that cannot be written (a full
disk), one line naming the path; 141 (as a process ended by SIGPIPE) when the reader of the
output went away (``| head -1``), quietly.
"""

from __future__ import annotations

import errno
import math
import os
import time
from dataclasses import dataclass

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.pipeline.monitor.checkpoint import CheckpointError
from kernel_contracts.verify.pipeline.monitor.stream import Position, StreamError
from kernel_contracts.verify.pipeline.monitor.window import (
    MonitorError,
    Reader,
    Window,
    decide_window,
)

__all__ = ["DEFAULT_WINDOW", "main", "monitor"]

DEFAULT_WINDOW = 100_000
EXIT_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away


class _Closed(KernelContractsError):
    """The reader of the output went away (a broken pipe)."""


def _failed(path: str, err: OSError) -> Exception:
    """The exception for an ``OSError`` writing ``path``: quiet for a broken pipe."""
    from kernel_contracts.verify.common.outputs import OutputError

    if isinstance(err, BrokenPipeError) or err.errno == errno.EPIPE:
        return _Closed()
    return OutputError(f"cannot write {path}: {err.strerror or err}")


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

    def check(self, checkpoint: str | None, resumed: bool) -> None:
        """Before any work: the output holds at least what the checkpoint says was written;
        a first run with a checkpoint finds the output empty; a run without one appends."""
        t = self.target
        if t is None or t.how != "replace":
            return
        if not checkpoint or not resumed:
            try:
                size = os.stat(t.where).st_size
            except FileNotFoundError:
                size = 0
            if checkpoint and size:
                raise CheckpointError(
                    f"cannot start: --out {t.path} holds {size} bytes but the checkpoint "
                    f"{checkpoint} does not exist (deleted?); starting over would repeat the "
                    "stream's windows: remove --out or give another --out path"
                )
            self.length = size
            return
        if self.length == 0:
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
        try:
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
        except OSError as err:
            raise _failed("<stdout>" if t is None else t.path, err) from None
        self.length += len(data)

    def silence(self) -> None:
        """After a broken pipe on stdout: point it at ``/dev/null``, so that the flush at
        exit does not fail again."""
        if self.target is None and hasattr(self.stdout, "fileno"):
            try:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, self.stdout.fileno())
                os.close(null)
            except (OSError, ValueError):
                pass

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
        self.last = None  # the last line read: where a window ends, as shown

    def close_window(self, end: Position, closed: str) -> None:
        shown = _shown_position(end) if self.last is None else _shown_line(self.last)
        text, status = decide_window(self.contract, self.reader, self.window, shown, closed)
        self.sink.write(text)
        self.worst = max(self.worst, status)
        self.window = Window(self.window.index + 1)
        self.decided += 1
        if self.checkpoint:
            self.save(end)

    def save(self, end: Position) -> None:
        from kernel_contracts.verify.pipeline.monitor.checkpoint import save

        state = {
            "binding": self.binding,
            "position": end.as_json(),
            "window": self.window.index,
            "worst": self.worst.label,
            "out_length": self.sink.length,
            "reader": self.reader.state(),
        }
        try:
            save(self.checkpoint, state)
        except OSError as err:
            raise _failed(self.checkpoint, err) from None

    def feed(self, line) -> None:
        w = self.window
        self.reader.feed(w, line)
        self.last = line
        if w.sampled >= self.settings.window_tokens or w.lines >= self.settings.max_lines:
            self.close_window(self.stream.position(line), "size")

    def finish(self, closed: str, *, consume_tail: bool) -> None:
        if consume_tail:
            tail = self.stream.tail()
            if tail is not None:
                self.feed(tail)
            self.reader.end_file(self.window)  # a hook batch still held is cut short
            self.reader.unpair_all(self.window)
        if not self.window.empty:
            self.close_window(self.stream.position(None), closed)


def _shown_line(line) -> dict:
    out = {"file": line.file} if line.file else {}
    return out | {"line": line.number, "offset": line.end}


def _shown_position(p: Position) -> dict:
    out = {"file": p.file} if p.file else {}
    return out | {"line": p.line, "offset": p.offset}


def monitor(run: _Run, *, follow: bool, idle_timeout: float | None, poll: float, warn=None) -> str:
    """Read until the end (no follow, or standard input closed) or an idle timeout; returns
    why it stopped: ``end`` or ``idle``. ``warn`` gets the stream's notes (a rotation)."""
    stream = run.stream
    last = time.monotonic()
    stdin = stream.kind == "stdin"
    while True:
        lines = stream.read(follow)
        for note in stream.notes():
            if warn is not None:
                warn(note)
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
    from kernel_contracts.verify.common import outputs

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
    from kernel_contracts.verify.common.arguments import monitor_parser

    args = monitor_parser(stdout, stderr).parse_args(argv)
    from kernel_contracts.evidence.logs import file_format_of
    from kernel_contracts.verify.common import outputs
    from kernel_contracts.verify.common.inputs import load_contract
    from kernel_contracts.verify.pipeline.monitor import checkpoint as ck
    from kernel_contracts.verify.pipeline.monitor.stream import open_stream, stream_kind

    contract = load_contract(args.contract, stderr)
    if contract is None:
        return 2
    plan = held = sink = None
    try:
        if not contract.numerical and not contract.statistical:
            raise MonitorError(
                f"{contract.source.path}: no numerical or statistical clause to monitor"
            )
        settings = _settings(contract, args)
        kind = stream_kind(args.stream)
        if kind == "file" and (stored := file_format_of(args.stream)) != "jsonl":
            raise MonitorError(
                f"{args.stream}: a {stored.capitalize()} log is written whole, not line by "
                f"line, so it cannot be monitored as it grows; decide the contract on it with "
                f"python -m verify {args.contract} --evidence {args.stream}"
            )
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
        held = ck.lock(args.checkpoint) if args.checkpoint else None
        resumed = ck.load(args.checkpoint, binding) if args.checkpoint else None
        position = resumed["position"] if resumed else Position()
        sink = _Sink(out, resumed["out_length"] if resumed else 0, stdout)
        sink.check(args.checkpoint, resumed is not None)
        stream = open_stream(args.stream, position, stdin_fd=stdin_fd, poll=args.poll)
        try:
            run = _Run(contract, settings, stream, sink, args.checkpoint, binding, resumed)
            if args.checkpoint and resumed is None:
                run.save(stream.position(None))  # before any output: see the docstring
            why = monitor(
                run,
                follow=args.follow,
                idle_timeout=args.idle_timeout,
                poll=args.poll,
                warn=lambda note: stderr.write(f"monitor: {note}\n"),
            )
        finally:
            stream.close()
            sink.close()
    except (MonitorError, StreamError, CheckpointError) as err:
        stderr.write(f"{err}\n")
        return 2
    except outputs.OutputError as err:
        stderr.write(f"verify: {err}\n")
        return 2
    except _Closed:
        sink.silence()
        return EXIT_PIPE
    finally:
        if plan is not None:
            plan.close()
        if held is not None:
            held.release()
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
