"""Hypothesis strategies shared by the soundness tests of the bounds, and their comparison."""

from __future__ import annotations

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

# the slack of a soundness comparison: a bound on float64 summation error for at most 10^5
# terms of size at most 1 (10^5·2^-52 ≈ 2e-11), with margin
TOL = 1e-10


def within(true: float, bound: float) -> bool:
    """Whether a true value computed in float64 is at most ``bound``, up to rounding."""
    return true <= bound * (1 + 1e-12) + TOL


@st.composite
def logit_pairs(draw, vocabs, temperatures, deltas):
    """(z, z', T, δ): training and inference logits with ‖z' − z‖∞ ≤ δ. Logits random,
    two-point, with one huge entry, tied or peaked; drifts uniform, ±δ, one-hot or aligned (the
    extremal tilt direction). ``vocabs``, ``temperatures`` and ``deltas`` are the sampled
    vocabulary sizes and the (sampled, or a float range (lo, hi)) temperatures and drifts."""
    vocab = draw(st.sampled_from(vocabs))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    T = draw(st.sampled_from(temperatures[0]) | st.floats(*temperatures[1]))
    delta = draw(st.sampled_from(deltas[0]) | st.floats(*deltas[1]))
    kind = draw(st.sampled_from(["normal", "two_point", "huge", "ties", "peaked"]))
    scale = draw(st.sampled_from([0.1, 1.0, 5.0, 30.0]))
    if kind == "normal":
        z = rng.normal(0.0, scale, vocab)
    elif kind == "two_point":
        z = np.where(rng.random(vocab) < draw(st.floats(0.0, 1.0)), scale, -scale)
    elif kind == "huge":
        z = rng.normal(0.0, 1.0, vocab)
        z[rng.integers(vocab)] = draw(st.sampled_from([50.0, 200.0, 1000.0]))
    elif kind == "ties":
        z = np.full(vocab, 1.0) + rng.normal(0.0, 1e-9, vocab)
    else:
        z = -scale * np.arange(vocab, dtype=np.float64) / max(vocab - 1, 1) * 10
    pattern = draw(st.sampled_from(["uniform", "signs", "one_hot", "aligned"]))
    if pattern == "uniform":
        d = rng.uniform(-delta, delta, vocab)
    elif pattern == "signs":
        d = np.where(rng.random(vocab) < 0.5, delta, -delta)
    elif pattern == "one_hot":
        d = np.zeros(vocab)
        d[rng.integers(vocab)] = delta if rng.random() < 0.5 else -delta
    else:  # raise the likely tokens, lower the rest: the extremal tilt direction
        d = np.where(z >= np.median(z), delta, -delta)
    return z, z + d, T, delta


def examples(n: int) -> settings:
    """Settings for ``n`` examples under the quick hypothesis profile, scaled with the loaded
    profile's ``max_examples`` (ten times under the thorough one); see ``conftest.py``."""
    return settings(max_examples=max(1, n * settings.default.max_examples // 100))
