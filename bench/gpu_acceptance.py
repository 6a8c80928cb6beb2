"""The GPU acceptance run in one call: bits, matmul speed, measurement speed and decode speed.

On one NVIDIA GPU (written for an H100 or H200), after writing the verdict reference on a CPU::

    python bench/gpu_check.py --write-reference verdicts.json         # CPU, a few minutes
    python bench/gpu_acceptance.py --reference verdicts.json           # GPU, one call
    python bench/gpu_acceptance.py --dry-run                           # CPU rehearsal, ~1 min

Steps, in this order (each one's failure is recorded and the next one still runs):

1. **check** (``bench/gpu_check.py``): the compiled Pallas kernel and the pure-JAX path
   against the NumPy reference, bit for bit, for every preset; the TinyLM forward under each
   preset, GPU against CPU; the evidence part of the example contracts against the CPU's file
   (skipped without ``--reference``).
2. **decode**: tokens per second of ``kernels.model.decode.generate`` on the Hugging Face
   decoder at Qwen2.5-0.5B's shape (random weights; batch 8, 1,024 prompt + 1,024 new
   tokens), K_inf (``inference_ops``, h100-fp8) against plain bfloat16 inference in the same
   run, and the device's peak memory after each (JAX's peak since the process started).
3. **matmul** (``bench/bench_matmul_gpu.py``): the bit checks of the timed arithmetic, then
   h100-fp8 and bf16 at 8192³ with the ceilings and the sweep, each as % of native bfloat16
   (measured in the same run) and % of its arithmetic floor (``bench/bench_matmul_floor.py``).
4. **measurement** (``bench/bench_measure_gpu.py`` and any benchmark listed in
   ``MEASUREMENT_BENCHES``): their own output, kept as text.

It writes ``acceptance.json`` and ``acceptance.md`` into ``--out`` (default: ``$OUT`` when set,
else ``acceptance/``). ``--dry-run`` runs every step on tiny shapes on the default device with
the Pallas kernels interpreted (its times mean nothing; it rehearses the run).

The device needs JAX with CUDA, Flax, NumPy, ml_dtypes and this checkout's code; the one other
wheel the run imports is ``jaxtyping`` (with ``wadler-lindig``), so carry those. z3 is not
needed (the verdicts leave the proofs out). Without ``kernel_contracts`` installed, the script
imports the checkout's folders under that name itself.

Exit codes: 0 every step ran and every check gave its reference's bits; 1 a difference or a
step that failed; 2 unusable arguments, an unreadable reference or missing wheels. Without a
GPU (and without ``--dry-run``) it says so and exits 0 having measured nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# module: the wheel that provides it, for every third-party module the run imports
WHEELS = {
    "jax": "jax[cuda]",
    "flax": "flax",
    "numpy": "numpy",
    "ml_dtypes": "ml_dtypes",
    "yaml": "PyYAML",
    "jaxtyping": "jaxtyping",
    "wadler_lindig": "wadler-lindig",
}
DECODE_PRESET = "h100-fp8"
MATMUL_PRESETS = ("h100-fp8", "bf16")
TINY_QWEN = {  # Qwen2's layout at toy sizes, for the rehearsal
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def measurement_benches(dry: bool) -> list[tuple[str, list[str]]]:
    """The measurement benchmarks the run calls: (module in ``bench/``, its arguments).

    THE ONE PLACE TO ADD A MEASUREMENT BENCHMARK (e.g. the single-pass kernel's): append its
    module and arguments here; its ``main(argv)`` is called and its output kept."""
    if dry:
        return [("bench_measure_gpu", ["--dry-run"])]
    return [("bench_measure_gpu", ["--repeat", "3"])]


def missing_wheels() -> list[str]:
    """The wheels whose modules cannot be imported here."""
    return [wheel for mod, wheel in WHEELS.items() if importlib.util.find_spec(mod) is None]


def import_checkout() -> None:
    """Make ``kernel_contracts.<folder>`` import this checkout's folders when the package is
    not installed (the installed distribution maps them the same way)."""
    try:
        importlib.import_module("kernel_contracts.kernels")
    except ModuleNotFoundError:
        sys.path.insert(0, str(ROOT))
        package = importlib.import_module("kernel_contracts")
        package.__path__.append(str(ROOT))


def commit() -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"


class Step:
    """One step's rows (check, case, result), its records and whether it failed."""

    def __init__(self, name: str, say):
        self.name, self.say = name, say
        self.rows: list[list[str]] = []
        self.records: dict = {}
        self.failures = 0
        self.error: str | None = None

    def row(self, check, case, result):
        self.rows.append([str(check), str(case), str(result)])
        self.say(f"| {check} | {case} | {result} |")

    def as_json(self) -> dict:
        status = "error" if self.error else ("failed" if self.failures else "ok")
        return {
            "status": status,
            "failures": self.failures,
            "error": self.error,
            "rows": self.rows,
            "records": self.records,
        }


def step_check(step, device, dry, reference):
    import gpu_check
    import numpy as np

    rng = np.random.default_rng(0)
    if dry:  # one ragged shape; one float and the int8 preset; one forward
        shapes, presets, forward = ((20, 30, 13),), ("h100-fp8", "a100-int8"), ("h100-fp8",)
    else:
        shapes, presets = gpu_check.SHAPES, tuple(gpu_check.PRESETS)
        forward = presets
    step.failures += gpu_check.check_matmul(
        device, rng, step.row, interpret=dry, shapes=shapes, presets=presets
    )
    step.failures += gpu_check.check_forward(device, step.row, forward)
    if reference is None:
        step.row("verdicts vs CPU file", "all contracts", "skipped: no --reference")
    else:
        step.failures += gpu_check.check_verdicts(reference, step.row)


def step_decode(step, device, dry, reference):
    del reference
    import jax
    import jax.numpy as jnp
    import numpy as np
    from bench_hf_decoder import QWEN25_05B, plain_inference_ops
    from timing import median_ready

    from kernel_contracts.contracts import preset
    from kernel_contracts.kernels.model.decode import generate
    from kernel_contracts.kernels.model.hf.config import parse_config
    from kernel_contracts.kernels.model.hf.decoder import Decoder
    from kernel_contracts.kernels.model.tinylm import with_ops
    from kernel_contracts.kernels.ops import inference_ops

    batch, prompt, new = (2, 4, 4) if dry else (8, 1024, 1024)
    config = parse_config(dict(QWEN25_05B, **TINY_QWEN) if dry else QWEN25_05B)
    gpu = device.platform == "gpu"
    with jax.default_device(device):
        model = Decoder(config, seed=0)
        rng = np.random.default_rng(0)
        prompts = jnp.asarray(rng.integers(0, config.vocab_size, (batch, prompt)), jnp.int32)
        key, temperature = jax.random.key(0), jnp.float32(1.0)
        kernels = {
            "plain": with_ops(model, plain_inference_ops(gpu)),
            "K_inf": with_ops(model, inference_ops(preset(DECODE_PRESET), batch_size=batch)),
        }
        for name, m in kernels.items():
            seconds = median_ready(
                lambda m=m: generate(m, prompts, key, temperature, new_tokens=new), repeats=1
            )
            peak = (device.memory_stats() or {}).get("peak_bytes_in_use")
            rec = {
                "ops": m.ops.name,
                "seconds": seconds,
                "tokens_per_s": batch * new / seconds,
                "peak_bytes": peak,
            }
            step.records[name] = rec
            peak_text = f", peak {peak / 2**30:.2f} GiB" if peak else ", peak not reported"
            step.row(
                "decode", f"{name} ({m.ops.name})", f"{rec['tokens_per_s']:.1f} tokens/s{peak_text}"
            )
    ratio = step.records["plain"]["seconds"] / step.records["K_inf"]["seconds"]
    step.records["shape"] = {
        "batch": batch,
        "prompt": prompt,
        "new_tokens": new,
        "layers": config.num_hidden_layers,
        "vocab": config.vocab_size,
    }
    step.records["k_inf_pct_of_plain"] = 100 * ratio
    step.row("decode", "K_inf / plain", f"{100 * ratio:.1f} % of plain's tokens/s")


def step_matmul(step, device, dry, reference):
    del reference
    import bench_matmul_gpu as bench
    import numpy as np

    sweep = [c for c in bench.SWEEP if c[0] in MATMUL_PRESETS]
    if dry:
        sweep = sweep[:1]
    shapes = ((20, 30, 13),) if dry else bench.CHECK_SHAPES
    cases = [(f"{name} pallas", name, None) for name in MATMUL_PRESETS]
    cases += [(f"{c[0]} {c[1]} {c[2]}x{c[3]} w{c[4]} s{c[5]}", c[0], c[1:]) for c in sweep]
    rng = np.random.default_rng(0)
    step.failures += bench.check(cases, rng, step.row, interpret=dry, shapes=shapes)
    size, repeats = (32, 1) if dry else (8192, 3)
    failures, records = bench.measure(
        size, repeats, MATMUL_PRESETS, sweep, device, step.row, interpret=dry
    )
    step.failures += failures
    step.records = {"size": size, "rows": records}


def step_measurement(step, device, dry, reference):
    del device, reference
    for module, argv in measurement_benches(dry):
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            rc = importlib.import_module(module).main(argv)
        step.records[module] = {"argv": argv, "exit_code": rc, "output": text.getvalue()}
        step.failures += rc != 0
        last = (text.getvalue().strip().splitlines() or ["(no output)"])[-1]
        step.row("measurement", f"{module} {' '.join(argv)}", f"exit {rc}: {last[:160]}")


STEPS = {
    "check": step_check,
    "decode": step_decode,
    "matmul": step_matmul,
    "measurement": step_measurement,
}


def markdown(report: dict) -> str:
    head = report["run"]
    lines = [
        f"# GPU acceptance run{' (dry run: times mean nothing)' if head['dry_run'] else ''}",
        "",
        f"device {head['device']}; jax {head['jax']}; commit {head['commit']}; {head['date']}",
        "",
    ]
    for name, step in report["steps"].items():
        lines += [f"## {name}: {step['status']}", "", "| check | case | result |", "|---|---|---|"]
        lines += [f"| {' | '.join(r)} |" for r in step["rows"]]
        if step["error"]:
            lines.append(f"| {name} | step | ERROR {step['error']} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None, *, stdout=sys.stdout, stderr=sys.stderr) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", metavar="PATH", help="gpu_check's CPU verdict file")
    parser.add_argument("--out", metavar="DIR", help="output folder (default $OUT or acceptance)")
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes, interpreted")
    parser.add_argument("--steps", nargs="+", choices=list(STEPS), default=list(STEPS))
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) and 2

    def say(line=""):
        print(line, file=stdout, flush=True)

    def refuse(message):
        print(f"gpu_acceptance: {message}", file=stderr)
        return 2

    if missing := missing_wheels():
        return refuse(f"missing wheels (install or carry them): {', '.join(missing)}")
    reference = None
    if args.reference:
        try:
            reference = json.loads(Path(args.reference).read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            return refuse(f"cannot read the reference {args.reference}: {e}")
        if not isinstance(reference, dict):
            return refuse(f"{args.reference}: not a verdict file (a JSON object)")
    out = Path(args.out or os.environ.get("OUT") or "acceptance")
    if out.exists() and not out.is_dir():
        return refuse(f"--out {out}: exists and is not a folder")

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the neighbouring benchmarks
    import_checkout()
    import jax

    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus and not args.dry_run:
        say("gpu_acceptance: no GPU visible to JAX; skipped (nothing was measured).")
        return 0
    device = gpus[0] if gpus else jax.devices()[0]
    report = {
        "run": {
            "dry_run": args.dry_run,
            "device": f"{device.platform} {device.device_kind}",
            "jax": jax.__version__,
            "commit": commit(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        },
        "steps": {},
    }
    say(f"device: {report['run']['device']}; jax {jax.__version__}")
    for name in args.steps:
        say(f"\n## {name}\n\n| check | case | result |\n|---|---|---|")
        step, t0 = Step(name, say), time.perf_counter()
        try:
            STEPS[name](step, device, args.dry_run, reference)
        except Exception as e:  # record it and go on to the next step
            step.error = f"{type(e).__name__}: {str(e)[:300]}"
            say(f"| {name} | step | ERROR {step.error} |")
        report["steps"][name] = step.as_json() | {"seconds": time.perf_counter() - t0}

    out.mkdir(parents=True, exist_ok=True)
    (out / "acceptance.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "acceptance.md").write_text(markdown(report) + "\n")
    bad = [n for n, s in report["steps"].items() if s["status"] != "ok"]
    say(f"\nwrote {out / 'acceptance.json'} and {out / 'acceptance.md'}")
    say(f"steps not ok: {', '.join(bad)}" if bad else "every step ran; every check equal")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
