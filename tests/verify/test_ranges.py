"""Centered-form ranges: every sub-expression's range encloses its values, and is tight enough
that the sequence-TV routes through the exact KL supremum encode and prove past its kink."""

from __future__ import annotations

import random
from fractions import Fraction

import mpmath
import pytest
import sympy

from kernel_contracts import bounds
from kernel_contracts.contracts import loads
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import discharge
from kernel_contracts.verify.proving.solve import intervals, ranges

_HEAD = """contract: 1
name: ranges
policy: {{temperature: {T}, vocab_size: 32000, max_new_tokens: {L}}}
kernels: {{train: {{preset: fp32}}, inference: {{preset: h100-fp8}}}}
numerical:
  - {{id: N1, metric: logit_drift, max: {delta}}}
guarantees:
  - {{id: G, quantity: {quantity}, max: {max}, from: [N1]}}
"""


def _derivation(T="1.0", L="512", delta="0.1", quantity="sequence_tv", maximum="0.99"):
    quantity += ", clip_epsilon: 0.2" if quantity == "clip_budget" else ""
    text = _HEAD.format(T=T, L=L, delta=delta, quantity=quantity, max=maximum)
    (d,) = bounds.derive(loads(text))
    return d


def _env(d, lo=None, hi=None):
    env = {k: (Fraction(v), Fraction(v)) for k, v in d.constants.items()}
    for v in d.variables:
        env[v.name] = (Fraction(v.lo) if lo is None else lo, Fraction(v.hi) if hi is None else hi)
    return env


def _mp(x: Fraction) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


CASES = [
    ("1.0", "512", "0.1", "sequence_tv"),  # crosses the kink 2δ/T = 1/8 at δ = 1/16
    ("1.0", "4096", "0.1", "sequence_tv"),
    ("0.5", "16", "0.3", "sequence_tv"),
    ("1.0", "1", "0.02", "token_kl"),
    ("0.05", "512", "0.01", "clip_budget"),
]


def _random_cases(n: int, seed: int = 7) -> list[tuple[str, str, str, str]]:
    rng = random.Random(seed)
    quantities = ["sequence_tv", "token_kl", "token_tv", "clip_budget"]
    return [
        (
            repr(round(rng.uniform(0.05, 5), 3)),
            str(rng.choice([1, 3, 64, 4096])),
            repr(round(rng.uniform(0.001, 3), 4)),
            rng.choice(quantities),
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize(("T", "L", "delta", "quantity"), CASES + _random_cases(8))
def test_every_range_encloses_the_values(T, L, delta, quantity):
    d = _derivation(T, L, delta, quantity)
    env = _env(d)
    memo = ranges.tighten(d.expr, env)
    (var,) = [v.name for v in d.variables]
    lo, hi = env[var]
    names = sorted(s.name for s in d.expr.free_symbols)
    with mpmath.workdps(80):
        consts = {k: _mp(v[0]) for k, v in env.items() if k != var}
        for node, (r_lo, r_hi) in memo.items():
            if node.is_Number or not node.free_symbols:
                continue
            syms = sorted(node.free_symbols, key=lambda s: s.name)
            f = sympy.lambdify(syms, node, modules="mpmath")
            for k in range(201):  # the ends, the kink's neighbourhood and a dense grid
                x = lo + (hi - lo) * Fraction(k, 200)
                vals = {**consts, var: _mp(x)}
                value = f(*[vals[s.name] for s in syms])
                assert _mp(r_lo) <= value <= _mp(r_hi), (str(node)[:80], float(x))
    assert set(names) <= {*env}


def test_ranges_are_far_tighter_than_naive_past_the_kink():
    d = _derivation()
    env = _env(d)
    kl = next(n for n in sympy.preorder_traversal(d.expr) if isinstance(n, sympy.Min))
    naive = intervals.evaluate(kl, env)
    tight = ranges.tighten(d.expr, env)[kl]
    assert naive[0] < -0.5  # the closed form's cancellation, naively
    assert tight[0] >= 0 and tight[1] - tight[0] < Fraction(1, 100)


@pytest.mark.parametrize("maximum", ["0.99", "0.9606"])
def test_sequence_tv_past_the_kink_is_proved(maximum):
    # δ = 0.1, T = 1, L = 512: 2δ/T = 0.2 ≥ 1/8, where the KL bound is the exact K(s); the
    # Bretagnolle–Huber route gives 0.960513 (it could not be encoded before)
    d = _derivation(maximum=maximum)
    assert d.route == "sequence_tv_bretagnolle_huber"
    o = discharge(d)
    assert o.status is Status.PROVED, o.reason
    assert o.bound == pytest.approx(0.960513, abs=1e-6)


def test_pinsker_past_the_kink_is_proved():
    d = _derivation(L="16", delta="0.1", maximum="0.25")  # √(16·K(0.2)/2) = 0.19866
    assert d.route == "sequence_tv_pinsker"
    o = discharge(d)
    assert o.status is Status.PROVED, o.reason


def test_a_tightened_query_re_checks(tmp_path):
    # the re-checker regenerates the query text, range lemmas included, from the report alone
    import json

    from kernel_contracts.verify.proving.check.recheck import check_data
    from kernel_contracts.verify.proving.render.report import dumps
    from kernel_contracts.verify.proving.runner import run

    text = _HEAD.format(T="1.0", L="512", delta="0.1", quantity="sequence_tv", max="0.99")
    data = json.loads(dumps(run(loads(text, str(tmp_path / "gone.yaml")))))
    (o,) = data["obligations"]
    assert o["status"] == "proved" and "range_arg." in o["smtlib"][0]["text"]
    result = check_data(data, report_dir=str(tmp_path))
    assert result.ok, result.differences
    forged = json.loads(json.dumps(data))
    q = forged["obligations"][0]["smtlib"][0]
    q["text"] = q["text"].replace(":named range_arg.", ":named range_xarg.", 1)
    assert not check_data(forged, report_dir=str(tmp_path)).ok
