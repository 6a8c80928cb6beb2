"""A checkpoint's tokenizer, read from its ``tokenizer.json`` by the ``tokenizers`` package.

``tokenizer.json`` is data (a vocabulary, merges, normalisation rules): reading it runs no code
from the folder. Prompts are encoded without special tokens added, as a chat template or BOS
policy is the user's to write into the prompt text.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from tokenizers import Tokenizer

from kernel_contracts.kernels.model.hf.errors import CheckpointError, CheckpointProblem
from kernel_contracts.kernels.model.hf.files import read_text

__all__ = ["TOKENIZER", "encode", "read_tokenizer"]

TOKENIZER = "tokenizer.json"


def read_tokenizer(folder: str) -> Tokenizer:
    """The tokenizer in ``folder/tokenizer.json``; a ``CheckpointError`` when it cannot be read.

    The file is read only as a regular file inside ``folder`` of at most
    ``LIMITS["tokenizer"]`` bytes (``contracts.bounded``), and parsed from those bytes."""
    path = os.path.join(folder, TOKENIZER)
    text = read_text(folder, TOKENIZER, "tokenizer")
    try:
        return Tokenizer.from_str(text)
    except Exception as err:  # the package raises a bare Exception for a malformed file
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError([CheckpointProblem(path, "", f"cannot read: {message}")]) from None


def encode(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """The token ids of each text, without added special tokens."""
    return [list(e.ids) for e in tokenizer.encode_batch(list(texts), add_special_tokens=False)]
