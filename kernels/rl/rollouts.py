"""Rollouts for bias measurement: held-out prompts, sampled by K_inf, teacher-forced by K_train.

``held_out_prompts`` cuts prompts at seeded offsets from the shipped model's held-out text (with
``kernels.emulation.prompts_from``, as ``evidence: emulate`` does). ``rollout_pairs`` serves
them through the inference kernel of a preset in batches of a fixed size (a short last batch is
filled with copies of its last prompt whose rows are dropped, so every row was computed in a
batch of that size), samples ``new_tokens`` tokens at temperature T, and teacher-forces the
finished sequences through the training kernel. Position 0 of the result is each prompt's own
next-token distribution: the one-token (bandit) case.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Int

from kernel_contracts.contracts.checks import check_temperature
from kernel_contracts.contracts.presets import preset
from kernel_contracts.kernels.model.decode import PairLogits

__all__ = ["held_out_prompts", "rollout_pairs"]


def held_out_prompts(
    count: int, length: int, seed: int, model: str = "tiny-lm"
) -> Int[np.ndarray, "prompts length"]:
    """``count`` prompts of ``length`` bytes from ``model``'s held-out windows (seeded)."""
    from kernel_contracts.kernels.emulation import prompts_from
    from kernel_contracts.kernels.model.tinylm import pretrained_extra

    windows = pretrained_extra(model)["heldout_windows"].astype(np.int32)
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    if not 1 <= length <= windows.shape[1]:
        raise ValueError(f"prompt length must be in [1, {windows.shape[1]}], got {length}")
    return prompts_from(windows, count, length, seed)


def rollout_pairs(
    prompts: Int[np.ndarray, "prompts length"],
    *,
    inference: str,
    new_tokens: int,
    temperature: float,
    seed: int = 0,
    train: str = "fp32",
    batch_size: int | None = None,
    model: str = "tiny-lm",
) -> PairLogits:
    """Sample ``new_tokens`` tokens after each prompt with K_inf (preset ``inference``) and
    teacher-force them through K_train (preset ``train``); both kernels' logits at the
    generated positions, in prompt order."""
    import jax
    import jax.numpy as jnp

    from kernel_contracts.kernels.model.decode import generate, teacher_force
    from kernel_contracts.kernels.model.tinylm import load_pretrained, with_ops
    from kernel_contracts.kernels.ops import inference_ops, train_ops

    prompts = np.asarray(prompts, np.int32)
    if prompts.ndim != 2 or prompts.shape[0] < 1 or prompts.shape[1] < 1:
        raise ValueError(f"expected prompts [count >= 1, length >= 1], got {prompts.shape}")
    if new_tokens < 1:
        raise ValueError(f"new_tokens must be at least 1, got {new_tokens}")
    check_temperature(temperature)
    policy = load_pretrained(model)
    count, prompt_len = prompts.shape
    if prompt_len + new_tokens > policy.config.context:
        raise ValueError(
            f"prompt length {prompt_len} + new_tokens {new_tokens} exceeds the context "
            f"{policy.config.context} of model {model!r}"
        )
    batch = min(32, count) if batch_size is None else batch_size
    if batch < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch}")
    k_train = with_ops(policy, train_ops(preset(train)))
    k_inf = with_ops(policy, inference_ops(preset(inference), batch_size=batch))
    key = jax.random.key(seed)
    parts = []
    for start in range(0, count, batch):
        chunk = prompts[np.minimum(np.arange(start, start + batch), count - 1)]
        tokens, z_inf = generate(
            k_inf,
            jnp.asarray(chunk),
            jax.random.fold_in(key, start),
            jnp.float32(temperature),
            new_tokens=new_tokens,
        )
        z_train = teacher_force(k_train, tokens, prompt_len=prompt_len)
        real = min(batch, count - start)
        parts.append((tokens[:real], z_train[:real], z_inf[:real]))
    return PairLogits(*(jnp.concatenate(list(p)) for p in zip(*parts, strict=True)))
