"""Every premise counts: a guarantee rests on every clause named in its ``from``.

A refutation stands only where the winning route rests on every premise (a counterexample to a
route that leaves a clause out may violate it); premises the chain can use are used (mean kl
through Pinsker and Jensen, a slice that holds every token, a zero exceedance of the signed log
ratio, a runtime bound on the sequence length); the rest make the verdict unknown with the
reason. And no estimator parameter near either end of its range is an internal error.
"""

from __future__ import annotations

import io
import json
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts import bounds
from kernel_contracts.bounds import LEMMAS, measure
from kernel_contracts.bounds.premises import covers_every_token
from kernel_contracts.contracts import Slice, exact, loads
from kernel_contracts.verify.cli.commands import main
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.check.recheck import check_data
from kernel_contracts.verify.proving.obligations import discharge
from kernel_contracts.verify.proving.solve.encoding import encode
from tests.support import strategies
from tests.support.cli_runner import run_cli
from tests.support.strategies import examples

_HEAD = """contract: 1
name: every-premise
policy: {{temperature: 1.0, vocab_size: 32000, max_new_tokens: {L}}}
kernels: {{train: {{preset: fp32}}, inference: {{preset: h100-fp8}}}}
"""
_PG = "quantity: pg_bias, score_norm: 1, advantage: 1"


def _text(body: str, L: int = 512) -> str:
    return _HEAD.format(L=L) + body


def _stat(cid: str, metric: str, statistic: str, maximum: str, extra: str = "") -> str:
    return (
        f"  - {{id: {cid}, metric: {metric}, statistic: {statistic}, max: {maximum}, "
        f"confidence: 0.95, min_samples: 1000{extra}}}\n"
    )


def _verdicts(text: str):
    return [discharge(d) for d in bounds.derive(loads(text))]


def _cli(tmp_path, text: str) -> tuple[int, dict, str]:
    path = tmp_path / "contract.yaml"
    path.write_text(text, encoding="utf-8")
    report = tmp_path / "report.json"
    code, _, err = run_cli(path, "--json", report, "--quiet")
    assert "internal error" not in err, err
    return code, json.loads(report.read_text(encoding="utf-8")), err


def _statuses(report: dict) -> dict[str, str]:
    return {o["id"]: o["status"] for o in report["obligations"]}


# ---- the cases of the issue, each against the truth --------------------------------------------
_MEAN_KL = _text(
    "statistical:\n"
    + _stat("S1", "logit_drift", "exceed_rate", "0.01", ", threshold: 0.01, slices: [all]")
    + _stat("S2", "kl", "mean", "1.0e-8", ", slices: [all]")
    + "guarantees:\n"
    "  - {id: G1, quantity: token_tv, max: 0.01, from: [S1, S2]}\n"
    f"  - {{id: G2, {_PG}, estimator: plain, max: 0.01, from: [S1, S2]}}\n"
    f"  - {{id: G3, {_PG}, estimator: tis, cap: 1, max: 0.01, from: [S1, S2]}}\n"
)


def test_mean_kl_bounds_the_mean_tv_and_proves_what_holds(tmp_path):
    # E[TV] ≤ √(E[kl]/2) = 7.07e-5: token_tv ≤ 0.01, plain bias 2·E[TV] ≤ 0.01, TIS (c = 1) ≤ 0.01
    truth = math.sqrt(1e-8 / 2)
    ds = bounds.derive(loads(_MEAN_KL))
    assert [d.value for d in ds] == pytest.approx([truth, 2 * truth, truth], rel=1e-12)
    assert all("mean_kl_to_tv" in d.chain for d in ds)
    assert [o.status for o in _verdicts(_MEAN_KL)] == [Status.PROVED] * 3
    code, report, _ = _cli(tmp_path, _MEAN_KL)
    assert _statuses(report) == {"G1": "proved", "G2": "proved", "G3": "proved"}
    assert code == 0
    assert check_data(report, report_dir=str(tmp_path)).differences == ()


def test_mean_kl_below_its_bound_is_unknown_never_refuted():
    # 1e-5 < 7.07e-5, but Pinsker + Jensen is not the supremum of E[TV]: no refutation
    text = _MEAN_KL.replace("max: 0.01, from: [S1, S2]", "max: 1.0e-5, from: [S2]", 1)
    o = _verdicts(text)[0]
    assert o.status is Status.UNKNOWN and "not attained" in o.reason


_SLICE = _text(
    "numerical:\n  - {id: N1, metric: tv, max: 0.5}\n"
    "  - {id: N2, metric: logit_drift, max: 0.001, slice: every}\n"
    "statistical:\n" + _stat("S1", "tv", "mean", "1.0e-6", ", slices: [every]") + "slices:\n"
    "  every: {position: [0, null]}\n  tail: {token_prob: [0, 0.01]}\n"
    "guarantees:\n"
    "  - {id: G1, quantity: token_tv, max: 0.1, from: [N1, N2]}\n"
    "  - {id: G2, quantity: token_tv, max: 0.1, from: [S1]}\n"
    f"  - {{id: G3, {_PG}, estimator: plain, max: 0.01, from: [S1]}}\n"
    "  - {id: G4, quantity: token_tv, max: 0.1, from: [N1, S1]}\n"
)


def test_a_slice_that_holds_every_token_is_the_whole_population():
    # N2 on position [0, ∞) is every token: TV ≤ tanh(0.002/4) ≈ 5e-4; S1's mean TV ≤ 1e-6
    d1, d2, d3, _ = bounds.derive(loads(_SLICE))
    assert d1.route == "token_tv_tanh" and d1.value == pytest.approx(math.tanh(0.0005))
    assert any("slice 'every' holds every token" in n for n in d1.notes)
    assert d2.value == pytest.approx(1e-6) and d3.value == pytest.approx(2e-6)
    g1, g2, g3, g4 = _verdicts(_SLICE)
    assert (g1.status, g2.status, g3.status) == (Status.PROVED,) * 3
    # a per-token TV clause beside a mean: the per-token route leaves S1 out, so unknown
    assert g4.status is Status.UNKNOWN and "S1: not used by route 'tv_clause'" in g4.reason


def test_a_premise_on_a_partial_slice_is_unknown_with_its_reason(tmp_path):
    text = _SLICE.replace("slice: every}", "slice: tail}").replace(
        "max: 0.1, from: [N1, N2]", "max: 0.1, from: [N1, N2]", 1
    )
    g1 = _verdicts(text)[0]
    assert g1.status is Status.UNKNOWN
    assert "N2: holds only on slice 'tail', not on every token" in g1.reason
    code, report, _ = _cli(tmp_path, text)
    assert report["obligations"][0]["status"] == "unknown" and code == 3
    assert check_data(report, report_dir=str(tmp_path)).differences == ()


@pytest.mark.parametrize(
    ("fields", "every"),
    [
        ({"position": (0, None)}, True),
        ({"position": (None, None)}, True),
        ({"position": (1, None)}, False),
        ({"position": (0, 10**9)}, False),
        ({"token_prob": (0.0, 1.0)}, True),
        ({"token_prob": (None, 1.0)}, True),
        ({"token_prob": (0.0, 0.999)}, False),
        ({"token_prob": (1e-300, 1.0)}, False),
        ({"entropy": (0.0, None), "margin": (None, None)}, True),
        ({"entropy": (0.0, 50.0)}, False),
        ({"margin": (0.1, None)}, False),
        ({"position": (0, None), "prompt": ".*"}, False),
    ],
)
def test_covers_every_token_only_where_the_ranges_cover_every_value(fields, every):
    assert covers_every_token(Slice(name="s", **fields)) is every


_SIGNED = _text(
    "numerical:\n  - {id: N1, metric: tv, max: 0.5}\nstatistical:\n"
    + _stat("S1", "log_ratio", "exceed_rate", "0", ", threshold: THETA, slices: [all]")
    + "guarantees:\n  - {id: G1, quantity: token_tv, max: 0.001, from: [N1, S1]}\n"
    "  - {id: G2, quantity: token_tv, max: MAX, from: [S1]}\n"
)


def test_a_zero_exceedance_of_the_signed_log_ratio_bounds_tv():
    # P(log w > 0) = 0: w ≤ 1 on every token, so π = π' and TV = 0
    g1, g2 = _verdicts(_SIGNED.replace("THETA", "0").replace("MAX", "0"))
    assert g1.status is Status.PROVED and g1.route == "signed_ratio_tv"
    assert g2.status is Status.PROVED and g2.bound == 0
    # θ = 0.1: TV ≤ 1 − e^{−0.1} = 0.0951626, a supremum (approached): proved above, refuted below
    sup = -math.expm1(-0.1)
    text = _SIGNED.replace("THETA", "0.1")
    _, above = _verdicts(text.replace("MAX", repr(sup * (1 + 1e-6))))
    _, below = _verdicts(text.replace("MAX", repr(sup * (1 - 1e-6))))
    assert above.status is Status.PROVED
    assert below.status is Status.REFUTED and below.counterexample is not None


def test_a_positive_signed_exceedance_rate_still_gives_no_bound():
    text = _SIGNED.replace("THETA", "0").replace("MAX", "0.5").replace("max: 0,", "max: 0.01,")
    g1, g2 = _verdicts(text)
    assert g1.status is Status.UNKNOWN and "signed log ratio" in g1.reason
    assert g2.status is Status.UNKNOWN


def _geo(L: int, runtime: str, from_: str, seq_tis: bool = True) -> str:
    return _text(
        "numerical:\n  - {id: N1, metric: logit_drift, max: 0.0575}\n"
        f"runtime:\n{runtime}guarantees:\n"
        f"  - {{id: G1, {_PG}, estimator: geo_mask, band: [0.9, 1.2], max: 0.5, from: {from_}}}\n"
        f"  - {{id: G2, quantity: sequence_tv, max: 0.01, from: {from_}}}\n"
        + (
            f"  - {{id: G3, {_PG}, estimator: seq_tis, cap: 2, max: 0.01, from: {from_}}}\n"
            if seq_tis
            else ""
        ),
        L,
    )


def test_a_runtime_sequence_length_bounds_the_horizon(tmp_path):
    runtime = "  - {id: R1, sequence_length: [1, 4]}\n"
    capped = bounds.derive(loads(_geo(512, runtime, "[N1, R1]")))
    at_4 = bounds.derive(loads(_geo(4, runtime, "[N1]")))
    for a, b in zip(capped, at_4, strict=True):
        assert a.constants["L"] == 4 and a.value == pytest.approx(b.value, rel=1e-15)
        assert any("horizon L = 4" in n for n in a.notes)
    # geo_mask at L = 4: 0.3226 ≤ 0.5 proved (at L = 512 the bound is 1)
    assert capped[0].value == pytest.approx(0.32255545045798, rel=1e-9)
    _, report, _ = _cli(tmp_path, _geo(512, runtime, "[N1, R1]", seq_tis=False))
    assert _statuses(report)["G1"] == "proved"
    assert all(o["constants"]["L"] == "4" for o in report["obligations"])
    assert check_data(report, report_dir=str(tmp_path)).differences == ()


def test_runtime_clauses_that_share_no_length_give_no_bound():
    runtime = "  - {id: R1, sequence_length: [1, 4]}\n  - {id: R2, sequence_length: [8, 16]}\n"
    for d in bounds.derive(loads(_geo(512, runtime, "[N1, R1, R2]"))):
        assert d.expr is None and "no common sequence length" in d.reason


def test_a_runtime_clause_without_a_length_changes_no_horizon():
    runtime = "  - {id: R1, batch_size: [1, 8]}\n"
    plain = bounds.derive(loads(_geo(512, runtime, "[N1]")))
    named = bounds.derive(loads(_geo(512, runtime, "[N1, R1]")))
    assert [d.value for d in plain] == [d.value for d in named]
    assert [d.extra["attained"] for d in plain] == [d.extra["attained"] for d in named]


def test_a_clause_the_route_leaves_out_turns_a_refutation_into_unknown():
    # N1 alone refutes token_tv ≤ 0.001 (tanh(0.01) > 0.001); N2's slice is only the tail
    body = (
        "numerical:\n  - {id: N1, metric: logit_drift, max: 0.02}\n"
        "  - {id: N2, metric: logit_drift, max: 0.0001, slice: tail}\n"
        "slices:\n  tail: {token_prob: [0, 0.01]}\n"
        "guarantees:\n  - {id: G1, quantity: token_tv, max: 0.001, from: [N1]}\n"
        "  - {id: G2, quantity: token_tv, max: 0.001, from: [N1, N2]}\n"
    )
    alone, both = _verdicts(_text(body))
    assert alone.status is Status.REFUTED
    assert both.status is Status.UNKNOWN and "N2: holds only on slice 'tail'" in both.reason


# ---- the new lemmas: witnesses, soundness --------------------------------------------------------
@pytest.mark.parametrize("kappa", [1e-10, 1e-6, 1e-3, 0.05])
def test_mean_kl_witness_is_an_instance_and_first_order_tight(kappa):
    w = LEMMAS["mean_kl_to_tv"].witness(kappa)
    z, zp = w.instance["z"], w.instance["z_prime"]
    kl = max(measure.kl(z, zp, 1.0), measure.kl(z, zp, 1.0, reverse=True))
    assert kl == pytest.approx(kappa, rel=1e-9)
    assert 1 - kappa <= w.ratio <= 1 + 1e-9


@pytest.mark.parametrize("theta", [0.0, 1e-8, 1e-3, 0.1, 1.0, 5.0])
def test_signed_ratio_witness_satisfies_its_premise_and_approaches_the_bound(theta):
    w = LEMMAS["signed_ratio_to_tv"].witness(theta)
    z, zp = w.instance["z"], w.instance["z_prime"]
    assert np.max(measure.log_ratio(z, zp, 1.0)) <= theta + 1e-12  # P(log w > θ) = 0
    assert w.achieved <= w.bound * (1 + 1e-12) + 1e-15
    assert w.bound == 0.0 or w.ratio >= 1 - 1e-6


_pairs = strategies.logit_pairs([2, 3, 16], ([0.5, 1.0], (0.05, 5.0)), ([0.01, 0.5], (0.0, 3.0)))


@examples(150)
@given(st.lists(_pairs, min_size=1, max_size=4), st.data())
def test_mean_kl_to_tv_is_sound(positions, data):
    """Positions drawn with weights: the weighted mean TV never exceeds √(E[kl]/2)."""
    weights = np.array([data.draw(st.floats(0.01, 1.0)) for _ in positions])
    weights /= weights.sum()
    tv = np.array([measure.tv(z, zp, T) for z, zp, T, _ in positions])
    kl = np.array(
        [max(measure.kl(z, zp, T), measure.kl(z, zp, T, reverse=True)) for z, zp, T, _ in positions]
    )
    bound = LEMMAS["mean_kl_to_tv"].evaluate(kappa=float(weights @ kl))
    assert float(weights @ tv) <= bound * (1 + 1e-9) + 1e-12


@examples(150)
@given(_pairs)
def test_signed_ratio_to_tv_is_sound(case):
    """θ = the largest log w over the vocabulary (P(log w > θ) = 0): TV ≤ 1 − e^{−θ}."""
    z, zp, T, _ = case
    theta = float(np.max(measure.log_ratio(z, zp, T)))
    assert theta >= -1e-12  # E_π' w = 1
    bound = LEMMAS["signed_ratio_to_tv"].evaluate(theta=max(theta, 0.0))
    assert measure.tv(z, zp, T) <= bound * (1 + 1e-9) + 1e-12


# ---- property: an added premise never leaves a refutation it does not satisfy --------------------
_GUARANTEES = [
    "quantity: token_tv",
    "quantity: token_log_ratio",
    "quantity: clip_budget, clip_epsilon: 0.2",
    f"{_PG}, estimator: plain",
    "quantity: reward_drift, reward_range: [0, 1]",
]
_STAT_METRICS = ("logit_drift", "logit_oscillation", "log_ratio", "abs_log_ratio", "tv", "kl",
                 "top1_flip")  # fmt: skip
_SLICES = "slices:\n  every: {position: [0, null]}\n  tail: {token_prob: [0, 0.01]}\n"


@st.composite
def _extra_clause(draw) -> tuple[str, str, str]:
    """(family, YAML line, clause max) of a random premise clause E."""
    family = draw(st.sampled_from(["numerical", "statistical", "runtime"]))
    level = draw(st.sampled_from(["0", "1.0e-6", "0.001", "0.01", "0.3", "2.5"]))
    if family == "numerical":
        metric = draw(st.sampled_from(["logit_drift", "logit_oscillation", "log_ratio", "tv"]))
        sl = draw(st.sampled_from(["all", "every", "tail"]))
        return family, f"  - {{id: E, metric: {metric}, max: {level}, slice: {sl}}}\n", level
    if family == "runtime":
        hi = draw(st.sampled_from([1, 2, 4, 64, 4096]))
        rng = draw(st.sampled_from([f"sequence_length: [1, {hi}]", f"batch_size: [1, {hi}]"]))
        return family, f"  - {{id: E, {rng}}}\n", str(hi)
    metric = draw(st.sampled_from(_STAT_METRICS))
    statistic = draw(st.sampled_from(["mean", "exceed_rate", "quantile", "max"]))
    rate = draw(st.sampled_from(["0", "0.001", "0.2"]))
    extra = {"exceed_rate": f", threshold: {level}", "quantile": ", q: 0.99"}.get(statistic, "")
    maximum = rate if statistic == "exceed_rate" else level
    sl = draw(st.sampled_from(["[all]", "[every]", "[tail]", "[tail, every]"]))
    return family, _stat("E", metric, statistic, maximum, f"{extra}, slices: {sl}"), maximum


@examples(25)
@given(
    st.sampled_from(_GUARANTEES),
    st.sampled_from(["0.01", "0.05", "0.3"]),
    _extra_clause(),
    st.booleans(),
)
def test_an_added_premise_never_leaves_a_refutation_that_violates_it(g, delta, extra, first):
    family, line, maximum = extra
    base = "numerical:\n  - {id: N1, metric: logit_drift, max: DELTA}\n".replace("DELTA", delta)
    # max at half the attained bound at δ: the contract with N1 alone is refuted
    (d,) = bounds.derive(
        loads(_text(base + f"guarantees:\n  - {{id: G, {g}, max: 1, from: [N1]}}\n"))
    )
    threshold = repr(d.value / 2)
    one = _text(base + f"guarantees:\n  - {{id: G, {g}, max: {threshold}, from: [N1]}}\n")
    assert _verdicts(one)[0].status is Status.REFUTED
    sections = {"numerical": base, "statistical": base + "statistical:\n", "runtime": base}
    body = sections[family] + (line if family != "runtime" else "runtime:\n" + line)
    from_ = "[E, N1]" if first else "[N1, E]"
    text = _text(
        body + _SLICES + f"guarantees:\n  - {{id: G, {g}, max: {threshold}, from: {from_}}}\n"
    )
    (d,) = bounds.derive(loads(text))
    (o,) = _verdicts(text)
    if o.status is not Status.REFUTED:
        return
    # a confirmed refutation rests on E, and its point satisfies E (and N1) exactly
    assert "E" in o.premises, (line, o.route)
    clause_max = {"N1": exact(float(delta)), "E": exact(float(maximum))}
    by_var = {v.name: v.clause for v in d.variables}
    for name, value in o.counterexample.point:
        clause = by_var.get(name)
        if clause in clause_max:
            assert Fraction(0) <= value <= clause_max[clause], (name, value, line)
    if family == "runtime" and "sequence_length" in line:
        assert "L" not in d.constants or d.constants["L"] <= int(maximum)


# ---- extreme estimator parameters: a verdict, never an internal error ----------------------------
_TINY, _HUGE = "5.0e-324", "1.0e+300"
_EXTREMES = (
    [f"{_PG}, estimator: {e}, cap: {c}" for e in ("tis", "seq_tis")
     for c in ("0", _TINY, "0.999999999999", "1", "1.000000000000001", "4.0e10", _HUGE)]
    + [f"{_PG}, estimator: mis, cap: {c}" for c in ("1.000000000000001", "4.0e10", _HUGE)]
    + [f"{_PG}, estimator: ppo_clip, clip_epsilon: {e}" for e in (_TINY, "0.999999999999999")]
    + [f"quantity: clip_budget, clip_epsilon: {e}" for e in (_TINY, "0.999999999999999")]
    + [f"{_PG}, estimator: {e}, band: {b}" for e in ("icepop", "geo_mask")
       for b in ("[0, 1.000000000000001]", f"[0.999999999999999, {_HUGE}]", f"[{_TINY}, 2]")]
    + [f"{_PG}, estimator: tv_mask, threshold: {t}" for t in (_TINY, "0.999999999999999")]
    + [f"{_PG}, estimator: kl_mask, threshold: {t}" for t in (_TINY, _HUGE)]
    + [f"quantity: pg_bias, score_norm: {v}, advantage: {v}, estimator: {e}"
       for v in (_TINY, _HUGE) for e in ("plain", "seq_is")]
    + [f"quantity: reward_drift, reward_range: {r}, scope: {s}"
       for r in (f"[0, {_HUGE}]", f"[-{_HUGE}, {_HUGE}]", f"[0, {_TINY}]")
       for s in ("token", "sequence")]
    + [f"quantity: sequence_tv, scope: sequence, horizon: {h}" for h in ("1", str(10**30))]
)  # fmt: skip
_PREMISES = "numerical:\n  - {id: N1, metric: logit_drift, max: 0.05}\nstatistical:\n" + _stat(
    "S1", "logit_drift", "exceed_rate", "0.01", ", threshold: 0.05, slices: [all]"
)


@pytest.mark.parametrize("premise", ["N1", "S1"])
def test_every_estimator_parameter_at_both_ends_derives_encodes_and_synthesises(premise):
    """Derivation and synth's bisection for every estimator parameter near both ends of its
    range, and the solver's encoding of each obligation from the exceedance premise (whose
    ranges reach 1/5e-324): no exception. The solver itself runs on a few cases below."""
    lines = [
        f"  - {{id: G{i}, {g}, max: 0.5, from: [{premise}]}}\n" for i, g in enumerate(_EXTREMES)
    ]
    contract = loads(_text(_PREMISES + "guarantees:\n" + "".join(lines)))
    for d in bounds.derive(contract):
        if d.expr is None:
            assert d.reason, d.guarantee
            continue
        if premise == "S1":
            box = tuple((v.name, v.clause, v.lo, v.hi) for v in d.variables)
            consts = {k: Fraction(v) for k, v in d.constants.items()}
            encode(d.expr, box, consts, d.threshold, title=d.guarantee)
        bounds.loosest(d)


@pytest.mark.parametrize(
    ("guarantee", "premise"),
    [
        (f"{_PG}, estimator: seq_tis, cap: 4.0e10", "N1"),
        (f"{_PG}, estimator: seq_tis, cap: {_HUGE}", "N1"),
        (f"{_PG}, estimator: tis, cap: {_TINY}", "S1"),
        (f"{_PG}, estimator: ppo_clip, clip_epsilon: {_TINY}", "N1"),
        (f"{_PG}, estimator: tv_mask, threshold: {_TINY}", "S1"),
    ],
)
def test_extreme_parameters_give_a_verdict_under_verify_and_synth(tmp_path, guarantee, premise):
    text = _text(
        _PREMISES + f"guarantees:\n  - {{id: G, {guarantee}, max: 0.5, from: [{premise}]}}\n"
    )
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    for argv in ([str(path), "--quiet", "--solver-budget", "1000000"], ["synth", str(path)]):
        out, err = io.StringIO(), io.StringIO()
        code = main(argv, stdout=out, stderr=err)
        assert code in (0, 1, 3) and "internal error" not in err.getvalue(), err.getvalue()


def test_kl_anchor_of_a_huge_cap_is_certified():
    from kernel_contracts.bounds.pg.closed_forms import kl_anchor

    for cap in (Fraction(4 * 10**10), Fraction(10**300)):
        anchor = kl_anchor(cap)
        assert isinstance(anchor, Fraction) and anchor > 1
        with mpmath.workdps(60):  # W₀ ≤ W*: c·log W₀ ≥ W₀ − 1
            w0 = mpmath.mpf(anchor.numerator) / anchor.denominator
            assert mpmath.mpf(cap.numerator) * mpmath.log(w0) >= w0 - 1
