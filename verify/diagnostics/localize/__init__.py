"""Where two kernels diverge, matmul by matmul (``python -m verify localize``)."""

from kernel_contracts.verify.diagnostics.localize.command import localize_main
from kernel_contracts.verify.diagnostics.localize.model import (
    Chosen,
    ModelError,
    choose_model,
    token_rows,
)

__all__ = ["Chosen", "ModelError", "choose_model", "localize_main", "token_rows"]
