"""Truncated IS normalised by its batch mean (tis_norm, ω = min(w, c)/m): the bound K +
(1 − K)₊·D_tis, K = e^x − 1, holds on every batch, enumerated exactly (every draw of a batch of
positions, in float64 and in exact rationals); it is a bound, not the supremum, so its
obligations prove above it and never refute below it; the DSL reads the estimator and the
exports write verl's setting or refuse with the reason.

Measured gap (the better of the one-token and population witnesses / bound): drift s = 0.05:
0.49, s = 0.2: 0.45 (c = 2), s = 0.5: 0.38, s = 1: 0.29, s = 3: 0.067; ratio r = 0.05: 0.96,
r = 0.3: 0.84, r = 1: 0.52 (c = 2).
"""

from __future__ import annotations

import itertools
import math
import pathlib
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts import bounds, contracts
from kernel_contracts.bounds import LEMMAS
from kernel_contracts.contracts.errors import KernelContractsError
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import discharge
from tests.support.pg_contracts import head, pg_contract
from tests.support.strategies import examples, within


def _drift_bound(s: float, c: float) -> float:
    return bounds.pg_bias_bound("tis_norm", osc=s, cap=c)


@pytest.mark.parametrize(
    ("osc", "c", "floor"),
    [(0.05, 2.0, 0.48), (0.2, 2.0, 0.45), (0.5, 2.0, 0.38), (1.0, 2.0, 0.28), (3.0, 2.0, 0.06)],
)
def test_drift_witness_stays_below_the_bound_with_the_measured_gap(osc, c, floor):
    w = LEMMAS["pg_bias_tis_norm"].witness(osc, 1.0, c)
    assert floor <= w.ratio <= 1 + 1e-12, w.ratio
    assert w.bound == pytest.approx(_drift_bound(osc, c), rel=1e-12)
    assert bounds.pg_bias_supremum("tis_norm", osc=osc, cap=c) is None


@pytest.mark.parametrize(("r", "floor"), [(0.05, 0.95), (0.3, 0.83), (1.0, 0.51)])
def test_ratio_witness_stays_below_the_bound_with_the_measured_gap(r, floor):
    w = LEMMAS["pg_bias_tis_norm_ratio"].witness(r, 2.0)
    assert floor <= w.ratio <= 1 + 1e-12, w.ratio


def _batch_discrepancy(laws, cap, exact=False):
    """The largest, over the batch's positions, of E|ω − w| at that position, every draw of the
    batch enumerated: ``laws`` is one (π, π') pair of probability lists per position."""
    one = Fraction(1) if exact else 1.0
    best = 0 * one
    draws = itertools.product(*(range(len(p)) for p, _ in laws))
    per = [0 * one] * len(laws)
    for draw in draws:
        prob = one
        ws = []
        for (p, q), y in zip(laws, draw, strict=True):
            prob *= q[y]
            ws.append(p[y] / q[y])
        capped = [min(w, cap) for w in ws]
        m = sum(capped) / len(capped)
        for i, (w, k) in enumerate(zip(ws, capped, strict=True)):
            per[i] += prob * abs(k / m - w)
    best = max(per)
    return best


def _tilted(rng, vocab: int, s: float) -> tuple[list[float], list[float]]:
    q = rng.dirichlet(np.full(vocab, rng.choice([0.2, 1.0, 5.0])))
    x = rng.uniform(0.0, s, vocab)
    x[rng.integers(vocab)] = rng.choice([0.0, s])
    p = q * np.exp(x)
    return list(p / p.sum()), list(q)


@examples(60)
@given(st.integers(1, 4), st.integers(2, 3), st.sampled_from([0.05, 0.3, 1.0, 3.0]),
       st.sampled_from([1.05, 1.5, 2.0, 5.0]), st.integers(0, 2**32 - 1))  # fmt: skip
def test_every_batch_enumerated_stays_below_the_drift_bound(n, vocab, s, c, seed):
    rng = np.random.default_rng(seed)
    laws = [_tilted(rng, vocab, s) for _ in range(n)]
    got = _batch_discrepancy(laws, c)
    assert within(got, _drift_bound(s * (1 + 1e-12), c)), (got, n, s, c)


@examples(60)
@given(
    st.lists(st.tuples(st.lists(st.integers(1, 30), min_size=2, max_size=3),
                       st.lists(st.integers(1, 30), min_size=2, max_size=3)),
             min_size=1, max_size=3),
    st.fractions(Fraction(101, 100), 5),
)  # fmt: skip
def test_exact_rational_batches_stay_below_the_ratio_bound(positions, c):
    laws = []
    for a, b in positions:
        k = min(len(a), len(b))
        laws.append(([Fraction(v, sum(a[:k])) for v in a[:k]],
                     [Fraction(v, sum(b[:k])) for v in b[:k]]))  # fmt: skip
    ws = [pi / qi for p, q in laws for pi, qi in zip(p, q, strict=True)]
    x = max(max(ws), 1 / min(ws))  # e^r, rational: every |log w| ≤ r
    k = x - 1
    bound = k + max(1 - k, 0) * max(x - c, 0) / (1 + x)
    assert _batch_discrepancy(laws, c, exact=True) <= bound


def test_one_token_batches_are_plain_importance_weights():
    # a batch of one token: m = min(w, c), ω = 1, the discrepancy is plain's E|1 − w| = 2·TV
    p, q = [0.7, 0.3], [0.4, 0.6]
    assert _batch_discrepancy([(p, q)], 2.0) == pytest.approx(2 * 0.3, rel=1e-12)


# ---- the DSL, derivations, obligations and exports ------------------------------------------
def test_obligations_prove_above_and_never_refute_below_the_bound():
    c = pg_contract(["estimator: tis_norm, cap: 2, max: 2.0, from: [N1]",
                     "estimator: tis_norm, cap: 2, max: 0.5, from: [N1]",
                     "estimator: tis_norm, cap: 2, max: 100, from: [N3]"],
                    delta="0.1", name="norm")  # fmt: skip
    above, below, ratio = bounds.derive(c)
    assert above.value == pytest.approx(5 * _drift_bound(0.2, 2.0), rel=1e-12)
    assert not above.extra["attained"] and above.chain[-1] == "pg_bias_tis_norm"
    assert ratio.chain[-1] == "pg_bias_tis_norm_ratio"
    assert discharge(above).status is Status.PROVED
    ob = discharge(below)
    assert ob.status is Status.UNKNOWN and "not attained" in ob.reason, ob.reason


@pytest.mark.parametrize(
    ("guarantee", "message"),
    [("estimator: tis_norm, cap: 1", "> 1"), ("estimator: tis_norm", "needs a cap")],
)
def test_bad_parameters_are_refused_with_their_key(guarantee, message):
    with pytest.raises(KernelContractsError) as err:
        pg_contract([f"{guarantee}, max: 1, from: [N1]"], name="norm")
    text = str(err.value)
    assert message in text and "guarantees[0]." in text, text


def test_a_tv_premise_alone_gives_no_bound():
    c = pg_contract(["estimator: tis_norm, cap: 2, max: 1, from: [N2]"], name="n", tv="0.1")
    (d,) = bounds.derive(c)
    assert d.expr is None and d.reason


def test_verl_export_normalises_and_the_others_refuse():
    from kernel_contracts.verify.pipeline.export import FRAMEWORKS, NoCounterpart, Request

    r = Request("G", "tis_norm", cap=Fraction(2))
    verl = dict(FRAMEWORKS["verl"].settings(r))
    rc = "algorithm.rollout_correction."
    assert verl[rc + "rollout_is"] == "token" and verl[rc + "rollout_is_threshold"] == 2
    assert verl[rc + "rollout_is_batch_normalize"] is True
    for name in ("trl", "nemo-rl", "skyrl"):
        with pytest.raises(NoCounterpart, match="batch mean"):
            FRAMEWORKS[name].settings(r)


def test_the_rl_page_tis_norm_guarantee_is_read_and_proved():
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "rl.md").read_text("utf-8")
    section = page[page.index("## Truncated IS over its batch mean") :]
    block = re.search(r"```yaml\n(guarantees:\n.*?)```", section, re.S).group(1)
    c = contracts.loads(head(name="norm").replace("guarantees:\n", "") + block, path="rl.md")
    (d,) = bounds.derive(c)
    assert discharge(d).status is Status.PROVED, d.guarantee


def test_the_weight_rule_is_verls_on_a_batch():
    from kernel_contracts.kernels.rl import correction_weights

    rng = np.random.default_rng(3)
    lr = rng.normal(0.0, 0.5, (8, 16)).astype(np.float32)
    mask = (rng.random((8, 16)) < 0.8).astype(np.float32)
    got = np.asarray(correction_weights("tis_norm", lr, mask, mask, params={"cap": 1.5}))
    # verl: exp(clamp(log w, ±20))·mask, clamp(max=c), divided by the masked mean if > 1e-8
    w = np.minimum(np.exp(np.clip(lr.astype(np.float64), -20, 20)) * mask, 1.5)
    want = w / (np.sum(w * mask) / np.sum(mask))
    np.testing.assert_allclose(got, want * mask, rtol=2e-6)
    assert math.isclose(float(np.sum(got) / np.sum(mask)), 1.0, rel_tol=1e-5)
