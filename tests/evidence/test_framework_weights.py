"""The frameworks' weight metrics in a report (``evidence.framework_weights``) against each
framework's own definition, evaluated here independently in numpy on the padded batch as the
framework's code meets it (the recorded framework batches, and an edge batch with an empty
row, a one-token row, a mask gap holding garbage and tokens exactly on every threshold).

The definitions, read at verl 1dda039b (``verl/trainer/ppo/rollout_corr_helper.py``:
``compute_rollout_correction_weights``, ``compute_is_metrics``,
``compute_rollout_rejection_mask``), NeMo-RL 7ea279ab (``ClippedPGLossFn``'s ``is_oob_ratio``),
TRL f2cd5771 (``_generate_and_score_completions``' ``sampling/importance_sampling_ratio/*``)
and SkyRL a9564572 (``compute_tis_ratio``, ``compute_token_mask``, the product sequence mask).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernel_contracts.evidence.framework_weights import FRAMEWORK_NAMES
from kernel_contracts.evidence.weights import label, weight_diagnostics
from tests.support.framework_batches import skyrl_batch, trl_output, verl_batch

F32 = np.float32
RC = "rollout_corr/"
TRL = "sampling/importance_sampling_ratio/"


def _exp32(x):
    """exp in float32 correctly rounded, the nearest to torch's float32 exp (numpy's own
    float32 exp is an ulp off on many inputs, which moves a token across a threshold)."""
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, np.float64)).astype(F32)


def _mm(values, mask, axis=None):  # verl's and NeMo-RL's masked mean: Σ v·m / (Σ m + 1e-8)
    v = np.asarray(values, np.float64) * mask
    return v.sum(axis=axis) / (mask.sum(axis=axis) + 1e-8)


# ---- verl: rollout_corr/* ------------------------------------------------------------------


def _verl_rejection(lr, m, options):
    """verl's combined rejection mask for (name, threshold) options: token_k1 "a_b" and
    seq_max_k3 τ, as compute_rollout_rejection_mask forms them."""
    safe = np.clip(lr, -20, 20)
    keep = np.ones(lr.shape, F32)
    for option, spec in options:
        if option == "token_k1":
            a, b = (float(x) for x in spec.split("_"))
            k1 = -safe
            ok = (k1 >= F32(math.log(a))) & (k1 <= F32(math.log(b)))
        elif option == "token_k2":
            ok = F32(0.5) * safe * safe <= F32(spec)
        else:  # seq_max_k3
            k3 = np.exp(safe) - F32(1.0) - safe
            top = np.where(m > 0, k3, -np.inf).max(axis=-1)
            top = np.where(top == -np.inf, 0.0, top)
            ok = np.broadcast_to((top <= F32(spec))[:, None], lr.shape)
        keep = keep * ok.astype(F32)
    dropped_seq = (~((keep > 0.5) & (m > 0)) & (m > 0)).any(axis=-1)
    return {
        RC + "rollout_rs_masked_fraction": _mm(1 - keep, m),
        RC + "rollout_rs_seq_masked_fraction": dropped_seq.astype(np.float64).mean(),
    }


def _verl(old, roll, m, level, threshold, rejection=()):
    m = m.astype(F32)  # torch keeps float32 when an int mask multiplies
    lr = (old - roll).astype(F32)
    upper, lower = threshold if isinstance(threshold, tuple) else (threshold, None)
    if level == "token":
        raw = _exp32(np.clip(lr, -20, 20)) * m
    else:
        s = (lr * m).sum(axis=-1, keepdims=True, dtype=F32)
        raw = np.broadcast_to(_exp32(np.clip(s, -20, 20)), lr.shape) * m
    if lower is None:
        w = np.minimum(raw, F32(upper))
    else:
        w = np.where((raw >= F32(lower)) & (raw <= F32(upper)), raw, F32(0))
    out = {RC + "rollout_is_mean": _mm(w, m)}
    if level == "sequence":
        out[RC + "rollout_is_max"] = math.exp(min(float(s.max()), 20.0))
    else:
        out[RC + "rollout_is_max"] = float(np.where(m > 0, w, -np.inf).max())
    wc = np.clip(w, 0.0, upper)
    normalized = wc / (_mm(wc, m) + 1e-8)
    out[RC + "rollout_is_eff_sample_size"] = 1.0 / _mm(normalized**2, m)
    if lower is not None:
        out[RC + "rollout_is_oob_ratio"] = _mm((raw < F32(lower)) | (raw > F32(upper)), m)
    if rejection:
        out |= _verl_rejection(lr, m, rejection)
    return out


# ---- NeMo-RL: is_oob_ratio -----------------------------------------------------------------


def _nemo(old, roll, m, kind, hi, lo=None):
    m = m.astype(F32)  # torch keeps float32 when an int mask multiplies
    with np.errstate(over="ignore"):
        w = np.nan_to_num(_exp32(old - roll), nan=0.0, posinf=0.0, neginf=0.0)
    if kind == "tis":
        oob = (w > F32(hi)) | (w < F32(lo or 0.0))
        return {"is_oob_ratio": _mm(oob, m)}
    if kind == "icepop":
        return {"is_oob_ratio": _mm(~((w >= F32(lo)) & (w <= F32(hi))), m)}
    log_r = np.nan_to_num(old - roll, nan=0.0, posinf=0.0, neginf=0.0)  # seq-mask-tis
    geo = _exp32(_mm(log_r, m, axis=-1).astype(F32))
    kept = ((geo >= F32(lo)) & (geo <= F32(hi))).astype(np.float64)
    sample = np.ones(len(geo))
    return {"is_oob_ratio": ((1 - kept) * sample).sum() / (sample.sum() + 1e-8)}


# ---- TRL: sampling/importance_sampling_ratio/* ---------------------------------------------


def _trl(old, roll, m, mode, clip_max, clip_min=None):
    m = m.astype(F32)  # torch keeps float32 when an int mask multiplies
    diff = (old - roll) * m
    sequence = mode.startswith("sequence")
    logs = diff.sum(axis=-1, keepdims=True, dtype=F32) if sequence else diff
    with np.errstate(over="ignore"):
        ratio = _exp32(logs)
    if mode.endswith("truncate"):
        ratio = np.clip(ratio, clip_min, clip_max)
    else:
        lo = -math.inf if clip_min is None else clip_min
        hi = math.inf if clip_max is None else clip_max
        ratio = np.where((ratio < F32(lo)) | (ratio > F32(hi)), F32(0), ratio)
    flat = ratio.ravel() if sequence else ratio[m > 0]
    flat = flat.astype(np.float64)
    return {TRL + "min": flat.min(), TRL + "mean": flat.mean(), TRL + "max": flat.max()}


# ---- SkyRL ---------------------------------------------------------------------------------


def _skyrl(old, roll, m, clip, mask_band=None, product_band=None, level="token"):
    m = m.astype(F32)  # torch keeps float32 when an int mask multiplies
    n = max(int((m > 0).sum()), 1)
    lr = (old - roll).astype(F32)
    out = {}
    if level == "token":
        r = _exp32(np.clip(lr, -20, 20))
        left = m > 0  # compute_tis_ratio sees the loss mask after the token mask
        if mask_band is not None:
            inside = (r >= F32(mask_band[0])) & (r <= F32(mask_band[1]))
            out["token_mask_ratio"] = ((~inside) & (m > 0)).sum() / n
            left = left & inside
        out["tis_token_clip_high_ratio"] = ((r > F32(clip)) & left).sum() / max(left.sum(), 1)
        return out
    s = (lr * m).sum(axis=-1, dtype=F32)
    big_w = _exp32(np.clip(s, -20, 20))
    out["tis_seq_clip_high_ratio"] = (big_w > F32(clip)).sum() / len(big_w)
    if product_band is not None:
        inside = ~(big_w > F32(product_band[1])) & ~(big_w < F32(product_band[0]))
        out["product_sequence_mask_masked_ratio"] = (~inside).sum() / len(big_w)
    return out


# ---- the batches ---------------------------------------------------------------------------


def _verl_arrays():
    b = verl_batch().batch
    return b["old_log_probs"].array, b["rollout_log_probs"].array, b["response_mask"].array


def _trl_arrays():
    o = trl_output()
    mask = o["completion_mask"].array * o["tool_mask"].array
    return o["old_per_token_logps"].array, o["sampling_per_token_logps"].array, mask


def _skyrl_arrays():
    b = skyrl_batch()
    return b["action_log_probs"].array, b["rollout_logprobs"].array, b["loss_mask"].array


def _edge_arrays():
    """7 rows of 8: full, 5 tokens, empty, one token, a gap of garbage, a row whose W is far
    above 1, 3 tokens. The padding holds garbage (finite, as every framework needs)."""
    rng = np.random.default_rng(11)
    lengths = [8, 5, 0, 1, 8, 6, 3]
    m = np.array([[int(t < n) for t in range(8)] for n in lengths], np.int64)
    m[4, 3:5] = 0  # tool tokens in the middle of row 4
    roll = rng.uniform(-4.0, -0.1, size=m.shape).astype(F32)
    old = (roll + rng.normal(0.0, 0.35, size=m.shape)).astype(F32)
    old[5, :6] = roll[5, :6] + F32(0.45)  # W = e^2.7 ≈ 14.9
    old = np.where(m > 0, old, F32(37.0))  # garbage on padding and in the gap
    roll = np.where(m > 0, roll, F32(-1e4))
    return old, roll, m


BATCHES = {"verl": _verl_arrays, "trl": _trl_arrays, "skyrl": _skyrl_arrays, "edge": _edge_arrays}


def _thresholds(old, roll, m):
    """Each cap and band end is the float32 weight of a token or sequence of the batch, so some
    token sits exactly on every threshold (a tie)."""
    w = np.sort(_exp32((old - roll)[m > 0].astype(F32)))
    big_w = np.sort(_exp32(((old - roll) * m).sum(axis=-1, dtype=F32))[m.sum(axis=-1) > 0])
    geo = np.sort(
        np.exp(((old - roll) * m).sum(axis=-1) / np.maximum(m.sum(axis=-1), 1)).astype(F32)
    )
    pick = lambda xs, q: float(xs[int(q * (len(xs) - 1))])  # noqa: E731
    return {
        "cap": pick(w, 0.6),
        "mis_cap": pick(w[w > 1], 0.5),  # mis takes a cap above 1
        "band": (pick(w, 0.2), pick(w, 0.8)),
        "seq_cap": pick(big_w, 0.5),
        "seq_band": (pick(big_w, 0.0), pick(big_w, 0.7)),
        "geo_band": (pick(geo, 0.3), pick(geo, 1.0)),
    }


def _expected(old, roll, m):
    """(estimator, {name: the framework's number}) for the settings ``verify export`` writes."""
    t = _thresholds(old, roll, m)
    cap, (lo, hi), s_cap, (s_lo, s_hi), (g_lo, g_hi) = (
        t["cap"], t["band"], t["seq_cap"], t["seq_band"], t["geo_band"],
    )  # fmt: skip
    k1 = f"{1 / hi!r}_{1 / lo!r}"
    reject = ("kl_reject", (("reject", "token_k1,seq_max_k3"), ("reject_threshold", f"{k1},0.02")))
    return [
        (
            ("tis", (("cap", cap),)),
            _verl(old, roll, m, "token", cap)
            | _nemo(old, roll, m, "tis", cap)
            | _trl(old, roll, m, "token_truncate", cap)
            | _skyrl(old, roll, m, cap),
        ),
        (
            ("mis", (("cap", t["mis_cap"]),)),
            _verl(old, roll, m, "token", (t["mis_cap"], 1e-9))
            | _nemo(old, roll, m, "icepop", t["mis_cap"], 0.0)
            | _trl(old, roll, m, "token_mask", t["mis_cap"])
            | _skyrl(old, roll, m, t["mis_cap"], mask_band=(0.0, t["mis_cap"])),
        ),
        (
            ("icepop", (("band", (lo, hi)),)),
            _verl(old, roll, m, "token", (hi, lo))
            | _nemo(old, roll, m, "icepop", hi, lo)
            | _trl(old, roll, m, "token_mask", hi, lo)
            | _skyrl(old, roll, m, hi, mask_band=(lo, hi)),
        ),
        (
            ("seq_tis", (("cap", s_cap),)),
            _verl(old, roll, m, "sequence", s_cap)
            | _trl(old, roll, m, "sequence_truncate", s_cap)
            | _skyrl(old, roll, m, s_cap, level="sequence"),
        ),
        (
            ("seq_mask", (("band", (s_lo, s_hi)),)),
            _verl(old, roll, m, "sequence", (s_hi, s_lo))
            | _trl(old, roll, m, "sequence_mask", s_hi, s_lo)
            | _skyrl(old, roll, m, s_hi, product_band=(s_lo, s_hi), level="sequence"),
        ),
        (
            ("tis_mask", (("cap", cap), ("band", (lo, hi)))),
            _verl(old, roll, m, "token", cap, (("token_k1", k1),))
            | _skyrl(old, roll, m, cap, mask_band=(lo, hi)),
        ),
        (
            reject,
            _verl(old, roll, m, "token", 5e8, (("token_k1", k1), ("seq_max_k3", 0.02))),
        ),
        (("geo_mask", (("band", (g_lo, g_hi)),)), _nemo(old, roll, m, "seq-mask-tis", g_hi, g_lo)),
        (("seq_is", ()), _trl(old, roll, m, "sequence_truncate", None, 0.0)),
    ]


def _report(old, roll, m, estimators):
    rows, cols = np.nonzero(m > 0)
    log_w = (old - roll)[rows, cols].astype(np.float64)
    return weight_diagnostics(
        estimators, log_w, roll[rows, cols].astype(np.float64), rows, sequences=m.shape[0]
    )


@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_each_framework_name_is_the_frameworks_number(batch):
    old, roll, m = BATCHES[batch]()
    cases = _expected(old, roll, m)
    numbers, skipped = _report(old, roll, m, tuple(e for e, _ in cases))
    assert skipped == {}
    for estimator, want in cases:
        got = {k: v for k, v in numbers[label(estimator)].items() if k in FRAMEWORK_NAMES}
        assert set(got) == set(want), label(estimator)
        for key, value in want.items():
            assert got[key] == pytest.approx(float(value), rel=2e-6, abs=1e-9), (
                label(estimator),
                key,
            )


def test_the_edge_batch_puts_a_token_on_each_threshold_and_the_rules_bite():
    old, roll, m = _edge_arrays()
    t = _thresholds(old, roll, m)
    w = _exp32((old - roll)[m > 0].astype(F32))
    assert F32(t["cap"]) in w and F32(t["band"][0]) in w and F32(t["band"][1]) in w
    cases = dict(_expected(old, roll, m))
    tis_mask = cases[("tis_mask", (("cap", t["cap"]), ("band", t["band"])))]
    assert 0 < tis_mask[RC + "rollout_rs_masked_fraction"] < 1
    assert 0 < cases[("tis", (("cap", t["cap"]),))]["is_oob_ratio"] < 1


def test_verl_weighs_before_its_rejection_and_logs_the_raw_sequence_maximum():
    """The two mismatches found: with a rejection mask verl's rollout_is_mean is the mean
    before the mask (ours, weight_mean, after), and for sequence IcePop its rollout_is_max is
    the greatest W before the band (ours, weight_max, the greatest kept)."""
    old, roll, m = _edge_arrays()
    t = _thresholds(old, roll, m)
    tis_mask = ("tis_mask", (("cap", t["cap"]), ("band", t["band"])))
    seq_mask = ("seq_mask", (("band", t["seq_band"]),))
    numbers, _ = _report(old, roll, m, (tis_mask, seq_mask))
    got = numbers[label(tis_mask)]
    assert got[RC + "rollout_is_mean"] > got["weight_mean"]
    w = np.exp((old - roll)[m > 0].astype(np.float64))
    assert got[RC + "rollout_is_mean"] == pytest.approx(np.minimum(w, t["cap"]).mean(), rel=1e-6)
    got = numbers[label(seq_mask)]
    big_w = np.exp(((old - roll) * m).sum(axis=-1))
    assert got[RC + "rollout_is_max"] == pytest.approx(big_w.max(), rel=1e-5)
    assert got["weight_max"] <= t["seq_band"][1] < got[RC + "rollout_is_max"]


def test_nemo_counts_truncated_tokens_under_tis_and_sequences_under_seq_mask_tis():
    old, roll, m = _edge_arrays()
    t = _thresholds(old, roll, m)
    tis = ("tis", (("cap", t["cap"]),))
    geo = ("geo_mask", (("band", t["geo_band"]),))
    numbers, _ = _report(old, roll, m, (tis, geo))
    w = _exp32((old - roll)[m > 0].astype(F32))
    assert numbers[label(tis)]["is_oob_ratio"] == pytest.approx(np.mean(w > F32(t["cap"])))
    assert numbers[label(tis)]["masked_fraction"] == 0.0  # nothing masked, some truncated
    # per sequence, the empty row (geometric mean 1) counted: 7 sequences
    got = numbers[label(geo)]["is_oob_ratio"]
    assert got * 7 == pytest.approx(round(got * 7))


def test_estimators_without_a_framework_setting_carry_none_of_its_names():
    old, roll, m = _edge_arrays()
    numbers, _ = _report(old, roll, m, (("seq_is", ()), ("tis", (("cap", 1e9),))))
    assert not any(k.startswith(RC) or k == "is_oob_ratio" for k in numbers["seq_is()"])
    big = numbers[label(("tis", (("cap", 1e9),)))]  # a cap above e^20: no verl, no SkyRL
    assert not any(k.startswith(RC) or k.startswith("tis_") for k in big)
    assert "is_oob_ratio" in big and TRL + "mean" in big


def test_verl_judges_its_rejection_on_the_log_ratio_clamped_to_20():
    # log w = −30: k2 = 450 unclamped, 200 on the clamped −20, so τ = 300 keeps it in verl
    roll = np.full((2, 3), -1.0, F32)
    old = roll + np.array([[-30.0, 0.1, -0.1], [0.2, 0.0, 0.0]], F32)
    m = np.array([[1, 1, 1], [1, 1, 0]])
    est = ("kl_reject", (("reject", "token_k2"), ("reject_threshold", "300")))
    numbers, _ = _report(old, roll, m, (est,))
    got = numbers[label(est)]
    want = _verl(old, roll, m, "token", 5e8, (("token_k2", 300.0),))
    assert want[RC + "rollout_rs_masked_fraction"] == 0.0
    for key, value in want.items():
        assert got[key] == pytest.approx(float(value), rel=2e-6), key
    assert got["masked_fraction"] == 1 / 5  # ours judges the unclamped −30: dropped
