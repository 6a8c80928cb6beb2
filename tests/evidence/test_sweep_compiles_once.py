"""The emulation sweep's bits, pinned: the token table of every setting of a runtime sweep
(batch sizes 1, 8 and 16; the shortest, middle and longest sequence lengths) hashed and
compared with the digests the emulation gave before the sweep shared one compiled program
per kernel. Padding a setting to the sweep's shapes must change no bit."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from kernel_contracts import contracts
from kernel_contracts.evidence.emulate import emulate_contract, sweep

EXAMPLE = Path(__file__).parents[2] / "contracts" / "examples" / "fp8-emulated.yaml"
# the shipped example with fewer prompts and tokens (its clauses, presets and envelope as
# shipped): three prompts, so batches of 8 and 16 are filled with rows that are dropped
EVIDENCE = "emulate: {model: tiny-lm, prompts: 3, max_new_tokens: 8, seed: 0}"


def small_example():
    text = EXAMPLE.read_text(encoding="utf-8")
    line = "emulate: {model: tiny-lm, prompts: 16, max_new_tokens: 32, seed: 0}"
    assert line in text
    return contracts.loads(text.replace(line, EVIDENCE))


def digest(table: dict[str, np.ndarray]) -> str:
    """sha256 over every column's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(table):
        column = np.ascontiguousarray(table[name])
        h.update(f"{name}\0{column.dtype.str}\0{column.shape}\0".encode())
        h.update(column.tobytes())
    return h.hexdigest()[:16]


# recorded from the emulation before the sweep was padded to one program (one compile per
# setting); each setting's table must keep these bits
PINNED = {
    (1, 9): "94075394b2dcad5c",
    (1, 128): "dda138740e3634e7",
    (8, 64): "141de4d8fecf6444",
    (16, 9): "4436a04b0fe96a4b",
    (16, 128): "00bc17d11339e5c0",
}


@pytest.mark.slow  # five settings, each compiled on its own (about 60 s on 2 idle cores)
@pytest.fixture(scope="module")
def tables():
    contract = small_example()
    return {
        setting: emulate_contract(contract, batch_size=setting[0], sequence_length=setting[1])
        for setting in sweep(contract)
    }


def test_the_sweep_keeps_its_bits(tables):
    assert {setting: digest(table) for setting, table in tables.items()} == PINNED
