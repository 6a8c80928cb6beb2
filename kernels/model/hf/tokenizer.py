"""A checkpoint's tokenizer, read from its ``tokenizer.json`` by the ``tokenizers`` package.

``tokenizer.json`` is data (a vocabulary, merges, normalisation rules): reading it runs no code
from the folder. Prompts are encoded without special tokens added, as a chat template or BOS
policy is the user's to write into the prompt text.

``byte_level_bpe`` builds the same kind of tokenizer from its parts (a GGUF file states them in
its metadata, ``kernels.model.gguf``): a byte-level BPE vocabulary and merges, GPT-2's split,
optionally every digit split off first, and special tokens matched whole.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from kernel_contracts.kernels.model.hf.errors import CheckpointError, CheckpointProblem
from kernel_contracts.kernels.model.hf.files import read_text

__all__ = ["TOKENIZER", "byte_level_bpe", "encode", "read_tokenizer"]

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


def byte_level_bpe(
    tokens: Sequence[str],
    merges: Sequence[tuple[str, str]],
    special: Sequence[int] = (),
    *,
    split_digits: bool = False,
) -> Tokenizer:
    """A byte-level BPE tokenizer: ``tokens`` (id order, spelled in GPT-2's byte alphabet) with
    their ``merges`` (best first), GPT-2's split of the text (after every digit is split off on
    its own when ``split_digits``), and the tokens ``special`` (ids) matched whole in text.

    Raises ``ValueError`` when the parts do not make a tokenizer."""
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError("the vocabulary lists a token twice")
    try:
        bpe = models.BPE(vocab=vocab, merges=list(merges), fuse_unk=False)
    except Exception as err:  # the package raises a bare Exception for a merge of unknown tokens
        raise ValueError(str(err).splitlines()[0] if str(err) else type(err).__name__) from None
    tokenizer = Tokenizer(bpe)
    split = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if split_digits:
        split = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), split])
    tokenizer.pre_tokenizer = split
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(
        [AddedToken(tokens[i], special=True, normalized=False) for i in special]
    )
    return tokenizer
