"""Localization of two kernels on shared operands, the flip statistics against hand-computed
cases, the ulp distance, the site walker, and ``python -m verify localize`` with its bad input."""

from __future__ import annotations

import json
import math
import pathlib
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.contracts.presets import PRESETS
from kernel_contracts.kernels._matmul import matmul
from kernel_contracts.kernels.diagnose.localization import kernel_logits, localize, replay
from kernel_contracts.kernels.diagnose.rescale import pow2_ceil, rescaled_matmul
from kernel_contracts.kernels.diagnose.sites import walk
from kernel_contracts.kernels.measurement.flipstats import (
    brier,
    fit_logistic,
    predict_flips,
    roc_auc,
)
from kernel_contracts.kernels.numerics.ulp import coarser, ulp_distance, ulp_summary
from tests.support.cli_runner import malformed_contract, run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
D, VOCAB = 32, 16

MODEL_SOURCE = """
import jax
import jax.numpy as jnp


def logits(params, tokens):
    x = params["embed"][tokens]

    def layer(x, w):
        return x + jnp.tanh(x @ w), None

    x, _ = jax.lax.scan(layer, x, params["layers"])
    return x @ params["head"]
"""


def _params(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "embed": rng.standard_normal((VOCAB, D)).astype(np.float32),
        "layers": (rng.standard_normal((2, D, D)) / np.sqrt(D)).astype(np.float32),
        "head": rng.standard_normal((D, VOCAB)).astype(np.float32),
    }


def _logits(params, tokens):
    x = params["embed"][tokens]

    def layer(x, w):
        return x + jnp.tanh(x @ w), None

    x, _ = jax.lax.scan(layer, x, params["layers"])
    return x @ params["head"]


TOKENS = np.random.default_rng(1).integers(0, VOCAB, (2, 8)).astype(np.int32)
FP32, INT8 = PRESETS["fp32"], PRESETS["a100-int8"]


# ------------------------------------------------------------------- flip statistics


def test_roc_auc_hand_cases():
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75  # 3 of 4 pairs ordered
    assert roc_auc([1.0, 1.0], [1, 0]) == 0.5  # a tie counts one half
    assert roc_auc([0.0, 1.0, 2.0], [0, 1, 1]) == 1.0
    assert roc_auc([3.0, 1.0, 2.0], [1, 0, 0]) == 1.0
    assert roc_auc([3.0, 1.0, 2.0], [0, 1, 1]) == 0.0
    # 2 positives (scores 2, 2), 3 negatives (1, 2, 3): pairs won 2·1, tied 2·1, lost 2·1
    assert roc_auc([2, 2, 1, 2, 3], [1, 1, 0, 0, 0]) == pytest.approx((2 + 0.5 * 2) / 6)
    assert roc_auc([1.0, 2.0], [1, 1]) is None
    assert roc_auc([1.0, 2.0], [0, 0]) is None


def test_brier_hand_cases():
    assert brier([0.9, 0.2], [1, 0]) == pytest.approx((0.01 + 0.04) / 2)
    assert brier([0.0, 1.0], [0, 1]) == 0.0
    assert brier([0.5] * 4, [0, 1, 1, 0]) == 0.25
    with pytest.raises(ValueError, match="probabilities"):
        brier([1.5], [1])


def test_logistic_fit_meets_its_optimality_conditions():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(400)
    y = (rng.random(400) < 1 / (1 + np.exp(-(0.5 - 2 * x)))).astype(float)
    fit = fit_logistic(x, y, ridge=1.0)
    z = (x - fit.center) / fit.scale
    p = fit(x)
    # gradient of the penalised log-likelihood vanishes: Σ(y − p) = λa, Σ(y − p)z = λb
    assert np.sum(y - p) == pytest.approx(fit.intercept, abs=1e-8)
    assert np.sum((y - p) * z) == pytest.approx(fit.slope, abs=1e-8)
    assert fit.slope < 0  # the data fall with x
    # a constant feature: no slope, and the intercept is the penalised logit of the rate
    flat = fit_logistic(np.ones(10), np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 0]), ridge=1.0)
    assert flat.slope == 0.0
    q = 1 / (1 + math.exp(-flat.intercept))
    assert 2 - 10 * q == pytest.approx(flat.intercept, abs=1e-10)


def test_predict_flips_splits_and_scores():
    margin = np.array([0.01, 5.0, 0.02, 4.0, 0.015, 3.0, 0.03, 6.0])
    flip = np.array([1, 0, 1, 0, 0, 0, 1, 0])
    fit = np.array([1, 1, 1, 1, 0, 0, 0, 0], bool)
    p = predict_flips(margin, flip, fit)
    assert (p.positions, p.flips, p.fit_positions, p.test_positions) == (8, 3, 4, 4)
    assert p.auc == roc_auc(-margin, flip)
    test = ~fit
    x = np.log(margin[test])
    assert p.brier == pytest.approx(brier(p.fit(x), flip[test]))
    assert p.brier_constant == pytest.approx(brier(np.full(4, 0.5), flip[test]))
    assert p.brier < p.brier_constant  # small margins flip here


# ------------------------------------------------------------------------ ulps, walker


def test_ulp_distance_hand_cases():
    assert coarser("float32", "bfloat16") == "bfloat16"
    a = np.float32([1.0, 1.0, 0.0, 3.0, np.nan, 1.0])
    b = np.float32([1.0078125, 1.00390625, 0.0, 2.96875, np.nan, np.inf])
    d = ulp_distance(a, b, "bfloat16")  # bf16 spacing 2**-7 on [1, 2), 2**-6 on [2, 4)
    assert d.tolist() == [1.0, 0.5, 0.0, 2.0, 0.0, math.inf]
    tiny = ulp_distance(np.float32([0.0]), np.float32([2.0**-133]), "bfloat16")
    assert tiny.tolist() == [1.0]  # at 0: the spacing of the bottom binade, 2**(-126-7)
    assert ulp_summary(np.array([0.0, 1.0, 2.0, np.inf]))["max"] == math.inf


def test_walk_labels_layers_and_values():
    seen = []

    def exact(site, lhs, rhs, dims, dtype):
        seen.append(site)
        return jax.lax.dot_general(lhs, rhs, dims, precision=jax.lax.Precision.HIGHEST)

    params = _params()
    out = walk(_logits, exact, params, TOKENS)
    assert [(s.index, s.layer, s.label, s.m, s.k, s.n) for s in seen] == [
        (0, (0,), "layers[0]", 16, D, D),
        (1, (1,), "layers[1]", 16, D, D),
        (2, (), "head", 16, D, VOCAB),
    ]
    want = _logits(params, jnp.asarray(TOKENS))
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_walk_attention_and_control_flow():
    rng = np.random.default_rng(5)
    wq, wk, wv, wc = (rng.standard_normal((D, D)).astype(np.float32) for _ in range(4))

    def attend(params, x):
        q, k, v = x @ params["wq"], x @ params["wk"], x @ params["wv"]
        weights = jax.nn.softmax(jnp.einsum("sd,td->st", q, k) / 8.0, axis=-1)
        y = jax.lax.cond(x[0, 0] > -1e9, lambda y: y @ params["wc"], lambda y: y, weights @ v)
        step = lambda c: (c[0] + 1, jnp.tanh(c[1] @ params["wc"]))  # noqa: E731
        return jax.lax.while_loop(lambda c: c[0] < 2, step, (0, y))[1]

    params = {"wq": wq, "wk": wk, "wv": wv, "wc": wc}
    x = rng.standard_normal((4, D)).astype(np.float32)
    for attention, count in (("float32", 6), ("matmul", 8)):
        seen = []

        def exact(site, lhs, rhs, dims, dtype, seen=seen):
            seen.append(site)
            return jax.lax.dot_general(lhs, rhs, dims, precision=jax.lax.Precision.HIGHEST)

        out = walk(attend, exact, params, x, attention=attention)
        np.testing.assert_allclose(np.asarray(out), np.asarray(attend(params, x)), atol=1e-5)
        assert len(seen) == count
    labels = [(s.layer, s.label) for s in seen]
    assert labels[:3] == [((), "wq"), ((), "wk"), ((), "wv")]
    assert labels[-3:] == [((), "wc"), ((0,), "wc"), ((1,), "wc")]  # cond, 2 while steps


def test_pow2_scales():
    s = jnp.float32([1.0, 1.5, 0.75, 3.0, 2.0**-126])
    assert np.asarray(pow2_ceil(s)).tolist() == [1.0, 2.0, 1.0, 4.0, 2.0**-126]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    w = rng.standard_normal((64, 8)).astype(np.float32)
    mx = PRESETS["mxfp8"].matmul  # MX scales are powers of two already
    np.testing.assert_array_equal(rescaled_matmul(x, w, mx, "pow2"), matmul(x, w, mx))


# ---------------------------------------------------------------------------- localize


@pytest.fixture(scope="module")
def located():
    return localize(_logits, _params(), TOKENS, FP32, INT8)


def test_a_kernel_against_itself_is_bit_identical():
    from kernel_contracts import kernels

    assert kernels.localize is localize and kernels.replay is replay  # the package's API
    loc = localize(_logits, _params(), TOKENS, FP32, FP32, pow2=False)
    assert [s.identical for s in loc.sites] == [1.0, 1.0, 1.0]
    assert [s.ulp_max for s in loc.sites] == [0.0, 0.0, 0.0]
    assert loc.first_divergent is None


def test_every_site_is_compared_on_kernel_a_operands(located):
    """Site 1's numbers are those of both kernels on the operands kernel A computed there,
    not on kernel B's own (compounded) operands."""
    p = _params()
    x0 = jnp.asarray(p["embed"])[TOKENS].reshape(-1, D)

    def site1(h0):
        h1 = x0 + jnp.tanh(h0)
        a = np.asarray(matmul(h1, p["layers"][1], FP32.matmul))
        b = np.asarray(matmul(h1, p["layers"][1], INT8.matmul))
        return ulp_distance(a, b, "bfloat16")

    shared = site1(matmul(x0, p["layers"][0], FP32.matmul))
    compounded = site1(matmul(x0, p["layers"][0], INT8.matmul))
    s = located.sites[1]
    assert (s.ulp_max, s.ulp_p50) == (ulp_summary(shared)["max"], ulp_summary(shared)["p50"])
    assert s.ulp_max != ulp_summary(compounded)["max"]
    assert located.fmt == "bfloat16" and located.batch_size == 2
    assert located.first_divergent.site.index == 0
    assert [g.layer for g in located.layers()] == [(0,), (1,), ()]


def test_pow2_scales_remove_epilogue_order_divergence(located):
    """Two int8 kernels that differ only in the order of the epilogue's scale multiplications:
    with power-of-two scales every multiplication is exact, so nothing is left to differ."""
    from dataclasses import replace

    spec = INT8.matmul
    swapped = replace(spec, epilogue=replace(spec.epilogue, order="acc_sx_sw"))
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((16, D)) * np.exp2(rng.uniform(-6, 6, (16, 1)))).astype(np.float32)
    w = (rng.standard_normal((D, D)) * np.exp2(rng.uniform(-6, 6, (1, D)))).astype(np.float32)
    a, b = rescaled_matmul(x, w, spec, "pow2"), rescaled_matmul(x, w, swapped, "pow2")
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # and against fp32 the power-of-two scales leave the int8 quantization in place
    assert all(s.pow2_identical < 1.0 for s in located.sites)


def test_replay_scores_margins_against_flips():
    tokens = np.random.default_rng(2).integers(0, VOCAB, TOKENS.shape).astype(np.int32)
    r = replay(_logits, _params(), tokens, FP32, INT8)
    za = np.asarray(kernel_logits(_logits, _params(), tokens, FP32))
    zb = np.asarray(kernel_logits(_logits, _params(), tokens, INT8))
    flips = za.argmax(-1) != zb.argmax(-1)
    assert (r.sequences, r.length, r.prediction.positions) == (2, 8, 16)
    assert r.prediction.flips == int(flips.sum()) and r.agreement == 1 - flips.mean()
    assert r.logit_drift_max == pytest.approx(float(np.abs(zb - za).max()))
    assert r.prediction.fit_positions == r.prediction.test_positions == 8
    top2 = np.sort(za, axis=-1)[..., -2:]
    assert r.prediction.auc == roc_auc(-(top2[..., 1] - top2[..., 0]).ravel(), flips.ravel())


# ------------------------------------------------------------------------- command line


def _model_dir(tmp_path) -> pathlib.Path:
    (tmp_path / "loc_model.py").write_text(MODEL_SOURCE)
    arrays = {k: v for k, v in _params().items()}
    arrays["extra/prompts"] = np.random.default_rng(3).integers(0, VOCAB, (8, 12)).astype(np.int32)
    np.savez(tmp_path / "params.npz", **arrays)
    return tmp_path


def _contract(tmp_path, k_max: int = 4096) -> pathlib.Path:
    path = tmp_path / "c.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            contract: 1
            name: localize-test
            kernels:
              train: {{preset: fp32}}
              inference: {{preset: a100-int8, matmul: {{k_max: {k_max}}}}}
            evidence:
              emulate: {{model: "loc_model:logits", params: params.npz}}
            """
        )
    )
    return path


def _run(*argv):
    # the contracts here name their model's code: consent is given (tests/evidence/
    # test_trust_code.py shows the refusal without it)
    return run_cli("localize", *argv, "--trust-code")


def test_cli_writes_the_tables_and_the_json(tmp_path):
    contract = _contract(_model_dir(tmp_path))
    report = tmp_path / "loc.json"
    code, out, err = _run(contract, "--sequences", 2, "--length", 8, "--replay", 2,
                          "--json", report)  # fmt: skip
    assert (code, err) == (0, "")
    assert "kernel A = fp32 (train), kernel B = a100-int8 (inference), model loc_model" in out
    assert "first divergent site: 0 (layer 0, layers[0])" in out
    doc = json.loads(report.read_text())
    assert [s["site"]["label"] for s in doc["sites"]] == ["layers[0]", "layers[1]", "head"]
    assert doc["first_divergent"] == 0 and doc["replay"]["prediction"]["positions"] == 16


def test_cli_bad_input_exits_2_with_one_message_and_writes_nothing(tmp_path):
    d = _model_dir(tmp_path)
    contract = _contract(d)
    small = d / "small.yaml"
    small.write_text(_contract(d, k_max=16).read_text())
    _contract(d)  # c.yaml back to k_max 4096
    missing = tmp_path / "missing.yaml"
    malformed, expected = malformed_contract()
    report = tmp_path / "out.json"
    cases = [
        ([missing], f"{missing}: no such file\n"),
        ([malformed], expected),
        ([contract, "--model", "gpt-9"],
         "--model gpt-9: unknown model (shipped: tiny-lm; or an entry point "
         "package.module:function with --params PATH)\n"),
        ([contract, "--model", "loc_model:logits"],
         "--model loc_model:logits: an entry point needs --params PATH\n"),
        ([contract, "--model", "loc_model:logits", "--params", d / "none.npz"],
         f"--params: no such file: {d / 'none.npz'}\n"),
        ([contract, "--model", "loc_model:nothing", "--params", d / "params.npz"],
         "--model: module 'loc_model' has no attribute 'nothing'\n"),
        ([contract, "--length", 13],
         "--length 13: the token windows (the params file's prompts) are 12 tokens long; give "
         "--length 12 or less\n"),
        ([contract, "--model", "tiny-lm", "--length", 200],
         "--length 200: model tiny-lm runs sequences of at most 128 tokens\n"),
        ([contract, "--replay", 1],
         "--replay 1: flip prediction fits on even sequences and scores odd ones, so it needs "
         "at least 2 (0 skips it)\n"),
        ([small, "--sequences", 1, "--length", 4, "--replay", 0],
         "verify localize: cannot run loc_model:logits on these kernels: invalid int8 matmul:   "
         "K = 32 exceeds the declared k_max = 16: the contract's exactness obligations do not "
         "cover this reduction\n"),
        ([contract, "--json", contract],
         f"verify: cannot write {contract}: it is the contract ({contract}); a report never "
         "overwrites its input\n"),
    ]  # fmt: skip
    for argv, message in cases:
        code, out, err = _run(*argv, *([] if "--json" in argv else ["--json", report]))
        assert (code, out, err) == (2, "", message), argv
        assert not report.exists()
    code, out, err = _run(contract, "--sequences", 0)
    assert (code, out) == (2, "")
    assert err.endswith("argument --sequences: must be positive: 0\n")
