"""``python -m verify export CONTRACT.yaml --to verl|nemo-rl|trl|skyrl``: proved settings out.

Loads and validates the contract, maps its driving guarantees to the framework's keys
(``verify.export.plan``), proves every guarantee a setting rests on, and only then writes the
settings to standard output or ``--out PATH`` (all or nothing, through ``verify.cli.outputs``: the
path is checked before any work, may not name the contract, and is replaced atomically).

Exit codes: 0 written; 1 a guarantee a setting rests on is refuted or unknown (nothing
written); 2 unusable input, nothing written: a usage error (unknown framework or format), a
missing or invalid contract, an unusable output path, a guarantee the framework has no
counterpart for, two guarantees that set one key differently, or no guarantee that maps to any
setting.
"""

from __future__ import annotations

from verify.export import nemo_rl, skyrl, trl, verl
from verify.export.request import ExportError, Framework

__all__ = ["FRAMEWORKS", "export_main"]

FRAMEWORKS: dict[str, Framework] = {
    f.name: f for f in (verl.FRAMEWORK, nemo_rl.FRAMEWORK, trl.FRAMEWORK, skyrl.FRAMEWORK)
}


def _parser(out, err):
    from verify.cli.commands import _Parser, _positive

    p = _Parser(
        prog="python -m verify export",
        description="Write a training framework's rollout-correction settings whose values the "
        "contract proves (importance-sampling mode, caps, masks, clip range).",
        out=out,
        err=err,
    )
    p.add_argument("contract", metavar="CONTRACT.yaml")
    p.add_argument("--to", required=True, metavar="FRAMEWORK", help=", ".join(FRAMEWORKS))
    p.add_argument("--out", metavar="PATH", help="write here instead of standard output")
    p.add_argument("--format", metavar="FORMAT",
                   help="verl, nemo-rl, skyrl: yaml (default) or overrides; trl: yaml "
                   "(default) or json")  # fmt: skip
    p.add_argument("--guarantee", metavar="ID", action="append", default=[],
                   help="export only this guarantee (repeatable)")  # fmt: skip
    p.add_argument("--timeout-ms", type=_positive, default=5000, metavar="N",
                   help="time budget per obligation (default 5000)")  # fmt: skip
    return p


def export_main(argv: list[str], *, stdout, stderr) -> int:
    """The ``export`` command on ``argv`` (the words after ``export``); returns the exit code."""
    from verify.cli import outputs
    from verify.cli.commands import load_contract, prepare_outputs
    from verify.export.plan import plan, prove
    from verify.export.render import render

    p = _parser(stdout, stderr)
    args = p.parse_args(argv)
    framework = FRAMEWORKS.get(args.to)
    if framework is None:
        p.error(f"--to {args.to}: unknown framework (choose from {', '.join(FRAMEWORKS)})")
    fmt = args.format or framework.formats[0]
    if fmt not in framework.formats:
        p.error(f"--format {fmt}: {framework.name} reads {' or '.join(framework.formats)}")
    target = prepare_outputs([("--out", args.out)], [("the contract", args.contract)], stderr)
    if target is None:
        return 2
    with target:
        contract = load_contract(args.contract, stderr)
        if contract is None:
            return 2
        try:
            export = plan(contract, framework, tuple(dict.fromkeys(args.guarantee)))
            proved = prove(export, timeout_ms=args.timeout_ms)
        except ExportError as err:
            stderr.write(f"{err}\n")
            return err.code
        text = render(export, fmt, proved)
        if args.out is None:
            stdout.write(text)
            return 0
        try:
            target.write([text])
        except outputs.OutputError as err:
            stderr.write(f"verify: {err}\n")
            return 2
    stdout.write(f"wrote {len(export.settings)} {framework.name} settings to {args.out}\n")
    return 0
