"""Promotion stages: offline_ci → shadow → canary → full, each a record bound to its contract,
its report and the record of the stage before it (``record``: the format and the requirements;
``chain``: re-checking records; ``stage``: the command line)."""

from kernel_contracts.verify.pipeline.promotion.chain import (
    is_record,
    link,
    read_record,
    record_differences,
)
from kernel_contracts.verify.pipeline.promotion.record import (
    FORMAT,
    PromotionError,
    build_record,
    checks,
)
from kernel_contracts.verify.pipeline.promotion.stage import (
    check_record_main,
    stage_main,
    traffic_share,
)

__all__ = [
    "FORMAT",
    "PromotionError",
    "build_record",
    "check_record_main",
    "checks",
    "is_record",
    "link",
    "read_record",
    "record_differences",
    "stage_main",
    "traffic_share",
]
