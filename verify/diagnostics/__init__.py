"""Kernel diagnostics: ``localize`` (which matmul of a model moves the logits), ``measure`` (the
drift table per preset and slice) and ``conformance`` (which check detects which injected
fault).

Imports the ``common`` room only. Importing it loads none of its modules.
"""

__all__: list[str] = []
