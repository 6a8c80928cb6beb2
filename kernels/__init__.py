"""kernels: number formats, emulated FP8/bf16 kernels, the policy model and measurement.

Importing this package imports no JAX: every submodule is loaded on first use, so a
proofs-only run of ``verify`` stays light. Public names are re-exported lazily below.
"""

from __future__ import annotations

from contracts.lazy import lazy_exports

# public name -> submodule that defines it. Modules whose main function shares their name are
# private (``kernels._measure``, the package ``kernels._matmul``), so the
# function is the public name.
_EXPORTS = {
    "Ops": "kernels.ops",
    "plain_ops": "kernels.ops",
    "train_ops": "kernels.ops",
    "inference_ops": "kernels.ops",
    "ModelConfig": "kernels.model",
    "TinyLM": "kernels.model",
    "load_pretrained": "kernels.model",
    "with_ops": "kernels.model",
    "generate": "kernels.decode",
    "teacher_force": "kernels.decode",
    "PairLogits": "kernels.decode",
    "load_checkpoint": "kernels.model",
    "save_checkpoint": "kernels.model",
    "TABLE_COLUMNS": "kernels.columns",
    "MEASURED_COLUMNS": "kernels.columns",
    "measure": "kernels._measure",
    "measure_numpy": "kernels._measure",
    "emulate": "kernels.emulation",
    "FormatInfo": "kernels.formats",
    "format_info": "kernels.formats",
    "saturating_cast": "kernels.formats",
    "matmul": "kernels._matmul",
    "emulated_dot_general": "kernels._matmul",
    "int8_matmul": "kernels._matmul",
    "matmul_reference": "kernels._matmul",
    "quantize_weight": "kernels._matmul",
    "QuantizedWeight": "kernels._matmul",
    "on_kernel": "kernels.transform",
    "reduction_splits": "kernels.batching",
    "reference_attention": "kernels.attention",
    "PagedKVCache": "kernels.attention",
    "decode_attention": "kernels.attention",
    "localize": "kernels.localization",
    "replay": "kernels.localization",
    "kernel_logits": "kernels.localization",
    "Localization": "kernels.localization",
    "SiteDivergence": "kernels.localization",
    "LayerDivergence": "kernels.localization",
    "Replay": "kernels.localization",
    "walk": "kernels.sites",
    "Site": "kernels.sites",
    "ulp_distance": "kernels.ulp",
    "rescaled_matmul": "kernels.rescale",
    "FlipPrediction": "kernels.flipstats",
    "roc_auc": "kernels.flipstats",
    "brier": "kernels.flipstats",
    "fit_logistic": "kernels.flipstats",
    "predict_flips": "kernels.flipstats",
    "FAULTS": "kernels.faults",
    "Candidate": "kernels.faults",
    "inject": "kernels.faults",
    "Decoder": "kernels.hf.decoder",
    "DecoderConfig": "kernels.hf.config",
    "CheckpointError": "kernels.hf.errors",
    "load_decoder": "kernels.hf.checkpoint",
    "save_decoder": "kernels.hf.checkpoint",
    "read_tokenizer": "kernels.hf.tokenizer",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
