"""The command line: ``python -m verify CONTRACT.yaml | check | synth | schema | monitor``, and
``export``, ``localize``, ``measure``, ``conformance``, ``init``.

``main(argv, *, stdout, stderr) -> int`` never exits and never lets a traceback reach the
user: usage errors exit 2 with the usage line; an unexpected exception is reported as one
``verify: internal error: ...`` line and exit 2. Exit codes
(``verify.common.arguments.EXIT_CODES``): 0 all proved and held; 1 something refuted or violated; 2
unusable input (nothing written); 3 something
unknown or inconclusive and nothing refuted or violated. With evidence, every guarantee's
premises count (``verify.common.support``): a premise the evidence violates is exit 1, one it left
unchecked exit 3, so exit 0 means the evidence held every premise of every proved guarantee.

The words ``check``, ``synth``, ``schema``, ``monitor`` and ``export`` are reserved as the first
argument: a contract file with one of those names is given with a directory, e.g. ``./check``.
So are ``localize``, ``measure``, ``conformance`` and ``init``.

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

import json
import sys
import time
from collections.abc import Sequence

from kernel_contracts.verify.common.arguments import PARSERS, Stop

__all__ = ["COMMANDS", "SUBCOMMANDS", "main"]


def _check(argv, stdout, stderr, t_start: float) -> int:
    args = PARSERS["check"](stdout, stderr).parse_args(argv)
    from kernel_contracts.verify.pipeline.promotion import check_record_main, is_record

    if is_record(args.report):  # a promotion record is re-checked with its chain
        return check_record_main(args.report, stdout=stdout, stderr=stderr)
    from kernel_contracts.verify.proving.check.recheck import check_main

    return check_main(args.report, stdout=stdout, stderr=stderr)


def _synth(argv, stdout, stderr, t_start: float) -> int:
    args = PARSERS["synth"](stdout, stderr).parse_args(argv)
    from kernel_contracts.verify.proving.solve.budget import from_args
    from kernel_contracts.verify.proving.synth import synth_main

    return synth_main(args.contract, from_args(args), stdout=stdout, stderr=stderr)


def _schema(argv, stdout, stderr, t_start: float) -> int:
    PARSERS["schema"](stdout, stderr).parse_args(argv)
    from kernel_contracts import contracts

    stdout.write(json.dumps(contracts.json_schema(), indent=2) + "\n")
    return 0


def _export(argv, stdout, stderr, t_start: float) -> int:
    from kernel_contracts.verify.pipeline.export import export_main

    return export_main(argv, stdout=stdout, stderr=stderr)


def _localize(argv, stdout, stderr, t_start: float) -> int:
    from kernel_contracts.verify.diagnostics.localize.command import localize_main

    return localize_main(argv, stdout=stdout, stderr=stderr)


def _measure(argv, stdout, stderr, t_start: float) -> int:
    from kernel_contracts.verify.diagnostics.measure.command import measure_main

    return measure_main(argv, stdout=stdout, stderr=stderr)


def _conformance(argv, stdout, stderr, t_start: float) -> int:
    from kernel_contracts.verify.diagnostics.conformance.command import conformance_main

    return conformance_main(argv, stdout=stdout, stderr=stderr)


def _init(argv, stdout, stderr, t_start: float) -> int:
    from kernel_contracts.verify.pipeline.starter import init_main

    return init_main(argv, stdout=stdout, stderr=stderr)


def _monitor(argv, stdout, stderr, t_start: float) -> int:
    from kernel_contracts.verify.pipeline import monitor

    return monitor.main(argv, stdout=stdout, stderr=stderr)


def _compile_cache(option: str | None, stderr) -> None:
    """JAX's persistent compilation cache, set before anything compiles
    (``verify.common.compile_cache``)."""
    from kernel_contracts.verify.common import compile_cache

    choice = compile_cache.locate(option)
    if choice.note:
        stderr.write(f"verify: note: {choice.note}\n")
    compile_cache.configure(choice)


def _verify(argv, stdout, stderr, t_start: float) -> int:
    from kernel_contracts.verify.proving.solve import smt

    smt.prestart()  # the solver process imports z3 while this one reads the contract
    args = PARSERS[""](stdout, stderr).parse_args(argv)
    _compile_cache(args.jax_cache, stderr)
    if args.stage or args.promotion_dir is not None or args.traffic is not None:
        from kernel_contracts.verify.pipeline.promotion import stage_main

        return stage_main(args, stdout, stderr, t_start)
    from kernel_contracts.verify.proving.command import verify_main

    return verify_main(args, stdout, stderr, t_start)


# the first word of the command line -> the command; anything else is a contract to verify
COMMANDS = {
    "check": _check,
    "synth": _synth,
    "schema": _schema,
    "monitor": _monitor,
    "export": _export,
    "localize": _localize,
    "measure": _measure,
    "conformance": _conformance,
    "init": _init,
}
SUBCOMMANDS = tuple(COMMANDS)


def main(argv: Sequence[str] | None = None, *, stdout=None, stderr=None) -> int:
    """Run the command line on ``argv``; returns the exit code."""
    t_start = time.perf_counter()
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = (
        (COMMANDS[argv[0]], argv[1:]) if argv and argv[0] in COMMANDS else (_verify, argv)
    )
    try:
        return command(rest, stdout, stderr, t_start)
    except Stop as stop:
        return stop.code
    except KeyboardInterrupt:
        stderr.write("verify: interrupted\n")
        return 2
    except ModuleNotFoundError as err:  # a broken installation: name what is missing
        stderr.write(
            f"verify: the module {err.name!r} is missing from this installation: install "
            "kernel-contracts with its dependencies (pip install kernel-contracts)\n"
        )
        return 2
    except Exception as err:  # the documented last resort: one line, never a traceback
        stderr.write(f"verify: internal error: {type(err).__name__}: {err}\n")
        return 2
