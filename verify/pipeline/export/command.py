"""``python -m verify export CONTRACT.yaml --to verl|nemo-rl|trl|skyrl``: proved settings out.

Loads and validates the contract, maps its driving guarantees to the framework's keys
(``verify.pipeline.export.plan``), proves every guarantee a setting rests on, and only then writes
the settings to standard output or ``--out PATH`` (all or nothing, through
``verify.common.outputs``: the path is checked before any work, may not name the contract,
and is replaced atomically).

With evidence (the contract's ``evidence:`` section, or ``--evidence PATH ...`` as for a
run), the clauses are measured first and every setting's guarantees are checked against what
the evidence says of their premises (``verify.common.support``): a setting whose proof rests on a
premise the evidence violates is refused; one that rests on a premise no evidence decided is
written, and the premise is named.

``--check-version X.Y`` names the framework release the settings are for: a release outside
the range of released versions the framework's keys were checked against
(``Framework.versions``, also written in the output's provenance), or one that is not written
``X.Y`` or ``X.Y.Z``, is refused before anything else is read; the main branch is accepted only
as the commit that was read, ``main@<commit>`` (``Framework.main``). With a release named, an
estimator the framework has only from a later release on (``Framework.since``) is refused.

Exit codes: 0 written (and, with evidence, it held every premise); 1 a guarantee a setting
rests on is refuted or unknown (or the |log w| bound a clamped framework weight needs,
``Framework.ratio_clamp``, is not proved), or rests on a premise the evidence violates
(nothing written);
2 unusable input, nothing written: a usage error (unknown framework or format, a malformed
``--check-version``, a release outside the checked range, or an estimator that release
lacks), a missing or
invalid contract, unusable evidence, an unusable output path, a guarantee the framework has
no counterpart for, two guarantees that set one key differently, or no guarantee that maps to
any setting; 3 written, but some premise of it stayed unchecked by the given evidence.
"""

from __future__ import annotations

from kernel_contracts.verify.pipeline.export import nemo_rl, skyrl, trl, verl
from kernel_contracts.verify.pipeline.export.request import ExportError, Framework

__all__ = ["FRAMEWORKS", "export_main"]

FRAMEWORKS: dict[str, Framework] = {
    f.name: f for f in (verl.FRAMEWORK, nemo_rl.FRAMEWORK, trl.FRAMEWORK, skyrl.FRAMEWORK)
}


def export_main(argv: list[str], *, stdout, stderr) -> int:
    """The ``export`` command on ``argv`` (the words after ``export``); returns the exit code."""
    from kernel_contracts.verify.common import outputs
    from kernel_contracts.verify.common.arguments import export_parser
    from kernel_contracts.verify.common.consent import consent_problem, trusted
    from kernel_contracts.verify.common.inputs import (
        declared_evidence_problem,
        given_evidence_problem,
        load_contract,
        prepare_outputs,
        run_inputs,
    )
    from kernel_contracts.verify.pipeline.export.plan import plan, premises_of, prove
    from kernel_contracts.verify.pipeline.export.render import render
    from kernel_contracts.verify.pipeline.export.request import check_version
    from kernel_contracts.verify.proving.solve.budget import from_args

    p = export_parser(stdout, stderr, frameworks=", ".join(FRAMEWORKS))
    args = p.parse_args(argv)
    framework = FRAMEWORKS.get(args.to)
    if framework is None:
        p.error(f"--to {args.to}: unknown framework (choose from {', '.join(FRAMEWORKS)})")
    fmt = args.format or framework.formats[0]
    if fmt not in framework.formats:
        p.error(f"--format {fmt}: {framework.name} reads {' or '.join(framework.formats)}")
    release = None
    if args.check_version is not None:
        try:
            release = check_version(framework, args.check_version)
        except ExportError as err:
            stderr.write(f"{err}\n")
            return err.code
    problem = given_evidence_problem(args.evidence)
    if problem:
        stderr.write(f"{problem}\n")
        return 2
    target = prepare_outputs([("--out", args.out)], run_inputs(args), stderr)
    if target is None:
        return 2
    with target:
        contract = load_contract(args.contract, stderr)
        if contract is None:
            return 2
        trust_code = trusted(args.trust_code)
        problem = None if args.evidence else declared_evidence_problem(contract, target)
        problem = problem or consent_problem(contract, trust_code)
        if problem:
            stderr.write(f"{problem}\n")
            return 2
        try:
            export = plan(contract, framework, tuple(dict.fromkeys(args.guarantee)), release)
            proved = prove(export, budget=from_args(args))
            unchecked = premises_of(export, tuple(args.evidence), trust_code=trust_code)
        except ExportError as err:
            stderr.write(f"{err}\n")
            return err.code
        text = render(export, fmt, proved)
        for line in unchecked:
            stderr.write(f"note: {line}\n")
        code = 3 if unchecked else 0
        if args.out is None:
            stdout.write(text)
            return code
        try:
            target.write([text])
        except outputs.OutputError as err:
            stderr.write(f"verify: {err}\n")
            return 2
    stdout.write(f"wrote {len(export.settings)} {framework.name} settings to {args.out}\n")
    return code
