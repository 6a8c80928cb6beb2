"""Reading ``kernels.train`` and ``kernels.inference``: a preset with field overrides.

Fields a contract gives replace the preset's; everything else comes from the preset.
``accumulator: {dtype: float32}`` stands for 23 mantissa bits rounded to nearest even;
``accumulator: {mantissa_bits: 13, rounding: toward_zero}`` spells the accumulator out.

Int8 kernels (``inputs: int8``) take ``accumulator: {dtype: int32}`` (exact integer products
and sums), ``per_row`` (per-token activation and per-channel weight scales) or ``per_tensor``
scaling, ``k_max`` (the longest reduction one accumulator sees, which the exactness obligations
of ``verify`` cover) and an ``epilogue`` (scale dtype, order of the scale multiplications, one
fused rounding or one after each multiply, rounding mode); ``output`` is the epilogue's output
dtype. ``group`` and ``promote_every`` do not apply to them. Fields are merged with the preset's
first, then the kernel is checked as a whole, so a contract that switches a float preset to int8
is told every field that must change.
"""

from __future__ import annotations

import dataclasses

from kernel_contracts.contracts.checks import VALUE_CUTOFF, Checker, did_you_mean, show, sub
from kernel_contracts.contracts.fields import (
    ACCUMULATOR_DTYPES,
    EPILOGUE_ORDERS,
    FORMATS,
    INPUT_FORMATS,
    INT_ACCUMULATORS,
    OBJECTS,
    ROUNDINGS,
    SCALE_FORMATS,
)
from kernel_contracts.contracts.model import (
    MX_BLOCK,
    AccumulatorSpec,
    EpilogueSpec,
    IntAccumulatorSpec,
    KernelPair,
    KernelSpec,
    MatmulSpec,
    Scaling,
)
from kernel_contracts.contracts.presets import PRESETS

__all__ = ["read_kernels"]

_MAX_MANTISSA_BITS = 23  # an accumulator is at most as wide as an fp32 register
_MAX_K = 2**53 - 1  # k_max: an integer every JSON reader keeps exactly


def read_kernels(ck: Checker, value: object, key: str) -> KernelPair | None:
    fields = OBJECTS["kernels"]
    m = ck.mapping(value, key, fields.known, fields.required)
    if m is None:
        return None
    train = _kernel(ck, m["train"], sub(key, "train")) if "train" in m else None
    inference = _kernel(ck, m["inference"], sub(key, "inference")) if "inference" in m else None
    if train is None or inference is None:
        return None
    return KernelPair(train=train, inference=inference)


def _kernel(ck: Checker, value: object, key: str) -> KernelSpec | None:
    fields = OBJECTS["kernel"]
    m = ck.mapping(value, key, fields.known, fields.required)
    if m is None:
        return None
    failed = ck.failures
    base = None
    if "preset" in m:
        name = ck.string(m["preset"], sub(key, "preset"))
        if name is not None and name not in PRESETS:
            ck.report(
                sub(key, "preset"),
                f"unknown preset {show(name)}{did_you_mean(name, PRESETS, VALUE_CUTOFF)}; "
                f"expected one of {', '.join(PRESETS)}",
            )
        elif name is not None:
            base = PRESETS[name]
    changed: list[str] = []
    matmul = _matmul(ck, m["matmul"], sub(key, "matmul"), base, changed) if "matmul" in m else {}
    attention = (
        _attention(ck, m["attention"], sub(key, "attention"), changed) if "attention" in m else {}
    )
    batching = None
    if "batching" in m:
        batching = ck.choice(m["batching"], sub(key, "batching"), ("dynamic", "fixed"))
        changed.append("batching")
    if base is None or ck.failures > failed:
        return None
    merged = dataclasses.replace(
        base,
        matmul=dataclasses.replace(base.matmul, **matmul),
        attention=dataclasses.replace(base.attention, **attention),
        batching=batching or base.batching,
    )
    if not _consistent(ck, merged.matmul, sub(key, "matmul")):
        return None
    differ = [name for name in changed if _get(merged, name) != _get(base, name)]
    if not differ:
        return merged
    note = f" Overridden by the contract: {', '.join(differ)}."
    return dataclasses.replace(merged, provenance=base.provenance + note)


def _get(spec: KernelSpec, dotted: str) -> object:
    value = spec
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _matmul(ck: Checker, value, key, base: KernelSpec | None, changed: list[str]) -> dict:
    fields = OBJECTS["matmul"]
    m = ck.mapping(value, key, fields.known)
    if m is None:
        return {}
    out: dict = {}
    if "inputs" in m:
        out["inputs"] = ck.choice(m["inputs"], sub(key, "inputs"), INPUT_FORMATS)
    if "output" in m:
        out["output"] = ck.choice(m["output"], sub(key, "output"), FORMATS)
    if "k_max" in m:
        out["k_max"] = ck.integer(m["k_max"], sub(key, "k_max"), 1, _MAX_K)
    if "epilogue" in m:
        start = base.matmul.epilogue if base is not None else None
        out["epilogue"] = _epilogue(ck, m["epilogue"], sub(key, "epilogue"), start)
    if "scaling" in m:
        out["scaling"] = _scaling(ck, m["scaling"], sub(key, "scaling"))
    if "group" in m:
        out["group"] = ck.integer(m["group"], sub(key, "group"), lo=1)
    if "promote_every" in m:
        every = m["promote_every"]
        out["promote_every"] = (
            None if every is None else ck.integer(every, sub(key, "promote_every"), lo=1)
        )
    if "accumulator" in m:
        start = base.matmul.accumulator if base is not None else AccumulatorSpec()
        out["accumulator"] = _accumulator(ck, m["accumulator"], sub(key, "accumulator"), start)
    changed += [f"matmul.{name}" for name in out]
    return out


def _scaling(ck: Checker, value, key) -> Scaling | None:
    """The scaling parsed (``Scaling.parse``; its spelling is the text as written, which the
    canonical form shows); MX scaling is offered with its standard block only."""
    text = ck.string(value, key)
    if text is None:
        return None
    try:
        parsed = Scaling.parse(text)
    except ValueError:
        parsed = None
    if parsed is None or (parsed.kind == "mx" and parsed.block != MX_BLOCK):
        ck.report(
            key,
            f"expected per_tensor, per_row, block:N (N >= 1) or mx:{MX_BLOCK}; got {show(text)}",
        )
        return None
    return parsed


def _accumulator(ck: Checker, value, key, start: AccumulatorSpec) -> AccumulatorSpec | None:
    fields = OBJECTS["accumulator"]
    m = ck.mapping(value, key, fields.known)
    if m is None:
        return None
    if not m:
        ck.report(key, "give dtype, or mantissa_bits and rounding")
        return None
    if isinstance(start, IntAccumulatorSpec):
        start = AccumulatorSpec()  # a float accumulator given over an int8 preset starts afresh
    bits, rounding = start.mantissa_bits, start.rounding
    if "dtype" in m and "mantissa_bits" in m:
        ck.report(sub(key, "mantissa_bits"), "give dtype or mantissa_bits, not both")
        return None
    if m.get("dtype") in INT_ACCUMULATORS:
        if "rounding" in m:
            ck.report(sub(key, "rounding"), f"an {m['dtype']} accumulator is exact: no rounding")
            return None
        return IntAccumulatorSpec(dtype=m["dtype"])
    if "dtype" in m:
        dtype = ck.choice(m["dtype"], sub(key, "dtype"), (*ACCUMULATOR_DTYPES, *INT_ACCUMULATORS))
        bits, rounding = ACCUMULATOR_DTYPES.get(dtype, bits), "nearest_even"
    if "mantissa_bits" in m:
        bits = ck.integer(m["mantissa_bits"], sub(key, "mantissa_bits"), 1, _MAX_MANTISSA_BITS)
    if "rounding" in m:
        rounding = ck.choice(m["rounding"], sub(key, "rounding"), ROUNDINGS)
    if bits is None or rounding is None:
        return None
    return AccumulatorSpec(mantissa_bits=bits, rounding=rounding)


def _epilogue(ck: Checker, value, key, start: EpilogueSpec | None) -> EpilogueSpec | None:
    """The int8 epilogue: fields given replace the preset's; ``order`` exists only when the
    roundings are separate (a fused epilogue rounds the exact product once)."""
    fields = OBJECTS["epilogue"]
    m = ck.mapping(value, key, fields.known)
    if m is None:
        return None
    start = start or EpilogueSpec()
    out = {}
    if "scales" in m:
        out["scales"] = ck.choice(m["scales"], sub(key, "scales"), SCALE_FORMATS)
    if "order" in m:
        out["order"] = ck.choice(m["order"], sub(key, "order"), EPILOGUE_ORDERS)
    if "fused" in m:
        out["fused"] = ck.boolean(m["fused"], sub(key, "fused"))
    if "rounding" in m:
        out["rounding"] = ck.choice(m["rounding"], sub(key, "rounding"), ROUNDINGS)
    if any(v is None for v in out.values()):
        return None
    fused = out.get("fused", start.fused)
    if fused and "order" in m:
        ck.report(sub(key, "order"), "a fused epilogue rounds the exact product once: no order")
        return None
    order = None if fused else out.get("order", start.order)
    if order is None and not fused:
        ck.report(sub(key, "order"), f"fused: false needs an order ({', '.join(EPILOGUE_ORDERS)})")
        return None
    return dataclasses.replace(start, **(out | {"order": order}))


def _consistent(ck: Checker, mm: MatmulSpec, key: str) -> bool:
    """Whether the merged matmul is a float kernel or a complete int8 kernel; every problem is
    reported at the key that must change (located at its nearest given parent)."""
    found: list[tuple[str, str]] = []

    def report(k: str, message: str) -> None:
        found.append((k, message))

    int_acc = isinstance(mm.accumulator, IntAccumulatorSpec)
    if not mm.is_int8:
        if int_acc:
            report(sub(key, "accumulator"), "an int32 accumulator needs inputs: int8")
        if mm.epilogue is not None:
            report(sub(key, "epilogue"), "applies to inputs: int8 only")
        return _report_sorted(ck, found)
    if not int_acc:
        report(sub(key, "accumulator"), "int8 inputs are accumulated in {dtype: int32}")
    if mm.scaling.kind not in ("per_row", "per_tensor"):
        report(
            sub(key, "scaling"),
            "int8 inputs take per_row (per-token activation and per-channel weight scales) "
            f"or per_tensor; got {show(mm.scaling)}",
        )
    if mm.group != 1:
        report(sub(key, "group"), f"int8 products and sums are exact: must be 1, got {mm.group}")
    if mm.promote_every is not None:
        report(
            sub(key, "promote_every"),
            f"an int32 accumulator is never promoted: must be null, got {mm.promote_every}",
        )
    if mm.output not in SCALE_FORMATS:
        report(
            sub(key, "output"),
            f"an int8 epilogue writes {', '.join(SCALE_FORMATS)}; got {show(mm.output)}",
        )
    if mm.k_max is None:
        report(sub(key, "k_max"), "int8 inputs need k_max, the longest reduction one int32 "
               "accumulator sees")  # fmt: skip
    if mm.epilogue is None:
        report(sub(key, "epilogue"), "int8 inputs need an epilogue (scales, order, fused, "
               "rounding); the preset a100-int8 has one")  # fmt: skip
    return _report_sorted(ck, found)


def _report_sorted(ck: Checker, found: list[tuple[str, str]]) -> bool:
    """Report ``found`` in document order (a key not written is placed at its parent)."""
    for k, message in sorted(found, key=lambda item: ck.where(item[0])):
        ck.report(k, message)
    return not found


def _attention(ck: Checker, value, key, changed: list[str]) -> dict:
    fields = OBJECTS["attention"]
    m = ck.mapping(value, key, fields.known)
    if m is None:
        return {}
    out: dict = {}
    if "kv_cache" in m:
        out["kv_cache"] = ck.choice(m["kv_cache"], sub(key, "kv_cache"), FORMATS)
    if "page_size" in m:
        out["page_size"] = ck.integer(m["page_size"], sub(key, "page_size"), lo=1)
    if "tiles" in m:
        tiles = m["tiles"]
        if isinstance(tiles, int) and not isinstance(tiles, bool):
            tiles = ck.integer(tiles, sub(key, "tiles"), lo=1)
            out["tiles"] = None if tiles is None else str(tiles)
        elif tiles in ("full", "adaptive"):
            out["tiles"] = tiles
        else:
            ck.expected(sub(key, "tiles"), "full, adaptive or a positive integer", tiles)
            out["tiles"] = None
    changed += [f"attention.{name}" for name in out]
    return out
