"""The toolkit's exception base, and the error a contract that cannot be used raises: every
problem in the file, at once.

Every exception class of ``contracts``, ``kernels``, ``bounds`` and ``verify`` derives from
``KernelContractsError`` (a test checks it), so one handler catches every error class of the
toolkit. (Plain ``ValueError`` and ``TypeError`` for wrong arguments to a function stay as they
are.) A class that is also a ``ValueError`` or an ``OSError`` keeps that base, so handlers
written for it still catch it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ContractError", "KernelContractsError", "Problem"]


class KernelContractsError(Exception):
    """The base of every exception the toolkit defines."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a contract file, at a position and key path.

    ``line`` and ``col`` are 1-based, or ``None`` when the problem concerns the whole file
    (a missing file, a directory). ``key`` is the DSL key path (``numerical[0].max``) or ``""``
    when the problem concerns the document as a whole.
    """

    path: str
    line: int | None
    col: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}:{self.col if self.col is not None else 1}"
        if self.key:
            return f"{where}: {self.key}: {self.message}"
        return f"{where}: {self.message}"

    @property
    def sort_key(self) -> tuple[int, int]:
        return (self.line or 0, self.col or 0)


class ContractError(KernelContractsError):
    """A contract that cannot be used; ``problems`` lists every problem found, by position.

    ``str(err)`` is one ``file:line:col: key.path: message`` line per problem, ready to print.
    """

    problems: tuple[Problem, ...]

    def __init__(self, problems: Iterable[Problem]):
        unique = list(dict.fromkeys(problems))
        if not unique:
            raise ValueError("a ContractError needs at least one problem")
        self.problems = tuple(sorted(unique, key=lambda p: p.sort_key))
        super().__init__("\n".join(str(p) for p in self.problems))

    def __reduce__(self):
        return (type(self), (self.problems,))
