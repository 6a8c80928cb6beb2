"""The drift table of a model's kernel pairs per preset and slice (``python -m verify measure``)."""

from kernel_contracts.verify.diagnostics.measure.command import measure_main

__all__ = ["measure_main"]
