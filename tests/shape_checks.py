"""The type checker the test suite applies to the shape-annotated modules (see conftest.py).

beartype with the numeric tower of PEP 484 (an ``int`` is accepted where a ``float`` is
annotated, as Python's own typing rules say), wrapped by jaxtyping's import hook so that each
call also checks the named dimensions of its array arguments and result.
"""

from __future__ import annotations

from beartype import BeartypeConf, beartype

typechecker = beartype(conf=BeartypeConf(is_pep484_tower=True))
