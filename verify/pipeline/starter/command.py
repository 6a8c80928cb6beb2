"""``python -m verify init --framework F --vocab N [...] [-o PATH [--force]]``.

Writes the starter contract of ``verify.pipeline.starter.contract`` to standard output or to
``PATH``. An existing ``PATH`` is replaced only with ``--force``; the file is written beside
its target and moved into place, so a failure leaves nothing half-written. Exit codes: 0
written; 2 unusable input (an unknown framework, preset or estimator, a bad vocabulary size,
temperature or estimator parameter, an existing file without ``--force``, a path that cannot be
written), with one line saying why, and nothing written.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from types import MappingProxyType

__all__ = ["init_main"]


def _params(args, estimator: str) -> tuple[dict, str | None]:
    """The estimator parameters given on the command line, or why one does not apply."""
    from kernel_contracts.contracts.checks import param_range, valid_band
    from kernel_contracts.contracts.fields import ESTIMATOR_PARAMS

    given = {
        "cap": args.cap,
        "clip_epsilon": args.clip_epsilon,
        "band": tuple(args.band) if args.band else None,
        "threshold": args.threshold,
    }
    needs = ESTIMATOR_PARAMS.get(estimator, ())
    if estimator == "kl_reject":  # verl's criteria strings have no option here
        return {}, (
            "--estimator kl_reject: its criteria (reject, reject_threshold) are written in the "
            "contract; start from another estimator and replace it"
        )
    for name, value in given.items():
        option = f"--{name.replace('_', '-')}"
        if value is None:
            continue
        if name not in needs:
            takes = ", ".join(f"--{n.replace('_', '-')}" for n in needs) or "no parameter"
            return {}, f"{option}: estimator {estimator} takes {takes}"
        if name == "band" and not valid_band(*value):
            return (
                {},
                f"{option}: a band LO HI needs 0 <= LO < 1 < HI, got {value[0]:g} {value[1]:g}",
            )
        if name != "band" and value not in (allowed := param_range(estimator, name)):
            return {}, f"{option}: must be {allowed} for estimator {estimator}, got {value:g}"
    return {k: v for k, v in given.items() if v is not None}, None


def _no_export(setup) -> str:
    """Why ``export`` writes no setting of the setup's framework for its estimator, or ``""``."""
    from fractions import Fraction

    from kernel_contracts.verify.pipeline.export import FRAMEWORKS, NoCounterpart, Request

    if setup.estimator == "plain":
        return "plain is no correction, so there is nothing to set"
    value = {}
    for name in ("cap", "clip_epsilon", "threshold", "band"):
        if name in setup.needs:
            v = setup.param(name)
            exact = tuple(Fraction(str(x)) for x in v) if name == "band" else Fraction(str(v))
            value[name] = exact
    try:
        FRAMEWORKS[setup.framework].settings(Request("G_pg_bias", setup.estimator, **value))
    except NoCounterpart as err:
        return str(err)
    return ""


def _write(path: str, text: str, force: bool) -> str | None:
    """Write ``text`` to ``path`` all at once; why not, or ``None``."""
    if os.path.isdir(path):
        return f"{path}: is a directory"
    if os.path.lexists(path) and not force:
        return f"{path} exists; give --force to replace it"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"cannot write {path}: no such directory"
    try:
        fd, temp = tempfile.mkstemp(prefix=".init-", suffix=".yaml", dir=folder)
    except OSError as err:
        return f"cannot write {path}: {err.strerror}"
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, 0o666 & ~_umask())
        os.replace(temp, path)
    except OSError as err:
        os.unlink(temp)
        return f"cannot write {path}: {err.strerror}"
    return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def init_main(argv: list[str], *, stdout, stderr) -> int:
    """The ``init`` command on ``argv`` (the words after ``init``); returns the exit code."""
    from kernel_contracts import contracts
    from kernel_contracts.contracts.fields import ESTIMATORS
    from kernel_contracts.verify.common.arguments import init_parser
    from kernel_contracts.verify.pipeline.export import FRAMEWORKS
    from kernel_contracts.verify.pipeline.starter.contract import Setup, starter_text

    p = init_parser(stdout, stderr, frameworks=list(FRAMEWORKS), presets=list(contracts.PRESETS),
                    estimators=list(ESTIMATORS))  # fmt: skip
    args = p.parse_args(argv)
    params, problem = _params(args, args.estimator)
    if problem:
        p.error(problem)
    setup = Setup(
        framework=args.framework,
        vocab_size=args.vocab,
        temperature=args.temperature,
        preset=args.preset,
        train_preset=args.train_preset,
        estimator=args.estimator,
        params=MappingProxyType(params),
        max_new_tokens=args.max_new_tokens,
    )
    command = shlex.join(["python", "-m", "verify", "init", *argv])
    name = os.path.basename(args.out) if args.out else "contract.yaml"
    try:
        text = starter_text(setup, command, name, _no_export(setup))
        contracts.loads(text, path=name)  # what is written reads back as a contract
    except contracts.ContractError as err:  # a setup the checks above let through
        stderr.write(f"verify init: this setup is not a valid contract: {err}\n")
        return 2
    except ValueError as err:
        stderr.write(f"verify init: {err}\n")
        return 2
    if args.out is None:
        stdout.write(text)
        return 0
    problem = _write(args.out, text, args.force)
    if problem:
        stderr.write(f"verify init: {problem}\n")
        return 2
    stdout.write(
        f"wrote {args.out}: every guarantee in it is proved from one premise, a logit-drift "
        f"limit; run python -m verify {shlex.quote(args.out)}, then measure that premise as its "
        "comments say\n"
    )
    return 0
