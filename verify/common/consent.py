"""Consent before code a contract names is run.

``evidence: emulate: {model: "package.module:function"}`` imports Python from the contract's
folder and calls it. A contract may come from anyone (a pull request that a CI job checks), so
such code is imported only when its user says so: ``--trust-code``, or the environment
variable ``KERNEL_CONTRACTS_TRUST_CODE=1``. A shipped model name, an ``hf:`` checkpoint
folder and a ``gguf:`` file need no consent: loading them runs no code from them.

Consent is a value, never a global. A command turns its flag and the environment into it once
(``trusted``) and hands it down to the one place that imports a user's module,
``kernels.model.user_model.load_entry``, which refuses without it whoever calls it: every
function between them (``verify.proving.runner.run``, ``verify.decide.evaluate``,
``evidence.emulate.emulate_contract``, the diagnostic commands' ``choose_model``) takes it as
``trust_code`` and defaults to no consent. ``consent_problem`` lets a command refuse before any
work, with the loader's own line at the contract's key: the command exits 2, nothing imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kernel_contracts.kernels.model.user_model import TRUST_ENV

__all__ = ["TRUST_ENV", "consent_problem", "trusted"]


def trusted(flag: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the user consented: ``--trust-code`` or ``KERNEL_CONTRACTS_TRUST_CODE=1``."""
    env = os.environ if environ is None else environ
    return bool(flag) or env.get(TRUST_ENV, "").strip() == "1"


def consent_problem(contract, trust_code: bool) -> str | None:
    """The line to print when ``contract`` names code and ``trust_code`` (the consent value,
    ``trusted``) is false, else ``None``; it points at the contract's ``evidence.emulate.model``
    and says what would be imported and run (``user_model.consent_refusal``)."""
    ev = contract.evidence.emulate if contract.evidence is not None else None
    if ev is None or trust_code:  # a proofs-only run loads no kernels
        return None
    from kernel_contracts.evidence.emulate import model_directory
    from kernel_contracts.kernels.model.user_model import (
        MODEL_KEY,
        consent_refusal,
        is_entry_point,
    )

    if not is_entry_point(ev.model):
        return None
    prefix = contract.source.prefix(MODEL_KEY)
    return f"{prefix}{MODEL_KEY}: {consent_refusal(ev.model, model_directory(contract))}"
