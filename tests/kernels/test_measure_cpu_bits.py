"""The host pass's bits, pinned: ``measure_rows``' table (every column of the rows it keeps,
and which rows it hands back) hashed over rows of every branch of its series, temperatures
and vocabularies the vector loops do not divide, compared with the digests the pass gave
before it was made faster.

The pass's sums are reassociated so that they vectorise, so their bits are those of the
vector width the compiler picks for the host: the digests were recorded on a host with
256-bit vectors (AVX2 without AVX-512) and are checked on such hosts only."""

from __future__ import annotations

import hashlib

import llvmlite.binding as llvm
import numpy as np
import pytest

from kernel_contracts.kernels.measurement.measure_cpu import measure_rows

_FEATURES = llvm.get_host_cpu_features()
_AVX2_ONLY = bool(_FEATURES.get("avx2")) and not _FEATURES.get("avx512f")


def _rows(seed: int, rows: int, vocab: int, drift: float):
    rng = np.random.default_rng(seed)
    z = (rng.standard_normal((rows, vocab)) * 3).astype(np.float32)
    zp = (z + rng.standard_normal(z.shape) * drift).astype(np.float32)
    y = rng.integers(0, vocab, rows)
    return z, zp, y


def _special(vocab: int):
    """Rows with ties, tokens masked by both kernels, a token masked by one, a NaN, an
    extreme drift, logits of one value, a huge spread and zeros of both signs."""
    z, zp, y = _rows(99, 8, vocab, 0.05)
    z[0, [3, vocab - 1]] = zp[0, [3, vocab - 1]] = 20.0
    z[1, :5] = zp[1, :5] = -np.inf
    y[1] = 2
    zp[2, 6] = -np.inf
    z[3, 7] = np.nan
    zp[4, 8] = z[4, 8] + 45.0
    z[5] = zp[5] = 1.5
    z[6] *= 30.0
    z[7, ::2] = -0.0
    zp[7, ::2] = 0.0
    return z, zp, y


def digest(z, zp, y, inv_t: float) -> str:
    """sha256 of the table's bits (rows the pass keeps) and of the mask of rows it flags."""
    table, redo = measure_rows(z, zp, y, np.float32(inv_t))
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(table[~redo]).tobytes())
    h.update(np.packbits(redo).tobytes())
    return h.hexdigest()[:16]


CASES = {
    # drifts whose |u| fall under 1/16, under ½ and above ½ (the three branches of φ)
    "drift 1e-6, T 1": (_rows(1, 16, 4099, 1e-6), 1.0),
    "drift 0.01, T 1": (_rows(2, 16, 4099, 0.01), 1.0),
    "drift 0.01, T 0.7": (_rows(3, 16, 4096, 0.01), 1 / 0.7),
    "drift 0.05, T 1": (_rows(8, 16, 4101, 0.05), 1.0),
    "drift 0.2, T 1": (_rows(4, 16, 4101, 0.2), 1.0),
    "drift 0.9, T 1.3": (_rows(5, 16, 4103, 0.9), 1 / 1.3),
    "vocab 7": (_rows(6, 9, 7, 0.1), 1.0),
    "vocab 300": (_rows(7, 9, 300, 0.1), 1.0),
    "special rows": (_special(1031), 1.0),
}

# recorded from the host pass before it was made faster
PINNED = {
    "drift 0.01, T 0.7": "838a1d1e4deb7dcc",
    "drift 0.01, T 1": "bb2bc6e12e1cda38",
    "drift 0.05, T 1": "12225968b4290765",
    "drift 0.2, T 1": "b43c8dfe9eda4883",
    "drift 0.9, T 1.3": "fb3e205aa16a486e",
    "drift 1e-6, T 1": "1eb26e09120a4bba",
    "special rows": "9f8c7a8e52f7b608",
    "vocab 300": "0844419eb3c04fd6",
    "vocab 7": "82e4433be795443d",
}


@pytest.mark.skipif(not _AVX2_ONLY, reason="digests recorded with 256-bit vectors (AVX2)")
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_host_pass_keeps_its_bits(case):
    (z, zp, y), inv_t = CASES[case]
    assert digest(z, zp, y, inv_t) == PINNED[case]
