"""Reading ``kernels.train`` and ``kernels.inference``: a preset with field overrides.

Fields a contract gives replace the preset's; everything else comes from the preset.
``accumulator: {dtype: float32}`` stands for 23 mantissa bits rounded to nearest even;
``accumulator: {mantissa_bits: 13, rounding: toward_zero}`` spells the accumulator out.
"""

from __future__ import annotations

import dataclasses
import re

from contracts.checks import Checker, show, sub
from contracts.fields import ACCUMULATOR_DTYPES, FORMATS, OBJECTS, ROUNDINGS
from contracts.model import AccumulatorSpec, KernelPair, KernelSpec
from contracts.presets import PRESETS

__all__ = ["read_kernels"]

_SCALING = re.compile(r"^(?:per_tensor|per_row|block:[1-9][0-9]*|mx:32)$")
_MAX_MANTISSA_BITS = 23  # an accumulator is at most as wide as an fp32 register


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
                f"unknown preset {show(name)}; expected one of {', '.join(PRESETS)}",
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
    for name in ("inputs", "output"):
        if name in m:
            out[name] = ck.choice(m[name], sub(key, name), FORMATS)
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


def _scaling(ck: Checker, value, key) -> str | None:
    text = ck.string(value, key)
    if text is None:
        return None
    if _SCALING.match(text) is None:
        ck.report(key, f"expected per_tensor, per_row, block:N (N >= 1) or mx:32; got {show(text)}")
        return None
    return text


def _accumulator(ck: Checker, value, key, start: AccumulatorSpec) -> AccumulatorSpec | None:
    fields = OBJECTS["accumulator"]
    m = ck.mapping(value, key, fields.known)
    if m is None:
        return None
    if not m:
        ck.report(key, "give dtype, or mantissa_bits and rounding")
        return None
    bits, rounding = start.mantissa_bits, start.rounding
    if "dtype" in m and "mantissa_bits" in m:
        ck.report(sub(key, "mantissa_bits"), "give dtype or mantissa_bits, not both")
        return None
    if "dtype" in m:
        dtype = ck.choice(m["dtype"], sub(key, "dtype"), tuple(ACCUMULATOR_DTYPES))
        bits, rounding = ACCUMULATOR_DTYPES.get(dtype, bits), "nearest_even"
    if "mantissa_bits" in m:
        bits = ck.integer(m["mantissa_bits"], sub(key, "mantissa_bits"), 1, _MAX_MANTISSA_BITS)
    if "rounding" in m:
        rounding = ck.choice(m["rounding"], sub(key, "rounding"), ROUNDINGS)
    if bits is None or rounding is None:
        return None
    return AccumulatorSpec(mantissa_bits=bits, rounding=rounding)


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
