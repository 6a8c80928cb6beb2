"""kernels: number formats, emulated FP8/bf16 kernels, the policy model and measurement."""
