"""A user's own model as emulation evidence: an entry point, a params file, cache-free decoding.

``evidence: emulate`` names a model either by a shipped checkpoint name (``tiny-lm``) or by a
Python entry point ``"package.module:function"`` together with ``params: PATH``.

The entry point
---------------
``function(params, tokens) -> logits`` with

* ``params``: the pytree read from the params file (below), JAX arrays in nested dicts;
* ``tokens``: ``Int[Array, "batch seq"]`` (int32 token ids);
* ``logits``: ``Float[Array, "batch seq vocab"]``, the next-token logits at every position;
  ``vocab`` is read from this shape.

It must be causal (the logits at position ``t`` depend on ``tokens[:, : t + 1]`` only), be
traceable by JAX (no Python branching on token values) and accept any ``batch`` and every
``seq`` the contract's sequences need. Its matmuls need not know this package: both kernels
run it through :func:`kernels.diagnose.transform.on_kernel` (K_train with the training spec and
fixed batching; K_inf with the inference spec at the serving batch, attention recognised and kept in
float32 as in the shipped path). The module is imported with the contract file's directory
first on ``sys.path``, so a model can live next to its contract.

Consent
-------
Importing the module runs its code, and a contract may come from anyone. ``load_entry``, the
one place that imports it (``load_user_model`` goes through it), takes the user's consent as
a value, ``trust_code``, and without it raises ``UserModelError`` at ``evidence.emulate.model``
(``consent_refusal``) before anything is imported. The command line turns
``--trust-code`` (or ``KERNEL_CONTRACTS_TRUST_CODE=1``, ``TRUST_ENV``) into that value
(``verify.common.consent``); this module reads no environment.

The params file
---------------
A NumPy ``.npz`` archive (read with ``allow_pickle=False``: no code runs when it is read; no
dependency beyond NumPy; the format of the shipped checkpoints). Each entry's name is a
``/``-separated path into nested dicts: ``params/Dense_0/kernel`` becomes
``{"params": {"Dense_0": {"kernel": ...}}}``, so a Flax Linen variable dict round-trips as
``{"/".join(path): leaf}``. Entries under ``extra/`` are not parameters; ``extra/prompts``, an
integer array ``[rows, width]``, holds token windows that prompts are cut from at seeded
offsets (as from the shipped model's held-out windows). Without it, prompt tokens are drawn
uniformly from the vocabulary, and prompts are at most ``PROMPT_TOKENS`` long.

Decoding reruns the transformed function on a fixed-shape buffer ``[batch, prompt + new - 1]``
(so it compiles once); positions not yet generated hold token 0. A causal model's logits do
not depend on them, except through the matmul scales: with ``per_tensor`` scaling the scale
of an activation covers the whole buffer, padding included, as in a kernel that quantizes a
padded batch.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import math
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from kernel_contracts.contracts import KernelContractsError
from kernel_contracts.contracts.bounded import LIMITS, UnsafeFile, open_regular, size_text
from kernel_contracts.contracts.sections import ENTRY_POINT

__all__ = [
    "PROMPT_TOKENS",
    "TRUST_ENV",
    "UserModel",
    "UserModelError",
    "consent_refusal",
    "decoder",
    "is_entry_point",
    "load_entry",
    "load_params",
    "load_user_model",
    "output_shape",
    "teacher_forcer",
]

PROMPT_TOKENS = 32  # longest random prompt when the params file holds no prompt windows
MODEL_KEY = "evidence.emulate.model"
PARAMS_KEY = "evidence.emulate.params"
TRUST_ENV = "KERNEL_CONTRACTS_TRUST_CODE"  # the environment's consent (read by the command line)


class UserModelError(KernelContractsError, ValueError):
    """An unusable user model; ``key`` is the contract key to point at, ``str(err)`` is
    user-ready and starts with that key."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


def is_entry_point(model: str) -> bool:
    """Whether ``model`` names an entry point (``module:function``) rather than a shipped model
    or a checkpoint (``hf:`` folder, ``gguf:`` file)."""
    from kernel_contracts.contracts.sections import CHECKPOINT_PREFIXES

    return ":" in model and not model.startswith(CHECKPOINT_PREFIXES)


@dataclass(frozen=True)
class UserModel:
    """A loaded user model: the entry point, its params, prompt windows (or None), vocab."""

    name: str
    fn: Callable
    params: Any
    windows: np.ndarray | None
    vocab: int


def _archive_problem(handle) -> str | None:
    """Why the ``.npz`` archive ``handle`` is not read, checked before an array is allocated:
    its members unpack to more than ``LIMITS["params"]``, or an array's header declares more
    bytes than its member holds."""
    limit = LIMITS["params"]
    with zipfile.ZipFile(handle) as archive:
        members = archive.infolist()
        unpacked = sum(info.file_size for info in members)
        if unpacked > limit:
            return (
                f"as an .npz archive: its arrays unpack to {unpacked} bytes, above the limit "
                f"of {size_text(limit)}"
            )
        for info in members:
            if not info.filename.endswith(".npy"):
                continue
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                if version not in ((1, 0), (2, 0), (3, 0)):
                    continue  # np.load names it
                reader = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = reader(member)
                need = math.prod(shape) * dtype.itemsize
                if need > info.file_size:
                    name = info.filename.removesuffix(".npy")
                    return (
                        f"as an .npz archive: entry {name!r} declares {need} bytes of "
                        f"{dtype} {list(shape)}, but its member holds {info.file_size}"
                    )
    return None


def load_params(path: str) -> tuple[dict, np.ndarray | None]:
    """The params pytree and the ``extra/prompts`` windows (or None) of an ``.npz`` file."""
    try:
        handle = open_regular(path, LIMITS["params"])
    except FileNotFoundError:
        raise UserModelError(PARAMS_KEY, f"no such file: {path}") from None
    except UnsafeFile as err:
        raise UserModelError(PARAMS_KEY, f"cannot read {err}") from None
    except OSError as err:
        raise UserModelError(PARAMS_KEY, f"cannot read {path}: {err.strerror}") from None
    try:
        with handle:
            why = _archive_problem(handle)
            if why is None:
                handle.seek(0)
                with np.load(handle, allow_pickle=False) as data:
                    arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        why = f"as an .npz archive: {err}"
    if why is not None:
        raise UserModelError(PARAMS_KEY, f"cannot read {path} {why}")
    windows = arrays.pop("extra/prompts", None)
    params: dict = {}
    for name, value in sorted(arrays.items()):
        if name.startswith("extra/"):
            continue
        if value.dtype.kind not in "fiub":
            raise UserModelError(PARAMS_KEY, f"entry {name!r} has dtype {value.dtype}")
        *parents, leaf = name.split("/")
        node = params
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UserModelError(PARAMS_KEY, f"entry {name!r} lies under an array entry")
        if leaf in node:
            raise UserModelError(PARAMS_KEY, f"entry {name!r} is also a prefix of others")
        node[leaf] = value
    if not params:
        raise UserModelError(PARAMS_KEY, f"{path} holds no parameters")
    if windows is not None and (
        windows.ndim != 2 or windows.dtype.kind not in "iu" or windows.size == 0
    ):
        raise UserModelError(
            PARAMS_KEY, f"extra/prompts must be a non-empty 2-D integer array, got "
            f"{windows.dtype} {windows.shape}",
        )  # fmt: skip
    return params, windows


@contextlib.contextmanager
def _on_path(directory: str):
    sys.path.insert(0, directory)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(directory)


def _forget_other_copy(top: str, directory: str) -> None:
    """Drop a cached module ``top`` (and its submodules) imported from another place when
    ``directory`` holds its own: two contracts in two folders may each ship a ``model.py``, and
    each must get its own. Functions already taken from the other copy keep working."""
    found = importlib.machinery.PathFinder.find_spec(top, [directory])
    cached = sys.modules.get(top)
    if found is None or cached is None:
        return
    spec = getattr(cached, "__spec__", None)
    here = (found.origin, list(found.submodule_search_locations or ()))
    there = (
        getattr(spec, "origin", None),
        list(getattr(spec, "submodule_search_locations", None) or ()),
    )
    if here != there:
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]


def consent_refusal(model: str, directory: str) -> str:
    """Why the entry point ``model`` is not imported from ``directory`` without consent: what
    it would import and call, and how to consent (the text after the key)."""
    module_name, attr = model.split(":", 1)
    return (
        f"names code to run: it would import module {module_name!r} (searched first in "
        f"{directory}) and call {attr}; pass --trust-code (or set {TRUST_ENV}=1) to allow it"
    )


def load_entry(model: str, directory: str, *, trust_code: bool) -> Callable:
    """The callable ``module:function`` names, imported with ``directory`` first on the path;
    refused (``consent_refusal``) unless ``trust_code`` is ``True``."""
    if ENTRY_POINT.match(model) is None:
        raise UserModelError(
            MODEL_KEY, f"{model!r} is not an entry point of the form package.module:function"
        )
    if trust_code is not True:
        raise UserModelError(MODEL_KEY, consent_refusal(model, directory))
    module_name, attr = model.split(":")
    try:
        _forget_other_copy(module_name.split(".")[0], directory)
        with _on_path(directory):
            module = importlib.import_module(module_name)
    except Exception as err:  # the user's module may fail in any way while it is imported
        raise UserModelError(
            MODEL_KEY, f"cannot import module {module_name!r}: {type(err).__name__}: {err}"
        ) from None
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise UserModelError(MODEL_KEY, f"module {module_name!r} has no attribute {attr!r}")
        value = getattr(value, part)
    if not callable(value):
        raise UserModelError(
            MODEL_KEY, f"{model} is not callable (it is of type {type(value).__name__})"
        )
    return value


def load_user_model(
    model: str, params_path: str | None, directory: str, *, trust_code: bool
) -> UserModel:
    """Read the params, import the entry point (``load_entry``: only with ``trust_code``) and
    find the vocabulary from one abstract call."""
    if params_path is None:
        raise UserModelError(MODEL_KEY, f"the entry point {model!r} needs params: PATH")
    params, windows = load_params(params_path)
    fn = load_entry(model, directory, trust_code=trust_code)
    params = _to_jax(params)
    shape = output_shape(fn, params, model, 1, 1)
    vocab = shape[-1]
    if windows is not None and (windows.min() < 0 or windows.max() >= vocab):
        raise UserModelError(
            PARAMS_KEY, f"extra/prompts holds token ids outside the vocabulary [0, {vocab})"
        )
    windows = None if windows is None else np.asarray(windows, np.int32)
    return UserModel(model, fn, params, windows, vocab)


def _to_jax(tree):
    import jax
    import jax.numpy as jnp

    return jax.tree.map(jnp.asarray, tree)


def output_shape(fn: Callable, params, model: str, batch: int, seq: int) -> tuple[int, ...]:
    """The logits shape of ``fn`` on ``[batch, seq]`` tokens, checked against the signature."""
    import jax
    import jax.numpy as jnp

    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32)
    try:
        out = jax.eval_shape(fn, params, tokens)
    except Exception as err:  # the user's function may fail in any way
        raise UserModelError(
            MODEL_KEY, f"{model} fails on tokens of shape ({batch}, {seq}): "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
        ) from None  # fmt: skip
    shape = getattr(out, "shape", None)
    dtype = getattr(out, "dtype", None)
    if (
        shape is None
        or len(shape) != 3
        or tuple(shape[:2]) != (batch, seq)
        or shape[2] < 2
        or not jnp.issubdtype(dtype, jnp.floating)
    ):
        got = f"{dtype} {tuple(shape)}" if shape is not None else type(out).__name__
        raise UserModelError(
            MODEL_KEY, f"{model} must return float logits of shape (batch, seq, vocab) = "
            f"({batch}, {seq}, vocab >= 2) for tokens of shape ({batch}, {seq}); got {got}",
        )  # fmt: skip
    return tuple(int(s) for s in shape)


# ---------------------------------------------------------------------------- decoding


def decoder(fn: Callable) -> Callable:
    """``generate(params, prompts, key, temperature, *, new_tokens, top_k, top_p)``, jitted:
    sample ``new_tokens`` tokens after each prompt with ``fn`` (a function already on K_inf),
    rerunning it on the whole fixed-shape buffer at each step. Returns the full sequences and
    the float32 logits ``[seqs, new, vocab]`` that predicted the new tokens."""
    import jax

    return jax.jit(partial(_generate, fn), static_argnames=("new_tokens", "top_k", "top_p"))


def teacher_forcer(fn: Callable) -> Callable:
    """``teacher_force(params, tokens, *, prompt_len)``, jitted: the float32 logits of ``fn``
    (a function already on K_train) that predict ``tokens[:, prompt_len:]``."""
    import jax

    return jax.jit(partial(_teacher_force, fn), static_argnames=("prompt_len",))


def _generate(fn, params, prompts, key, temperature, *, new_tokens, top_k, top_p):
    import jax
    import jax.numpy as jnp

    from kernel_contracts.kernels.model.decode import sample

    seqs, prompt_len = prompts.shape
    tokens = jnp.concatenate([prompts, jnp.zeros((seqs, new_tokens), prompts.dtype)], axis=1)

    def body(carry, t):
        tokens, key = carry
        logits = fn(params, tokens[:, :-1])
        z = jax.lax.dynamic_index_in_dim(logits, t, axis=1, keepdims=False).astype(jnp.float32)
        key, sub = jax.random.split(key)
        drawn = sample(sub, z, temperature, top_k, top_p).astype(tokens.dtype)
        tokens = jax.lax.dynamic_update_slice_in_dim(tokens, drawn[:, None], t + 1, axis=1)
        return (tokens, key), z

    steps = jnp.arange(prompt_len - 1, prompt_len - 1 + new_tokens)
    (tokens, _), z = jax.lax.scan(body, (tokens, key), steps)
    return tokens, jnp.swapaxes(z, 0, 1)


def _teacher_force(fn, params, tokens, *, prompt_len):
    import jax.numpy as jnp

    return fn(params, tokens[:, :-1])[:, prompt_len - 1 :].astype(jnp.float32)
