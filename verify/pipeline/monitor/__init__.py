"""The online monitor: a contract's clauses decided window by window over a growing rollout
log, with the escalation policy applied, exactly once across restarts.

``main`` is ``python -m verify monitor``; ``stream`` reads the lines, ``window`` decides the
windows, ``checkpoint`` keeps where a restart resumes.
"""

from kernel_contracts.verify.pipeline.monitor.checkpoint import CheckpointError
from kernel_contracts.verify.pipeline.monitor.command import DEFAULT_WINDOW, main
from kernel_contracts.verify.pipeline.monitor.lines import MAX_LINE, Line
from kernel_contracts.verify.pipeline.monitor.stream import Position, StreamError
from kernel_contracts.verify.pipeline.monitor.window import MAX_PENDING, MonitorError, sample_mask

__all__ = [
    "DEFAULT_WINDOW",
    "MAX_LINE",
    "MAX_PENDING",
    "CheckpointError",
    "Line",
    "MonitorError",
    "Position",
    "StreamError",
    "main",
    "sample_mask",
]
