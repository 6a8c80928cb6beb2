"""RL loop throughput: steps/s with rollouts on each emulated inference kernel against rollouts on
the fp32 preset, same run.

Each preset gets a session of ``kernels.rl.loop`` (the shipped tiny-lm, GRPO with the ``tis``
correction, ``--groups`` x ``--group-size`` rollouts of ``--new-tokens`` tokens per step); one
warm-up step compiles everything. Then ``--steps`` steps per preset are timed, best of
``--repeat`` rounds interleaved across presets (so machine load hits all alike), wall and CPU
seconds, with the share of the wall time spent generating rollouts. The ratio is a preset's
steps/s over the fp32 rollouts' steps/s (by wall time, and by CPU time, which load on a shared
machine inflates less). The first step's seconds are mostly compilation.

Run: ``python bench/bench_rl.py [--presets bf16 h100-fp8] [--steps 5] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from timing import interleaved

from kernel_contracts.contracts.presets import PRESETS


def _stepper(session, steps: int, rollout_seconds: list):
    from kernel_contracts.kernels.rl.loop import rl_step

    counter = itertools.count(1)  # step 0 was the warm-up

    def run():
        total = 0.0
        for _ in range(steps):
            record, _ = rl_step(session, next(counter))
            total += record.rollout_s
        rollout_seconds.append(total)

    return run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", choices=[x for x in PRESETS if x != "fp32"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=16)
    args = p.parse_args(argv)
    if min(args.steps, args.repeat, args.groups, args.group_size, args.new_tokens) < 1:
        p.error("--steps, --repeat, --groups, --group-size and --new-tokens must be >= 1")
    presets = ["fp32", *(args.presets or ["bf16", "h100-fp8"])]

    import jax

    from kernel_contracts.kernels.rl.loop import RLConfig, rl_step, start_session

    fns, rollout, compile_s = {}, {}, {}
    for name in presets:
        config = RLConfig(
            preset=name,
            estimator="tis",
            params=(("cap", 2.0),),
            groups=args.groups,
            group_size=args.group_size,
            new_tokens=args.new_tokens,
        )
        session = start_session(config)
        first, _ = rl_step(session, 0)
        compile_s[name] = first.rollout_s + first.update_s
        rollout[name] = []
        fns[name] = _stepper(session, args.steps, rollout[name])
    wall, cpu, _ = interleaved(fns, args.repeat)

    base = args.steps / wall["fp32"]
    print(
        f"RL loop, {args.groups} x {args.group_size} rollouts of {args.new_tokens} tokens per "
        f"step, tis correction; best of {args.repeat} rounds of {args.steps} steps, interleaved; "
        f"jax {jax.__version__} on {platform.machine()}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}\n"
    )
    header = "| rollouts on | first step s | wall s | CPU s | steps/s | rollout share | vs fp32 |"
    print(header + " vs fp32 (CPU s) |")
    print("|---" * 8 + "|")
    for name in presets:
        rate = args.steps / wall[name]
        share = min(rollout[name]) / wall[name]
        print(
            f"| {name} | {compile_s[name]:.1f} | {wall[name]:.2f} | {cpu[name]:.2f} | "
            f"{rate:.2f} | {share:.0%} | {rate / base:.2f}x | {cpu['fp32'] / cpu[name]:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
