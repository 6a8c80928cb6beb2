"""GPU acceptance run (one NVIDIA GPU, written for an H200): the emulation gives the CPU's bits.

1. **Matmul**: the compiled Pallas kernel (``interpret=False``) and the pure-JAX path on the GPU
   against the NumPy reference, bit for bit, for every preset (int8 included, pure JAX only),
   on an aligned and a ragged shape, with and without split-K.
2. **TinyLM forward** of the shipped model under each preset's inference kernel (matmuls and
   attention as ``kernels.ops.inference_ops`` injects them), on the GPU against the same
   forward on the CPU, bit for bit.
3. **Verdicts**: the evidence part of ``contracts/examples/fp8-emulated.yaml`` and
   ``int8-conformance.yaml`` (every clause's verdict, measured value, bounds and data
   fingerprint, and the report's ``evidence`` record) measured on the GPU against a file the
   CPU run wrote. The proofs are left out (they need z3, and do not depend on the machine).
4. **Speed** at (size, size, size): the emulated Pallas kernel vs native bfloat16 ``jnp.dot``
   (reported, not checked).

Write the reference on a CPU machine first, then run the check on the GPU machine::

    python bench/gpu_check.py --write-reference verdicts.json      # CPU, about 2 minutes
    python bench/gpu_check.py --reference verdicts.json            # GPU, under 5 minutes

Prints one Markdown table. Exit code 1 if any result differs from its reference (or a check
fails to run), 2 on unusable arguments; without a GPU the check says so and exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from timing import median_ready as timed

from kernel_contracts.contracts import PRESETS, preset
from kernel_contracts.kernels._matmul import matmul

ROOT = Path(__file__).resolve().parent.parent
CONTRACTS = ("contracts/examples/fp8-emulated.yaml", "contracts/examples/int8-conformance.yaml")
SHAPES = ((256, 1024, 256), (200, 300, 130))  # aligned; ragged in every dimension
TOKENS = (4, 48)  # sequences × positions of the TinyLM forward


def same_bits(got, ref) -> tuple[bool, int]:
    """Whether two float32 arrays hold the same bits (NaNs alike); the count of differences."""
    got, ref = np.asarray(got, np.float32), np.asarray(ref, np.float32)
    if got.shape != ref.shape:
        return False, max(got.size, ref.size)
    equal = (got.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(got) & np.isnan(ref))
    return bool(equal.all()), int((~equal).sum())


def _plain(value):
    """``value`` as JSON data: dataclasses, enums, tuples and NumPy scalars unpacked."""
    if dataclasses.is_dataclass(value):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, enum.Enum):
        return value.name.lower()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


_MACHINE_KEYS = ("time", "seconds", "elapsed", "device", "backend", "platform", "host")


def _comparable(value):
    """``value`` without the entries that describe the machine or the run's timing."""
    if isinstance(value, dict):
        return {
            k: _comparable(v)
            for k, v in value.items()
            if not any(word in k.lower() for word in _MACHINE_KEYS)
        }
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def measure_verdicts() -> dict:
    """The evidence part of each contract's run: clause verdicts and the evidence record."""
    from kernel_contracts.contracts import load
    from kernel_contracts.verify.proving.runner import clause_verdicts

    out = {}
    for path in CONTRACTS:
        clauses, info = clause_verdicts(load(ROOT / path))
        out[path] = _comparable({"clauses": _plain(clauses), "evidence": _plain(info)})
    return out


def differences(got, ref, where: str = "") -> list[str]:
    """Where two JSON values differ (floats compared exactly, NaN equal to NaN)."""
    if isinstance(ref, dict) and isinstance(got, dict):
        keys = sorted(set(ref) | set(got))
        return [d for k in keys for d in differences(got.get(k), ref.get(k), f"{where}.{k}")]
    if isinstance(ref, list) and isinstance(got, list) and len(ref) == len(got):
        return [
            d
            for i, (g, r) in enumerate(zip(got, ref, strict=True))
            for d in differences(g, r, f"{where}[{i}]")
        ]
    if isinstance(ref, float) and isinstance(got, float) and np.isnan(ref) and np.isnan(got):
        return []
    return [] if got == ref else [f"{where}: {got!r} != {ref!r}"]


def check_matmul(gpu, rng, row, *, interpret=False, shapes=SHAPES, presets=tuple(PRESETS)) -> int:
    """``interpret=True``: the GPU kernel interpreted (a rehearsal on a CPU)."""
    failures = 0
    for name in presets:
        spec = preset(name).matmul
        pallas = "pallas_gpu" if interpret else "pallas"
        impls = ("jax",) if spec.is_int8 else (pallas, "jax")
        for m, k, n in shapes:
            x = rng.standard_normal((m, k)).astype(np.float32)
            w = rng.standard_normal((k, n)).astype(np.float32)
            xg, wg = jax.device_put(x, gpu), jax.device_put(w, gpu)
            for splits in (1, 3):
                ref = np.asarray(matmul(x, w, spec, impl="numpy", splits=splits))
                for impl in impls:
                    case = f"{name} {impl} {m}x{k}x{n} splits={splits}"
                    try:
                        got = matmul(xg, wg, spec, impl=impl, splits=splits, interpret=interpret)
                        ok, bad = same_bits(got, ref)
                        result = "same bits" if ok else f"DIFFERENT: {bad} of {ref.size} outputs"
                    except Exception as e:  # report and go on: this is a check script
                        ok, result = False, f"ERROR {type(e).__name__}: {str(e)[:80]}"
                    failures += not ok
                    row("matmul vs NumPy reference", case, result)
    return failures


def check_forward(gpu, row, presets=tuple(PRESETS)) -> int:
    from kernel_contracts.kernels.model.tinylm import load_pretrained
    from kernel_contracts.kernels.ops import inference_ops

    failures = 0
    cpu = jax.devices("cpu")[0]
    tokens = np.random.default_rng(1).integers(0, 256, TOKENS).astype(np.int32)
    for name in presets:
        model = load_pretrained(ops=inference_ops(preset(name), TOKENS[0]))
        forward = jax.jit(lambda t, model=model: model(t))
        try:
            with jax.default_device(cpu):
                ref = np.asarray(forward(jax.device_put(tokens, cpu)))
            with jax.default_device(gpu):
                got = np.asarray(forward(jax.device_put(tokens, gpu)))
            ok, bad = same_bits(got, ref)
            result = "same bits" if ok else f"DIFFERENT: {bad} of {ref.size} logits"
        except Exception as e:
            ok, result = False, f"ERROR {type(e).__name__}: {str(e)[:80]}"
        failures += not ok
        row("TinyLM forward, GPU vs CPU", f"{name} ({TOKENS[0]}x{TOKENS[1]} tokens)", result)
    return failures


def check_verdicts(reference: dict, row) -> int:
    try:
        measured = measure_verdicts()
    except Exception as e:
        row("verdicts vs CPU file", "all contracts", f"ERROR {type(e).__name__}: {str(e)[:80]}")
        return 1
    failures = 0
    for path in CONTRACTS:
        if path not in reference:
            row("verdicts vs CPU file", path, "NOT IN THE REFERENCE FILE")
            failures += 1
            continue
        diff = differences(measured[path], reference[path])
        clauses = len(reference[path]["clauses"])
        result = f"same ({clauses} clauses)" if not diff else f"DIFFERENT: {diff[0]}"
        if len(diff) > 1:
            result += f" and {len(diff) - 1} more"
        failures += bool(diff)
        row("verdicts vs CPU file", Path(path).name, result)
    return failures


def speed(gpu, rng, size: int, repeats: int, row, *, interpret=False) -> int:
    with jax.default_device(gpu):
        x = jnp.asarray(rng.standard_normal((size, size)), jnp.float32)
        w = jnp.asarray(rng.standard_normal((size, size)), jnp.float32)
        xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
        native = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
        t_native = timed(native, xb, wb, repeats=repeats)
        flops = 2.0 * size**3
        row("speed", f"native bf16 jnp.dot at {size}^3", f"{t_native * 1e3:.2f} ms")
        failures = 0
        for name in ("h100-fp8", "bf16"):
            spec = preset(name).matmul
            impl = "pallas_gpu" if interpret else "pallas"
            emu = jax.jit(
                lambda a, b, spec=spec, impl=impl: matmul(
                    a, b, spec, impl=impl, interpret=interpret
                )
            )
            try:
                t = timed(emu, x, w, repeats=max(1, repeats // 2))
                result = (
                    f"{t * 1e3:.2f} ms, {flops / t / 1e12:.2f} TFLOP/s, "
                    f"{100 * t_native / t:.1f}% of native bf16"
                )
            except Exception as e:
                failures += 1
                result = f"ERROR {type(e).__name__}"
            row("speed", f"emulated {name} (Pallas) at {size}^3", result)
    return failures


def main(argv=None, *, stdout=sys.stdout, stderr=sys.stderr) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write-reference", metavar="PATH", help="CPU: write the verdict file")
    mode.add_argument("--reference", metavar="PATH", help="GPU: check against this file")
    parser.add_argument("--size", type=int, default=4096, help="matrix size of the speed rows")
    parser.add_argument("--repeats", type=int, default=5)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) and 2

    def out(line=""):
        print(line, file=stdout, flush=True)

    if args.write_reference:
        data = {"jax": jax.__version__, **measure_verdicts()}
        Path(args.write_reference).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        out(f"gpu_check: wrote the CPU verdicts of {len(CONTRACTS)} contracts")
        return 0
    try:
        reference = json.loads(Path(args.reference).read_text())
    except (OSError, ValueError) as e:
        print(f"gpu_check: cannot read the reference {args.reference}: {e}", file=stderr)
        return 2
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        out("gpu_check: no GPU visible to JAX; skipped (nothing was checked).")
        return 0
    out(f"device: {gpus[0].device_kind}; jax {jax.__version__} (reference: {reference.get('jax')})")
    out()
    out("| check | case | result |")
    out("|---|---|---|")

    def row(check, case, result):
        out(f"| {check} | {case} | {result} |")

    rng = np.random.default_rng(0)
    failures = check_matmul(gpus[0], rng, row)
    failures += check_forward(gpus[0], row)
    failures += check_verdicts(reference, row)
    failures += speed(gpus[0], rng, args.size, args.repeats, row)
    out()
    out("every result equals its CPU reference" if not failures else f"{failures} FAILURES")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
