"""kernels.model.gguf: GGUF files (llama.cpp's format) as Hugging Face decoders.

``load_gguf(path)`` reads a GGUF file's metadata and tensors (F32, F16, BF16 and the block
quantizations Q8_0, Q4_0, Q4_1, Q4_K and Q6_K, dequantized to float32) into the
:class:`kernels.model.hf.Decoder` of its architecture; ``read_gguf_tokenizer`` builds the
tokenizer its metadata states and ``chat_template`` returns its chat template. Reads are bounded
and checked as for checkpoint folders; nothing in a file is run. Public names are re-exported
lazily.
"""

from __future__ import annotations

from kernel_contracts.contracts.lazy import lazy_exports

# public name -> submodule that defines it
_EXPORTS = {
    "GGUFError": "kernel_contracts.kernels.model.gguf.header",
    "read_header": "kernel_contracts.kernels.model.gguf.header",
    "SUPPORTED": "kernel_contracts.kernels.model.gguf.quants",
    "dequantize": "kernel_contracts.kernels.model.gguf.quants",
    "chat_template": "kernel_contracts.kernels.model.gguf.load",
    "gguf_sha256": "kernel_contracts.kernels.model.gguf.load",
    "load_gguf": "kernel_contracts.kernels.model.gguf.load",
    "read_gguf_config": "kernel_contracts.kernels.model.gguf.load",
    "read_gguf_tokenizer": "kernel_contracts.kernels.model.gguf.load",
    "unpermute": "kernel_contracts.kernels.model.gguf.load",
    "smollm2_path": "kernel_contracts.kernels.model.gguf.package",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
