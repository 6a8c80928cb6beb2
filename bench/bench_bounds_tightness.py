"""Tightness of every link: witness / bound, measured on explicit instances.

Run: python bench/bench_bounds_tightness.py [--json PATH]

Token-level links: the smallest ratio over a grid of (osc, T). Sequence TV: the best i.i.d.
two-point witness (exact binomial TV) against the tightest of the four routes, at
L ∈ {1, 16, 256, 4096} and δ ∈ {0.001, 0.01, 0.1} (T = 1), with the winning route.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import sympy

from kernel_contracts.bounds import LEMMAS
from kernel_contracts.bounds.sequence import best_iid_witness, sequence_routes
from kernel_contracts.bounds.token import kl_tilt_sup

GRID = [(osc, T) for osc in (0.002, 0.02, 0.2, 1.0, 4.0) for T in (0.05, 0.7, 1.0, 20.0)]
EXTRA = {
    "reward_drift_tv": (1.0,),
    "pg_bias_plain": (5.0, 1.0),
    "pg_bias_tis": (1.2,),
    "pg_bias_mis": (1.2,),
    "clip_budget": (0.2,),
}
TOKEN = [
    "token_log_ratio",
    "token_tv_tanh",
    "token_kl_exact",
    "token_kl_hoeffding",
    "reward_drift_tv",
    "pg_bias_plain",
    "pg_bias_tis",
    "pg_bias_mis",
    "clip_budget",
]


def token_rows() -> list[dict]:
    rows = []
    for name in TOKEN:
        ratios = []
        for osc, T in GRID:
            w = LEMMAS[name].witness(osc, T, *EXTRA.get(name, ()))
            if w.bound > 0:
                ratios.append(w.ratio)
        rows.append({"link": name, "min_ratio": min(ratios), "max_ratio": max(ratios)})
    for name in ("ratio_to_tv", "ratio_to_kl"):
        ratios = [LEMMAS[name].witness(r).ratio for r in (1e-3, 0.05, 0.5, 2.0, 8.0)]
        rows.append({"link": name, "min_ratio": min(ratios), "max_ratio": max(ratios)})
    return rows


def sequence_rows() -> list[dict]:
    rows = []
    for delta in (0.001, 0.01, 0.1):
        s = 2 * delta
        ss = sympy.Float(s, 30)
        for L in (1, 16, 256, 4096):
            routes = sequence_routes(sympy.tanh(ss / 4), kl_tilt_sup(ss), ss, sympy.Integer(L))
            values = {k: float(v.evalf(30)) for k, v in routes.items()}
            winner = min(values, key=values.get)
            _, achieved = best_iid_witness(s, L)
            rows.append(
                {
                    "delta": delta,
                    "L": L,
                    "route": winner,
                    "bound": values[winner],
                    "witness": achieved,
                    "ratio": achieved / values[winner],
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    tok, seq = token_rows(), sequence_rows()
    print(f"{'token-level link':<22} {'min witness/bound':>18} {'max':>10}")
    for r in tok:
        print(f"{r['link']:<22} {r['min_ratio']:>18.6f} {r['max_ratio']:>10.6f}")
    print()
    print(f"{'delta':>6} {'L':>5} {'winning route':<30} {'bound':>10} {'witness':>10} {'ratio':>7}")
    for r in seq:
        print(
            f"{r['delta']:>6} {r['L']:>5} {r['route']:<30} {r['bound']:>10.6f} "
            f"{r['witness']:>10.6f} {r['ratio']:>7.4f}"
        )
    print(f"\n({time.perf_counter() - t0:.1f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"token": tok, "sequence": seq}, f, indent=2)
    return (
        0
        if all(r["ratio"] <= 1 + 1e-9 for r in seq)
        and not any(math.isnan(r["min_ratio"]) for r in tok)
        else 1
    )


if __name__ == "__main__":
    sys.exit(main())
