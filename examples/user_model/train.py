"""Train ``tiny_linen_lm`` on the standard library's sources and write ``params.npz``.

Run from the repository root:  python examples/user_model/train.py   (about a minute on two
CPU cores). The archive holds the Linen variables under ``params/...`` (one entry per leaf,
named by its path) and 32 held-out windows of 48 bytes under ``extra/prompts``, the format
``evidence: emulate`` reads for a user model.
"""

from __future__ import annotations

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_linen_lm import CONTEXT, LM

from kernel_contracts.kernels.model.train import load_corpus

STEPS, BATCH, LR, SEED = 1000, 32, 3e-3, 0
HERE = os.path.dirname(os.path.abspath(__file__))


def flat(tree, prefix=""):
    out = {}
    for key, value in tree.items():
        path = f"{prefix}/{key}" if prefix else key
        out.update(flat(value, path) if isinstance(value, dict) else {path: np.asarray(value)})
    return out


def main() -> None:
    corpus = load_corpus()
    rng = np.random.default_rng(SEED)
    model = LM()
    variables = model.init(jax.random.key(SEED), jnp.zeros((1, CONTEXT), jnp.int32))
    optimizer = optax.adamw(optax.warmup_cosine_decay_schedule(0, LR, 50, STEPS), weight_decay=0.01)
    state = optimizer.init(variables)

    @jax.jit
    def step(variables, state, batch):
        def loss(v):
            z = model.apply(v, batch[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(z, batch[:, 1:]).mean()

        value, grads = jax.value_and_grad(loss)(variables)
        updates, state = optimizer.update(grads, state, variables)
        return optax.apply_updates(variables, updates), state, value

    start = time.perf_counter()
    for i in range(STEPS):
        offsets = rng.integers(0, corpus.train.size - CONTEXT - 1, BATCH)
        batch = np.stack([corpus.train[o : o + CONTEXT + 1] for o in offsets]).astype(np.int32)
        variables, state, value = step(variables, state, jnp.asarray(batch))
        if i % 100 == 0 or i == STEPS - 1:
            print(f"step {i:4d}  loss {float(value):.3f}  ({time.perf_counter() - start:.0f} s)")
    starts = np.linspace(0, corpus.heldout.size - 48, 32).astype(np.int64)
    prompts = np.stack([corpus.heldout[s : s + 48] for s in starts]).astype(np.uint8)
    arrays = {k: v.astype(np.float32) for k, v in flat(jax.device_get(variables)).items()}
    path = os.path.join(HERE, "params.npz")
    np.savez_compressed(path, **arrays, **{"extra/prompts": prompts})
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
