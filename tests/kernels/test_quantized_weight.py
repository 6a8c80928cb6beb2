"""A weight quantized once (``quantize_weight``) gives the matmul the same bits as the weight
itself, and the models' decode loops quantize their weights once, not at every step."""

from __future__ import annotations

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.contracts import PRESETS, preset
from kernel_contracts.kernels._matmul import QuantizedWeight, matmul, quantize_weight
from kernel_contracts.kernels.model.decode import generate
from kernel_contracts.kernels.model.hf import load_decoder
from kernel_contracts.kernels.model.tinylm import ModelConfig, TinyLM, with_ops
from kernel_contracts.kernels.ops import EmulatedMatmul, PlainMatmul, inference_ops, prepared
from tests.support.bits import same_bits

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLOAT_PRESETS = sorted(name for name, spec in PRESETS.items() if not spec.matmul.is_int8)


def _operands(m: int, k: int, n: int, seed: int):
    """Random operands with the values that test a quantizer: zeros, outliers that set a scale
    run's maximum, values below every format's range, and a column and a row holding inf/NaN."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * np.exp(rng.normal(0, 2, (m, 1)))).astype(np.float32)
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    w[rng.integers(0, k, 5), rng.integers(0, n, 5)] = 300.0  # outliers
    w[:, 0] = 0.0  # an all-zero column: scale 1
    w[3, 1] = 1e-30  # below every format's range
    w[7, 2] = np.inf  # spoils its column's run
    x[1, 4] = np.nan
    return x, w


@pytest.mark.parametrize("name", FLOAT_PRESETS)
@pytest.mark.parametrize("splits", [1, 3])
def test_a_quantized_weight_gives_the_same_bits(name, splits):
    spec = preset(name).matmul
    x, w = _operands(6, 300, 40, seed=splits)  # K = 300: a ragged last block of 128 and of 32
    q = quantize_weight(w, spec)
    assert isinstance(q, QuantizedWeight) and q.values.shape == w.shape
    direct = matmul(x, w, spec, splits=splits)
    assert same_bits(matmul(x, q, spec, splits=splits), direct)
    jitted = jax.jit(lambda x, q: matmul(x, q, spec, splits=splits))
    assert same_bits(jitted(x, q), direct)
    assert same_bits(matmul(x, w, spec, impl="numpy", splits=splits), direct)


@pytest.mark.parametrize("impl", ["pallas", "pallas_gpu"])
@pytest.mark.parametrize("name", ["h100-fp8", "mxfp8"])
def test_the_pallas_kernels_read_a_quantized_weight(impl, name):
    spec = preset(name).matmul
    x, w = _operands(4, 64, 16, seed=7)
    q = quantize_weight(w, spec)
    reference = matmul(x, w, spec, impl="numpy")
    assert same_bits(matmul(x, q, spec, impl=impl, interpret=True), reference)


def test_stacked_weights_are_quantized_one_by_one():
    spec = preset("h100-fp8").matmul
    ws = np.stack([_operands(2, 200, 24, seed=s)[1] for s in range(3)])
    stacked = quantize_weight(ws.reshape(3, 1, 200, 24), spec)
    assert stacked.values.shape == (3, 1, 200, 24) and stacked.scales.shape == (3, 1, 2, 24)
    for i in range(3):
        one = quantize_weight(ws[i], spec)
        assert same_bits(stacked.values[i, 0], one.values)
        assert same_bits(stacked.scales[i, 0], one.scales)


def test_what_prepares_a_weight():
    w = jnp.ones((8, 4), jnp.float32)
    assert prepared(PlainMatmul(), w) is w  # a matmul without prepare reads the weight itself
    assert isinstance(prepared(EmulatedMatmul(preset("bf16").matmul), w), QuantizedWeight)
    int8 = EmulatedMatmul(preset("a100-int8").matmul)
    assert same_bits(prepared(int8, w), w)  # int8 quantizes its weight with its product


def test_misuse_is_refused():
    spec = preset("h100-fp8").matmul
    x, w = _operands(2, 16, 8, seed=0)
    q = quantize_weight(w, spec)
    with pytest.raises(ValueError, match="int8 spec"):
        quantize_weight(w, preset("a100-int8").matmul)
    with pytest.raises(ValueError, match="JAX and Pallas paths"):
        matmul(x, q, spec, impl="numpy")
    with pytest.raises(ValueError, match="JAX and Pallas paths"):
        matmul(x, q, preset("a100-int8").matmul)
    with pytest.raises(ValueError, match="shapes do not fit"):
        matmul(x[:, :8], q, spec)


# ------------------------------------------------------------------ the decode loop


def _computations(hlo: str) -> dict[str, str]:
    """Each computation of an optimized HLO module's text, by name."""
    found = {}
    for block in re.split(r"\n(?=(?:ENTRY )?%\S+ \()", hlo):
        head = re.match(r"(?:ENTRY )?%(\S+) \(", block)
        if head:
            found[head.group(1)] = block
    return found


def _inside_loops(computations: dict[str, str]) -> set[str]:
    """The computations that run inside some while loop: every loop's body and condition, and
    whatever they call."""
    called = re.compile(r"(?:calls|body|condition|to_apply)=%([\w.\-]+)|\{(%[^}]*)\}")
    loops = set()
    for text in computations.values():
        for m in re.finditer(r"condition=%([\w.\-]+), body=%([\w.\-]+)", text):
            loops.update(m.groups())
    todo, inside = list(loops), set()
    while todo:
        name = todo.pop()
        if name in inside or name not in computations:
            continue
        inside.add(name)
        for m in called.finditer(computations[name]):
            names = [m.group(1)] if m.group(1) else re.findall(r"%([\w.\-]+)", m.group(2))
            todo.extend(n for n in names if n in computations)
    return inside


def _quantizing(text: str) -> bool:
    return bool(re.search(r'op_name="[^"]*quantize_weight', text))


def _decode_program(model, batch: int = 2, prompt: int = 3, new: int = 4) -> str:
    k_inf = with_ops(model, inference_ops(preset("h100-fp8"), batch_size=batch))
    prompts = jnp.zeros((batch, prompt), jnp.int32)
    lowered = generate.lower(k_inf, prompts, jax.random.key(0), jnp.float32(1.0), new_tokens=new)
    return lowered.compile().as_text()


@pytest.mark.parametrize("model", ["tiny", "qwen3"])
def test_the_decode_loop_quantizes_no_weight(model):
    decoder = (
        TinyLM(ModelConfig(vocab=64, d_model=32, layers=2, heads=4, d_ff=64, context=16), seed=1)
        if model == "tiny"
        else load_decoder(ROOT / "tests" / "data" / "hf" / "qwen3")
    )
    computations = _computations(_decode_program(decoder))
    inside = _inside_loops(computations)
    assert inside, "no while loop found: the program's text was not parsed"
    outside = set(computations) - inside
    assert any(_quantizing(computations[c]) for c in outside)  # the weights are quantized...
    assert not [c for c in inside if _quantizing(computations[c])]  # ...before the loop
