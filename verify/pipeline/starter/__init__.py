"""A commented starter contract for a named setup (``python -m verify init``).

``Setup`` names the setup (framework, vocabulary, temperature, kernel presets, estimator and its
parameters, horizon, targets); ``starter_text`` writes a contract that proves every guarantee it
states from one premise, the logit drift between the two kernels, and says what to measure to
make that premise true; ``init_main`` is the command. Both load the bound calculator only when
called.
"""

from kernel_contracts.verify.pipeline.starter.command import init_main
from kernel_contracts.verify.pipeline.starter.contract import (
    DEFAULT_PARAMS,
    LOG_FORMATS,
    Setup,
    starter_text,
)

__all__ = ["DEFAULT_PARAMS", "LOG_FORMATS", "Setup", "init_main", "starter_text"]
