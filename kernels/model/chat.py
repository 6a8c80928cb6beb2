"""Chat prompts: user messages rendered through a model's chat template.

A chat model is trained on conversations laid out by its chat template (a Jinja template that
GGUF files carry as ``tokenizer.chat_template``, as Hugging Face's ``tokenizer_config.json``
does): role markers, a default system message, the cue that the assistant speaks next.
``render_conversation(template, messages)`` renders a conversation;
``render_chat(template, messages)`` gives, for each message, the text of a one-turn
conversation ``[{"role": "user", "content": message}]`` with the generation cue
(``add_generation_prompt``), exactly as Hugging Face's ``apply_chat_template`` renders it:
the template runs in Jinja's immutable sandbox with ``trim_blocks`` and ``lstrip_blocks``,
and ``raise_exception(message)`` available to the template. The sandbox lets a template read
the messages and nothing else: no attribute of Python objects, no file, no import, no
mutation. Its only home of ``jinja2``.

References:
    Hugging Face transformers, "Templates for chat models" (the rendering conventions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kernel_contracts.contracts.errors import KernelContractsError

__all__ = ["ChatTemplateError", "render_chat", "render_conversation"]


class ChatTemplateError(KernelContractsError, ValueError):
    """A chat template that cannot be parsed or rendered (the message says why)."""


def _raise(message: str):
    raise ChatTemplateError(f"the chat template raised: {message}")


def _compiled(template: str):
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    try:
        return env.from_string(template)
    except jinja2.TemplateError as err:
        raise ChatTemplateError(f"the chat template does not parse: {err}") from None


def _render(compiled, messages: Sequence[Mapping[str, str]]) -> str:
    import jinja2

    try:
        return compiled.render(messages=list(messages), add_generation_prompt=True)
    except jinja2.TemplateError as err:
        raise ChatTemplateError(f"the chat template failed: {err}") from None


def render_conversation(template: str, messages: Sequence[Mapping[str, str]]) -> str:
    """The conversation ``messages`` (``{"role": ..., "content": ...}`` each) followed by the
    cue for the assistant's reply, rendered by ``template``; ``ChatTemplateError`` when the
    template does not parse or fails while rendering."""
    return _render(_compiled(template), messages)


def render_chat(template: str, messages: Sequence[str]) -> list[str]:
    """Each of ``messages`` as the text of a one-turn chat, a user message followed by the cue
    for the assistant's reply, rendered by ``template`` (``ChatTemplateError`` as
    ``render_conversation``)."""
    compiled = _compiled(template)
    return [_render(compiled, [{"role": "user", "content": m}]) for m in messages]
