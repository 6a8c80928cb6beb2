"""Weight diagnostics of a log (``evidence.weights``): each number against its definition on
hand-built tokens, the estimators a log cannot weigh, chunking, the report and the schema."""

from __future__ import annotations

import math
import pathlib
import re

import numpy as np
import pytest

from kernel_contracts import contracts
from kernel_contracts.evidence.logs import read_log
from kernel_contracts.evidence.sources import tables_source
from kernel_contracts.evidence.weights import (
    NAMES,
    OUR_NAMES,
    estimators_of,
    label,
    weight_diagnostics,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "contracts" / "examples"

# three sequences: 0 and 1 of three tokens, 2 of two; one token far above 1, one far below
LOG_W = np.log(np.array([1.0, 1.5, 3.0, 0.9, 1.1, 0.2, 1.05, 0.95]))
SEQ = np.array([0, 0, 0, 1, 1, 1, 2, 2])


def _diagnose(*estimators, log_w=LOG_W, seq=SEQ):
    return weight_diagnostics(estimators, log_w, np.full(log_w.shape, -1.0), seq)


def _expected(omega: np.ndarray, clipped: int, seq=SEQ) -> dict[str, float]:
    n, s = omega.size, np.unique(seq).size
    zero = omega == 0
    per_seq_zero = np.bincount(seq, weights=zero.astype(float))
    out = {
        "ess": omega.sum() ** 2 / (omega**2).sum(),
        "ess_per_token": omega.sum() ** 2 / (omega**2).sum() / n,
        "weight_mean": omega.mean(),
        "weight_max": omega.max(),
        "clip_fraction": clipped / n,
        "masked_fraction": zero.sum() / n,
        "seq_masked_fraction": np.count_nonzero(per_seq_zero) / s,
        "seq_rejected_fraction": np.count_nonzero(per_seq_zero == np.bincount(seq)) / s,
    }
    return out


def _close(got: dict, want: dict) -> None:
    got = {k: v for k, v in got.items() if k in OUR_NAMES}
    assert list(got) == [k for k in OUR_NAMES if k in want]
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-6), k


def test_tis_truncates_and_the_ess_is_kish():
    w = np.exp(LOG_W)
    numbers, skipped = _diagnose(("tis", (("cap", 2.0),)))
    assert skipped == {}
    _close(numbers["tis(cap=2.0)"], _expected(np.minimum(w, 2.0), clipped=1))


def test_icepop_masks_tokens_and_counts_the_sequences_they_touch():
    w = np.exp(LOG_W)
    numbers, _ = _diagnose(("icepop", (("band", (0.5, 2.0)),)))
    got = numbers["icepop(band=[0.5, 2.0])"]
    _close(got, _expected(w * ((w >= 0.5) & (w <= 2.0)), clipped=0))
    assert got["masked_fraction"] == 2 / 8
    assert got["seq_masked_fraction"] == 2 / 3
    assert got["seq_rejected_fraction"] == 0


def test_sequence_weights_clip_whole_sequences_and_reject_them():
    big_w = np.exp(np.bincount(SEQ, weights=LOG_W))[SEQ]  # W: 4.5, 0.198, 0.9975
    numbers, _ = _diagnose(
        ("seq_tis", (("cap", 2.0),)), ("seq_is", ()), ("seq_mask", (("band", (0.5, 2.0)),))
    )
    _close(numbers["seq_tis(cap=2.0)"], _expected(np.minimum(big_w, 2.0), clipped=3))
    _close(numbers["seq_is()"], _expected(big_w, clipped=0))
    got = numbers["seq_mask(band=[0.5, 2.0])"]
    _close(got, _expected(big_w * ((big_w >= 0.5) & (big_w <= 2.0)), clipped=0))
    assert got["seq_rejected_fraction"] == 2 / 3


def test_a_cap_of_0_has_no_ess_and_rejects_everything():
    numbers, _ = _diagnose(("tis", (("cap", 0.0),)))
    got = numbers["tis(cap=0.0)"]
    assert "ess" not in got and "ess_per_token" not in got
    assert got["masked_fraction"] == 1.0
    assert got["seq_rejected_fraction"] == 1.0


def test_what_a_log_cannot_weigh_is_named_with_the_reason():
    ppo = ("ppo_clip", (("clip_epsilon", 0.2),))
    numbers, skipped = _diagnose(ppo, ("tv_mask", (("threshold", 0.05),)))
    assert numbers == {}
    assert "depend on the advantages" in skipped["ppo_clip(clip_epsilon=0.2)"]
    assert "token_tv" in skipped["tv_mask(threshold=0.05)"]
    # where no token is clipped under either sign, the advantages cannot matter: weighed
    calm = np.log(np.array([1.0, 1.05, 0.97, 1.1, 0.9]))
    numbers, skipped = _diagnose(ppo, log_w=calm, seq=np.array([0, 0, 1, 1, 1]))
    assert skipped == {}
    _close(
        numbers["ppo_clip(clip_epsilon=0.2)"], _expected(np.exp(calm), 0, np.array([0, 0, 1, 1, 1]))
    )


def test_chunks_give_the_numbers_of_one_pass(monkeypatch):
    import kernel_contracts.evidence.weights as weights_module

    rng = np.random.default_rng(3)
    seq = np.repeat(np.arange(40), rng.integers(1, 9, size=40))
    log_w = rng.normal(0.0, 0.5, size=seq.size)
    ests = (("icepop", (("band", (0.5, 2.0)),)), ("seq_tis", (("cap", 1.5),)))
    whole = _diagnose(*ests, log_w=log_w, seq=seq)
    monkeypatch.setattr(weights_module, "_CELLS", 64)  # 8 sequences a chunk
    chunked = _diagnose(*ests, log_w=log_w, seq=seq)
    assert chunked[1] == whole[1] == {}
    for key, got in chunked[0].items():
        for name, v in got.items():
            assert v == pytest.approx(whole[0][key][name], rel=1e-9), (key, name)


def test_non_finite_tokens_are_left_out_and_nothing_gives_nothing():
    est = ("tis", (("cap", 2.0),))
    log_w = np.append(LOG_W, [np.inf, np.nan])
    seq = np.append(SEQ, [2, 2])
    assert _diagnose(est, log_w=log_w, seq=seq) == _diagnose(est)
    assert _diagnose(est, log_w=np.zeros(0), seq=np.zeros(0, int)) == ({}, {})
    assert _diagnose(log_w=LOG_W) == ({}, {})


def test_a_log_source_carries_the_diagnostics_of_every_estimator_of_the_contract():
    contract = contracts.load(str(EXAMPLES / "rl-corrections.yaml"))
    log = EXAMPLES / "rollout-sample.jsonl"
    table = read_log(str(log), None, vocab_size=contract.policy.vocab_size)
    info = tables_source(contract, [table]).info
    weighed, skipped = info["weight_diagnostics"], info["weight_diagnostics_skipped"]
    labels = [label(e) for e in estimators_of(contract)]
    assert set(weighed) | set(skipped) == set(labels) and not set(weighed) & set(skipped)
    assert {"tis(cap=2.0)", "seq_is()", "geo_mask(band=[0.9, 1.11])"} <= set(weighed)
    assert "kl_mask(threshold=0.01)" in skipped
    for numbers in weighed.values():
        assert all(isinstance(v, float) and math.isfinite(v) for v in numbers.values())
        assert set(numbers) <= set(NAMES)


def test_kl_reject_is_weighed_and_keyed_by_its_criteria():
    est = ("kl_reject", (("reject", "token_k1,seq_max_k3"), ("reject_threshold", "0.5_2.0,0.5")))
    assert label(est) == "kl_reject(reject=token_k1,seq_max_k3, reject_threshold=0.5_2.0,0.5)"
    (weighed, _) = _diagnose(est)
    # token_k1 keeps w in [0.5, 2]; seq_max_k3 drops a sequence with w − 1 − log w > 0.5
    omega = np.where((np.exp(LOG_W) >= 0.5) & (np.exp(LOG_W) <= 2.0), np.exp(LOG_W), 0.0)
    omega[SEQ <= 1] = 0.0  # k3 of 3.0 is 0.90, of 0.2 is 0.81: sequences 0 and 1 go
    got = weighed[label(est)]
    assert got["masked_fraction"] == pytest.approx(np.mean(omega == 0))


def test_the_schema_page_documents_every_key():
    doc = (ROOT / "docs" / "report-schema.md").read_text(encoding="utf-8")
    section = doc.split("weight_diagnostics`: what each correction does")[1].split("\n## ")[0]
    documented = re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)
    assert documented == list(NAMES)


def test_the_covariance_losses_are_not_weighed_even_where_the_signs_agree():
    """A constant advantage makes every covariance 0 whatever its sign, so all +1 and all −1
    give Clip-Cov the same weights on calm ratios (its band holding 0): the sign test would
    pass, yet real advantages move the covariances and pick other tokens. Named, not weighed."""
    calm = np.log(np.array([1.0, 1.05, 0.97, 1.1, 0.9]))
    seq = np.array([0, 0, 1, 1, 1])
    clip = ("clip_cov", (("clip_epsilon", 0.2), ("cov_fraction", 0.5), ("cov_band", (-1.0, 1.0))))
    kl = ("kl_cov", (("cov_fraction", 0.5), ("kl_coef", 0.1)))
    numbers, skipped = _diagnose(clip, kl, log_w=calm, seq=seq)
    assert numbers == {}
    for key in ("clip_cov(clip_epsilon=0.2, cov_fraction=0.5, cov_band=[-1.0, 1.0])",
                "kl_cov(cov_fraction=0.5, kl_coef=0.1)"):  # fmt: skip
        assert "advantages' values across the batch" in skipped[key], skipped
