"""GSPO anchored on the rollout (gspo, ω_t = s·1[not clipped], s the sequence's geometric-mean
ratio): the bound min(1 + (e^x − 2e^{−x})₊, e^x − 1 + D_plain(x) + 1[e^x ≥ 1 + ε]) holds at
every position of every sequence law enumerated (prefix-dependent laws, sequences that end
early, the advantage's sign the worse per draw, which covers every framework's tie rule and
verl's and SkyRL's zero above log s = 10), in float64 and on exact rational laws with s
enclosed by integer roots; it is a bound, not the supremum, so its obligations prove above it
and never refute below it; the weight is the gradient of verl's GSPO loss; the DSL reads the
estimator and every export refuses with its reason.

Measured gap (best enumerated sequence witness / bound, ε = 0.2): drift s = 0.05: 0.32,
s = 0.15: 0.31, s = 0.2: 0.098 (the drop step is on from e^s ≥ 1.2), s = 0.5: 0.70, s = 1: 0.34;
ratio r = 0.05: 0.46, r = 0.15: 0.47, r = 0.3: 1.0 (every token dropped), r = 1: 0.35.
"""

from __future__ import annotations

import math
import pathlib
import re
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts import bounds, contracts
from kernel_contracts.bounds import LEMMAS
from kernel_contracts.bounds.pg import gspo
from kernel_contracts.contracts.errors import KernelContractsError
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import discharge
from tests.support.pg_contracts import head, pg_contract
from tests.support.strategies import examples, within

EPS = 0.2


def _drift_bound(s: float, eps: float = EPS) -> float:
    return bounds.pg_bias_bound("gspo", osc=s, clip_epsilon=eps)


@pytest.mark.parametrize(
    ("osc", "floor"), [(0.05, 0.32), (0.15, 0.31), (0.2, 0.098), (0.5, 0.69), (1.0, 0.33)]
)
def test_drift_witness_stays_below_the_bound_with_the_measured_gap(osc, floor):
    w = LEMMAS["pg_bias_gspo"].witness(osc, 1.0, EPS)
    assert floor <= w.ratio <= 1 + 1e-12, w.ratio
    assert w.bound == pytest.approx(_drift_bound(osc), rel=1e-12)
    assert bounds.pg_bias_supremum("gspo", osc=osc, clip_epsilon=EPS) is None


@pytest.mark.parametrize(("r", "floor"), [(0.05, 0.45), (0.15, 0.47), (0.3, 0.99), (1.0, 0.34)])
def test_ratio_witness_stays_below_the_bound_with_the_measured_gap(r, floor):
    w = LEMMAS["pg_bias_gspo_ratio"].witness(r, EPS)
    assert floor <= w.ratio <= 1 + 1e-12, w.ratio


# ---- sequence laws, every draw enumerated ---------------------------------------------------
def _paths(node, prob, ws):
    """(π'-probability, the w of each token) of every complete sequence under ``node``: a node
    is (π, π', children), children[y] the node after token y, or None where y ends it."""
    p, q, children = node
    for y, (py, qy) in enumerate(zip(p, q, strict=True)):
        here = (prob * qy, [*ws, py / qy])
        if children[y] is None:
            yield here
        else:
            yield from _paths(children[y], *here)


def _cost(s, w, eps, dropped_if_either=False):
    """|ω − w| at the worse advantage sign: w where a sign clips s, |s − w| where none does."""
    droppable = s > 1 + eps or s < 1 - eps or dropped_if_either
    return max(abs(s - w), w) if droppable else abs(s - w)


def _discrepancies(tree, eps):
    """E_π'|ω_t − w_t| at every position t (float64)."""
    per: dict[int, float] = {}
    for prob, ws in _paths(tree, 1.0, []):
        s = math.exp(sum(math.log(w) for w in ws) / len(ws))
        for t, w in enumerate(ws):
            per[t] = per.get(t, 0.0) + prob * _cost(s, w, eps)
    return per


def _tilted(rng, vocab: int, s: float) -> tuple[list[float], list[float]]:
    q = rng.dirichlet(np.full(vocab, rng.choice([0.2, 1.0, 5.0])))
    x = rng.uniform(0.0, s, vocab)
    x[rng.integers(vocab)] = rng.choice([0.0, s])
    x[rng.integers(vocab)] = rng.choice([0.0, s])
    p = q * np.exp(x)
    return list(p / p.sum()), list(q)


def _tree(rng, depth: int, vocab: int, s: float):
    p, q = _tilted(rng, vocab, s)
    ends = rng.random(vocab) < 0.3  # a token that ends the sequence early
    children = [None if depth == 1 or end else _tree(rng, depth - 1, vocab, s) for end in ends]
    return p, q, children


@examples(80)
@given(st.integers(1, 3), st.integers(2, 3), st.sampled_from([0.05, 0.15, 0.19, 0.3, 1.0, 3.0]),
       st.sampled_from([0.1, 0.2, 0.28]), st.integers(0, 2**32 - 1))  # fmt: skip
def test_every_sequence_law_enumerated_stays_below_the_drift_bound(depth, vocab, s, eps, seed):
    tree = _tree(np.random.default_rng(seed), depth, vocab, s)
    got = max(_discrepancies(tree, eps).values())
    assert within(got, _drift_bound(s * (1 + 1e-12), eps)), (got, depth, s, eps)


@examples(40)
@given(st.floats(1e-4, 1 - 1e-4), st.floats(1e-4, 1 - 1e-4), st.sampled_from([1, 2, 5, 64, 512]),
       st.sampled_from([0.01, 0.1, 0.18, 0.25, 1.0, 4.0]),
       st.sampled_from([0.05, 0.2, 0.9]))  # fmt: skip
def test_long_sequences_of_extreme_two_point_tilts_stay_below_the_bound(q0, q1, L, s, eps):
    # the witnesses' family, drawn: π'-mass near 0 or 1 on the raised token, up to 512 positions
    law, other = (gspo.drift_law(q, s) for q in (q0, q1))
    got = gspo.sequence_discrepancy(law, other, L, eps)
    assert within(got, _drift_bound(s * (1 + 1e-12), eps)), (got, q0, q1, L, s, eps)


def test_a_sequence_that_ends_early_can_have_a_mean_ratio_above_one():
    # why the forms use s ≤ e^x and not E_π' s ≤ 1: the first token decides the length
    x = math.exp(0.5)
    q = 1 / (1 + x)
    law = ([q * x, (1 - q) / x], [q, 1 - q])  # w = (e^0.5, e^-0.5), E_π' w = 1
    tree = (*law, [None, (*law, [None, None])])  # the raised token ends the sequence
    mean_s = sum(prob * math.exp(sum(map(math.log, ws)) / len(ws))
                 for prob, ws in _paths(tree, 1.0, []))  # fmt: skip
    assert mean_s > 1.0


# exact rational laws: every w rational, s = (Π w)^{1/n} enclosed between integer roots
def _iroot(n_: int, k: int) -> int:
    lo, hi = 0, 1 << (n_.bit_length() // k + 2)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if mid**k <= n_ else (lo, mid - 1)
    return lo


def _s_enclosure(prod: Fraction, n: int, digits: int = 40) -> tuple[Fraction, Fraction]:
    scale = 10**digits
    a, b = prod.numerator, prod.denominator
    low = _iroot(a * b ** (n - 1) * scale**n, n)  # ⌊(a/b)^{1/n}·b·scale⌋
    s_lo = Fraction(low, b * scale)
    return s_lo, (s_lo if s_lo**n == prod else s_lo + Fraction(1, b * scale))


def _rational_tree(draw_sizes, positions):
    """A tree whose node i holds the i-th law of ``positions`` (integer weights)."""
    it = iter(positions)

    def node(depth):
        a, b = next(it)
        k = min(len(a), len(b))
        p = [Fraction(v, sum(a[:k])) for v in a[:k]]
        q = [Fraction(v, sum(b[:k])) for v in b[:k]]
        kids = [None if depth == 1 or y == 0 else node(depth - 1) for y in range(k)]
        return p, q, kids

    return node(draw_sizes)


@examples(60)
@given(
    st.integers(1, 3),
    st.lists(st.tuples(st.lists(st.integers(1, 30), min_size=2, max_size=3),
                       st.lists(st.integers(1, 30), min_size=2, max_size=3)),
             min_size=7, max_size=7),
    st.fractions(Fraction(1, 20), Fraction(19, 20)),
)  # fmt: skip
def test_exact_rational_sequence_laws_stay_below_the_ratio_bound(depth, positions, eps):
    # token 0 of every node ends the sequence, the others go on (at most 1 + 2 + 4 nodes used)
    tree = _rational_tree(depth, positions * 3)
    paths = list(_paths(tree, Fraction(1), []))
    ws = [w for _, path in paths for w in path]
    K = max(max(ws), 1 / min(ws))  # e^r, rational: every |log w| ≤ r
    bound = min(1 + max(K - 2 / K, 0), K - 1 + 2 * (K - 1) / (K + 1) + (1 if 1 + eps <= K else 0))
    per: dict[int, Fraction] = {}
    for prob, path in paths:
        prod = Fraction(1)
        for w in path:
            prod *= w
        s_lo, s_hi = _s_enclosure(prod, len(path))
        straddles = s_lo <= 1 + eps <= s_hi or s_lo <= 1 - eps <= s_hi
        for t, w in enumerate(path):
            c = max(_cost(s_lo, w, eps, straddles), _cost(s_hi, w, eps, straddles))
            per[t] = per.get(t, Fraction(0)) + prob * c
    assert max(per.values()) <= bound, (max(per.values()), bound)
    # the lemma's form at r = log K is at least this rational one (its step is a ramp below)
    form = LEMMAS["pg_bias_gspo_ratio"].evaluate(G=1, A=1, r=math.log(K), clip_epsilon=float(eps))
    assert form >= float(bound) * (1 - 1e-12), (form, bound)


# ---- the weight is the gradient of verl's GSPO loss ------------------------------------------
def _verl_gspo_weights(lr, mask, adv, eps):
    """d/d log π of verl's per-token GSPO loss, over −A (JAX autodiff of the same formula)."""

    def loss(logp):
        mean = jnp.sum((logp - LOGQ) * mask, axis=1, keepdims=True) / jnp.maximum(
            jnp.sum(mask, axis=1, keepdims=True), 1
        )
        log_st = logp - jax.lax.stop_gradient(logp) + jax.lax.stop_gradient(mean)
        log_st = jnp.where(log_st > 10.0, jax.lax.stop_gradient(log_st) * 0 + 10.0, log_st)
        st_ = jnp.exp(log_st)
        return jnp.sum(jnp.maximum(-adv * st_, -adv * jnp.clip(st_, 1 - eps, 1 + eps)) * mask)

    grad = jax.grad(loss)(LOGQ + lr)
    return np.where(adv != 0, np.asarray(grad) / np.where(adv != 0, -adv, 1.0), np.nan)


LOGQ = jnp.asarray(np.log(np.random.default_rng(1).uniform(0.05, 0.9, (8, 12))), jnp.float32)


def test_the_weight_rule_is_the_gradient_of_verls_loss_on_a_batch():
    from kernel_contracts.kernels.rl import correction_weights

    rng = np.random.default_rng(3)
    lr = (rng.normal(0.0, 0.4, (8, 12)) + rng.normal(0.0, 0.3, (8, 1))).astype(np.float32)
    lr[7, :3] = 12.0  # a mean log-ratio above 10: verl's clamp stops the gradient
    mask = (rng.random((8, 12)) < 0.8).astype(np.float32)
    mask[7, :] = 0.0
    mask[7, :3] = 1.0
    adv = np.repeat(rng.choice([-1.0, 1.0], (8, 1)), 12, axis=1).astype(np.float32)
    adv[7] = -1.0
    want = _verl_gspo_weights(jnp.asarray(lr), jnp.asarray(mask), jnp.asarray(adv), EPS)
    got = np.asarray(correction_weights("gspo", lr, mask, adv, params={"clip_epsilon": EPS},
                                        ties="verl"))  # fmt: skip
    real = mask > 0
    np.testing.assert_allclose(got[real], want[real], rtol=2e-6, atol=1e-7)
    assert np.all(got[7, :3] == 0)  # verl's clamp; ours keeps s there
    ours = np.asarray(correction_weights("gspo", lr, mask, adv, params={"clip_epsilon": EPS}))
    assert np.all(ours[7, :3] > 1e5)
    np.testing.assert_array_equal(ours[:7], got[:7])
    assert 0 < np.count_nonzero(got[:7][real[:7]]) < np.count_nonzero(real[:7])


def test_a_token_at_the_clip_end_keeps_s():
    from kernel_contracts.kernels.rl import correction_weights

    x = np.float32(math.log(1.25))  # a log-ratio whose float32 exp is 1.25 = 1 + ε exactly
    while float(jnp.exp(x)) != 1.25:
        x = np.nextafter(x, np.float32(1 if float(jnp.exp(x)) < 1.25 else 0))
    lr = np.full((1, 2), x, np.float32)
    for ties in (None, "verl", "trl", "nemo-rl", "skyrl"):
        got = np.asarray(correction_weights("gspo", lr, np.ones_like(lr), np.ones_like(lr),
                                            params={"clip_epsilon": 0.25}, ties=ties))  # fmt: skip
        assert np.all(got == 1.25), (ties, got)
        above = lr
        while float(jnp.exp(above[0, 0])) <= 1.25:  # the next log-ratio whose s rounds above
            above = np.nextafter(above, np.float32(1))
        got = np.asarray(correction_weights("gspo", above, np.ones_like(lr), np.ones_like(lr),
                                            params={"clip_epsilon": 0.25}, ties=ties))  # fmt: skip
        assert np.all(got == 0), (ties, got)


# ---- the DSL, derivations, obligations and exports ------------------------------------------
def test_obligations_prove_above_and_never_refute_below_the_bound():
    c = pg_contract(["estimator: gspo, clip_epsilon: 0.2, max: 2.0, from: [N1]",
                     "estimator: gspo, clip_epsilon: 0.2, max: 0.1, from: [N1]",
                     "estimator: gspo, clip_epsilon: 0.2, max: 100, from: [N3]"],
                    delta="0.05", name="gspo")  # fmt: skip
    above, below, ratio = bounds.derive(c)
    assert above.value == pytest.approx(5 * _drift_bound(0.1), rel=1e-12)
    assert not above.extra["attained"] and above.chain[-1] == "pg_bias_gspo"
    assert ratio.chain[-1] == "pg_bias_gspo_ratio"
    assert discharge(above).status is Status.PROVED
    ob = discharge(below)
    assert ob.status is Status.UNKNOWN and "not attained" in ob.reason, ob.reason


@pytest.mark.parametrize(
    ("guarantee", "message"),
    [("estimator: gspo, clip_epsilon: 1.5", "(0, 1)"), ("estimator: gspo", "needs clip_epsilon"),
     ("estimator: gspo, clip_epsilon: 0.2, cap: 2", "applies only to")],
)  # fmt: skip
def test_bad_parameters_are_refused_with_their_key(guarantee, message):
    with pytest.raises(KernelContractsError) as err:
        pg_contract([f"{guarantee}, max: 1, from: [N1]"], name="g")
    text = str(err.value)
    assert message in text and "guarantees[0]." in text, text


def test_a_tv_premise_alone_gives_no_bound():
    c = pg_contract(["estimator: gspo, clip_epsilon: 0.2, max: 1, from: [N2]"], name="g",
                    tv="0.1")  # fmt: skip
    (d,) = bounds.derive(c)
    assert d.expr is None and d.reason


def test_every_export_refuses_with_the_old_policy_reason():
    from kernel_contracts.verify.pipeline.export import FRAMEWORKS, NoCounterpart, Request

    r = Request("G", "gspo", clip_epsilon=Fraction(1, 5))
    for name, framework in FRAMEWORKS.items():
        with pytest.raises(NoCounterpart, match="old") as err:
            framework.settings(r)
        assert "training kernel" in str(err.value) or "trainer" in str(err.value), name
        assert framework.features["gspo"], name


def test_the_rl_page_gspo_guarantee_is_read_and_proved():
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "rl.md").read_text("utf-8")
    section = page[page.index("## GSPO's sequence ratio") :]
    block = re.search(r"```yaml\n(guarantees:\n.*?)```", section, re.S).group(1)
    c = contracts.loads(head(name="gspo").replace("guarantees:\n", "") + block, path="rl.md")
    (d,) = bounds.derive(c)
    assert discharge(d).status is Status.PROVED, d.guarantee
