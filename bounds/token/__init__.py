"""Token-level links: logit drift → oscillation → log ratio, total variation and KL
(``bounds.token.lemmas``: the lemmas, their closed forms and two-token witnesses)."""

from kernel_contracts.bounds.token.lemmas import (
    KL_SWITCH,
    TOKEN_LEMMAS,
    kl_tilt_sup,
    signed_ratio_pair,
    symmetric_kl_pair,
    tilt_pair,
)

__all__ = [
    "KL_SWITCH",
    "TOKEN_LEMMAS",
    "kl_tilt_sup",
    "signed_ratio_pair",
    "symmetric_kl_pair",
    "tilt_pair",
]
