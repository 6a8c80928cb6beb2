"""Calibration of the solver budget: the resource units every shipped obligation spends.

    python bench/solver_budgets.py [--markdown]

For each contract of ``contracts/examples`` it derives the guarantees' obligations and the int8
kernels' exactness obligations (proofs only: no evidence is measured) and decides them with the
default budget (``verify.proving.solve.budget``), then prints per obligation its verdict, the z3
resource units (``rlimit count``) its queries spent, the most one query spent, and the units
cvc5 spends cross-checking its queries as ``verify check`` does. The last lines compare the
largest spend with the default per-query allowance and cvc5's ``rlimit-per``: the margins the
defaults leave. These counts are the solvers' own and do not depend on the machine or its
load (times do, and are not printed); they change with the solver versions, which are printed.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EXAMPLES = sorted((ROOT / "contracts" / "examples").glob("*.yaml"))


def measure(path: pathlib.Path, budget) -> list[tuple[str, str, int, int, int]]:
    """``(obligation, status, z3 units, most z3 units of one query, cvc5 units)`` per obligation
    of the contract at ``path``."""
    from kernel_contracts import bounds, contracts
    from kernel_contracts.verify.proving.kernel_obligations import kernel_obligations
    from kernel_contracts.verify.proving.obligations import discharge
    from kernel_contracts.verify.proving.solve import smt

    contract = contracts.load(str(path))
    obligations = [discharge(d, budget=budget) for d in bounds.derive(contract)]
    obligations += kernel_obligations(contract, budget=budget)
    rows = []
    for o in obligations:
        most, cvc5 = 0, 0
        for q in o.queries:
            again = smt.z3_check(q.text, rlimit=budget.allowance(budget.rlimit))
            most = max(most, again.rlimit)
            cross = smt.cvc5_check(q.text, rlimit=budget.cvc5_rlimit)
            cvc5 = max(cvc5, cross.rlimit if cross is not None else 0)
        rows.append((o.id, o.status.label, o.rlimit, most, cvc5))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    from kernel_contracts.verify.proving.solve import smt
    from kernel_contracts.verify.proving.solve.budget import Budget

    budget = Budget()
    print(f"z3 {smt.z3_version()}, cvc5 {smt.cvc5_version()}; budget {budget.json()}")
    header = ("contract", "obligation", "status", "z3 rlimit", "most in one query", "cvc5 units")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    else:
        print("  ".join(f"{h:>18}" for h in header))
    most = {"guarantee": 0, "kernel": 0}  # a kernel obligation's id has a colon
    most_cvc5 = 0
    for path in EXAMPLES:
        for row in measure(path, budget):
            cells = (path.name, *map(str, row))
            kind = "kernel" if ":" in row[0] else "guarantee"
            most[kind], most_cvc5 = max(most[kind], row[3]), max(most_cvc5, row[4])
            if args.markdown:
                print("| " + " | ".join(cells) + " |")
            else:
                print("  ".join(f"{c:>18}" for c in cells))
    # a guarantee's query may spend the per-query allowance, a kernel query the whole budget
    limits = {"guarantee": budget.allowance(budget.rlimit), "kernel": budget.rlimit}
    for kind, limit in limits.items():
        print(f"most z3 units in one {kind} query: {most[kind]}; it may spend {limit} "
              f"({limit / max(most[kind], 1):.1f}x)")  # fmt: skip
    print(f"most cvc5 units in one query: {most_cvc5}; rlimit-per {budget.cvc5_rlimit} "
          f"({budget.cvc5_rlimit / max(most_cvc5, 1):.1f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
