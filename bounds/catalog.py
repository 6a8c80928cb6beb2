"""The registry of every lemma, by name."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from bounds.correction_lemmas import CORRECTION_LEMMAS
from bounds.lemma import Lemma
from bounds.rl import RL_LEMMAS
from bounds.sequence import SEQUENCE_LEMMAS
from bounds.token import TOKEN_LEMMAS

__all__ = ["LEMMAS"]

LEMMAS: Mapping[str, Lemma] = MappingProxyType(
    {
        lemma.name: lemma
        for lemma in (*TOKEN_LEMMAS, *SEQUENCE_LEMMAS, *RL_LEMMAS, *CORRECTION_LEMMAS)
    }
)
