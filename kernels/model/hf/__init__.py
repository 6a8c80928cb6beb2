"""kernels.model.hf: Llama 3, Qwen2 and Qwen3 decoders from Hugging Face checkpoint folders.

``load_decoder(folder)`` reads ``config.json`` and the safetensors weights (one file, or shards
with their index) into a :class:`Decoder` whose matmuls and attention are the injected ``Ops``
of :mod:`kernels.ops`, as TinyLM's are; ``read_tokenizer`` reads ``tokenizer.json``. Nothing in
a checkpoint folder is ever run. Public names are re-exported lazily: importing the package
loads nothing heavy until a name is used.
"""

from __future__ import annotations

from kernel_contracts.contracts.lazy import lazy_exports

# public name -> submodule that defines it
_EXPORTS = {
    "ARCHITECTURES": "kernel_contracts.kernels.model.hf.config",
    "DecoderConfig": "kernel_contracts.kernels.model.hf.config",
    "RopeConfig": "kernel_contracts.kernels.model.hf.config",
    "parse_config": "kernel_contracts.kernels.model.hf.config",
    "read_config": "kernel_contracts.kernels.model.hf.config",
    "CheckpointError": "kernel_contracts.kernels.model.hf.errors",
    "CheckpointProblem": "kernel_contracts.kernels.model.hf.errors",
    "Decoder": "kernel_contracts.kernels.model.hf.decoder",
    "inverse_frequencies": "kernel_contracts.kernels.model.hf.rope",
    "hf_tensors": "kernel_contracts.kernels.model.hf.checkpoint",
    "config_json": "kernel_contracts.kernels.model.hf.checkpoint",
    "load_decoder": "kernel_contracts.kernels.model.hf.checkpoint",
    "save_decoder": "kernel_contracts.kernels.model.hf.checkpoint",
    "read_tokenizer": "kernel_contracts.kernels.model.hf.tokenizer",
    "encode": "kernel_contracts.kernels.model.hf.tokenizer",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
