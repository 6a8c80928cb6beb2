"""The error a checkpoint that cannot be used raises: every problem in it, each at its file and
key (a ``config.json`` key or a tensor name), at once."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kernel_contracts.contracts.errors import KernelContractsError

__all__ = ["CheckpointError", "CheckpointProblem"]


@dataclass(frozen=True)
class CheckpointProblem:
    """One thing wrong with a checkpoint: the file, the key or tensor name (or ``""``), why."""

    file: str
    key: str
    message: str

    def __str__(self) -> str:
        return (
            f"{self.file}: {self.key}: {self.message}"
            if self.key
            else f"{self.file}: {self.message}"
        )


class CheckpointError(KernelContractsError, ValueError):
    """A checkpoint folder that cannot be loaded; ``problems`` lists every problem found.

    ``str(err)`` is one ``file: key: message`` line per problem, ready to print.
    """

    problems: tuple[CheckpointProblem, ...]

    def __init__(self, problems: Iterable[CheckpointProblem]):
        unique = tuple(dict.fromkeys(problems))
        if not unique:
            raise ValueError("a CheckpointError needs at least one problem")
        self.problems = unique
        super().__init__("\n".join(str(p) for p in unique))

    def __reduce__(self):
        return (type(self), (self.problems,))
