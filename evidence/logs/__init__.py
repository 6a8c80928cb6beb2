"""Evidence from users' RL stacks: log readers (JSONL; Parquet and Arrow through pyarrow) and
sampled-token metrics (numpy only)."""

from kernel_contracts.evidence.logs.metrics import (
    IS_RATIO_QUANTILES,
    framework_metrics,
    token_metrics,
)
from kernel_contracts.evidence.logs.read import read_log
from kernel_contracts.evidence.logs.reader import (
    LOGPROB_TOLERANCE,
    LogError,
    LogTable,
    Problem,
)
from kernel_contracts.evidence.logs.schema import (
    FILE_FORMATS,
    FORMATS,
    LogFormat,
    detect_format,
    file_format_of,
)
from kernel_contracts.evidence.logs.shift import (
    SupportShift,
    shift_corrected,
    shift_declared,
    shift_detected,
    support_shift,
)
from kernel_contracts.evidence.logs.writer import LoggedSequence, record, write_log

__all__ = [
    "FILE_FORMATS",
    "FORMATS",
    "IS_RATIO_QUANTILES",
    "LOGPROB_TOLERANCE",
    "LogError",
    "LogFormat",
    "LogTable",
    "LoggedSequence",
    "Problem",
    "SupportShift",
    "detect_format",
    "file_format_of",
    "framework_metrics",
    "read_log",
    "record",
    "shift_corrected",
    "shift_declared",
    "shift_detected",
    "support_shift",
    "token_metrics",
    "write_log",
]
