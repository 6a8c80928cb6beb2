"""The emulation sweep's bits, pinned: the token table of every setting of a runtime sweep
(batch sizes 1, 8 and 16; the shortest, middle and longest sequence lengths) hashed and
compared with the digests the emulation gave before the sweep shared one compiled program
per kernel. Padding a setting to the sweep's shapes (``shared=True``) must change no bit;
the shared sweep traces each kernel's program once, and only settings of the same reduction
splits share a program."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_contracts import contracts
from kernel_contracts.evidence.emulate import emulate_contract, sweep, sweep_padding
from kernel_contracts.kernels.emulation import Padding
from kernel_contracts.kernels.model.decode import TRACES
from tests.support.bits import digest

EXAMPLE = Path(__file__).parents[2] / "contracts" / "examples" / "fp8-emulated.yaml"
# the shipped example with fewer prompts and tokens (its clauses, presets and envelope as
# shipped): three prompts, so batches of 8 and 16 are filled with rows that are dropped
EVIDENCE = "emulate: {model: tiny-lm, prompts: 3, max_new_tokens: 8, seed: 0}"


def small_example():
    text = EXAMPLE.read_text(encoding="utf-8")
    line = "emulate: {model: tiny-lm, prompts: 16, max_new_tokens: 32, seed: 0}"
    assert line in text
    return contracts.loads(text.replace(line, EVIDENCE))


# recorded from the emulation before the sweep was padded to one program (one compile per
# setting); each setting's table must keep these bits
PINNED = {
    (1, 9): "94075394b2dcad5c",
    (1, 128): "dda138740e3634e7",
    (8, 64): "141de4d8fecf6444",
    (16, 9): "4436a04b0fe96a4b",
    (16, 128): "00bc17d11339e5c0",
}


def run_sweep(shared: bool, lengths=None):
    """Every setting's token table (of the sequence ``lengths`` given, else all), and how many
    times each kernel's program was traced while the sweep ran (a program already traced by an
    earlier test of this process is not traced again: at most once)."""
    contract = small_example()
    before = dict(TRACES)
    tables = {
        setting: emulate_contract(
            contract, batch_size=setting[0], sequence_length=setting[1], shared=shared
        )
        for setting in sweep(contract)
        if lengths is None or setting[1] in lengths
    }
    return tables, {k: TRACES[k] - before[k] for k in TRACES}


@pytest.fixture(scope="module")
def swept():
    return run_sweep(shared=True)


@pytest.mark.slow  # two settings of the sweep in their own shapes
def test_batches_served_in_one_call_keep_their_bits():
    """In its own shapes each setting serves its batches 16 rows to a call (the three prompts
    of a batch-1 setting in one call of three rows, each with its batch's own sampling key):
    the bits of one call for each batch, as pinned. The shortest sequences, at batch 1 (three
    batches in one call) and 16 (one batch, filled): the longer ones add compile time, not
    another way of grouping the batches."""
    tables, traced = run_sweep(shared=False, lengths={9})
    assert set(tables) == {(1, 9), (16, 9)}
    assert {setting: digest(table) for setting, table in tables.items()} == {
        setting: PINNED[setting] for setting in tables
    }
    assert traced["teacher_force_padded"] == 0


@pytest.mark.slow  # the sweep in its padded program (about a minute on 2 idle cores)
def test_the_sweep_keeps_its_bits(swept):
    tables, _ = swept
    assert {setting: digest(table) for setting, table in tables.items()} == PINNED


@pytest.mark.slow  # the same sweep (the module's fixture)
def test_the_sweep_compiles_one_program_per_kernel(swept):
    _, traced = swept
    assert traced["generate"] <= 1 and traced["teacher_force_padded"] <= 1
    assert traced["teacher_force"] == 0  # every setting ran in the shared, padded program
    contract = small_example()
    shapes = {sweep_padding(contract, 3, 8, setting) for setting in sweep(contract)}
    assert shapes == {Padding(rows=16, width=120, kernel_batch=16)}


def test_rows_sharing_a_scale_run_in_their_own_shape():
    """``per_tensor`` FP8 scaling shares one scale over a matmul's rows: padding rows would
    change it, so such a contract's settings are not padded."""
    text = EXAMPLE.read_text(encoding="utf-8")
    assert "inference: {preset: h100-fp8}" in text
    contract = contracts.loads(text.replace("h100-fp8}", "h100-fp8-fast-accum}"))
    assert {sweep_padding(contract, 16, 32, s) for s in sweep(contract)} == {None}


def test_settings_with_other_splits_get_other_programs():
    """Batches of other reduction splits (17 rows and more: two 16-row tiles) and caches with
    other attention splits get programs of their own."""
    text = EXAMPLE.read_text(encoding="utf-8").replace("batch_size: [1, 16]", "batch_size: [1, 32]")
    contract = contracts.loads(text)
    assert sweep(contract) == [(1, 33), (1, 128), (16, 64), (32, 33), (32, 128)]
    shapes = {s: sweep_padding(contract, 16, 32, s) for s in sweep(contract)}
    assert shapes[(1, 33)] == shapes[(1, 128)] == shapes[(16, 64)] == Padding(16, 96, 16)
    assert shapes[(32, 33)] == shapes[(32, 128)] == Padding(32, 96, 32)
    # outside the sweep: its own shape
    assert sweep_padding(contract, 16, 32, (4, 40)) is None


def test_a_sweep_of_one_setting_runs_in_its_own_shape():
    """Nothing to share: the one setting is not padded (its kernels built for its batch)."""
    text = EXAMPLE.read_text(encoding="utf-8")
    text = text.replace("batch_size: [1, 16]", "batch_size: [8, 8]")
    contract = contracts.loads(
        text.replace("sequence_length: [1, 128]", "sequence_length: [64, 64]")
    )
    assert sweep(contract) == [(8, 64)]
    assert sweep_padding(contract, 16, 32, (8, 64)) is None
