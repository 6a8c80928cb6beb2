"""A setting's value as a scalar that YAML readers and Hydra overrides read back unchanged.

Scalars are written so that YAML 1.1 and 1.2 readers (PyYAML, OmegaConf) and Hydra's override
grammar read them back as the same value: numbers as the shortest decimal of the double, with a
``.`` in the mantissa (``1.0e-09``, not ``1e-09``, which YAML 1.1 reads as a string), integers
(a count such as a number of log-probs) without one; strings quoted; ``null``, ``true`` and
``false`` for ``None`` and the booleans.
"""

from __future__ import annotations

import json
from fractions import Fraction

from kernel_contracts.verify.pipeline.export.request import Value, number

__all__ = ["scalar"]


def _float_text(v: Fraction) -> str:
    text = number(v)
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:
        text = f"{mantissa}.0e{exponent}"
    return text


def scalar(v: Value, *, quote: str = '"') -> str:
    """``v`` as a YAML (``quote='"'``) or Hydra override (``quote="'"``) scalar."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Fraction):
        return _float_text(v)
    if isinstance(v, int):
        return str(v)
    if quote == "'":
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return json.dumps(v, ensure_ascii=False)
