"""Named kernel presets, with where each number comes from.

A preset is a complete ``KernelSpec``; a contract names one and may override any field.
The numbers are data here (so ``contracts`` can validate names without importing JAX);
``kernels`` turns them into arithmetic.
"""

from __future__ import annotations

from types import MappingProxyType

from kernel_contracts.contracts.model import (
    AccumulatorSpec,
    AttentionSpec,
    EpilogueSpec,
    IntAccumulatorSpec,
    KernelSpec,
    MatmulSpec,
)

__all__ = ["PRESETS", "preset"]

_FP32_ACC = AccumulatorSpec(mantissa_bits=23, rounding="nearest_even")

_PRESETS = {
    "fp32": KernelSpec(
        preset="fp32",
        matmul=MatmulSpec(inputs="float32", accumulator=_FP32_ACC, output="float32"),
        attention=AttentionSpec(kv_cache="float32", page_size=16, tiles="full"),
        batching="fixed",
        provenance=(
            "IEEE-754 binary32 throughout, round-to-nearest-even, one sequential fp32 "
            "accumulation: the training kernel of an autograd framework at fixed shapes."
        ),
    ),
    "bf16": KernelSpec(
        preset="bf16",
        matmul=MatmulSpec(inputs="bfloat16", accumulator=_FP32_ACC, output="bfloat16", group=1),
        attention=AttentionSpec(kv_cache="bfloat16", page_size=16, tiles="adaptive"),
        batching="dynamic",
        provenance=(
            "bfloat16 inputs and outputs with fp32 accumulation, as in bf16 tensor-core GEMMs "
            "(cuBLAS/CUTLASS default); bf16 paged KV cache as served by vLLM/SGLang."
        ),
    ),
    "h100-fp8": KernelSpec(
        preset="h100-fp8",
        matmul=MatmulSpec(
            inputs="float8_e4m3fn",
            scaling="block:128",
            accumulator=AccumulatorSpec(mantissa_bits=13, rounding="toward_zero"),
            group=4,
            promote_every=128,
            output="bfloat16",
        ),
        attention=AttentionSpec(kv_cache="float8_e4m3fn", page_size=16, tiles="adaptive"),
        batching="dynamic",
        provenance=(
            "e4m3 inputs with 1x128 block scales; Hopper wgmma FP8 accumulation keeps about 13 "
            "mantissa bits with truncation (DeepSeek-V3 technical report, arXiv 2412.19437, "
            "§3.3.2, and tensor-core probing studies); partial sums promoted to an fp32 register "
            "every 128 elements (N_C = 128, the DeepSeek-V3 recipe). group=4 products per "
            "accumulator rounding is our modelling assumption."
        ),
    ),
    "h100-fp8-fast-accum": KernelSpec(
        preset="h100-fp8-fast-accum",
        matmul=MatmulSpec(
            inputs="float8_e4m3fn",
            scaling="per_tensor",
            accumulator=AccumulatorSpec(mantissa_bits=13, rounding="toward_zero"),
            group=4,
            promote_every=None,
            output="bfloat16",
        ),
        attention=AttentionSpec(kv_cache="float8_e4m3fn", page_size=16, tiles="adaptive"),
        batching="dynamic",
        provenance=(
            "as h100-fp8 but with per-tensor scales and no promotion: the whole K reduction "
            "stays in the ~13-bit truncating accumulator (cuBLAS/TransformerEngine 'fast "
            "accumulation'); DeepSeek-V3 reports ~2% maximum relative error at K = 4096."
        ),
    ),
    "mxfp8": KernelSpec(
        preset="mxfp8",
        matmul=MatmulSpec(
            inputs="float8_e4m3fn",
            scaling="mx:32",
            accumulator=_FP32_ACC,
            group=32,
            output="bfloat16",
        ),
        attention=AttentionSpec(kv_cache="bfloat16", page_size=16, tiles="adaptive"),
        batching="dynamic",
        provenance=(
            "OCP Microscaling spec v1.0: e4m3 elements with one power-of-two E8M0 scale per 32 "
            "elements; fp32 accumulation of each 32-element block product, as on Blackwell."
        ),
    ),
    "a100-int8": KernelSpec(
        preset="a100-int8",
        matmul=MatmulSpec(
            inputs="int8",
            scaling="per_row",
            accumulator=IntAccumulatorSpec(dtype="int32"),
            group=1,
            promote_every=None,
            output="bfloat16",
            k_max=4096,
            epilogue=EpilogueSpec(
                scales="float32", order="acc_sw_sx", fused=False, rounding="nearest_even"
            ),
        ),
        attention=AttentionSpec(kv_cache="bfloat16", page_size=16, tiles="adaptive"),
        batching="dynamic",
        provenance=(
            "W8A8 int8 serving on Ampere tensor cores (mma s8.s8.s32: exact int32 "
            "accumulation, wrapping past 2^31 - 1 unless saturation is asked for): symmetric "
            "per-token activation and per-channel weight scales as in LLM.int8() vector-wise "
            "quantization (Dettmers et al., arXiv 2208.07339) and SmoothQuant (Xiao et al., "
            "arXiv 2211.10438); the epilogue of vLLM's CUTLASS 2.x ScaledEpilogue for sm80: the "
            "accumulator converted to float32, times the per-channel weight scale (float32, "
            "round to nearest), times the per-token scale, converted to the bfloat16 output "
            "(round to nearest). k_max = 4096 is a 7B-class hidden size: declare your model's "
            "longest reduction (the MLP down-projection's width)."
        ),
    ),
}

PRESETS = MappingProxyType(_PRESETS)


def preset(name: str) -> KernelSpec:
    """The ``KernelSpec`` of a named preset; ``KeyError`` when there is none."""
    return _PRESETS[name]
