"""Proved rollout-correction settings for training frameworks (``python -m verify export``).

A contract's ``pg_bias`` guarantees (estimator and cap, band or threshold) and ``clip_budget``
guarantees (clip range) become the settings of verl, NeMo-RL, TRL or SkyRL, spelt as each
framework spells them (one module per framework says which code the keys come from and which
estimators it has no counterpart for). A setting is written only when the guarantee it comes
from is proved.
"""

from kernel_contracts.verify.pipeline.export.command import FRAMEWORKS, export_main
from kernel_contracts.verify.pipeline.export.plan import Export, Setting, plan, prove
from kernel_contracts.verify.pipeline.export.render import render
from kernel_contracts.verify.pipeline.export.request import (
    ExportError,
    Framework,
    NoCounterpart,
    Request,
    requests_of,
)
from kernel_contracts.verify.pipeline.export.table import export_table

__all__ = [
    "FRAMEWORKS",
    "Export",
    "ExportError",
    "Framework",
    "NoCounterpart",
    "Request",
    "Setting",
    "export_main",
    "export_table",
    "plan",
    "prove",
    "render",
    "requests_of",
]
