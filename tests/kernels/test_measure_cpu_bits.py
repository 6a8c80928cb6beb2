"""The host pass's bits, pinned: ``measure_rows``' table (its columns on the rows it keeps,
and which rows it hands back) hashed over rows of every branch of its series, temperatures
and vocabularies the vector loops do not divide, compared with the digests the pass gave
before any attempt to make it faster: a change to the pass that moves a bit fails here.

The pass's sums are reassociated so that they vectorise, so their bits are those of the
vector width the compiler picks for the host: the digests were recorded on a host with
256-bit vectors (AVX2 without AVX-512) and are checked on such hosts only.

The two KL columns (``kl_train_inf``, and ``kl_inf_train``, which is computed from it) are
left out: they were seen 1-2 ulp apart depending on whether Numba compiled the pass in this
process or loaded it from its cache, for a reason not found (``test_measure_cpu`` checks them
against float64)."""

from __future__ import annotations

import hashlib

import llvmlite.binding as llvm
import numpy as np
import pytest

from kernel_contracts.kernels.measurement._measure import COLUMNS
from kernel_contracts.kernels.measurement.measure_cpu import measure_rows

_FEATURES = llvm.get_host_cpu_features()
_AVX2_ONLY = bool(_FEATURES.get("avx2")) and not _FEATURES.get("avx512f")
# every column but the two KL divergences (see the module's docstring)
_PINNED_COLUMNS = [i for i, k in enumerate(COLUMNS) if k not in ("kl_train_inf", "kl_inf_train")]


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
    """sha256 of the table's bits (rows the pass keeps, ``_PINNED_COLUMNS``) and of the mask
    of rows it flags."""
    table, redo = measure_rows(z, zp, y, np.float32(inv_t))
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(table[~redo][:, _PINNED_COLUMNS]).tobytes())
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

# recorded from the host pass before any attempt to make it faster
PINNED = {
    "drift 0.01, T 0.7": "10a606e05ce4a2bb",
    "drift 0.01, T 1": "6cad17d0ed05bef8",
    "drift 0.05, T 1": "db98358ea3ff3aca",
    "drift 0.2, T 1": "06a371a1eb9a2369",
    "drift 0.9, T 1.3": "af14383245902f75",
    "drift 1e-6, T 1": "e310ba7270654de8",
    "special rows": "8b712f5d5a6f1a29",
    "vocab 300": "98ab5eb27301bc1f",
    "vocab 7": "ce72971a81966646",
}


@pytest.mark.skipif(not _AVX2_ONLY, reason="digests recorded with 256-bit vectors (AVX2)")
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_host_pass_keeps_its_bits(case):
    (z, zp, y), inv_t = CASES[case]
    assert digest(z, zp, y, inv_t) == PINNED[case]
