"""derive(contract): routes, premises, vocabulary, monotonicity, loosest, evaluators."""

from __future__ import annotations

import itertools
import math
import pathlib
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts import bounds
from kernel_contracts.bounds import derive, evaluate, loosest
from kernel_contracts.contracts import (
    Contract,
    Guarantee,
    KernelPair,
    NumericalClause,
    Policy,
    RuntimeClause,
    Source,
    StatisticalClause,
    preset,
)
from tests.support.strategies import examples

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "contracts" / "examples").glob("*.yaml"))


def contract(numerical=(), statistical=(), guarantees=(), runtime=(), **policy) -> Contract:
    return Contract(
        version=1,
        name="test",
        policy=Policy(**policy),
        kernels=KernelPair(preset("fp32"), preset("h100-fp8")),
        source=Source(path="<test>", sha256="", canonical=""),
        numerical=tuple(numerical),
        statistical=tuple(statistical),
        runtime=tuple(runtime),
        guarantees=tuple(guarantees),
    )


N_DRIFT = NumericalClause("N1", "logit_drift", 0.02)
N_OSC = NumericalClause("N2", "logit_oscillation", 0.03)
N_RATIO = NumericalClause("N3", "log_ratio", 0.05)
N_TV = NumericalClause("N4", "tv", 0.004)
S_RATE = StatisticalClause("S1", "logit_drift", "exceed_rate", 0.001, threshold=0.02)
S_QUANT = StatisticalClause("S2", "logit_drift", "quantile", 0.05, q=0.999, confidence=0.9)
ALL = (N_DRIFT, N_OSC, N_RATIO, N_TV)
PG = {"score_norm": 5.0, "advantage": 1.0}

GUARANTEES = [
    Guarantee("token_tv", "token_tv", 0.02, ("N1",)),
    Guarantee("log_ratio", "token_log_ratio", 0.05, ("N1",)),
    Guarantee("kl", "token_kl", 0.01, ("N1",)),
    Guarantee("seq", "sequence_tv", 0.5, ("N1",)),
    Guarantee("reward_tok", "reward_drift", 0.1, ("N1",), reward_range=(-1.0, 1.0)),
    Guarantee("reward_seq", "reward_drift", 0.5, ("N1",), scope="sequence", reward_range=(0, 1)),
    Guarantee("plain", "pg_bias", 0.2, ("N1",), **PG),
    Guarantee("tis", "pg_bias", 0.2, ("N1",), estimator="tis", cap=1.01, **PG),
    Guarantee("mis", "pg_bias", 5.0, ("N1",), estimator="mis", cap=1.01, **PG),
    Guarantee("clip", "clip_budget", 0.5, ("N1",), clip_epsilon=0.2),
]

ALLOWED_FUNCS = (sympy.exp, sympy.log, sympy.tanh, sympy.Min, sympy.Max)


def _check_vocabulary(expr: sympy.Expr) -> None:
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Symbol):
            assert node.is_nonnegative, node
        elif isinstance(node, sympy.Number):
            assert isinstance(node, sympy.Rational), node  # no floats
        elif isinstance(node, sympy.Pow):
            e = node.exp
            ok = (
                e.is_Integer
                or e == sympy.Rational(1, 2)
                or e == -sympy.Rational(1, 2)
                or (e.is_Symbol and e.is_integer)
            )
            assert ok, node
        else:
            assert isinstance(node, (sympy.Add, sympy.Mul, *ALLOWED_FUNCS)), type(node)


def _all_derivations():
    c = contract(ALL, (S_RATE, S_QUANT), GUARANTEES)
    return list(derive(c))


def test_every_guarantee_quantity_is_derived():
    ds = _all_derivations()
    assert [d.guarantee for d in ds] == [g.id for g in GUARANTEES]
    for d in ds:
        assert d.expr is not None, (d.guarantee, d.reason)
        assert d.reason == ""
        _check_vocabulary(d.expr)
        values = {**d.constants, **{v.name: v.hi for v in d.variables}}
        assert d.value == pytest.approx(evaluate(d.expr, values), rel=1e-15)
        assert d.latex == sympy.latex(d.expr)
        assert set(d.chain) <= set(bounds.LEMMAS)
        assert all(
            p.removeprefix("lemma:") in bounds.LEMMAS for p in d.premises if p.startswith("lemma:")
        )


@pytest.mark.parametrize("index", range(len(GUARANTEES)))
def test_bound_is_nondecreasing_in_every_variable(index):
    d = _all_derivations()[index]
    base = {**d.constants, **{v.name: v.hi for v in d.variables}}
    for v in d.variables:
        grid = [v.hi * Fraction(i, 16) for i in range(49)]  # 0 … 3·hi
        vals = [evaluate(d.expr, {**base, v.name: x}) for x in grid]
        assert all(b >= a * (1 - 1e-14) for a, b in itertools.pairwise(vals)), v.name


def test_tightest_premise_wins_and_losers_are_kept():
    c = contract(ALL, (), [Guarantee("G", "token_tv", 0.02, ("N1", "N2", "N3", "N4"))])
    (d,) = derive(c)
    # candidates: tanh(0.04/4)=0.00999…, tanh(0.03/4)=0.0075, tanh(0.025)=0.02499, 0.004
    assert d.route == "tv_clause" and d.value == pytest.approx(0.004)
    assert d.premises[0] == "N4"
    names = [a.name for a in d.alternatives]
    assert {"token_tv_tanh", "ratio_to_tv", "token_tv_linear", "token_tv_exp"} <= set(names)
    assert all(a.value >= d.value for a in d.alternatives)


def test_named_looser_alternatives_for_drift():
    (d,) = derive(contract([N_DRIFT], (), [Guarantee("G", "token_tv", 0.02, ("N1",))]))
    alt = {a.name: a.value for a in d.alternatives}
    assert d.value == pytest.approx(math.tanh(0.01))
    assert alt["token_tv_linear"] == pytest.approx(0.01)  # δ/(2T)
    assert alt["token_tv_exp"] == pytest.approx(math.expm1(0.04) / 2)  # ½(e^{2δ/T} − 1)


@pytest.mark.parametrize(
    ("L", "delta", "winner"),
    [
        (1, 0.02, "sequence_tv_coupling"),
        (512, 0.02, "sequence_tv_pinsker"),
        (16384, 0.02, "sequence_tv_bretagnolle_huber"),
    ],
)
def test_sequence_route_winner_depends_on_regime(L, delta, winner):
    g = Guarantee("G", "sequence_tv", 0.5, ("N1",), horizon=L)
    (d,) = derive(contract([NumericalClause("N1", "logit_drift", delta)], (), [g]))
    assert d.route == winner
    assert len(d.alternatives) == 3
    assert all(a.value >= d.value for a in d.alternatives)


def test_statistical_premise_bounds_an_expectation():
    g = Guarantee("G", "token_tv", 0.02, ("S1",))
    (d,) = derive(contract((), [S_RATE], [g]))
    assert d.extra["scope"] == "expectation"
    assert d.extra["confidence"] == 0.95
    assert d.value == pytest.approx(0.999 * math.tanh(0.01) + 0.001)
    assert any("expectation" in n for n in d.notes)
    (q,) = derive(contract((), [S_QUANT], [Guarantee("G", "token_tv", 0.1, ("S2",))]))
    assert q.value == pytest.approx(0.999 * math.tanh(0.025) + 0.001)
    assert q.extra["confidence"] == 0.9


@pytest.mark.parametrize(
    ("g", "clauses", "reason"),
    [
        (Guarantee("G", "clip_budget", 1.0, ("N4",), clip_epsilon=0.2), [N_TV], "no lemma"),
        (Guarantee("G", "token_log_ratio", 1.0, ("S1",)), [S_RATE], "only an expectation"),
        (Guarantee("G", "reward_drift", 1.0, ("N1",)), [N_DRIFT], "reward_range"),
        (Guarantee("G", "pg_bias", 1.0, ("N1",)), [N_DRIFT], "score_norm"),
        (Guarantee("G", "pg_bias", 1.0, ("N1",), estimator="tis", **PG), [N_DRIFT], "cap"),
        (Guarantee("G", "token_tv", 1.0, ("N9",)), [N_DRIFT], "unknown clause"),
        (
            Guarantee("G", "token_tv", 1.0, ("N5",)),
            [NumericalClause("N5", "logit_drift", 0.1, slice="tail")],
            "only on slice",
        ),
        (Guarantee("G", "token_tv", 1.0, ()), [N_DRIFT], "no premise"),
    ],
)
def test_unsupported_guarantees_say_why(g, clauses, reason):
    num = [c for c in clauses if isinstance(c, NumericalClause)]
    stat = [c for c in clauses if isinstance(c, StatisticalClause)]
    (d,) = derive(contract(num, stat, [g]))
    assert d.expr is None
    assert reason in d.reason + " ".join(d.notes), (d.reason, d.notes)
    assert loosest(d) is None


def test_runtime_clauses_are_conditions():
    g = Guarantee("G", "token_tv", 0.02, ("N1", "R1"))
    (d,) = derive(contract([N_DRIFT], (), [g], runtime=[RuntimeClause("R1", batch_size=(1, 8))]))
    assert d.expr is not None and "R1" in d.premises


def test_truncated_support_is_reported_not_folded():
    g = Guarantee("G", "token_log_ratio", 0.05, ("N1",))
    (plain,) = derive(contract([N_DRIFT], (), [g]))
    (full,) = derive(contract([N_DRIFT], (), [g], top_p=0.9, logprobs="full_vocab"))
    assert full.expr == plain.expr and full.value == plain.value
    (trunc,) = derive(contract([N_DRIFT], (), [g], top_p=0.9, logprobs="processed"))
    assert trunc.expr is None and "log ratio ±∞" in trunc.reason
    assert any("log(S_inf/S_train)" in n for n in trunc.notes)
    assert not plain.notes


@pytest.mark.parametrize("quantity", ["token_tv", "token_kl", "sequence_tv", "pg_bias"])
@pytest.mark.parametrize("truncation", [{"top_k": 1}, {"top_k": 40}, {"top_p": 0.9}])
def test_truncated_sampling_law_has_no_bound(quantity, truncation):
    g = Guarantee("G", quantity, 0.99, ("N1",), score_norm=1.0, advantage=1.0)
    (d,) = derive(contract([N_DRIFT], (), [g], logprobs="full_vocab", **truncation))
    assert d.expr is None and "nearly tie" in d.reason and "TV up to 1" in d.reason
    if truncation.get("top_k") == 1:
        assert "greedy decoding" in d.reason


def test_loosest_is_on_the_boundary():
    (d,) = derive(contract([N_DRIFT], (), [Guarantee("G", "token_tv", 0.011, ("N1",))]))
    out = loosest(d)
    hi = out["delta_N1"]
    assert hi == Fraction(11, 500)  # tanh(δ/2) ≤ 0.011 ⇔ δ ≤ 0.0220009…, 3 digits down
    assert evaluate(d.expr, {**d.constants, "delta_N1": hi}) <= 0.011
    assert evaluate(d.expr, {**d.constants, "delta_N1": hi * Fraction(10005, 10000)}) > 0.011


def test_loosest_none_when_zero_fails():
    g = Guarantee("G", "token_tv", 0.0005, ("S1",))
    (d,) = derive(contract((), [S_RATE], [g]))
    assert loosest(d) is None  # ρ alone already costs 0.001 at δ = 0


@pytest.mark.skipif(not EXAMPLES, reason="no example contracts")
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_contracts_are_fully_derived(path):
    from kernel_contracts.contracts import load

    for d in derive(load(str(path))):
        assert d.expr is not None, (d.guarantee, d.reason)
        _check_vocabulary(d.expr)


def test_numpy_and_jax_evaluators_agree_with_mpmath():
    d = _all_derivations()[3]  # sequence TV: Min/Max/log/exp/sqrt
    names = sorted(s.name for s in d.expr.free_symbols)
    consts = {**d.constants}
    var = d.variables[0].name
    grid = np.linspace(0.0, 0.5, 257)
    args = [grid if n == var else float(consts[n]) for n in names]
    np_vals = bounds.numpy_function(d.expr, names)(*args)
    jax_vals = np.asarray(bounds.jax_function(d.expr, names)(*args))
    ref = np.array([evaluate(d.expr, {**consts, var: float(x)}) for x in grid[::32]])
    np.testing.assert_allclose(np_vals[::32], ref, rtol=1e-12)
    # JAX computes in float32 by default, and K(s) = log((e^s − 1)/s) − 1 + s/(e^s − 1) cancels
    # about 4 digits near s = 1/8: 1e-4 relative is float32's 1.2e-7 times that loss
    np.testing.assert_allclose(jax_vals[::32], ref, rtol=1e-4)


def test_import_does_not_load_jax():
    code = (
        "import sys; from kernel_contracts import bounds; bounds.derive;"
        "assert 'jax' not in sys.modules, 'jax loaded'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@examples(40)
@given(
    st.sampled_from([0.001, 0.02, 0.3, 2.0]),
    st.sampled_from([0.1, 0.7, 1.0, 5.0]),
    st.integers(0, 2**32 - 1),
)
def test_derived_values_bound_the_true_quantities(delta, T, seed):
    """End to end: a contract's derived values hold for logit pairs meeting its clause."""
    from kernel_contracts.bounds import measure

    gs = [
        Guarantee("tv", "token_tv", 1.0, ("N1",)),
        Guarantee("lr", "token_log_ratio", 1.0, ("N1",)),
        Guarantee("kl", "token_kl", 1.0, ("N1",)),
        Guarantee("clip", "clip_budget", 1.0, ("N1",), clip_epsilon=0.2),
        Guarantee("tis", "pg_bias", 1.0, ("N1",), estimator="tis", cap=1.5, **PG),
        Guarantee("mis", "pg_bias", 1.0, ("N1",), estimator="mis", cap=1.5, **PG),
    ]
    c = contract([NumericalClause("N1", "logit_drift", delta)], (), gs, temperature=T)
    v = {d.guarantee: d.value for d in derive(c)}
    rng = np.random.default_rng(seed)
    for _ in range(20):
        z = rng.normal(0, rng.choice([0.5, 3.0]), rng.choice([2, 7, 500]))
        zp = z + np.where(rng.random(z.size) < rng.random(), delta, -delta)
        tol = 1e-10
        assert measure.tv(z, zp, T) <= v["tv"] * (1 + 1e-12) + tol
        assert measure.max_abs_log_ratio(z, zp, T) <= v["lr"] * (1 + 1e-12) + tol
        assert max(measure.kl(z, zp, T), measure.kl(z, zp, T, True)) <= v["kl"] * (1 + 1e-12) + tol
        assert measure.clip_share(z, zp, T, 0.2) <= v["clip"] * (1 + 1e-12) + tol
        assert 5.0 * measure.tis_excess(z, zp, T, 1.5) <= v["tis"] * (1 + 1e-12) + tol
        assert 5.0 * measure.mis_masked_mass(z, zp, T, 1.5) <= v["mis"] * (1 + 1e-12) + tol
