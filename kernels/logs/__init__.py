"""Evidence from users' RL stacks: JSONL log readers and sampled-token metrics (numpy only)."""

from kernels.logs.metrics import IS_RATIO_QUANTILES, framework_metrics, token_metrics
from kernels.logs.reader import LOGPROB_TOLERANCE, LogError, LogTable, Problem, read_log
from kernels.logs.schema import FORMATS, LogFormat, detect_format
from kernels.logs.shift import SupportShift, support_shift
from kernels.logs.writer import LoggedSequence, record, write_log

__all__ = [
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
    "framework_metrics",
    "read_log",
    "record",
    "support_shift",
    "token_metrics",
    "write_log",
]
