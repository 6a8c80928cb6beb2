"""kernels: number formats, emulated FP8/bf16 kernels, the policy model and measurement.

Importing this package imports no JAX: every submodule is loaded on first use, so a
proofs-only run of ``verify`` stays light. Public names are re-exported lazily below.
"""

from __future__ import annotations

from kernel_contracts.contracts.lazy import lazy_exports

# public name -> submodule that defines it. Modules whose main function shares their name are
# private (``kernels.measurement._measure``, the package ``kernels._matmul``), so the
# function is the public name.
_EXPORTS = {
    "Ops": "kernel_contracts.kernels.ops",
    "plain_ops": "kernel_contracts.kernels.ops",
    "train_ops": "kernel_contracts.kernels.ops",
    "inference_ops": "kernel_contracts.kernels.ops",
    "ModelConfig": "kernel_contracts.kernels.model.tinylm",
    "TinyLM": "kernel_contracts.kernels.model.tinylm",
    "load_pretrained": "kernel_contracts.kernels.model.tinylm",
    "with_ops": "kernel_contracts.kernels.model.tinylm",
    "generate": "kernel_contracts.kernels.model.decode",
    "teacher_force": "kernel_contracts.kernels.model.decode",
    "PairLogits": "kernel_contracts.kernels.model.decode",
    "load_checkpoint": "kernel_contracts.kernels.model.tinylm",
    "save_checkpoint": "kernel_contracts.kernels.model.tinylm",
    "TABLE_COLUMNS": "kernel_contracts.kernels.measurement.columns",
    "MEASURED_COLUMNS": "kernel_contracts.kernels.measurement.columns",
    "measure": "kernel_contracts.kernels.measurement._measure",
    "measure_numpy": "kernel_contracts.kernels.measurement._measure",
    "emulate": "kernel_contracts.kernels.emulation",
    "Decoding": "kernel_contracts.kernels.emulation",
    "ServedPair": "kernel_contracts.kernels.emulation",
    "decoder_pair": "kernel_contracts.kernels.emulation",
    "user_pair": "kernel_contracts.kernels.emulation",
    "prompts_from": "kernel_contracts.kernels.emulation",
    "FormatInfo": "kernel_contracts.kernels.numerics.formats",
    "format_info": "kernel_contracts.kernels.numerics.formats",
    "saturating_cast": "kernel_contracts.kernels.numerics.formats",
    "matmul": "kernel_contracts.kernels._matmul",
    "emulated_dot_general": "kernel_contracts.kernels._matmul",
    "int8_matmul": "kernel_contracts.kernels._matmul",
    "matmul_reference": "kernel_contracts.kernels._matmul",
    "epilogue_np": "kernel_contracts.kernels._matmul",
    "quantize_weight": "kernel_contracts.kernels._matmul",
    "QuantizedWeight": "kernel_contracts.kernels._matmul",
    "on_kernel": "kernel_contracts.kernels.diagnose.transform",
    "reduction_splits": "kernel_contracts.kernels.batching",
    "reference_attention": "kernel_contracts.kernels.attention",
    "PagedKVCache": "kernel_contracts.kernels.attention",
    "decode_attention": "kernel_contracts.kernels.attention",
    "localize": "kernel_contracts.kernels.diagnose.localization",
    "replay": "kernel_contracts.kernels.diagnose.localization",
    "kernel_logits": "kernel_contracts.kernels.diagnose.localization",
    "Localization": "kernel_contracts.kernels.diagnose.localization",
    "SiteDivergence": "kernel_contracts.kernels.diagnose.localization",
    "LayerDivergence": "kernel_contracts.kernels.diagnose.localization",
    "Replay": "kernel_contracts.kernels.diagnose.localization",
    "walk": "kernel_contracts.kernels.diagnose.sites",
    "Site": "kernel_contracts.kernels.diagnose.sites",
    "ulp_distance": "kernel_contracts.kernels.numerics.ulp",
    "rescaled_matmul": "kernel_contracts.kernels.diagnose.rescale",
    "FlipPrediction": "kernel_contracts.kernels.measurement.flipstats",
    "roc_auc": "kernel_contracts.kernels.measurement.flipstats",
    "brier": "kernel_contracts.kernels.measurement.flipstats",
    "fit_logistic": "kernel_contracts.kernels.measurement.flipstats",
    "predict_flips": "kernel_contracts.kernels.measurement.flipstats",
    "FAULTS": "kernel_contracts.kernels.diagnose.faults",
    "Candidate": "kernel_contracts.kernels.diagnose.faults",
    "inject": "kernel_contracts.kernels.diagnose.faults",
    "Decoder": "kernel_contracts.kernels.model.hf.decoder",
    "DecoderConfig": "kernel_contracts.kernels.model.hf.config",
    "CheckpointError": "kernel_contracts.kernels.model.hf.errors",
    "load_decoder": "kernel_contracts.kernels.model.hf.checkpoint",
    "save_decoder": "kernel_contracts.kernels.model.hf.checkpoint",
    "read_tokenizer": "kernel_contracts.kernels.model.hf.tokenizer",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
