"""Write the tiny reference checkpoints and the reference implementation's logits.

For each family (Llama 3 with llama3 rotary scaling, untied embeddings and two shards; Qwen2
with q/k/v biases and tied embeddings; Qwen3 with q/k RMSNorm and a head_dim that is not
hidden_size / heads) this script

1. writes ``config.json`` in the hub's keys (``rope_theta``, ``rope_scaling``, ...);
2. builds the model from that file with Hugging Face transformers, fills every parameter with
   seeded random values rounded to bfloat16, and writes them under the hub's tensor names as
   bfloat16 safetensors (``model.safetensors``, or shards with ``model.safetensors.index.json``);
3. reloads the folder in float32 with transformers and stores in ``reference.npz`` the tokens,
   the full-sequence logits, and the logits of incremental decoding through its KV cache (a
   prefill of ``PREFILL`` tokens, then one token at a time).

It needs torch and transformers, which the project does not depend on: run it in a separate
environment (``pip install torch transformers safetensors numpy``) from the repository root,
``python tests/data/hf/make_reference.py``. Everything is seeded: a rerun writes the same files.
The tests read the files without torch (tests/kernels/test_hf_reference.py).
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

HERE = pathlib.Path(__file__).resolve().parent
BATCH, SEQ, PREFILL = 2, 12, 5

_COMMON = {
    "vocab_size": 128,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "max_position_embeddings": 128,
    "torch_dtype": "bfloat16",
    "use_cache": True,
}

FAMILIES = {
    "llama3": (
        {
            **_COMMON,
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            "attention_bias": False,
            "mlp_bias": False,
            "tie_word_embeddings": False,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
        2,
    ),
    "qwen2": (
        {
            **_COMMON,
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0,
            "rope_scaling": None,
            "tie_word_embeddings": True,
            "use_sliding_window": False,
            "sliding_window": 128,
            "max_window_layers": 2,
        },
        1,
    ),
    "qwen3": (
        {
            **_COMMON,
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "head_dim": 16,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0,
            "rope_scaling": None,
            "attention_bias": False,
            "tie_word_embeddings": False,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": 2,
        },
        1,
    ),
}


def _random_state(model, seed: int) -> dict[str, torch.Tensor]:
    """Every stored parameter of ``model``, seeded, rounded to bfloat16."""
    rng = np.random.default_rng(seed)
    out = {}
    tied = model.config.tie_word_embeddings
    for name, param in sorted(model.state_dict().items()):
        if tied and name == "lm_head.weight":
            continue
        shape = tuple(param.shape)
        if name.endswith("norm.weight"):
            values = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            values = 0.2 * rng.standard_normal(shape)
        else:
            values = 0.15 * rng.standard_normal(shape)
        out[name] = torch.from_numpy(values.astype(np.float32)).to(torch.bfloat16)
    return out


def _write_weights(folder: pathlib.Path, state: dict[str, torch.Tensor], shards: int) -> None:
    for old in folder.glob("*.safetensors*"):
        old.unlink()
    names = sorted(state)
    if shards == 1:
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return
    weight_map = {}
    for k, group in enumerate(np.array_split(np.arange(len(names)), shards), start=1):
        file = f"model-{k:05d}-of-{shards:05d}.safetensors"
        part = {names[i]: state[names[i]] for i in group}
        save_file(part, str(folder / file), metadata={"format": "pt"})
        weight_map.update({name: file for name in part})
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def _logits(model, tokens: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        full = model(tokens).logits.float().numpy()
        out = model(tokens[:, :PREFILL], use_cache=True)
        steps = [out.logits.float()]
        cache = out.cache
        for t in range(PREFILL, tokens.shape[1]):
            out = model(tokens[:, t : t + 1], cache=cache, use_cache=True)
            cache = out.cache
            steps.append(out.logits.float())
        decoded = torch.cat(steps, dim=1).numpy()
    return full, decoded


def main() -> None:
    torch.manual_seed(0)
    for seed, (family, (config, shards)) in enumerate(sorted(FAMILIES.items())):
        folder = HERE / family
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        model = AutoModelForCausalLM.from_config(
            AutoConfig.from_pretrained(str(folder)), dtype=torch.float32
        )
        _write_weights(folder, _random_state(model, 1000 + seed), shards)
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float32, attn_implementation="eager"
        ).eval()
        rng = np.random.default_rng(2000 + seed)
        tokens = rng.integers(0, config["vocab_size"], (BATCH, SEQ)).astype(np.int64)
        full, decoded = _logits(model, torch.from_numpy(tokens))
        np.savez(
            folder / "reference.npz",
            tokens=tokens.astype(np.int32),
            logits=full.astype(np.float32),
            decode_logits=decoded.astype(np.float32),
            prefill=np.int32(PREFILL),
        )
        print(f"{family}: {sorted(os.listdir(folder))}")


if __name__ == "__main__":
    main()
