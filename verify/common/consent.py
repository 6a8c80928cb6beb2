"""Consent before code a contract names is run.

``evidence: emulate: {model: "package.module:function"}`` imports Python from the contract's
folder and calls it. A contract may come from anyone (a pull request that a CI job checks), so
the command line imports such code only when its user says so: ``--trust-code``, or the
environment variable ``KERNEL_CONTRACTS_TRUST_CODE=1``. Without it the command exits 2 before
anything is imported, with a line saying what would be imported and run. A shipped model name
and an ``hf:`` checkpoint folder need no consent: loading them runs no code from the folder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["TRUST_ENV", "consent_problem", "named_code", "trusted"]

TRUST_ENV = "KERNEL_CONTRACTS_TRUST_CODE"


def trusted(flag: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the user consented: ``--trust-code`` or ``KERNEL_CONTRACTS_TRUST_CODE=1``."""
    env = os.environ if environ is None else environ
    return bool(flag) or env.get(TRUST_ENV, "").strip() == "1"


def named_code(contract) -> str | None:
    """What running ``contract`` would import and call (a phrase), or ``None`` when it names
    no code."""
    ev = contract.evidence.emulate if contract.evidence is not None else None
    if ev is None:  # a proofs-only run loads no kernels
        return None
    from kernel_contracts.kernels.model.user_model import is_entry_point

    if not is_entry_point(ev.model):
        return None
    module, function = ev.model.split(":", 1)
    path = contract.source.path
    folder = os.path.dirname(os.path.abspath(path)) if os.path.isfile(path) else os.getcwd()
    return f"import module {module!r} (searched first in {folder}) and call {function}"


def consent_problem(contract, flag: bool, environ: Mapping[str, str] | None = None) -> str | None:
    """The line to print when ``contract`` names code and the user has not consented, else
    ``None``; it points at the contract's ``evidence.emulate.model``."""
    what = named_code(contract)
    if what is None or trusted(flag, environ):
        return None
    prefix = contract.source.prefix("evidence.emulate.model")
    return (
        f"{prefix}evidence.emulate.model: the contract names code to run: it would {what}; "
        f"pass --trust-code (or set {TRUST_ENV}=1) to allow it"
    )
