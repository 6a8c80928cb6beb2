"""Token → sequence links: total variation of L-token sequence laws by four routes
(``bounds.sequence.lemmas``: the lemmas, their closed forms, routes and i.i.d. witnesses)."""

from kernel_contracts.bounds.sequence.lemmas import (
    SEQUENCE_LEMMAS,
    best_iid_witness,
    sequence_routes,
    sequence_tv_bound,
)

__all__ = ["SEQUENCE_LEMMAS", "best_iid_witness", "sequence_routes", "sequence_tv_bound"]
