"""The registry of every lemma, by name.

The correction lemmas' bounds take about a second to build in sympy and no derivation needs
them (routes build their own expressions), so they are built on the registry's first use.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

from kernel_contracts.bounds.lemma import Lemma
from kernel_contracts.bounds.pg.links import RL_LEMMAS
from kernel_contracts.bounds.sequence.lemmas import SEQUENCE_LEMMAS
from kernel_contracts.bounds.token.lemmas import TOKEN_LEMMAS

__all__ = ["LEMMAS"]


class _Registry(Mapping[str, Lemma]):
    """A read-only mapping of lemma name → ``Lemma``, complete on first use."""

    def __init__(self) -> None:
        self._lemmas: Mapping[str, Lemma] | None = None

    def _all(self) -> Mapping[str, Lemma]:
        if self._lemmas is None:
            from kernel_contracts.bounds.pg.lemmas import CORRECTION_LEMMAS

            every = (*TOKEN_LEMMAS, *SEQUENCE_LEMMAS, *RL_LEMMAS, *CORRECTION_LEMMAS)
            self._lemmas = MappingProxyType({lemma.name: lemma for lemma in every})
        return self._lemmas

    def __getitem__(self, name: str) -> Lemma:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"LEMMAS({list(self)})"


LEMMAS: Mapping[str, Lemma] = _Registry()
