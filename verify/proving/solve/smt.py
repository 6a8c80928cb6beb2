"""Running SMT-LIB2 text in z3 (and cvc5, where installed): the toolkit's only solver calls.

Each call builds a fresh solver in a fresh context from the query's text alone, so what is
solved is exactly what a report stores and what a re-checker re-runs.

Every call gets a budget in the solver's own deterministic units (z3's ``rlimit``, cvc5's
``rlimit-per``; ``verify.proving.solve.budget``), so its answer does not depend on the machine or
its load, and reports the units it spent (z3's statistic ``rlimit count``; a fresh context
counts from zero). One fixed z3 procedure answers each query (``_z3_solver``): z3's own
strategies switch tactics by the wall clock. Some nonlinear procedures never look at their
limits (z3 on a degree-4096 polynomial ran for minutes past one), so every call also runs in a
solver process of its own (:class:`_Worker`, started once and reused) under a hang guard: a
call that has not answered within ``guard_s`` seconds of wall clock has the process killed and
answers ``unknown`` with a reason that says so (``Answer.hang_guard``); the next call starts a
new process.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from kernel_contracts.verify.proving.solve.budget import DEFAULT_HANG_GUARD_S

__all__ = [
    "Answer",
    "cvc5_check",
    "cvc5_version",
    "serve",
    "z3_check",
    "z3_check_tracked",
    "z3_version",
]


@dataclass(frozen=True)
class Answer:
    """A solver's answer to one query: ``sat``, ``unsat``, ``unknown`` or ``error``."""

    answer: str
    core: tuple[str, ...] = ()
    model: dict[str, Fraction] = field(default_factory=dict)
    reason: str = ""
    time_ms: float = 0.0
    rlimit: int = 0  # the solver's resource units this call spent (z3's rlimit count)
    hang_guard: bool = False  # stopped by the wall-clock hang guard, not by its budget
    out_of_budget: bool = False  # ``unknown`` because the call spent its resource units


def z3_version() -> str:
    import z3

    return z3.get_version_string()


def cvc5_version() -> str | None:
    """cvc5's version, or ``None`` when its Python package is not installed."""
    from importlib import metadata
    from importlib.util import find_spec

    if find_spec("cvc5") is None:
        return None
    try:
        return metadata.version("cvc5")
    except metadata.PackageNotFoundError:
        return "unknown"


def _z3_value(v) -> Fraction | None:
    import z3

    if z3.is_rational_value(v):
        return Fraction(v.numerator_as_long(), v.denominator_as_long())
    if z3.is_algebraic_value(v):
        return Fraction(v.approx(40).as_fraction())
    return None


def _bare(name: str) -> str:
    return name[1:-1] if name.startswith("|") and name.endswith("|") else name


_CORE_OPTION = "(set-option :produce-unsat-cores true)"


def _z3_solver(text: str, ctx):
    """The solver for ``text``: with core tracking, or for a logic other than ``QF_NRA``, z3's
    SMT core (it answers under the assumptions that track the named assertions); else the
    procedure z3's own strategy for ``QF_NRA`` starts with (simplify, propagate values, nlsat:
    first its simple check, then in full). z3's own strategies move between tactics after
    seconds of wall clock (``try_for``) and by the memory the process holds, so their answers
    could depend on the machine's load; these depend only on the text and the resource units."""
    import z3

    if _CORE_OPTION in text or "(set-logic QF_NRA)" not in text:
        return z3.SimpleSolver(ctx=ctx)
    nlsat = z3.Tactic("qfnra-nlsat", ctx)
    simple = z3.Then(z3.With(nlsat, simple_check=True), z3.Tactic("fail-if-undecided", ctx))
    tactic = z3.Then(
        z3.Tactic("simplify", ctx), z3.Tactic("propagate-values", ctx), z3.OrElse(simple, nlsat)
    )
    return tactic.solver()


def _z3_run(text: str, rlimit: int):
    """A fresh z3 solver (``_z3_solver``) on ``text`` with ``rlimit`` resource units;
    (solver, result)."""
    import z3

    solver = _z3_solver(text, z3.Context())
    solver.set("rlimit", max(1, int(rlimit)))
    solver.from_string(text)
    return solver, solver.check()


def _spent(solver) -> int:
    """The resource units ``solver``'s context has counted (all of them this call's)."""
    names = set(solver.statistics().keys())
    return int(solver.statistics().get_key_value("rlimit count")) if "rlimit count" in names else 0


def _unknown(solver, rlimit: int, spent: int, start: float) -> Answer:
    """z3's ``unknown``, saying whether it spent its ``rlimit`` units (z3 then answers
    "max. resource limit exceeded" or, from inside a tactic, "canceled")."""
    why = solver.reason_unknown()
    if spent >= rlimit or "resource limit" in why or why == "canceled":
        reason = f"z3 spent its allowance of {rlimit} resource units (rlimit) on the query ({why})"
        return Answer(
            "unknown", reason=reason, time_ms=_ms(start), rlimit=spent, out_of_budget=True
        )
    return Answer("unknown", reason=f"z3: {why}", time_ms=_ms(start), rlimit=spent)


def z3_check(
    text: str, *, rlimit: int, guard_s: float = DEFAULT_HANG_GUARD_S, want: Sequence[str] = ()
) -> Answer:
    """Check ``text`` with z3 within ``rlimit`` resource units (each run); on sat, the values
    of ``want``. ``guard_s``: the hang guard (module docstring)."""
    return _guarded(_z3_check, text, guard_s, rlimit, tuple(want))


def _z3_check(text: str, rlimit: int, want: Sequence[str] = ()) -> Answer:
    """``z3_check`` in this process.

    Tracking named assertions slows z3's nonlinear search, so the answer comes from the
    assertions without core tracking; an ``unsat`` is then re-derived with tracking on, for
    its core (both runs see the same assertions, each with ``rlimit`` units; the answer counts
    both runs' units).
    """
    import z3

    start = time.perf_counter()
    spent = 0
    try:
        solver, result = _z3_run(text.replace(_CORE_OPTION, ""), rlimit)
        spent = _spent(solver)
        if result == z3.unsat and _CORE_OPTION in text:
            solver, again = _z3_run(text, rlimit)
            spent += _spent(solver)
            if again != z3.unsat:
                reason = (
                    f"z3 proved the query, but answered {again} when repeating the proof to "
                    f"record which premises it used, within {rlimit} resource units (a larger "
                    "--solver-budget may settle it)"
                )
                return Answer("unknown", reason=reason, time_ms=_ms(start), rlimit=spent)
    except z3.Z3Exception as err:
        return Answer("error", reason=f"z3: {err}", time_ms=_ms(start), rlimit=spent)
    if result == z3.unsat:
        core = tuple(sorted(_bare(str(c)) for c in solver.unsat_core()))
        return Answer("unsat", core=core, time_ms=_ms(start), rlimit=spent)
    if result == z3.sat:
        model = solver.model()
        wanted = {_bare(n) for n in want}
        values = {}
        for decl in model.decls():
            if decl.name() in wanted:
                value = _z3_value(model[decl])
                if value is not None:
                    values[decl.name()] = value
        return Answer("sat", model=values, time_ms=_ms(start), rlimit=spent)
    return _unknown(solver, rlimit, spent, start)


def z3_check_tracked(text: str, *, rlimit: int, guard_s: float = DEFAULT_HANG_GUARD_S) -> Answer:
    """``z3_check`` in one run, with the core tracking ``text`` asks for: for a query whose
    answer should be ``unsat`` (a cached derivation's, ``verify.proving.replay``), the answer and
    the core of ``z3_check``'s second run without its first. Anything but ``unsat`` is answered
    ``unknown`` (a model of a tracked run is not the one ``z3_check`` would give)."""
    return _guarded(_z3_check_tracked, text, guard_s, rlimit)


def _z3_check_tracked(text: str, rlimit: int) -> Answer:
    import z3

    start = time.perf_counter()
    try:
        solver, result = _z3_run(text, rlimit)
    except z3.Z3Exception as err:
        return Answer("error", reason=f"z3: {err}", time_ms=_ms(start))
    spent = _spent(solver)
    if result == z3.unsat:
        core = tuple(sorted(_bare(str(c)) for c in solver.unsat_core()))
        return Answer("unsat", core=core, time_ms=_ms(start), rlimit=spent)
    reason = f"z3 answered {result} when repeating the proof to record which premises it used"
    return Answer("unknown", reason=reason, time_ms=_ms(start), rlimit=spent)


def z3_core_suffices(
    text: str, core: Sequence[str], *, rlimit: int, guard_s: float = DEFAULT_HANG_GUARD_S
) -> Answer:
    """Re-check ``text`` keeping only the named assertions in ``core`` (expect ``unsat``)."""
    return _guarded(_z3_core_suffices, text, guard_s, rlimit, tuple(core))


def _z3_core_suffices(text: str, rlimit: int, core: Sequence[str]) -> Answer:
    import z3

    start = time.perf_counter()
    solver = _z3_solver(text, z3.Context())
    solver.set("rlimit", max(1, int(rlimit)))
    keep = set(core)
    lines = []
    for line in text.splitlines():
        if line.startswith("(assert (! ") and line.rsplit(":named ", 1)[-1][:-2] not in keep:
            continue
        lines.append(line)
    try:
        solver.from_string("\n".join(lines))
        result = solver.check()
    except z3.Z3Exception as err:
        return Answer("error", reason=f"z3: {err}", time_ms=_ms(start))
    return Answer(str(result), time_ms=_ms(start), rlimit=_spent(solver))


def cvc5_check(text: str, *, rlimit: int, guard_s: float = DEFAULT_HANG_GUARD_S) -> Answer | None:
    """Check ``text`` with cvc5's own SMT-LIB2 parser within ``rlimit`` of its resource units
    (its option ``rlimit-per``); ``None`` if cvc5 is not installed."""
    from importlib.util import find_spec

    if find_spec("cvc5") is None:
        return None
    return _guarded(_cvc5_check, text, guard_s, rlimit)


def _cvc5_check(text: str, rlimit: int) -> Answer:
    import cvc5

    start = time.perf_counter()
    try:
        tm = cvc5.TermManager()
        solver = cvc5.Solver(tm)
        solver.setOption("rlimit-per", str(max(1, int(rlimit))))
        symbols = cvc5.SymbolManager(tm)
        parser = cvc5.InputParser(solver, symbols)
        parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text, "query")
        answer = "unknown"
        while True:
            command = parser.nextCommand()
            if command.isNull():
                break
            if str(command).startswith("(check-sat"):
                answer = command.invoke(solver, symbols).strip() or "unknown"
                break
            command.invoke(solver, symbols)
    except Exception as err:  # cvc5 raises its own RuntimeError subclasses
        return Answer("error", reason=f"cvc5: {err}".splitlines()[0], time_ms=_ms(start))
    if answer not in ("sat", "unsat"):
        answer = "unknown"
    return Answer(answer, time_ms=_ms(start), rlimit=_cvc5_spent(solver))


def _cvc5_spent(solver) -> int:
    """The resource units cvc5 counted (its statistic ``resource::resourceUnitsUsed``)."""
    try:
        return int(solver.getStatistics()["resource::resourceUnitsUsed"]["value"])
    except Exception:  # a cvc5 without the statistic
        return 0


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


# ---- the solver process ----------------------------------------------------------------------
_START_S = 120.0  # the most a new solver process may take to import its solvers


def serve(inbox, outbox) -> None:
    """A solver process's loop: (function, args) in, its Answer out, until the pipe closes.

    It says it is ready once the solvers are imported, so that a call's limit never pays for
    the process's start."""
    import z3  # noqa: F401  (imported before the first call's clock runs)

    outbox.send("ready")
    while True:
        try:
            fn, args = inbox.recv()
        except EOFError:
            return
        try:
            got = fn(*args)
        except Exception as err:  # answered, not raised: the caller decides what it means
            got = Answer("error", reason=f"{type(err).__name__}: {err}".splitlines()[0])
        outbox.send(got)


class _Worker:
    """One solver process reached over pipes, replaced when a call overruns.

    Forked where that is safe and cheap (it inherits the imports). A process running JAX's
    threads must not fork, and multiprocessing's fork server or spawn would re-import the
    caller's main module (re-running an unguarded training script), so there the solver is a
    fresh interpreter running ``verify.proving.solve._worker`` on two inherited pipe descriptors.
    """

    def __init__(self, wait: bool = True) -> None:
        if "jax" not in sys.modules and "fork" in multiprocessing.get_all_start_methods():
            ctx = multiprocessing.get_context("fork")
            self.inbox, child = ctx.Pipe()
            self.outbox = self.inbox
            self.process = ctx.Process(target=serve, args=(child, child), daemon=True)
            self.process.start()
            child.close()
            self.popen = None
        else:
            self.process = None
            self.popen, self.inbox, self.outbox = _start_interpreter()
        self.ready = False
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Wait until the process has imported its solvers (once)."""
        if self.ready:
            return
        if not self.inbox.poll(_START_S) or self.inbox.recv() != "ready":
            self.stop()
            raise RuntimeError(f"the solver process did not start within {_START_S} s")
        self.ready = True

    def alive(self) -> bool:
        return self.process.is_alive() if self.process else self.popen.poll() is None

    def call(self, fn: Callable, args: tuple, limit_s: float) -> Answer | None:
        """``fn(*args)`` in the process; ``None`` if no answer within ``limit_s``."""
        self.outbox.send((fn, args))
        if self.inbox.poll(limit_s):
            try:
                return self.inbox.recv()
            except EOFError:  # the process died (e.g. out of memory)
                return None
        return None

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.join(5)
        else:
            self.popen.kill()
            self.popen.wait(5)
        for conn in {self.inbox, self.outbox}:
            conn.close()


def _start_interpreter():
    """``python -m kernel_contracts.verify.proving.solve._worker`` with a pipe each way;
    (Popen, inbox, outbox)."""
    import os
    import subprocess
    from multiprocessing.connection import Connection

    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    argv = [
        sys.executable,
        "-m",
        "kernel_contracts.verify.proving.solve._worker",
        str(to_child_r),
        str(from_child_w),
    ]
    try:
        popen = subprocess.Popen(
            argv, pass_fds=(to_child_r, from_child_w),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        os.close(to_child_r)
        os.close(from_child_w)
    return popen, Connection(from_child_r, writable=False), Connection(to_child_w, readable=False)


_worker: _Worker | None = None


@atexit.register
def _stop_at_exit() -> None:
    """Stop the solver process when this one exits, rather than leave it to notice its closed
    pipe (an interpreter that exits with a child still running warns about it)."""
    global _worker
    if _worker is not None:
        with contextlib.suppress(OSError, ValueError):  # already gone: nothing to stop
            _worker.stop()
        _worker = None


def prestart() -> None:
    """Start the solver process now, without waiting while it imports its solvers, so that
    this process's own work (loading a contract) overlaps that; the first call waits for it."""
    global _worker
    if _worker is None or not _worker.alive():
        _worker = _Worker(wait=False)


def _guarded(fn: Callable, text: str, guard_s: float, *rest) -> Answer:
    """``fn(text, *rest)`` in the solver process, ended if it overruns the hang guard."""
    global _worker
    start = time.perf_counter()
    if _worker is None or not _worker.alive():
        _worker = _Worker()
    _worker.wait_ready()
    got = _worker.call(fn, (text, *rest), guard_s)
    if got is None:
        _worker.stop()
        _worker = None
        name = "cvc5" if fn is _cvc5_check else "z3"
        reason = (
            f"hang guard: {name} gave no answer within {guard_s:g} s of wall clock, so the "
            "solver was stopped before its budget decided; --timeout-ms raises the guard"
        )
        return Answer("unknown", reason=reason, time_ms=_ms(start), hang_guard=True)
    return got
