"""Benchmarks of full-vocabulary measurement, and the table of measured divergence by preset.

    python bench/bench_measure.py throughput [--tokens 4096] [--vocab 32768] [--repeat 5]
                                             [--drift 0.01]
    python bench/bench_measure.py table [--prompts 64] [--new-tokens 64]

``throughput`` times ``kernels.measure`` on random logits (z' = z + drift·N(0, 1)) on both of
its paths, ``impl="cpu"`` (the host's compiled pass, ``kernels.measurement.measure_cpu``: the
default on a one-CPU-device machine) and ``impl="jax"`` (the XLA program of
``kernels.measurement.measure_fused``), against, in the same run and interleaved (so load from other
processes hits all alike; best of ``--repeat``):

- the machine's read bandwidth: the fastest of three passes that read the same two arrays once
  and do the least arithmetic per byte (a jitted row maximum and row sum, the runtime and
  threads the measurement uses, and a numpy maximum). The fastest is the best evidence of what
  the memory delivers; a slower one measures its own overhead;
- a floor loop: two exponentials per pair of logits, each summed (the transcendentals of the
  measurement's general path, e^{z/T} and e^u per pair; a block whose |u| are all below 1/2
  needs e^{z/T} alone, see ``kernels.measurement.measure_fused``), whose rate of vector operations
  the floor argument uses;
- the straightforward numpy implementation (``measure_numpy`` in float32, over blocks of rows so
  its temporaries fit in memory), once.

It prints wall and CPU seconds (all threads), each path's bytes of logits read per second as a share
of the read bandwidth, the same share per core (the read pass's CPU-seconds over the path's: the
host pass splits its rows over every core while the numpy read uses one, so the wall-clock share
counts the second core as the pass's own and halves when other jobs hold it; CPU-seconds compare the
work each does per byte, whatever the load), how far the two paths' divergences differ, and for the
XLA path a floor argument: the operations per pair of logits counted from the compiled program
(``count_ops``: exponentials, elementwise operations and reduction steps), the operation rate it and
the floor loop reached, what a 25 % share would need as a share of the cores' peak, and the share of
the read bandwidth that the counted operations allow at the floor loop's rate and at the cores'
peak; and the load average before and after.

``table`` runs the shipped policy through K_train = fp32 and K_inf = each preset (the
``emulate`` evidence path) and prints a Markdown table of drift, TV and |log ratio| quantiles.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from timing import best, interleaved

# An exponential is about 15 vector operations in XLA's CPU code (range reduction, a degree-6
# polynomial, scaling). The cores execute at most 4 pipes x 8 float32 lanes per cycle each.
OPS_PER_EXP = 15
PEAK_OPS_PER_CYCLE = 32  # per core: 4 vector pipes x 8 float32 lanes (256-bit)
_TRANSCENDENTAL = ("exponential", "exponential-minus-one", "log", "log-plus-one")
_NOT_WORK = ("parameter", "bitcast", "broadcast", "constant", "dynamic-slice", "slice", "iota")


def count_ops(hlo: str, tokens: int, vocab: int, block: int, dearest: bool = False) -> dict:
    """Work per pair of logits in a compiled measurement (``Compiled.as_text()``), counted from
    the HLO after XLA's optimisations: the elementwise operations of every fused loop whose
    output has one value per logit of a block (``arrays``: how many such arrays each block
    writes), the transcendentals among them, and the reductions that read one value per logit
    (of a block, or of the whole input before the block loop). Loops whose output is smaller
    (gathers of one logit per row) do no work per logit and are left out. Of each conditional
    the cheapest branch is counted (the path of logits whose drift is small), or with
    ``dearest`` the dearest (large drift, and rows recomputed in the log domain)."""
    comps: dict[str, list[str]] = {}
    cur = None
    for line in hlo.splitlines():
        m = re.match(r"^(?:ENTRY )?%(\S+) \(.*\{$", line)
        if m:
            cur = m.group(1)
            comps[cur] = []
        elif line.startswith("}"):
            cur = None
        elif cur:
            comps[cur].append(line)
    inst = re.compile(r"^\s*(?:ROOT )?%(\S+) = \w+\[([\d,]*)\]\S* ([\w-]+)\(")
    keys = ("exponentials", "elementwise", "reductions", "arrays")

    def size(shape: str) -> int:
        return math.prod(int(d) for d in shape.split(",") if d)

    def total(c: dict) -> int:
        return c["exponentials"] * OPS_PER_EXP + c["elementwise"] + c["reductions"]

    def count(comp: str, per_pair: int) -> dict:
        out = dict.fromkeys(keys, 0)
        shapes = {}
        for line in comps[comp]:
            if " conditional(" in line:
                names = re.search(r"branch_computations=\{([^}]*)\}", line)
                if names:
                    branches = re.findall(r"%([\w.-]+)", names.group(1))
                else:
                    branches = re.findall(r"(?:true|false)_computation=%([\w.-]+)", line)
                pick = max if dearest else min
                counts = [count(b, per_pair) for b in branches]
                for k, v in pick(counts, key=total).items():
                    out[k] += v
                continue
            m = inst.match(line)
            if not m:
                continue
            name, shape, op = m.groups()
            shapes[name] = size(shape)
            if op != "fusion":
                continue
            callee = re.search(r"calls=%([^,\s]+)", line).group(1)
            if "kind=kCustom" in line:  # a library reduction: one step per value it reads
                operands = re.findall(r"%([\w.-]+)", line.split("fusion(", 1)[1].split(")")[0])
                params = [size(m2.group(2)) for x in comps[callee] if (m2 := inst.match(x))]
                if per_pair in [shapes.get(o) for o in operands] + params:
                    out["reductions"] += 1
            elif shapes[name] == per_pair:
                out["arrays"] += 1
                for x in comps[callee]:
                    m2 = inst.match(x)
                    if m2 and size(m2.group(2)) == per_pair and m2.group(3) not in _NOT_WORK:
                        kind = "exponentials" if m2.group(3) in _TRANSCENDENTAL else "elementwise"
                        out[kind] += 1
        return out

    body = re.search(r"body=%([^,\s]+)", hlo).group(1)
    entry = next(name for name in comps if name.startswith("main"))
    inner, outer = count(body, block * vocab), count(entry, tokens * vocab)
    out = {k: inner[k] + outer[k] for k in keys}
    out["total"] = total(out)
    return out


def _clock_hz() -> float:
    """The CPU clock Linux reports (0 where it reports none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) * 1e6
    except (OSError, ValueError):
        pass
    return 0.0


def throughput(tokens: int, vocab: int, repeat: int, numpy_rows: int, drift: float) -> None:
    import jax
    import jax.numpy as jnp

    from kernel_contracts.kernels import measure, measure_numpy

    rng = np.random.default_rng(0)
    z = (rng.standard_normal((tokens, vocab), np.float32) * 3).astype(np.float32)
    zp = z + (rng.standard_normal((tokens, vocab), np.float32) * drift).astype(np.float32)
    y = rng.integers(0, vocab, tokens)
    logit_bytes = z.nbytes + zp.nbytes
    pairs = z.size
    zj, zpj, yj = jnp.asarray(z), jnp.asarray(zp), jnp.asarray(y)
    load_before = os.getloadavg()

    row_max = jax.jit(lambda a, b: (jnp.max(a, axis=1), jnp.max(b, axis=1)))
    row_sum = jax.jit(lambda a, b: (jnp.sum(a, axis=1), jnp.sum(b, axis=1)))
    two_exp = jax.jit(
        lambda a, b: (jnp.sum(jnp.exp(a - 12.0), axis=1), jnp.sum(jnp.exp(b - a), axis=1))
    )
    fns = {
        "read: jitted row max": lambda: jax.block_until_ready(row_max(zj, zpj)),
        "read: jitted row sum": lambda: jax.block_until_ready(row_sum(zj, zpj)),
        "read: numpy max": lambda: (z.max(), zp.max()),
        "floor: 2 exp per pair, summed": lambda: jax.block_until_ready(two_exp(zj, zpj)),
        "kernels.measure, impl=jax": lambda: jax.block_until_ready(
            measure(zj, zpj, yj, 1.0, impl="jax")
        ),
        "kernels.measure, impl=cpu": lambda: jax.block_until_ready(
            measure(zj, zpj, yj, 1.0, impl="cpu")
        ),
    }
    host = measure(zj, zpj, yj, 1.0, impl="cpu")
    xla = measure(zj, zpj, yj, 1.0, impl="jax")
    agree = max(  # the two paths' largest relative difference on the divergences
        float(np.max(np.abs(np.asarray(host[k]) - np.asarray(xla[k])) / np.abs(np.asarray(xla[k]))))
        for k in ("tv", "kl_train_inf", "kl_inf_train")
    )
    for fn in fns.values():
        fn()  # compile
    wall, cpu, _ = interleaved(fns, repeat)

    def run_numpy():
        for i in range(0, tokens, numpy_rows):
            s = slice(i, i + numpy_rows)
            measure_numpy(z[s], zp[s], y[s], 1.0, dtype=np.float32)

    t_np = best(run_numpy, 1)
    load_after = os.getloadavg()

    read_name = min((k for k in fns if k.startswith("read")), key=wall.get)
    read_bw = logit_bytes / wall[read_name]
    read_cpu = min(cpu[k] for k in fns if k.startswith("read"))  # CPU-seconds of the read
    t_jax = wall["kernels.measure, impl=jax"]
    t_cpu = wall["kernels.measure, impl=cpu"]
    print(
        f"full-vocabulary measurement, {tokens} tokens x {vocab} vocab "
        f"(float32 logits, {logit_bytes / 1e9:.2f} GB, drift {drift} x N(0, 1)), "
        f"best of {repeat}, interleaved"
    )
    print(f"  load average before / after: {load_before[0]:.2f} / {load_after[0]:.2f}")
    print(f"  {'':32s} {'wall s':>8s} {'cpu s':>8s} {'GB/s':>8s} {'of read':>8s} {'per core':>8s}")
    for name in fns:
        gbs = logit_bytes / wall[name]
        print(
            f"  {name:32s} {wall[name]:8.3f} {cpu[name]:8.3f} {gbs / 1e9:8.2f} {gbs / read_bw:8.1%}"
            f" {read_cpu / cpu[name]:8.1%}"
        )
    print(f"  machine read bandwidth ({read_name}): {read_bw / 1e9:.2f} GB/s")
    for name, t in (("cpu", t_cpu), ("jax", t_jax)):
        t_cpu_s = cpu[f"kernels.measure, impl={name}"]
        print(
            f"  impl={name}: {logit_bytes / t / read_bw:.1%} of the read bandwidth "
            f"({read_cpu / t_cpu_s:.1%} per core: {t_cpu_s:.3f} CPU-s against the read's "
            f"{read_cpu:.3f}), {tokens / t:,.0f} tokens/s, {t_np / t:.1f} x numpy"
        )
    print(f"  numpy (straightforward, f32): {t_np:8.3f} s  {tokens / t_np:12,.0f} tokens/s")
    print(f"  impl=cpu / impl=jax: {t_jax / t_cpu:.2f} x faster; divergences agree to {agree:.1e}")
    from kernel_contracts.kernels.measurement._measure import _compiled

    block = 8  # measure()'s default
    hlo = _compiled(tuple(jax.local_devices()), block).lower(zj, zpj, yj, jnp.float32(1.0))
    hlo = hlo.compile().as_text()
    work = count_ops(hlo, tokens, vocab, block)
    dearest = count_ops(hlo, tokens, vocab, block, dearest=True)
    ops = work["total"]
    print(
        f"  impl=jax, work per pair of logits (counted from the compiled program, on the path of "
        f"these "
        f"logits, every |u| < 1/2): {work['exponentials']} exponential(s) x {OPS_PER_EXP} + "
        f"{work['elementwise']} elementwise + {work['reductions']} reduction steps = {ops} "
        f"vector-lane operations; {work['arrays']} arrays of {block} x {vocab} written per "
        f"block of {block} rows (dearest branches, large drift and log-domain rows: "
        f"{dearest['total']})"
    )
    t_floor = wall["floor: 2 exp per pair, summed"]
    floor_ops = 2 * OPS_PER_EXP + 4  # two exponentials, two subtractions, two sums
    rate = pairs * floor_ops / t_floor  # vector-lane operations/s the floor loop reached
    peak = PEAK_OPS_PER_CYCLE * _clock_hz() * (os.cpu_count() or 1)
    print(
        f"  reached: {pairs * ops / t_jax / 1e9:.1f} G operations/s wall, "
        f"{pairs * ops / cpu['kernels.measure, impl=jax'] / 1e9:.1f} G per CPU-second; the floor "
        f"loop ({floor_ops} operations per pair) {rate / 1e9:.1f} G operations/s wall"
    )
    need = 0.25 * read_bw / (logit_bytes / pairs) * ops
    print(
        f"  25 % of the read bandwidth needs {0.25 * read_bw / 8 / 1e9:.2f} G pairs/s = "
        f"{need / 1e9:.0f} G operations/s"
        + (f", {need / peak:.0%} of the cores' peak of {peak / 1e9:.0f} G/s" if peak else "")
    )
    print(
        f"  floor from the operation count: at the floor loop's {rate / 1e9:.1f} G operations/s, "
        f"{ops} operations per pair allow {rate / ops * 8 / read_bw:.1%} of the read bandwidth"
        + (f"; at the cores' peak, {peak / ops * 8 / read_bw:.1%}" if peak else "")
    )
    print(f"  devices: {jax.devices()}, CPUs: {os.cpu_count()}")


def _tightness(tab, temperature: float) -> float:
    """The largest measured TV as a share of its bound tanh(osc / 4T) (≤ 1 when it holds)."""
    bound = np.tanh(tab["logit_oscillation"].astype(np.float64) / (4 * temperature))
    tv = tab["tv"].astype(np.float64)
    return float(np.max(np.where(bound > 0, tv / np.where(bound > 0, bound, 1.0), 0.0)))


def table(prompts: int, new_tokens: int, seed: int, temperature: float) -> None:
    from kernel_contracts.contracts import PRESETS
    from kernel_contracts.contracts.model import (
        Contract,
        EmulateEvidence,
        Evidence,
        KernelPair,
        Policy,
        Source,
    )
    from kernel_contracts.evidence.emulate import emulate_contract

    rows = []
    for name, spec in PRESETS.items():
        contract = Contract(
            version=1,
            name=f"fp32-vs-{name}",
            policy=Policy(temperature=temperature, vocab_size=256, max_new_tokens=new_tokens),
            kernels=KernelPair(train=PRESETS["fp32"], inference=spec),
            source=Source(path="<bench>", sha256="", canonical=""),
            evidence=Evidence(
                emulate=EmulateEvidence(prompts=prompts, max_new_tokens=new_tokens, seed=seed)
            ),
        )
        t0 = time.perf_counter()
        tab = emulate_contract(contract)
        seconds = time.perf_counter() - t0
        rows.append((name, tab, seconds))
        print(f"{name}: {len(tab['tv'])} tokens in {seconds:.1f} s", file=sys.stderr)

    def q(x, level):
        return float(np.quantile(x, level))

    print(
        f"Shipped policy `tiny-lm`, K_train = fp32, {prompts} held-out prompts x {new_tokens} "
        f"sampled tokens (T = {temperature}, seed {seed}); quantiles over tokens.\n"
    )
    print(
        "| K_inf preset | tokens | drift p50 | drift p99 | drift max | TV p50 | TV p99 | TV max "
        "| \\|log ratio\\| p99 | \\|log ratio\\| max | top-1 flips | max TV / tanh(osc/4T) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, tab, _ in rows:
        d, tv, lr = tab["logit_drift"], tab["tv"], np.abs(tab["log_ratio"])
        print(
            f"| {name} | {len(d)} | {q(d, 0.5):.2e} | {q(d, 0.99):.2e} | {d.max():.2e} "
            f"| {q(tv, 0.5):.2e} | {q(tv, 0.99):.2e} | {tv.max():.2e} "
            f"| {q(lr, 0.99):.2e} | {lr.max():.2e} | {tab['top1_flip'].mean():.2%} "
            f"| {_tightness(tab, temperature):.3f} |"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--tokens", type=int, default=4096)
    t.add_argument("--vocab", type=int, default=32768)
    t.add_argument("--repeat", type=int, default=5)
    t.add_argument("--numpy-rows", type=int, default=256)
    t.add_argument("--drift", type=float, default=0.01, help="std of z' - z (default 0.01)")
    b = sub.add_parser("table")
    b.add_argument("--prompts", type=int, default=64)
    b.add_argument("--new-tokens", type=int, default=64)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args(argv)
    if args.cmd == "throughput":
        throughput(args.tokens, args.vocab, args.repeat, args.numpy_rows, args.drift)
    else:
        table(args.prompts, args.new_tokens, args.seed, args.temperature)
    return 0


if __name__ == "__main__":
    sys.exit(main())
