"""Verdicts on an emulated token table: full-vocabulary metrics, bounded means, worst cases.

The emulator is replaced by a constructed token table (same columns as ``kernels.emulation``)
so each verdict is known in advance; the real emulator runs in the end-to-end tests.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from kernel_contracts import contracts
from kernel_contracts.kernels.measurement.columns import TABLE_COLUMNS as COLUMNS
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.decide import evaluate


def _table(n=4000, seed=0, tv_scale=0.004, flips=0):
    rng = np.random.default_rng(seed)
    drift = rng.uniform(0, 0.02, n)
    t = {
        "logit_drift": drift,
        "logit_oscillation": 2 * drift,
        "tv": rng.uniform(0, tv_scale, n),
        "kl_train_inf": rng.uniform(0, 1e-4, n),
        "kl_inf_train": rng.uniform(0, 2e-4, n),
        "log_ratio": rng.normal(0, 0.005, n),
        "top1_flip": np.zeros(n, np.int64),
        "margin": rng.exponential(2.0, n),
        "entropy": rng.uniform(0, 5, n),
        "token_prob": rng.uniform(0, 1, n),
        "position": np.tile(np.arange(32, 96), n // 64 + 1)[:n],
        "prompt": np.repeat(np.arange(n // 64 + 1), 64)[:n],
        "token": rng.integers(0, 256, n),
    }
    t["top1_flip"][:flips] = 1
    assert set(t) == set(COLUMNS)
    return t


@pytest.fixture
def fake_emulate(monkeypatch):
    import kernel_contracts.evidence.emulate as emulate_module

    holder = {}

    def emulate(contract, *, progress=None, trust_code=False):
        if progress is not None:
            progress(1, 1)
        return holder["table"]

    monkeypatch.setattr(emulate_module, "emulate_contract", emulate)
    return holder


def _contract(tmp_path, body):
    text = f"""contract: 1
name: emulated
policy: {{temperature: 1.0, top_p: 1.0, top_k: 0, logprobs: full_vocab, vocab_size: 256,
         max_new_tokens: 64}}
kernels: {{train: {{preset: fp32}}, inference: {{preset: h100-fp8}}}}
slices:
  flat: {{entropy: [3, null]}}
  early: {{position: [0, 40]}}
  even: {{prompt: "^[0-9]*[02468]$"}}
{body}
evidence:
  emulate: {{model: tiny-lm, prompts: 64, max_new_tokens: 64, seed: 0}}
"""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return contracts.load(path)


def _by_key(results):
    return {(r.id, r.slice): r for r in results}


def test_full_vocab_metrics_and_slices(tmp_path, fake_emulate):
    fake_emulate["table"] = t = _table(n=40000)
    body = """numerical:
  - {id: N1, metric: logit_drift, max: 0.025, slice: all}
  - {id: N2, metric: tv, max: 0.003, slice: flat}
  - {id: N3, metric: log_ratio, max: 0.1, slice: early}
statistical:
  - {id: S1, metric: tv, statistic: mean, max: 0.0025, confidence: 0.95, slices: [all, even]}
  - {id: S2, metric: tv, statistic: mean, max: 0.0015, confidence: 0.95, slices: [all]}
  - {id: S3, metric: kl, statistic: quantile, q: 0.5, max: 0.00011, confidence: 0.95,
     slices: [all]}
"""
    results, report = evaluate(_contract(tmp_path, body))
    r = _by_key(results)
    assert r[("N1", "all")].status is Status.HELD
    assert r[("N1", "all")].value == pytest.approx(t["logit_drift"].max())
    flat = t["entropy"] >= 3
    assert r[("N2", "flat")].samples == int(flat.sum())
    assert r[("N2", "flat")].status is Status.VIOLATED
    assert r[("N3", "early")].samples == int((t["position"] <= 40).sum())
    assert r[("N3", "early")].value == pytest.approx(
        np.abs(t["log_ratio"][t["position"] <= 40]).max()
    )
    # mean tv is 0.002: 0.0025 holds, 0.0015 is violated (n = 40000, range [0, 1])
    assert r[("S1", "all")].status is Status.HELD
    assert r[("S1", "all")].value == pytest.approx(t["tv"].mean())
    assert r[("S1", "all")].reason.startswith("bounded-mean bound on [0, 1]")
    even = t["prompt"] % 2 == 0
    assert r[("S1", "even")].samples == int(even.sum())
    assert r[("S2", "all")].status is Status.VIOLATED
    # kl is the larger direction per token: median of max(U(0,1e-4), U(0,2e-4)) ≈ 1.05e-4
    kl = np.maximum(t["kl_train_inf"], t["kl_inf_train"])
    assert r[("S3", "all")].value == pytest.approx(np.quantile(kl, 0.5), rel=0.01)
    src = report["sources"][0]
    assert src["kind"] == "emulate" and src["tokens"] == 40000
    assert src["fingerprint"] == results[0].fingerprint
    assert results[0].source == "emulate:tiny-lm/h100-fp8"


@pytest.mark.parametrize(("flips", "status"), [(0, Status.HELD), (60, Status.VIOLATED)])
def test_top1_flip_rate_uses_clopper_pearson(tmp_path, fake_emulate, flips, status):
    fake_emulate["table"] = _table(flips=flips)
    body = """statistical:
  - {id: F1, metric: top1_flip, statistic: mean, max: 0.005, confidence: 0.99, slices: [all]}
"""
    (res,), _ = evaluate(_contract(tmp_path, body))
    assert res.status is status
    assert res.value == flips / 4000
    assert res.reason.startswith(f"Clopper–Pearson bound of the rate ({flips} of 4000 tokens)")
    if flips == 0:
        assert res.bound == pytest.approx(1 - 0.01 ** (1 / 4000), rel=1e-6)


def test_non_finite_values_count_as_the_worst(tmp_path, fake_emulate):
    t = _table()
    t["tv"] = t["tv"].copy()
    t["tv"][7] = np.nan
    t["logit_drift"] = t["logit_drift"].copy()
    t["logit_drift"][3] = np.inf
    fake_emulate["table"] = t
    body = """numerical:
  - {id: N1, metric: logit_drift, max: 0.025, slice: all}
statistical:
  - {id: S1, metric: tv, statistic: max, max: 0.5, slices: [all]}
"""
    r = _by_key(evaluate(_contract(tmp_path, body))[0])
    assert r[("N1", "all")].status is Status.VIOLATED
    assert "1 tokens had a non-finite value, counted as the worst" in r[("N1", "all")].reason
    assert r[("S1", "all")].status is Status.VIOLATED
    assert r[("S1", "all")].value == 1.0  # the worst tv


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_when_not_quiet_and_on_a_terminal(tmp_path, fake_emulate):
    fake_emulate["table"] = _table(n=640)
    c = _contract(tmp_path, "numerical:\n  - {id: N1, metric: tv, max: 1, slice: all}\n")
    err = _Terminal()
    evaluate(c, quiet=True, stderr=err)
    assert err.getvalue() == ""
    evaluate(c, quiet=False, stderr=err)
    assert err.getvalue() == "\remulating [#########################] 100%\n"
    log = io.StringIO()  # a file or a pipe, not a terminal: no carriage-return updates
    evaluate(c, quiet=False, stderr=log)
    assert log.getvalue() == ""


def test_progress_draws_each_percent_once_on_a_terminal_and_nothing_elsewhere():
    from kernel_contracts.evidence.sources import Progress

    term, log = _Terminal(), io.StringIO()
    for stream in (term, log):
        bar = Progress(stream, "reading x")
        for done in range(0, 701):
            bar(done, 700)
    assert term.getvalue().count("\r") == 101 and term.getvalue().endswith("100%\n")
    assert log.getvalue() == ""


def test_mean_bound_matches_hoeffding_or_better(tmp_path, fake_emulate):
    fake_emulate["table"] = t = _table(n=2000, tv_scale=0.2)
    body = """statistical:
  - {id: S1, metric: tv, statistic: mean, max: 0.2, confidence: 0.9, slices: [all]}
"""
    (res,), _ = evaluate(_contract(tmp_path, body))
    hoeffding = t["tv"].mean() + math.sqrt(math.log(1 / 0.1) / (2 * 2000))
    assert t["tv"].mean() < res.bound <= hoeffding + 1e-12


def test_emulation_problems_are_evidence_errors(tmp_path):
    """The real emulator's refusals come back as one-line evidence errors (exit 2)."""
    from kernel_contracts.verify.decide import EvidenceError

    text = (
        "contract: 1\nname: bad\n"
        "policy: {temperature: 1.0, top_p: 1.0, top_k: 0, logprobs: full_vocab, "
        "vocab_size: 256, max_new_tokens: 64}\n"
        "kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}\n"
        "numerical:\n  - {id: N1, metric: logit_drift, max: 0.5, slice: all}\n"
        "evidence:\n  emulate: {model: huge-lm, prompts: 2, max_new_tokens: 4}\n"
    )
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(EvidenceError) as err:
        evaluate(contracts.load(path))
    assert str(err.value) == (
        f"{path}:8:3: evidence.emulate: unknown pretrained model 'huge-lm'; known: ['tiny-lm']"
    )
