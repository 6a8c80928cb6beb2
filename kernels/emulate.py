"""Evidence by emulation: the shipped policy through a contract's two kernels, measured per token.

``emulate(contract)`` loads the trained model named by ``contract.evidence.emulate``, draws
prompts from its held-out text (seeded), generates continuations with K_inf (the contract's
inference kernel: emulated matmuls, paged low-precision KV cache, dynamic batching) at the
contract's sampling policy, teacher-forces the same sequences through K_train, and measures
every generated token over the full vocabulary. The result is a token table: one row per
generated token, one 1-D numpy array per column.

Prompts are served in batches of a fixed size (the upper end of the contract's first runtime
``batch_size`` range, at most 32, and at most the number of prompts); a short last batch is
filled with further prompts whose rows are dropped, so every row was computed in a batch of
that size. ``batch_size`` and ``sequence_length`` override both choices for one setting of a
runtime sweep: every batch then holds exactly ``batch_size`` sequences, and each prompt is
``sequence_length - max_new_tokens`` bytes long, so every sequence ends at that length
(``length_range`` gives the lengths the model can run). The model's vocabulary (256 bytes) is
what is measured, whatever ``policy.vocab_size`` says; the divergence bounds do not depend on
the vocabulary size.
Sampling applies the policy's top-k / top-p; the metrics are always those of the full-vocabulary
distributions softmax(z/T) (``logprobs: full_vocab`` semantics).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from contracts.model import Contract, EmulateEvidence
from kernels.columns import TABLE_COLUMNS

__all__ = [
    "MAX_BATCH",
    "PROMPT_BYTES",
    "TABLE_COLUMNS",
    "emulate",
    "length_range",
    "prompts_from",
    "serving_batch",
]

PROMPT_BYTES = 32  # prompt length, shortened when the context cannot hold it and the output
MAX_BATCH = 32  # the largest serving batch emulated


def serving_batch(contract: Contract, prompts: int) -> int:
    """How many sequences K_inf serves at once for this contract."""
    batch = MAX_BATCH
    for clause in contract.runtime:
        if clause.batch_size is not None:
            batch = min(batch, max(1, int(clause.batch_size[1])))
            break
    return max(1, min(batch, prompts))


def prompts_from(windows: np.ndarray, count: int, length: int, seed: int) -> np.ndarray:
    """``count`` prompts of ``length`` bytes cut at seeded offsets from held-out windows."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, windows.shape[0], count)
    starts = rng.integers(0, windows.shape[1] - length + 1, count)
    return np.stack([windows[r, s : s + length] for r, s in zip(rows, starts, strict=True)])


def length_range(contract: Contract) -> tuple[int, int]:
    """The shortest and longest sequences (prompt + generated tokens) the emulation of
    ``contract`` can run: a prompt of at least one byte, within the model's context and its
    held-out windows."""
    from kernels.model import load_pretrained, pretrained_extra

    ev = contract.evidence.emulate or EmulateEvidence()
    context = load_pretrained(ev.model).config.context
    width = pretrained_extra(ev.model)["heldout_windows"].shape[1]
    return ev.max_new_tokens + 1, min(context, ev.max_new_tokens + width)


def emulate(
    contract: Contract,
    *,
    progress: Callable[[int, int], None] | None = None,
    batch_size: int | None = None,
    sequence_length: int | None = None,
) -> dict[str, np.ndarray]:
    """The token table of ``contract``'s kernel pair on the shipped policy.

    ``progress(done, total)`` is called after each served batch with prompts done so far.
    ``batch_size`` and ``sequence_length`` fix one setting of a runtime sweep (module
    docstring).
    """
    import jax  # here, not at the top: importing this module must not import JAX
    import jax.numpy as jnp

    from kernels.decode import generate, teacher_force
    from kernels.measure import measure
    from kernels.model import load_pretrained, pretrained_extra, with_ops
    from kernels.ops import inference_ops, train_ops

    ev = contract.evidence.emulate or EmulateEvidence()
    policy = contract.policy
    model = load_pretrained(ev.model)
    context = model.config.context
    if ev.prompts < 1:
        raise ValueError(f"evidence.emulate.prompts must be at least 1, got {ev.prompts}")
    if not 1 <= ev.max_new_tokens < context:
        raise ValueError(
            f"evidence.emulate.max_new_tokens must be in [1, {context - 1}] for model "
            f"{ev.model!r} (context {context}), got {ev.max_new_tokens}"
        )
    prompt_len = min(PROMPT_BYTES, context - ev.max_new_tokens)
    windows = pretrained_extra(ev.model)["heldout_windows"].astype(np.int32)
    if sequence_length is not None:
        lo, hi = ev.max_new_tokens + 1, min(context, ev.max_new_tokens + windows.shape[1])
        if not lo <= sequence_length <= hi:
            raise ValueError(
                f"evidence.emulate: sequence length {sequence_length} is outside the lengths "
                f"model {ev.model!r} can run with max_new_tokens {ev.max_new_tokens}: [{lo}, {hi}]"
            )
        prompt_len = sequence_length - ev.max_new_tokens
    prompts = prompts_from(windows, ev.prompts, prompt_len, ev.seed)
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"evidence.emulate: batch size must be at least 1, got {batch_size}")
    batch = serving_batch(contract, ev.prompts) if batch_size is None else batch_size
    k_train = with_ops(model, train_ops(contract.kernels.train))
    k_inf = with_ops(model, inference_ops(contract.kernels.inference, batch_size=batch))
    temperature = jnp.float32(policy.temperature)
    key = jax.random.key(ev.seed)
    vocab = model.config.vocab
    parts: list[dict[str, np.ndarray]] = []
    for start in range(0, ev.prompts, batch):
        ids = np.arange(start, start + batch)
        real = ids < ev.prompts
        chunk = prompts[np.minimum(ids, ev.prompts - 1)]
        if not real.all():  # fill the batch with other prompts; their rows are dropped
            fill = prompts_from(windows, int((~real).sum()), prompt_len, ev.seed + 1 + start)
            chunk = np.concatenate([chunk[real], fill])
        tokens, z_inf = generate(
            k_inf,
            jnp.asarray(chunk),
            jax.random.fold_in(key, start),
            temperature,
            new_tokens=ev.max_new_tokens,
            top_k=policy.top_k,
            top_p=policy.top_p,
        )
        z_train = teacher_force(k_train, tokens, prompt_len=prompt_len)
        observed = tokens[:, prompt_len:]
        metrics = measure(
            z_train.reshape(-1, vocab),
            z_inf.reshape(-1, vocab),
            observed.reshape(-1),
            policy.temperature,
        )
        n_new = ev.max_new_tokens
        keep = np.repeat(real, n_new)
        part = {k: np.asarray(v)[keep] for k, v in metrics.items()}
        part["top1_flip"] = part["top1_flip"].astype(np.int64)
        part["position"] = np.tile(np.arange(prompt_len, prompt_len + n_new), batch)[keep]
        part["prompt"] = np.repeat(ids, n_new)[keep]
        part["token"] = np.asarray(observed).reshape(-1).astype(np.int64)[keep]
        parts.append(part)
        if progress is not None:
            progress(min(start + batch, ev.prompts), ev.prompts)
    return {c: np.concatenate([p[c] for p in parts]) for c in TABLE_COLUMNS}
