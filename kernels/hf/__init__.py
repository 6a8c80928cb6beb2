"""kernels.hf: Llama 3, Qwen2 and Qwen3 decoders from Hugging Face checkpoint folders.

``load_decoder(folder)`` reads ``config.json`` and the safetensors weights (one file, or shards
with their index) into a :class:`Decoder` whose matmuls and attention are the injected ``Ops``
of :mod:`kernels.ops`, as TinyLM's are; ``read_tokenizer`` reads ``tokenizer.json``. Nothing in
a checkpoint folder is ever run. Public names are re-exported lazily: importing the package
loads nothing heavy until a name is used.
"""

from __future__ import annotations

from contracts.lazy import lazy_exports

# public name -> submodule that defines it
_EXPORTS = {
    "ARCHITECTURES": "kernels.hf.config",
    "DecoderConfig": "kernels.hf.config",
    "RopeConfig": "kernels.hf.config",
    "parse_config": "kernels.hf.config",
    "read_config": "kernels.hf.config",
    "CheckpointError": "kernels.hf.errors",
    "CheckpointProblem": "kernels.hf.errors",
    "Decoder": "kernels.hf.decoder",
    "inverse_frequencies": "kernels.hf.rope",
    "hf_tensors": "kernels.hf.checkpoint",
    "config_json": "kernels.hf.checkpoint",
    "load_decoder": "kernels.hf.checkpoint",
    "save_decoder": "kernels.hf.checkpoint",
    "read_tokenizer": "kernels.hf.tokenizer",
    "encode": "kernels.hf.tokenizer",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
