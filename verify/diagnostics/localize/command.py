"""``python -m verify localize CONTRACT.yaml``: where the contract's two kernels diverge.

Kernel A is the contract's training kernel (fixed batching, as K_train always runs), kernel B
its inference kernel at a serving batch of ``--sequences`` (``kernels.diagnose.localization``). The
model is ``--model``/``--params`` or the contract's own
(``verify.diagnostics.localize.model``). Two runs:

1. ``--sequences`` held-out sequences of ``--length`` tokens, every matmul site compared on
   shared operands (kernel B fed kernel A's operands), with and without power-of-two scales;
2. ``--replay`` other sequences teacher-forced through both kernels end to end, and kernel A's
   margin scored as a predictor of top-1 flips (ROC-AUC, Brier of a logistic map fitted on
   the even sequences, scored on the odd ones); ``--replay 0`` skips it.

Prints the tables; ``--json PATH`` writes everything (checked before any work, written all or
nothing). Exit codes: 0 done; 2 unusable input (the contract, the model, the lengths, a kernel
that cannot run the model, the output path), nothing written.
"""

from __future__ import annotations

__all__ = ["localize_main"]


def localize_main(argv: list[str], *, stdout, stderr) -> int:
    """The ``localize`` command on ``argv`` (the words after ``localize``)."""
    from dataclasses import replace

    from kernel_contracts.verify.common import outputs
    from kernel_contracts.verify.common.arguments import localize_parser
    from kernel_contracts.verify.common.consent import trusted
    from kernel_contracts.verify.common.inputs import load_contract, prepare_outputs
    from kernel_contracts.verify.diagnostics.localize.model import (
        ModelError,
        choose_model,
        token_rows,
    )
    from kernel_contracts.verify.diagnostics.localize.render import to_json, to_text

    args = localize_parser(stdout, stderr).parse_args(argv)
    if args.replay == 1:
        stderr.write(
            "--replay 1: flip prediction fits on even sequences and scores odd ones, so it "
            "needs at least 2 (0 skips it)\n"
        )
        return 2
    target = prepare_outputs([("--json", args.json)], [("the contract", args.contract)], stderr)
    if target is None:
        return 2
    with target:
        contract = load_contract(args.contract, stderr)
        if contract is None:
            return 2
        try:
            chosen = choose_model(
                contract, args.model, args.params, args.length, trust_code=trusted(args.trust_code)
            )
        except ModelError as err:
            stderr.write(f"{err}\n")
            return 2
        import numpy as np

        from kernel_contracts.kernels.diagnose.localization import localize, replay

        a = replace(contract.kernels.train, batching="fixed")
        b = contract.kernels.inference
        rng = np.random.default_rng(args.seed)
        rows = token_rows(chosen, args.sequences + args.replay, args.length, rng)
        try:
            loc = localize(chosen.fn, chosen.params, rows[: args.sequences], a, b)
            rep = None
            if args.replay:
                rep = replay(chosen.fn, chosen.params, rows[args.sequences :], a, b)
        except (ValueError, NotImplementedError) as err:
            first = str(err).replace("\n", " ")
            stderr.write(f"verify localize: cannot run {chosen.name} on these kernels: {first}\n")
            return 2
        meta = {"contract": args.contract, "model": chosen.name, "seed": args.seed,
                "sequences": args.sequences, "length": args.length,
                "tokens": chosen.tokens}  # fmt: skip
        if args.json is not None:
            try:
                target.write([to_json(loc, rep, meta)])
            except outputs.OutputError as err:
                stderr.write(f"verify: {err}\n")
                return 2
    stdout.write(to_text(loc, rep, meta))
    return 0
