"""synth's notes say what to do when a value is not proved: a value a little below the loosest
one, or the budget to give; the solver's own words stay out of them."""

from __future__ import annotations

import dataclasses

import pytest

from kernel_contracts import contracts
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving import synth
from kernel_contracts.verify.proving.solve.budget import Budget

CONTRACT = """\
contract: 1
name: synth-notes
policy: {temperature: 1.0, vocab_size: 256}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
numerical:
  - {id: N1, metric: logit_drift, max: 0.02}
guarantees:
  - {id: G1, quantity: token_tv, max: 0.0100, from: [N1]}
"""


@pytest.fixture
def contract():
    return contracts.loads(CONTRACT)


def _discharge_proving_below(limit):
    """A stand-in for the solver: unknown (as a spent budget reads) above ``limit``, else
    proved."""
    real = synth.discharge

    def discharge(d, *, budget):
        ob = real(d, budget=budget)
        (v,) = d.variables
        if v.hi > limit:
            return dataclasses.replace(ob, status=Status.UNKNOWN, reason="budget spent")
        return ob

    return discharge


def test_the_loosest_value_proved_is_printed_as_is(contract):
    (s,) = synth.synthesize(contract)
    assert s.status is Status.PROVED and s.value == synth.Fraction("0.02")
    assert s.note == "token_tv ≤ 0.01 proved with delta_N1 ≤ 0.02"


def test_a_value_just_below_the_loosest_is_proved_and_said_so(contract, monkeypatch):
    monkeypatch.setattr(synth, "discharge", _discharge_proving_below(synth.Fraction("0.0199")))
    (s,) = synth.synthesize(contract, budget=Budget(rlimit=700_000))
    assert s.status is Status.PROVED and s.value == synth.Fraction("0.0198")
    assert s.note == (
        "token_tv ≤ 0.01 proved with delta_N1 ≤ 0.0198 (the loosest value, 0.02, was not "
        "proved within a solver budget of 700000)"
    )
    assert "max: 0.0198" in synth.render((s,))


def test_no_value_proved_says_which_budget_or_value_to_set(contract, monkeypatch):
    monkeypatch.setattr(synth, "discharge", _discharge_proving_below(0))
    (s,) = synth.synthesize(contract, budget=Budget(rlimit=700_000))
    assert s.status is Status.UNKNOWN
    assert s.note == (
        "the chain's bound allows delta_N1 ≤ 0.02, but neither that value nor one up to 10% "
        "below it was proved within a solver budget of 700000 per try; run synth again with a "
        "larger budget (--solver-budget 2800000), or set this clause's max below 0.02 and run "
        "python -m verify on the contract"
    )
    assert "z3" not in synth.render((s,))


def test_the_solver_message_on_a_lost_core_is_plain_words(monkeypatch):
    import z3

    from kernel_contracts.verify.proving.solve import smt

    real = smt._z3_run

    def run(text, rlimit):  # the second run, the one recording the premises, gives up
        solver, result = real(text, rlimit)
        return solver, (z3.unknown if smt._CORE_OPTION in text else result)

    monkeypatch.setattr(smt, "_z3_run", run)
    text = f"{smt._CORE_OPTION}\n(declare-const x Real)\n(assert (! (> x 1) :named a))\n"
    answer = smt._z3_check(text + "(assert (< x 0))\n", 2000)
    assert answer.answer == "unknown"
    assert answer.reason == (
        "z3 proved the query, but answered unknown when repeating the proof to record which "
        "premises it used, within 2000 resource units (a larger --solver-budget may settle it)"
    )


def test_the_long_horizon_unknown_points_to_synth():
    from kernel_contracts import bounds
    from kernel_contracts.verify.proving.obligations import discharge

    text = CONTRACT.replace("vocab_size: 256}", "vocab_size: 151936, max_new_tokens: 4096}")
    text = text.replace("quantity: token_tv, max: 0.0100", "quantity: sequence_tv, max: 0.1")
    (d,) = bounds.derive(contracts.loads(text))
    o = discharge(d)
    assert o.status is Status.UNKNOWN and "not attained" in o.reason
    assert o.reason.endswith(
        "; python -m verify synth on this contract gives the largest premise max that proves it"
    )
    (s,) = synth.synthesize(contracts.loads(text))
    assert s.status is Status.PROVED and s.value < synth.Fraction("0.02")
