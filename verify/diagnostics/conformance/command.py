"""``python -m verify conformance CONTRACT.yaml``: the suite and its positive controls.

Runs ``verify.diagnostics.conformance.run_suite`` on one kernel of the contract (``--kernel
inference``, the default, or ``train``): the kernel's JAX implementation with every fault of
``kernels.diagnose.faults`` injected in turn, every check run on each, the top-1 check on
``--sequences`` held-out sequences of ``--length`` tokens of the model (``--model`` /
``--params`` or the contract's; ``--sequences 0`` leaves it out). Prints the table of which
check detects which fault and the flags (false alarms, faults their designed check missed,
checks that fire on nothing, faults nothing detects); ``--json PATH`` writes it.

A command rather than a script: the table belongs to a contract's kernel (its epilogue,
scales, ``k_max``), it gates (exit code), it reuses the contract loading, the bad-input rules
and the all-or-nothing output of the other commands, and the a-priori check needs ``bounds``,
which only ``verify`` may import.

Exit codes: 0 no check fires on the null fault and every fault is detected by the check
designed for it; 1 otherwise; 2 unusable input (nothing written).
"""

from __future__ import annotations

__all__ = ["conformance_main"]


def conformance_main(argv: list[str], *, stdout, stderr) -> int:
    """The ``conformance`` command on ``argv`` (the words after ``conformance``)."""
    from kernel_contracts.verify.common import outputs
    from kernel_contracts.verify.common.arguments import conformance_parser
    from kernel_contracts.verify.common.consent import trusted
    from kernel_contracts.verify.common.inputs import load_contract, prepare_outputs
    from kernel_contracts.verify.diagnostics.localize.model import (
        ModelError,
        choose_model,
        token_rows,
    )

    args = conformance_parser(stdout, stderr).parse_args(argv)
    if args.sequences and args.length < 1:
        stderr.write("--length 0: the top-1 check needs at least one token per sequence\n")
        return 2
    target = prepare_outputs([("--json", args.json)], [("the contract", args.contract)], stderr)
    if target is None:
        return 2
    with target:
        contract = load_contract(args.contract, stderr)
        if contract is None:
            return 2
        model = None
        if args.sequences:
            try:
                chosen = choose_model(
                    contract,
                    args.model,
                    args.params,
                    args.length,
                    trust_code=trusted(args.trust_code),
                )
            except ModelError as err:
                stderr.write(f"{err}\n")
                return 2
            import numpy as np

            from kernel_contracts.verify.diagnostics.conformance.suite import Model

            rng = np.random.default_rng(args.seed)
            tokens = token_rows(chosen, args.sequences, args.length, rng)
            model = Model(chosen.fn, chosen.params, tokens)
        from kernel_contracts.verify.diagnostics.conformance.render import to_json, to_text
        from kernel_contracts.verify.diagnostics.conformance.suite import run_suite

        kernel = getattr(contract.kernels, args.kernel)
        try:
            table = run_suite(kernel, seed=args.seed, model=model)
        except (ValueError, NotImplementedError) as err:
            first = str(err).replace("\n", " ")
            stderr.write(f"verify conformance: cannot run the {args.kernel} kernel: {first}\n")
            return 2
        if args.json is not None:
            try:
                target.write([to_json(table, args.kernel)])
            except outputs.OutputError as err:
                stderr.write(f"verify: {err}\n")
                return 2
    stdout.write(to_text(table, args.kernel))
    return 0 if table.ok else 1
