"""A checkpoint a model spec names: ``hf:FOLDER`` (a Hugging Face checkpoint folder,
``kernels.model.hf``), ``gguf:FILE`` (a GGUF file, ``kernels.model.gguf``) or
``gguf:package:DIST/FILE`` (a GGUF file an installed Python package ships,
``kernels.model.gguf.package``).

Both load as the same :class:`kernels.model.hf.Decoder`, with a ``tokenizers`` tokenizer; these
functions take the spec and read the right files. Every one raises ``CheckpointError`` (each
problem at its file and key) for a checkpoint that cannot be used, and ``ValueError`` for a spec
that names no checkpoint.
"""

from __future__ import annotations

from kernel_contracts.contracts.sections import (
    CHECKPOINT_PREFIXES,
    GGUF_PREFIX,
    HF_PREFIX,
    PACKAGE_PREFIX,
)

__all__ = [
    "checkpoint_chat",
    "checkpoint_config",
    "checkpoint_logits_function",
    "checkpoint_path",
    "checkpoint_sha256",
    "checkpoint_tokenizer",
    "is_checkpoint",
    "load_checkpoint",
]


def is_checkpoint(model: str) -> bool:
    """Whether the model spec ``model`` names a checkpoint (``hf:`` or ``gguf:``)."""
    return model.startswith(CHECKPOINT_PREFIXES)


def _split(spec: str) -> tuple[bool, str]:
    """(whether it is a GGUF file, the path) of the checkpoint ``spec``."""
    if spec.startswith(GGUF_PREFIX + PACKAGE_PREFIX):  # a file an installed package ships
        from kernel_contracts.kernels.model.gguf.package import packaged_gguf

        return True, packaged_gguf(spec[len(GGUF_PREFIX) + len(PACKAGE_PREFIX) :])
    if spec.startswith(GGUF_PREFIX):
        return True, spec[len(GGUF_PREFIX) :]
    if spec.startswith(HF_PREFIX):
        return False, spec[len(HF_PREFIX) :]
    raise ValueError(f"{spec!r} names no checkpoint (hf:FOLDER or gguf:FILE)")


def checkpoint_path(spec: str) -> str:
    """The folder or file the checkpoint ``spec`` names."""
    return _split(spec)[1]


def checkpoint_config(spec: str):
    """The ``DecoderConfig`` of the checkpoint ``spec``."""
    gguf, path = _split(spec)
    if gguf:
        from kernel_contracts.kernels.model.gguf.load import read_gguf_config

        return read_gguf_config(path)
    from kernel_contracts.kernels.model.hf.config import read_config

    return read_config(path)


def checkpoint_tokenizer(spec: str):
    """The tokenizer (``tokenizers.Tokenizer``) of the checkpoint ``spec``."""
    gguf, path = _split(spec)
    if gguf:
        from kernel_contracts.kernels.model.gguf.load import read_gguf_tokenizer

        return read_gguf_tokenizer(path)
    from kernel_contracts.kernels.model.hf.tokenizer import read_tokenizer

    return read_tokenizer(path)


def load_checkpoint(spec: str, ops=None):
    """The decoder of the checkpoint ``spec`` (on plain float32 ops unless ``ops`` is given)."""
    gguf, path = _split(spec)
    if gguf:
        from kernel_contracts.kernels.model.gguf.load import load_gguf

        return load_gguf(path, ops)
    from kernel_contracts.kernels.model.hf.checkpoint import load_decoder

    return load_decoder(path, ops)


def checkpoint_logits_function(spec: str):
    """``(fn, params, config)`` of the checkpoint ``spec``: ``fn(params, tokens)`` its
    teacher-forced logits on plain float32 ops, each matmul one ``dot_general`` (``plain_ops()``,
    not the decoder's blocked default: ``on_kernel`` emulates each dot as one kernel matmul)."""
    from flax import nnx

    from kernel_contracts.kernels.ops import plain_ops

    model = load_checkpoint(spec, plain_ops())
    graphdef, params = nnx.split(model)

    def fn(params, tokens):
        return nnx.merge(graphdef, params)(tokens)

    return fn, params, model.config


def checkpoint_sha256(spec: str) -> str | None:
    """sha256 of the checkpoint ``spec``'s files (a folder's config and weights, a GGUF file's
    bytes); ``None`` when one cannot be read or is refused."""
    from kernel_contracts.kernels.model.hf.errors import CheckpointError

    try:
        gguf, path = _split(spec)
    except CheckpointError:  # a package that is not installed
        return None
    if gguf:
        from kernel_contracts.kernels.model.gguf.load import gguf_sha256

        return gguf_sha256(path)
    from kernel_contracts.kernels.model.hf.checkpoint import folder_sha256

    return folder_sha256(path)


def checkpoint_chat(spec: str, messages: list[str]) -> list[str]:
    """Each of ``messages`` as a one-turn chat rendered by the chat template of the GGUF
    checkpoint ``spec`` (``kernels.model.chat.render_chat``); ``CheckpointError`` when the file
    has no template or its template fails."""
    from kernel_contracts.kernels.model.chat import ChatTemplateError, render_chat
    from kernel_contracts.kernels.model.hf.errors import CheckpointError, CheckpointProblem

    gguf, path = _split(spec)
    key = "tokenizer.chat_template"
    if not gguf:
        raise CheckpointError([CheckpointProblem(path, "", "a chat template needs a GGUF file")])
    from kernel_contracts.kernels.model.gguf.load import chat_template

    template = chat_template(path)
    if template is None:
        raise CheckpointError([CheckpointProblem(path, key, "the file has no chat template")])
    try:
        return render_chat(template, messages)
    except ChatTemplateError as err:
        raise CheckpointError([CheckpointProblem(path, key, str(err))]) from None
