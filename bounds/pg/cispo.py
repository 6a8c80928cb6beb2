"""CISPO anchored on the rollout (``cispo``): ω = sg(clip(w, 1 − ε_low, 1 + ε_high)).

CISPO's loss is −A·sg(clip(r, 1 − ε_low, 1 + ε_high))·log π: the gradient multiplies ∇log π by
the clipped ratio and nothing is dropped. With the ratio taken against the rollout's (engine's)
log-probs (SkyRL's ``cispo_anchor: rollout``) r is the kernel pair's w and the weight is
``tis_clip``'s at the band [lo, hi] = [1 − ε_low, 1 + ε_high] (lo = 0 for SkyRL's default
ε_low = 1). So each lemma here is ``bounds.pg.tis_clip``'s under CISPO's name, with the same
form, tightness and witness (drift and ratio forms the suprema, attained by two tokens; the TV
form approached; the tail clause's split). SkyRL (and verl) compute r from the log-ratio clamped
to [−20, 20]; where |log w| ≤ 20 that changes nothing, and the SkyRL export proves it from the
guarantee's premises (``verify.pipeline.export.skyrl``).

Anchored on the trainer's old log-probs (the default of verl, NeMo-RL's ``use_cispo``, TRL's
``loss_type: cispo`` and SkyRL's ``cispo_anchor: old``) r is not the kernel pair's ratio, and
the mismatch enters only through the framework's separate importance correction.

References:
    MiniMax, "MiniMax-M1" (2025) — CISPO, the clipped IS weight with stop-gradient.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable

from kernel_contracts.bounds.lemma import Lemma, Witness
from kernel_contracts.bounds.pg.tis_clip import TIS_CLIP_LEMMAS

__all__ = ["CISPO_LEMMAS", "cispo_name"]

_NOTE = "CISPO anchored on the rollout: ω = sg(clip(w, 1 − ε_low, 1 + ε_high)), tis_clip's weight"


def cispo_name(tis_clip_name: str) -> str:
    """``pg_bias_tis_clip…`` → ``pg_bias_cispo…``: the lemma's name under CISPO."""
    return tis_clip_name.replace("pg_bias_tis_clip", "pg_bias_cispo", 1)


def _renamed(witness: Callable[..., Witness] | None) -> Callable[..., Witness] | None:
    if witness is None:
        return None

    def named(*args, **kwargs) -> Witness:
        w = witness(*args, **kwargs)
        return dataclasses.replace(w, lemma=cispo_name(w.lemma))

    named.__signature__ = inspect.signature(witness)
    named.__doc__ = witness.__doc__
    return named


CISPO_LEMMAS: tuple[Lemma, ...] = tuple(
    dataclasses.replace(
        lemma,
        name=cispo_name(lemma.name),
        assumptions=(*lemma.assumptions, _NOTE),
        witness=_renamed(lemma.witness),
    )
    for lemma in TIS_CLIP_LEMMAS
)
