"""The bias bounds under verl's and SkyRL's clamp of log w to ±20 (``kernels.rl.ties.CLAMPS``).

Under ``ties="verl"`` or ``"skyrl"`` a weight is computed as those frameworks compute it: w is
exp of the log-ratio clamped to [−20, 20] (``clamp: value``), or the loss's ratio goes through
that clamp and passes no gradient beyond it (``clamp: gradient``: ω = 0 where |log w| > 20).
The clamp changes a weight only beyond e^±20, so the laws here reach there: two to six tokens
whose logit drift reaches ±40, and E_π'|ω − w| of the weights ``numpy_weights`` gives under
each clamped rule, with the advantage's sign drawn per token, is checked against the bound
``bounds.pg_bias_bound`` derives from the law's oscillation.

What the tests find, and pin:

- The masks whose band lies inside (e^−20, e^20) (``icepop``, ``tis_mask``, ``seq_outlier``
  from a positive lower end; ``cispo``) decide and weigh every token as the unclamped rule
  does. The dual clip's lost gradient beyond the clamp is the weight the estimator itself
  gives the token under the other advantage sign (w < e^−20 is clipped for A < 0, w > e^20 for
  A > 0), and DPPO's is a dropped token, ω ∈ {0, w}: both stay within the bound, which holds
  for every sign.
- A kept weight under e^−20 is raised to e^−20 (``tis``, ``mis``, ``icepop`` and ``cispo``
  from 0, verl's DPPO) or lost (SAPO's gate): E_π'|ω − w| moves by less than e^−20 ≈ 2.1e−9,
  and that can pass the supremum: at an oscillation of 45 the clamped ``tis`` exceeds its
  (attained) bound by 1.9e−9 and the clamped ``mis`` gives E_π'|ω − w| > 1 (a pinned law
  below). The bound plus e^−20 holds for them. So such a clamped estimator is covered by its
  bound only where no token has |log w| > 20, which an export to verl or SkyRL must prove
  (``Framework.ratio_clamp``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts import bounds
from kernel_contracts.kernels.rl.ties import LOG_RATIO_CLAMP, TIE_RULES
from kernel_contracts.kernels.rl.weight_rules import numpy_weights
from tests.support.strategies import examples, within

E20 = math.exp(-LOG_RATIO_CLAMP)  # the most a clamped weight under e^−20 moves
# the parameters each clamped estimator is drawn with; a band from 0 where the DSL allows it
PARAMS = {
    "tis": [{"cap": 1.25}],
    "mis": [{"cap": 2.0}],
    "icepop": [{"band": (0.5, 2.0)}, {"band": (0.0, 2.0)}],
    "tis_mask": [{"cap": 1.25, "band": (0.25, 1.5)}],
    "seq_outlier": [{"band": (0.5, 2.0)}],
    "cispo": [{"band": (0.8, 1.2)}, {"band": (0.0, 1.2)}],
    "dual_clip": [{"clip_epsilon": 0.25, "cap": 1.125}],
    "dppo_tv": [{"threshold": 0.05}],
    "dppo_kl": [{"threshold": 0.02}],
    "sapo": [{"temperatures": (1.0, 1.05)}],
}
# the clamped rules whose kept weight under e^−20 moves, so that only the bound plus e^−20
# holds: raised to e^−20 where the rule reads the clamped w (``value``) and keeps such a
# weight (a band from 0 included), or lost with SAPO's gate
RAISED = {"tis", "mis", "dppo_tv", "dppo_kl"}
# estimators with a sequence or batch weight, or a bound from their criteria, not drawn here:
# seq_tis and seq_mask clamp a sequence's sum, tis_norm divides by the batch mean, kl_reject's
# bound is derived from its criteria
NOT_DRAWN = {"seq_tis", "seq_mask", "tis_norm", "kl_reject"}
CLAMPED = sorted(
    (framework, name, i)
    for framework, rules in TIE_RULES.items()
    for name, rule in rules.items()
    if rule.clamp is not None and name not in NOT_DRAWN and name != "gspo"
    for i in range(len(PARAMS[name]))
)


def _raised(framework: str, name: str, prm: dict) -> bool:
    """Whether a weight under e^−20 that the estimator keeps can move under the clamp."""
    if TIE_RULES[framework][name].clamp == "gradient":
        return name == "sapo"  # the dual clip's and DPPO's lost weight is a dropped token's
    return name in RAISED or (name in ("icepop", "cispo") and prm["band"][0] < E20)


@st.composite
def _law(draw):
    """(log π', log π) of 2 to 6 tokens (float64 log-softmax of logits z' and z = z' + Δ, one Δ
    entry large enough that some |log w| passes 20), and the oscillation max Δ − min Δ."""
    n = draw(st.integers(2, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    z_inf = rng.normal(0.0, draw(st.sampled_from([0.5, 3.0, 10.0])), n)
    delta = rng.uniform(-1.0, 1.0, n) * draw(st.floats(0.0, 5.0))
    big = draw(st.floats(15.0, 40.0)) * draw(st.sampled_from([1.0, -1.0]))
    delta[draw(st.integers(0, n - 1))] = big
    z = z_inf + delta
    log_q = z_inf - np.logaddexp.reduce(z_inf)
    log_p = z - np.logaddexp.reduce(z)
    return log_q, log_p, float(delta.max() - delta.min())


def _discrepancy(name, prm, log_q, log_p, signs, ties) -> float:
    """E_π'|ω − w| of the weights ``ties``'s rule gives; each token its own row (so a sequence
    rule sees one token) with its advantage sign."""
    lr = (log_p - log_q)[:, None]
    omega = numpy_weights(
        name, lr, np.ones_like(lr), signs[:, None], params=prm, logp_inf=log_q[:, None], ties=ties
    )[:, 0]
    return float(np.sum(np.exp(log_q) * np.abs(omega - np.exp(lr[:, 0]))))


@pytest.mark.parametrize(("framework", "name", "i"), CLAMPED)
@examples(6)
@given(law=_law(), data=st.data())
def test_the_bound_holds_for_the_clamped_weights(framework, name, i, law, data):
    prm = PARAMS[name][i]
    log_q, log_p, osc = law
    n = len(log_q)
    signs = np.array(data.draw(st.lists(st.sampled_from([1.0, -1.0]), min_size=n, max_size=n)))
    bound = bounds.pg_bias_bound(name, osc=osc * (1 + 1e-12), **prm)
    clamped = _discrepancy(name, prm, log_q, log_p, signs, framework)
    assert within(_discrepancy(name, prm, log_q, log_p, signs, None), bound)
    slack = E20 if _raised(framework, name, prm) else 0.0
    assert within(clamped, bound + slack), (framework, name, prm, clamped, bound)


def _two_point(osc: float):
    """The tis witness's shape at oscillation ``osc``: one token with logit drift +osc/2 on
    π' ≈ e^(−osc/2), the other at drift −osc/2 (w ≈ e^(−osc/2) < e^−20 past osc = 40)."""
    a = osc / 2
    log_q = np.array([-a - math.log1p(math.exp(-a)), -math.log1p(math.exp(-a))])
    log_p = np.array([-math.log1p(math.exp(-a)), -a - math.log1p(math.exp(-a))])
    return log_q, log_p


@pytest.mark.parametrize("framework", ["verl", "skyrl"])
def test_the_lower_clamp_passes_the_supremum_by_less_than_e_minus_20(framework):
    log_q, log_p = _two_point(45.0)
    osc = float(np.ptp(log_p - log_q))
    plus = np.ones(2)
    for name, prm in (("tis", {"cap": 2.0}), ("mis", {"cap": 2.0}), ("icepop", {"band": (0, 2)})):
        bound = bounds.pg_bias_bound(name, osc=osc, **prm)
        exact = _discrepancy(name, prm, log_q, log_p, plus, None)
        clamped = _discrepancy(name, prm, log_q, log_p, plus, framework)
        assert exact <= bound  # the estimator is within its bound
        assert clamped > bound + 1e-9  # the clamped weight is not: the token at w < e^−20
        assert clamped - exact < E20  # raised to e^−20 moves the discrepancy by under e^−20
    assert _discrepancy("mis", {"cap": 2.0}, log_q, log_p, plus, framework) > 1.0
    sup = bounds.pg_bias_supremum("tis", osc=osc, cap=2.0)  # tis's bound is attained
    assert sup == pytest.approx(bounds.pg_bias_bound("tis", osc=osc, cap=2.0), rel=1e-12)


def test_every_clamped_rule_is_drawn_or_named():
    clamped = {n for rules in TIE_RULES.values() for n, r in rules.items() if r.clamp}
    assert clamped <= set(PARAMS) | NOT_DRAWN
    assert {f for f, rules in TIE_RULES.items() if any(r.clamp for r in rules.values())} == {
        "verl",
        "skyrl",
    }


# exported clamped pairs whose weights the clamp cannot raise, or that have their own guard:
# the dual clip (its lost weight is a dropped token's), kl_reject (exported only with options
# inside the clamp, which drop every token beyond it: verify.pipeline.export.verl); the
# sequence weights of seq_tis and seq_mask need |log w| <= 20/L per token instead (their sum
# is what is clamped: Framework.sequence_clamp)
SEQUENCE_SUMS = {"seq_tis", "seq_mask"}
NO_TOKEN_PROOF = {"dual_clip", "kl_reject", *SEQUENCE_SUMS}


@pytest.mark.parametrize("framework", ["verl", "skyrl"])
def test_an_export_whose_clamped_weight_can_move_needs_the_log_ratio_inside_the_clamp(framework):
    from kernel_contracts.verify.pipeline.export import FRAMEWORKS

    needs = {
        name
        for name, rule in TIE_RULES[framework].items()
        if rule.exported and rule.clamp is not None and name not in NO_TOKEN_PROOF
    }
    assert needs, framework
    clamp = FRAMEWORKS[framework].ratio_clamp
    assert {n: clamp.get(n) for n in needs} == dict.fromkeys(needs, LOG_RATIO_CLAMP)
    assert not set(clamp) & {"dual_clip"}
    sums = {n for n, rule in TIE_RULES[framework].items() if rule.exported and rule.clamp}
    sums &= SEQUENCE_SUMS
    assert sums == SEQUENCE_SUMS, framework
    per_sequence = FRAMEWORKS[framework].sequence_clamp
    assert {n: per_sequence.get(n) for n in sums} == dict.fromkeys(sums, LOG_RATIO_CLAMP)
