"""CISPO anchored on the rollout (cispo, ω = sg(clip(w, 1 − ε_low, 1 + ε_high))): the weight is
SkyRL's (its ±20 clamp of log r included) and tis_clip's; its lemmas are tis_clip's under
CISPO's name, with witnesses that attain the drift and ratio suprema; hypothesis laws never
beat the forms; the obligations prove above the supremum and refute just below it; the SkyRL
export writes the rollout anchor for its main branch only, and the others refuse with the
reason.
"""

from __future__ import annotations

import io
import pathlib
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_contracts import bounds, contracts
from kernel_contracts.bounds import LEMMAS
from kernel_contracts.bounds.pg.tis_clip import clip_discrepancy
from kernel_contracts.contracts.errors import KernelContractsError
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.proving.obligations import discharge
from tests.support.pg_contracts import head, pg_contract
from tests.support.strategies import examples, within


@pytest.mark.parametrize(("osc", "lo", "hi"), [(0.5, 0.0, 1.5), (2.0, 0.5, 2.0), (6.0, 0.5, 5.0)])
def test_drift_and_ratio_witnesses_attain_the_forms(osc, lo, hi):
    w = LEMMAS["pg_bias_cispo"].witness(osc, 1.0, lo, hi)
    assert w.lemma == "pg_bias_cispo" and w.ratio >= 1 - 1e-9, w.ratio
    assert w.bound == pytest.approx(bounds.pg_bias_bound("cispo", osc=osc, band=(lo, hi)))
    sup = bounds.pg_bias_supremum("cispo", osc=osc, band=(lo, hi))
    assert sup == pytest.approx(w.bound, rel=1e-9)
    r = LEMMAS["pg_bias_cispo_ratio"].witness(osc / 2, lo, hi)
    assert r.lemma == "pg_bias_cispo_ratio" and r.ratio >= 1 - 1e-9, r.ratio
    assert LEMMAS["pg_bias_cispo_tv"].witness(0.1, lo, hi).ratio >= 1 - 1e-9


@examples(60)
@given(st.integers(2, 4), st.sampled_from([0.1, 0.5, 1.0, 3.0]),
       st.sampled_from([(0.0, 5.0), (0.5, 1.5), (0.8, 1.28)]),
       st.integers(0, 2**32 - 1))  # fmt: skip
def test_random_tilts_never_beat_the_drift_form(vocab, s, band, seed):
    rng = np.random.default_rng(seed)
    zp = rng.normal(0.0, 2.0, vocab)
    x = rng.uniform(0.0, s, vocab)
    x[rng.integers(vocab)] = rng.choice([0.0, s])
    got = clip_discrepancy(zp + x, zp, 1.0, *band)
    assert within(got, bounds.pg_bias_bound("cispo", osc=s * (1 + 1e-12), band=band))


# ---- the weight: SkyRL's loss gradient, anchored on the rollout ------------------------------
def _skyrl_cispo(logp, rollout_logp, eps_low, eps_high):
    """SkyRL a9564572 compute_policy_loss_cispo, cispo_anchor "rollout": the loss is
    −A·sg(clamp(exp(clamp(log π − log π_rollout, ±20)), 1 − ε_low, 1 + ε_high))·log π, so the
    gradient over −A·∇log π is the clamped ratio."""
    ratio = np.exp(np.clip(logp - rollout_logp, -20.0, 20.0))
    return np.clip(ratio, 1 - eps_low, 1 + eps_high)


@pytest.mark.parametrize(("eps_low", "eps_high"), [(1.0, 4.0), (0.2, 0.28)])
def test_the_weight_is_skyrls_on_a_batch_with_its_clamp(eps_low, eps_high):
    from kernel_contracts.kernels.rl import correction_weights

    rng = np.random.default_rng(4)
    lq = np.log(rng.uniform(0.01, 0.9, (6, 10)))
    lr = rng.normal(0.0, 0.6, (6, 10))
    lr[0, :2] = (-25.0, 25.0)  # beyond SkyRL's clamp
    mask = np.ones_like(lr)
    params = {"band": (1 - eps_low, 1 + eps_high)}
    want = _skyrl_cispo(lq + lr, lq, eps_low, eps_high)
    got = np.asarray(correction_weights("cispo", lr, mask, mask, params=params, ties="skyrl"))
    np.testing.assert_allclose(got, want, rtol=3e-6, atol=0)
    ours = np.asarray(correction_weights("cispo", lr, mask, mask, params=params))
    same = np.asarray(correction_weights("tis_clip", lr, mask, mask, params=params))
    np.testing.assert_array_equal(ours, same)
    if eps_low == 1.0:  # lo = 0: SkyRL raises w = e^-25 to e^-20, ours keeps it
        assert got[0, 0] > ours[0, 0] > 0
    np.testing.assert_array_equal(got[1:], ours[1:])


# ---- the DSL, derivations, obligations and exports ------------------------------------------
def test_the_dsl_derives_cispos_forms_and_refutes_below_the_supremum():
    c = pg_contract(["estimator: cispo, band: [0.5, 2.0], max: 5, from: [N1]",
                     "estimator: cispo, band: [0.5, 2.0], max: 5, from: [N3]"],
                    delta="2.0", name="cispo")  # fmt: skip
    drift, ratio = bounds.derive(c)
    sup = 5 * bounds.pg_bias_supremum("cispo", osc=4.0, band=(0.5, 2.0))
    assert drift.value == pytest.approx(sup, rel=1e-12) and drift.chain[-1] == "pg_bias_cispo"
    assert ratio.chain[-1] == "pg_bias_cispo_ratio" and drift.extra["attained"]
    above = pg_contract([f"estimator: cispo, band: [0.5, 2.0], max: {sup * 1.05:.6f}, "
                         "from: [N1]"], delta="2.0", name="c")  # fmt: skip
    below = pg_contract([f"estimator: cispo, band: [0.5, 2.0], max: {sup * 0.99:.6f}, "
                         "from: [N1]"], delta="2.0", name="c")  # fmt: skip
    assert discharge(bounds.derive(above)[0]).status is Status.PROVED
    assert discharge(bounds.derive(below)[0]).status is Status.REFUTED


@pytest.mark.parametrize(
    ("guarantee", "message"),
    [("estimator: cispo, band: [1.2, 2.0]", "band"), ("estimator: cispo", "needs a band"),
     ("estimator: cispo, band: [0.5, 2.0], cap: 2", "applies only to")],
)  # fmt: skip
def test_bad_parameters_are_refused_with_their_key(guarantee, message):
    with pytest.raises(KernelContractsError) as err:
        pg_contract([f"{guarantee}, max: 1, from: [N1]"], name="c")
    text = str(err.value)
    assert message in text and "guarantees[0]." in text, text


def test_skyrl_writes_the_rollout_anchor_and_the_others_refuse():
    from kernel_contracts.verify.pipeline.export import FRAMEWORKS, NoCounterpart, Request

    r = Request("G", "cispo", band=(Fraction(0), Fraction(5)))
    sky = dict(FRAMEWORKS["skyrl"].settings(r))
    a = "trainer.algorithm."
    assert sky[a + "policy_loss_type"] == "cispo" and sky[a + "cispo.cispo_anchor"] == "rollout"
    assert sky[a + "cispo.cispo_eps_clip_low"] == 1 and sky[a + "cispo.cispo_eps_clip_high"] == 4
    assert sky[a + "off_policy_correction.tis_ratio_type"] is None  # SkyRL refuses TIS with it
    assert sky["generator.sampling_params.logprobs"] == 1
    assert FRAMEWORKS["skyrl"].since["cispo"][0] == "main"
    assert FRAMEWORKS["skyrl"].ratio_clamp["cispo"] == 20
    for name in ("verl", "trl", "nemo-rl"):
        with pytest.raises(NoCounterpart, match=r"old|prev_logprobs"):
            FRAMEWORKS[name].settings(r)


def _export(tmp_path, version: str) -> tuple[int, str, str]:
    from kernel_contracts.verify.pipeline.export import export_main

    path = tmp_path / "c.yaml"
    path.write_text(head(name="cispo", delta="0.05")
                    + "  - {id: G0, quantity: pg_bias, score_norm: 5, advantage: 1, "
                    "estimator: cispo, band: [0.0, 5.0], max: 5, from: [N1]}\n")  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    code = export_main([str(path), "--to", "skyrl", "--check-version", version],
                       stdout=out, stderr=err)  # fmt: skip
    return code, out.getvalue(), err.getvalue()


def test_the_skyrl_export_is_for_the_main_branch_only(tmp_path):
    from kernel_contracts.verify.pipeline.export import FRAMEWORKS

    code, out, err = _export(tmp_path, "main@" + FRAMEWORKS["skyrl"].main[:8])
    assert code == 0, err
    assert "cispo_anchor: rollout" in out and "main@a9564572 for cispo" in out, out
    code, out, err = _export(tmp_path, "0.3")
    assert code == 2 and not out
    assert "skyrl 0.3 has no counterpart" in err and "main branch only" in err, err


def test_the_rl_page_cispo_guarantee_is_read_and_proved():
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "rl.md").read_text("utf-8")
    section = page[page.index("## CISPO anchored on the rollout") :]
    block = re.search(r"```yaml\n(guarantees:\n.*?)```", section, re.S).group(1)
    c = contracts.loads(head(name="cispo").replace("guarantees:\n", "") + block, path="rl.md")
    (d,) = bounds.derive(c)
    assert discharge(d).status is Status.PROVED, d.guarantee
