"""The models (TinyLM and a Hugging Face decoder) and the measurement over a device mesh: the
same bits as on one device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from jax.sharding import AbstractMesh, PartitionSpec

from kernel_contracts.kernels.model.sharding import (
    HF_DECODER_RULES,
    TINY_LM_RULES,
    make_mesh,
    param_specs,
)
from kernel_contracts.kernels.model.tinylm import ModelConfig, TinyLM

ROOT = Path(__file__).resolve().parents[2]
MESH = AbstractMesh((2, 2), ("data", "model"))

# one-device and 2 x 2 mesh runs of the same kernel pair in one process with four host devices
SCRIPT = """
import json
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from kernel_contracts.contracts import preset
from kernel_contracts.kernels.model.decode import generate, teacher_force
from kernel_contracts.kernels.measurement._measure import measure
from kernel_contracts.kernels.model.hf import load_decoder
from kernel_contracts.kernels.model.tinylm import ModelConfig, TinyLM, with_ops
from kernel_contracts.kernels.ops import inference_ops, train_ops
from kernel_contracts.kernels.model.sharding import make_mesh, shard_batch, shard_model

models = {
    "tiny": TinyLM(ModelConfig(vocab=64, d_model=32, layers=2, heads=4, d_ff=64, context=16),
                   seed=3),
    "qwen3": load_decoder("tests/data/hf/qwen3"),  # grouped-query attention, q/k norms
}
prompts = jnp.asarray(np.random.default_rng(0).integers(0, 64, (4, 3)), jnp.int32)
key, temperature = jax.random.key(7), jnp.float32(1.0)
mesh = make_mesh()

def run(k_inf, k_train, prompts):
    tokens, z_inf = generate(k_inf, prompts, key, temperature, new_tokens=4)
    z_train = teacher_force(k_train, tokens, prompt_len=3)
    return {"tokens": tokens, "z_inf": z_inf, "z_train": z_train}

def measured(out):  # over all four devices, from arrays placed anywhere
    vocab = out["z_train"].shape[-1]
    return measure(out["z_train"].reshape(-1, vocab), out["z_inf"].reshape(-1, vocab),
                   out["tokens"][:, 3:].reshape(-1), 0.7, impl="jax")

def bits(a):
    a = np.asarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.int32)

out = {"devices": len(jax.devices()), "mesh": dict(mesh.shape)}
for name, model in models.items():
    k_train = with_ops(model, train_ops(preset("fp32")))
    k_inf = with_ops(model, inference_ops(preset("h100-fp8"), batch_size=4))
    one = run(k_inf, k_train, prompts)
    s_inf, s_train = shard_model(k_inf, mesh), shard_model(k_train, mesh)
    sharded = run(s_inf, s_train, shard_batch(prompts, mesh))
    one, sharded = one | measured(one), sharded | measured(sharded)
    leaves = jax.tree.leaves(nnx.state(s_inf))
    out[name] = {
        "split": sum(len(a.sharding.device_set) == 4 and not a.sharding.is_fully_replicated
                     for a in leaves),
        "spread": len(sharded["z_train"].sharding.device_set),
        "equal": {k: bool(np.array_equal(bits(one[k]), bits(sharded[k]))) for k in one},
    }
print(json.dumps(out))
"""


# The suite's most expensive test (about 100 CPU s), and it stays so: per model, four programs
# (generate and teacher_force, on one device and on the mesh) are traced, lowered and compiled
# in a child with four host devices, which can share no program with the parent. Measured per
# model: tracing and lowering a third, XLA's compilation two thirds; the measurement pass under
# 10 %. The layers run as one scan, so fewer layers would not shorten it, and the kernel pair
# must stay the h100-fp8 one: its block scales are where a split weight could change bits.
@pytest.mark.slow
def test_sharded_emulation_is_bit_identical_to_one_device():
    # read when JAX starts: a new process. Both runs compile under the same flags; the cheaper
    # backend passes only shorten compilation (a default-flag run gives the same verdict)
    flags = (
        "--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0 "
        "--xla_llvm_disable_expensive_passes=true"
    )
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["devices"] == 4 and out["mesh"] == {"data": 2, "model": 2}
    # TinyLM: wqkv and w_in of 2 layers and the head; the Qwen3 decoder: the q, k, v, gate and
    # up projections of each of its 2 layers and the LM head
    for name, split in (("tiny", 5), ("qwen3", 11)):
        assert out[name]["split"] == split  # the weights really are split
        assert out[name]["spread"] == 4  # and the logits come back from every device
        equal = out[name]["equal"]
        assert equal == dict.fromkeys(equal, True), (name, equal)


def test_rules_split_only_axes_nothing_reduces_over():
    import jax

    state = jax.eval_shape(lambda: _split_state(TinyLM(ModelConfig(d_model=32, heads=4))))
    specs = param_specs(state, TINY_LM_RULES, MESH)
    split = {p for p, s in specs.items() if any(a is not None for a in s)}
    assert split == {f"blocks/{i}/{n}" for i in range(4) for n in ("wqkv", "w_in")} | {"head"}
    assert all(s == PartitionSpec(None, "model") for p, s in specs.items() if p in split)
    assert specs["blocks/0/wo"] == specs["blocks/0/w_out"] == PartitionSpec(None, None)


def test_indivisible_and_stacked_axes():
    shapes = {
        "layers/q_proj/kernel": np.zeros((3, 8, 2, 4)),  # stacked over 3 layers: split heads
        "layers/up_proj/kernel": np.zeros((8, 5)),  # 5 columns over 2 devices: stays whole
        "layers/o_proj/kernel": np.zeros((2, 4, 8)),
        "embed_tokens/embedding": np.zeros((16, 8)),
    }
    specs = param_specs(shapes, HF_DECODER_RULES, MESH)
    assert specs == {
        "layers/q_proj/kernel": PartitionSpec(None, None, "model", None),
        "layers/up_proj/kernel": PartitionSpec(None, None),
        "layers/o_proj/kernel": PartitionSpec(None, None, None),
        "embed_tokens/embedding": PartitionSpec(None, None),
    }


def test_mesh_shapes_and_bad_model_axis():
    import jax

    one = make_mesh()
    assert one.axis_names == ("data", "model")
    assert dict(one.shape) == {"data": len(jax.local_devices()), "model": 1}
    with pytest.raises(ValueError, match="positive divisor"):
        make_mesh(model=len(jax.local_devices()) + 1)


def _split_state(model):
    from flax import nnx

    return nnx.split(model)[1]
