"""The two kernels run on one policy: sample with K_inf, teacher-force the same tokens with K_train.

K_inf decodes incrementally: every prompt token and every generated token goes through
``TinyLM.step`` on the inference ``Ops`` (emulated low-precision matmuls with batch-dependent
reduction splits, attention through the paged low-precision KV cache), and new tokens are
sampled from its logits at the contract's temperature (with its top-k / top-p, if any).
K_train then runs the finished sequences once, teacher-forced, in float32 with reference
attention. Both give logits for the same positions of the same token sequences.

``model`` is any decoder with ``init_cache``, ``step`` and a teacher-forced call on ``ops``: the
shipped TinyLM or a Hugging Face decoder (:class:`kernels.model.hf.decoder.Decoder`). A model
that also splits ``step`` into ``hidden_step`` (up to the last layer), ``head_weight`` (the LM
head as the matmul reads it) and ``head_logits`` (the final norm and the head), as both of
those do, has the head and the draw skipped at the steps where every row is still fed its
prompt: their logits are never read, and the steps that do sample compute the same bits.

The generation loop is one ``lax.scan`` inside one ``nnx.jit`` (a padded program's, one
``lax.while_loop`` that stops after the decoded length): a kernel pair compiles once per shape,
never per step. The loop's body has no conditional around the model's step: a model prepares
its weights (quantized, stacked) inside ``step``, and XLA moves that loop-invariant work out of
a loop's body but not out of a conditional's branch, where it ran again at every step
(docs/benchmarks.md, "Decoding: the padded program and the prompt steps").
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from jax.extend import core as jcore
from jaxtyping import Array, ArrayLike, Float, Int

from kernel_contracts.kernels.numerics import portable

__all__ = ["TRACES", "PairLogits", "generate", "sample", "teacher_force", "teacher_force_padded"]

# how many times each jitted function has been traced (a retrace detector)
TRACES: dict[str, int] = {"generate": 0, "teacher_force": 0, "teacher_force_padded": 0}


class PairLogits(NamedTuple):
    """Logits of both kernels at the generated positions of the same sequences."""

    tokens: Int[Array, "seqs length"]  # prompt + generated tokens
    z_train: Float[Array, "seqs new vocab"]  # K_train logits predicting tokens[:, prompt:]
    z_inf: Float[Array, "seqs new vocab"]  # K_inf logits predicting tokens[:, prompt:]


def sample(
    key: Array,
    logits: Float[ArrayLike, "seqs vocab"],
    temperature: Float[ArrayLike, ""] | float,
    top_k: int = 0,
    top_p: float = 1.0,
    rows_per_key: int | None = None,
    row_in_key: Int[ArrayLike, " seqs"] | None = None,
) -> Int[Array, " seqs"]:
    """Sample one token per row from softmax(logits / T), truncated by top-k and top-p.

    The Gumbel-max draw argmax(x + g), g = −log(−log u), with the arithmetic of
    :mod:`kernels.numerics.portable` (the division by T, the logarithms, the top-p softmax) and a
    fixed-order prefix sum, so a key draws the same token on every backend.

    ``key`` is one key, or a 1-D array of keys each of which draws for ``rows_per_key``
    consecutive rows what it draws alone for a batch of that many rows (the rows past the
    last one cut). With ``row_in_key`` the array holds one key for each row, and row ``i``
    draws what its key draws for row ``row_in_key[i]`` of a batch of ``rows_per_key`` rows
    (the same as for that row of any smaller batch: JAX's partitionable random bits)."""
    x = portable.divide(logits, jnp.asarray(temperature, jnp.float32))
    if top_k > 0:
        kth = jax.lax.top_k(x, top_k)[0][..., -1:]
        x = jnp.where(x < kth, -jnp.inf, x)
    if top_p < 1.0:
        ordered = -jnp.sort(-x, axis=-1)
        probs = portable.softmax(ordered, axis=-1)
        prefix = jax.lax.associative_scan(jnp.add, probs, axis=-1)  # one fixed tree of adds
        before = prefix - probs  # mass strictly above each entry
        keep = before < top_p  # the smallest prefix whose mass reaches top_p
        cutoff = jnp.min(jnp.where(keep, ordered, jnp.inf), axis=-1, keepdims=True)
        x = jnp.where(x < cutoff, -jnp.inf, x)
    return jnp.argmax(x + _gumbel(key, x.shape, rows_per_key, row_in_key), axis=-1)


def _bits(
    key: Array, shape: tuple[int, ...], rows_per_key: int | None, row_in_key: Array | None
) -> Array:
    """Random 32-bit words of ``shape``: from one key, or ``rows_per_key`` rows from each of
    a 1-D array of keys, or one row from each row's key (``sample``)."""
    if key.ndim == 0:
        return jax.random.bits(key, shape, jnp.uint32)
    if row_in_key is not None:
        if rows_per_key is None or key.shape[0] != shape[0]:
            raise ValueError(f"{key.shape[0]} keys for {shape[0]} rows: one key a row")
        rows = (rows_per_key, *shape[1:])

        def row(k, i):
            return jax.random.bits(k, rows, jnp.uint32)[i]

        return jax.vmap(row)(key, jnp.asarray(row_in_key))
    if rows_per_key is None or key.shape[0] * rows_per_key < shape[0]:
        raise ValueError(f"{key.shape[0]} keys of {rows_per_key} rows cannot draw {shape[0]} rows")
    rows = (rows_per_key, *shape[1:])
    bits = jax.vmap(lambda k: jax.random.bits(k, rows, jnp.uint32))(key)
    return bits.reshape(-1, *shape[1:])[: shape[0]]


def _split(key: Array) -> tuple[Array, Array]:
    """The next key and this step's subkey, of one key or of each of a 1-D array of keys."""
    if key.ndim == 0:
        key, sub = jax.random.split(key)
        return key, sub
    both = jax.vmap(jax.random.split)(key)
    return both[:, 0], both[:, 1]


def _gumbel(
    key: Array,
    shape: tuple[int, ...],
    rows_per_key: int | None = None,
    row_in_key: Array | None = None,
) -> Float[Array, "*shape"]:
    """Standard Gumbel noise −log(−log u), u uniform in (0, 1) built from 23 random bits
    (``u = (b + ½)·2**-23``: exact, never 0 or 1)."""
    bits = _bits(key, shape, rows_per_key, row_in_key) >> 9
    u = (bits.astype(jnp.float32) + 0.5) * jnp.float32(2.0**-23)
    return -portable.log(-portable.log(u))


@nnx.jit(static_argnames=("new_tokens", "top_k", "top_p", "rows_per_key"))
def generate(
    model: nnx.Module,
    prompts: Int[ArrayLike, "seqs width"],
    key: Array,
    temperature: Float[ArrayLike, ""],
    prompt_len: Int[ArrayLike, ""] | Int[ArrayLike, " seqs"] | None = None,
    row_in_key: Int[ArrayLike, " seqs"] | None = None,
    *,
    new_tokens: int,
    top_k: int = 0,
    top_p: float = 1.0,
    rows_per_key: int | None = None,
) -> tuple[Int[Array, "seqs length"], Float[Array, "seqs new vocab"]]:
    """Decode ``new_tokens`` tokens after each prompt, one position at a time, on
    ``model.ops``; returns the full sequences and the logits that predicted the new tokens.

    ``prompt_len`` (a traced count; ``None``: the prompts' width) is how many of each row's
    leading tokens are its prompt: the rows then hold ``width - prompt_len`` padding columns,
    and the sequences ``width + new_tokens`` positions, of which the first
    ``prompt_len + new_tokens`` are decoded (the later steps are skipped and their tokens are
    left as they are). One compiled program serves every prompt length up to the width, with
    the same bits at the decoded positions as a program compiled for that length: each step's
    arithmetic sees only the positions before it.

    ``prompt_len`` may also give each row its own prompt length (``[seqs]``, each at most the
    width): the prompts of one batch right-padded to its longest. A row is then fed its prompt
    until its own length and sampled after it, and its logits are those at its own positions;
    its padding columns are overwritten by its samples, and causal attention keeps every
    position from seeing a later one, so no attention mask is needed.

    ``key`` is one key, or a 1-D array of keys, one for each ``rows_per_key`` consecutive rows
    (the last one's rows may run past the batch): each key then draws for its rows the tokens
    it draws alone for a batch of ``rows_per_key`` rows, so batches sampled with keys of their
    own run as one call, with the same bits where the model computes each row on its own.
    With ``row_in_key`` (traced) ``key`` holds one key for each row, drawing as ``sample``
    says: batches of any size share one program."""
    TRACES["generate"] += 1
    seqs, width = prompts.shape
    length = width + new_tokens
    real = width if prompt_len is None else jnp.asarray(prompt_len)
    last = jnp.max(real)  # the longest row's prompt length
    graphdef, state = nnx.split(model)
    tokens = jnp.concatenate([prompts, jnp.zeros((seqs, new_tokens), prompts.dtype)], axis=1)
    caches = model.init_cache(seqs, length)

    first = jnp.min(real)  # the first step that samples a token is first - 1

    def body(carry, t):
        tokens, caches, key = carry
        m = nnx.merge(graphdef, state)
        key, sub = _split(key)

        def draw(logits):
            drawn = sample(sub, logits, temperature, top_k, top_p, rows_per_key, row_in_key)
            return logits, drawn.astype(tokens.dtype)

        if hasattr(m, "hidden_step"):  # the head and the draw only where a row samples
            x, caches = m.hidden_step(tokens[:, t], t, caches)
            head = m.head_weight()  # outside the conditional: loop-invariant, hoisted

            def drawing(x):
                return draw(m.head_logits(x, head))

            def feeding(x):
                shapes = jax.eval_shape(drawing, x)
                return tuple(jnp.zeros(a.shape, a.dtype) for a in shapes)

            logits, drawn = jax.lax.cond(t + 1 >= first, drawing, feeding, x)
        else:
            logits, caches = m.step(tokens[:, t], t, caches)
            logits, drawn = draw(logits)
        nxt = jnp.where(t + 1 < real, tokens[:, t + 1], drawn)
        tokens = jax.lax.dynamic_update_slice_in_dim(tokens, nxt[:, None], t + 1, axis=1)
        return (tokens, caches, key), logits

    carry = (tokens, caches, key)
    steps = jnp.arange(length - 1)
    if prompt_len is None:
        (tokens, _, _), logits = jax.lax.scan(body, carry, steps)
    else:  # a padded program stops after the decoded length
        # the body traced once: its jaxpr gives the shape of the logits' buffer and is the
        # loop's step (evaluated, not traced again: the model's Python runs once)
        traced, shapes = jax.make_jaxpr(body, return_shape=True)(carry, steps[0])
        run_body, tree = jcore.jaxpr_as_fun(traced), jax.tree.structure(shapes)
        out = jnp.zeros((length - 1, *shapes[1].shape), shapes[1].dtype)

        def more(state):
            return state[0] < last + new_tokens - 1

        def step(state):
            t, carry, out = state
            carry, row = jax.tree.unflatten(tree, run_body(*jax.tree.leaves((carry, t))))
            return t + 1, carry, jax.lax.dynamic_update_index_in_dim(out, row, t, axis=0)

        _, (tokens, _, _), logits = jax.lax.while_loop(more, step, (jnp.int32(0), carry, out))
    logits = jnp.swapaxes(logits, 0, 1)  # [seqs, steps, vocab]
    return tokens, _at_prompt_ends(logits, real, new_tokens)


def _at_prompt_ends(
    logits: Float[Array, "seqs steps vocab"],
    prompt_len: Int[ArrayLike, ""] | Int[ArrayLike, " seqs"] | int,
    new_tokens: int,
) -> Float[Array, "seqs new vocab"]:
    """The ``new_tokens`` logits of each row from its last prompt position on: one offset for
    every row (a count), or each row's own (a ``[seqs]`` vector)."""
    prompt_len = jnp.asarray(prompt_len)
    if prompt_len.ndim == 0:
        return jax.lax.dynamic_slice_in_dim(logits, prompt_len - 1, new_tokens, axis=1)
    at = prompt_len[:, None] - 1 + jnp.arange(new_tokens)[None, :]
    return jnp.take_along_axis(logits, at[:, :, None], axis=1)


@nnx.jit(static_argnames=("prompt_len",))
def teacher_force(
    model: nnx.Module, tokens: Int[ArrayLike, "seqs length"], *, prompt_len: int
) -> Float[Array, "seqs new vocab"]:
    """Whole-sequence logits of ``model.ops`` that predict ``tokens[:, prompt_len:]``."""
    TRACES["teacher_force"] += 1
    return model(tokens[:, :-1])[:, prompt_len - 1 :]


@nnx.jit(static_argnames=("new_tokens",))
def teacher_force_padded(
    model: nnx.Module,
    tokens: Int[ArrayLike, "seqs length"],
    prompt_len: Int[ArrayLike, ""] | Int[ArrayLike, " seqs"],
    *,
    new_tokens: int,
) -> Float[Array, "seqs new vocab"]:
    """``teacher_force`` with a traced ``prompt_len``: the logits that predict
    ``tokens[:, prompt_len : prompt_len + new_tokens]``, the later positions padding (causal
    attention: no position before them sees them). One compiled program serves every prompt
    length; a ``[seqs]`` ``prompt_len`` gives each row its own (as ``generate``'s)."""
    TRACES["teacher_force_padded"] += 1
    return _at_prompt_ends(model(tokens[:, :-1]), prompt_len, new_tokens)
