"""``verify.pipeline.routing``: each action on a hand-computed batch, the proved TIS cap (and its
refusal), verdicts equal to the offline evaluation's, and bad batches refused with the argument
named."""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

from kernel_contracts import contracts
from kernel_contracts.verify.common.status import Status
from kernel_contracts.verify.pipeline import routing
from kernel_contracts.verify.pipeline.routing import PromotionState, RoutingError

ROOT = pathlib.Path(__file__).resolve().parents[2]

HEAD = """contract: 1
name: routing-test
policy: {temperature: 1.0, top_p: 1.0, top_k: 0, logprobs: full_vocab, vocab_size: 256,
         max_new_tokens: 64}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
numerical:
  - {id: N_lr, metric: log_ratio, max: 0.5, slice: all}
statistical:
  - {id: S_rate, metric: abs_log_ratio, statistic: exceed_rate, threshold: 0.2, max: 0.05,
     confidence: 0.95, min_samples: 4, slices: [all]}
"""

GUARANTEES = """guarantees:
  - {id: G_tis_tight, quantity: pg_bias, score_norm: 5.0, advantage: 1.0, estimator: tis,
     cap: 1.2, max: 0.001, from: [N_lr], assume: [support_overlap]}
  - {id: G_tis, quantity: pg_bias, score_norm: 5.0, advantage: 1.0, estimator: tis, cap: 2.0,
     max: 0.001, from: [N_lr], assume: [support_overlap]}
"""

RULES = """escalation:
  - {when: {clause: N_lr}, severity: warn, action: mask_tokens}
  - {when: {clause: S_rate}, severity: critical, action: route_to_train_kernel}
  - {when: {clause: N_lr}, severity: warn, action: tis_correct}
  - {when: {clause: S_rate}, severity: critical, action: halt_promotion}
"""


def _load(tmp_path, text, name="contract.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return contracts.load(path)


@pytest.fixture(scope="module")
def contract(tmp_path_factory):
    return _load(tmp_path_factory.mktemp("routing"), HEAD + GUARANTEES + RULES)


@pytest.fixture(scope="module")
def router(contract):
    return routing.prepare(contract)


# log w = train − inference: row 0 [0, 0.75, 0.1, pad], row 1 [0, 0.3, −0.7, 6], row 2 zeros
TRAIN = np.array([[-1.0, -0.5, -2.0, 0.0], [-1.0, -1.0, -1.0, -3.0], [-0.2, -0.2, -0.2, -0.2]])
INFER = np.array([[-1.0, -1.25, -2.1, 0.0], [-1.0, -1.3, -0.3, -9.0], [-0.2, -0.2, -0.2, -0.2]])
MASK = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]], dtype=bool)


def test_every_action_on_a_hand_computed_batch(router):
    d = routing.route(router, TRAIN, INFER, MASK)
    verdicts = {(c.id, c.slice): c.status for c in d.clauses}
    # |log w| > 0.5 at [0, 1], [1, 2], [1, 3]: max 6 > 0.5; 4 of 11 tokens above 0.2
    assert verdicts == {("N_lr", "all"): Status.VIOLATED, ("S_rate", "all"): Status.VIOLATED}
    n_lr = d.clauses[0]
    assert (n_lr.samples, n_lr.value) == (11, 6.0)
    assert d.clauses[1].value == 4 / 11
    # Π in order: the first rule that fires decides; every rule that fires is carried out
    assert (d.rule, d.severity, d.action) == (0, "warn", "mask_tokens")
    assert d.actions == ("mask_tokens", "route_to_train_kernel", "tis_correct", "halt_promotion")
    assert [e.fired for e in d.escalation] == [True, True, True, True]
    assert d.token_mask.tolist() == [
        [False, True, False, False],
        [False, False, True, True],
        [False, False, False, False],
    ]
    # tokens above 0.2 (the exceed_rate threshold): rows 0 and 1; row 2 has none
    assert d.rescore.tolist() == [True, True, False]
    assert d.rescore_indices == (0, 1)
    # min(w, 2) with the cap of G_tis (G_tis_tight, listed first, is refuted)
    assert (d.cap, d.cap_guarantee) == (Fraction(2), "G_tis")
    expected = [
        [1.0, 2.0, math.exp(-2.0 + 2.1), 0.0],
        [1.0, math.exp(-1.0 + 1.3), math.exp(-1.0 + 0.3), 2.0],
        [1.0, 1.0, 1.0, 1.0],
    ]
    assert d.weights.tolist() == expected
    assert d.promotion == PromotionState(
        halted=True, reason="rule 3 (halt_promotion): S_rate violated"
    )
    assert (d.tokens, d.sequences, d.status) == (11, 3, Status.VIOLATED)


def test_a_clean_batch_fires_nothing_and_keeps_the_promotion_state(router):
    state = PromotionState(stage="canary")
    lt = np.full((4, 16), -1.0)  # 0 of 64 tokens above 0.2: Clopper–Pearson 0.0457 ≤ 0.05
    d = routing.route(router, lt, lt - 0.01, np.ones((4, 16), bool), promotion=state)
    assert [c.status for c in d.clauses] == [Status.INCONCLUSIVE, Status.HELD]
    assert (d.rule, d.action, d.actions) == (None, None, ())
    assert (d.token_mask, d.weights, d.rescore, d.rescore_indices) == (None, None, None, ())
    assert d.promotion is state


def test_the_decision_is_immutable_and_the_state_is_returned_anew(router):
    state = PromotionState(stage="shadow")
    d = routing.route(router, TRAIN, INFER, MASK, promotion=state)
    assert state == PromotionState(stage="shadow")  # not mutated
    assert d.promotion == PromotionState(
        stage="shadow", halted=True, reason="rule 3 (halt_promotion): S_rate violated"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.action = "log"
    for array in (d.token_mask, d.weights, d.rescore):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 0
    # a halted state stays halted, with its first reason: the same record comes back
    again = routing.route(router, TRAIN, INFER, MASK, promotion=d.promotion)
    assert again.promotion is d.promotion
    rolled = routing.halt(d.promotion, "later", rollback=True)
    assert (rolled.halted, rolled.rollback, rolled.reason) == (True, True, d.promotion.reason)


@pytest.mark.parametrize(
    ("action", "halted", "rollback"),
    [("log", False, False), ("alert", False, False), ("rollback", True, True)],
)
def test_log_alert_give_the_record_only_and_rollback_halts(tmp_path, action, halted, rollback):
    rules = f"escalation:\n  - {{when: {{clause: N_lr}}, severity: info, action: {action}}}\n"
    router = routing.prepare(_load(tmp_path, HEAD + rules))
    d = routing.route(router, TRAIN, INFER, MASK)
    assert (d.rule, d.severity, d.action, d.actions) == (0, "info", action, (action,))
    assert (d.token_mask, d.weights, d.rescore) == (None, None, None)
    assert (d.promotion.halted, d.promotion.rollback) == (halted, rollback)
    assert router.cap is None


def test_rules_on_a_guarantee_or_an_unmeasurable_clause_implicate_every_token(tmp_path):
    text = (
        HEAD
        + "  - {id: S_tv, metric: tv, statistic: mean, max: 0.1, slices: [all]}\n"
        + GUARANTEES
        + "escalation:\n"
        + "  - {when: {clause: G_tis_tight, status: [refuted]}, severity: warn,"
        + " action: route_to_train_kernel}\n"
        # a log bounds tv from below only: never held, and no token can be told apart
        + "  - {when: {clause: S_tv, status: [inconclusive]}, severity: warn,"
        + " action: mask_tokens}\n"
    )
    router = routing.prepare(_load(tmp_path, text))
    assert router.obligations == (("G_tis_tight", Status.REFUTED),)
    d = routing.route(router, TRAIN, INFER, MASK)
    assert d.actions == ("route_to_train_kernel", "mask_tokens")
    assert d.rescore.tolist() == [True, True, True]
    assert d.token_mask.tolist() == MASK.tolist()


def test_flagged_tokens_follow_the_clause_slice(tmp_path):
    text = HEAD.replace("slice: all", "slice: late") + (
        "slices:\n  late: {position: [2, null]}\n"
        "escalation:\n  - {when: {clause: N_lr}, severity: warn, action: mask_tokens}\n"
    )
    router = routing.prepare(_load(tmp_path, text))
    d = routing.route(router, TRAIN, INFER, MASK)
    # [0, 1] (0.75) lies before position 2: only [1, 2] and [1, 3] are in the slice
    assert d.token_mask.tolist() == [
        [False, False, False, False],
        [False, False, True, True],
        [False, False, False, False],
    ]


def test_prompt_slices_need_prompts(tmp_path):
    text = HEAD.replace("slice: all", "slice: math") + "slices:\n  math: {prompt: '^math'}\n"
    router = routing.prepare(_load(tmp_path, text))
    with pytest.raises(RoutingError) as err:
        routing.route(router, TRAIN, INFER, MASK)
    assert str(err.value) == (
        "prompts: slice math selects on the prompt: pass prompts=, one name per sequence"
    )
    d = routing.route(router, TRAIN, INFER, MASK, prompts=["math-1", "code-1", "math-2"])
    assert (d.clauses[0].samples, d.clauses[0].value) == (7, 0.75)


# -- the TIS cap comes from a proved guarantee ----------------------------------------------


def test_the_cap_is_the_first_proved_tis_guarantee(router):
    assert (router.cap, router.cap_guarantee) == (Fraction(2), "G_tis")
    assert router.obligations == (("G_tis_tight", Status.REFUTED), ("G_tis", Status.PROVED))


def test_a_named_unproved_cap_is_refused(contract):
    with pytest.raises(RoutingError) as err:
        routing.prepare(contract, tis_guarantee="G_tis_tight")
    assert str(err.value).startswith(
        "tis_correct: no proved TIS cap: G_tis_tight (cap 1.2) is refuted"
    )
    with pytest.raises(RoutingError, match=r"^tis_guarantee: 'G_x' is not a pg_bias guarantee"):
        routing.prepare(contract, tis_guarantee="G_x")


def test_tis_correct_without_a_proved_cap_is_refused_before_the_loop(tmp_path):
    tight = GUARANTEES.split("  - {id: G_tis,")[0]
    with pytest.raises(RoutingError) as err:
        routing.prepare(_load(tmp_path, HEAD + tight + RULES, "a.yaml"))
    assert str(err.value).startswith(
        "tis_correct: no proved TIS cap: G_tis_tight (cap 1.2) is refuted"
    )
    with pytest.raises(RoutingError) as err:
        routing.prepare(_load(tmp_path, HEAD + RULES, "b.yaml"))
    assert str(err.value) == (
        "tis_correct: the contract has no pg_bias guarantee with estimator: tis and a cap, so "
        "no cap is proved for the importance weights"
    )


def _report(tmp_path, contract_path, name="report.json"):
    out = tmp_path / name
    run = subprocess.run(
        [sys.executable, "-m", "verify", str(contract_path), "--json", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode in (0, 1), run.stderr
    return out


def test_a_report_lends_its_cap_only_when_it_rechecks(tmp_path, contract):
    path = _report(tmp_path, contract.source.path)
    router = routing.prepare(contract, report=path)
    assert (router.cap, router.cap_guarantee, router.statuses_from) == (
        Fraction(2),
        "G_tis",
        str(path),
    )
    # a forged report: the refuted tight cap edited to proved, and the cap asked for
    data = json.loads(path.read_text())
    for o in data["obligations"]:
        if o["id"] == "G_tis_tight":
            o["status"] = "proved"
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data))
    with pytest.raises(RoutingError) as err:
        routing.prepare(contract, report=forged, tis_guarantee="G_tis_tight")
    assert str(err.value).startswith(f"report: {forged} does not re-check (")
    assert "its verdicts are not used" in str(err.value)


def test_a_report_of_another_contract_is_refused(tmp_path, contract):
    other = _load(tmp_path, (HEAD + GUARANTEES + RULES).replace("max: 0.5", "max: 0.4"))
    with pytest.raises(RoutingError) as err:
        routing.prepare(other, report=_report(tmp_path, contract.source.path))
    assert str(err.value) == (
        f"report: {tmp_path / 'report.json'} is not a report of this contract ('routing-test')"
    )
    # the function (``verify.run`` is the function ``verify.proving.runner.run``)
    from kernel_contracts.verify.proving.runner import run

    report = run(contract)
    assert routing.prepare(contract, report=report).cap == Fraction(2)
    with pytest.raises(RoutingError, match=r"^report: a report of contract 'routing-test'"):
        routing.prepare(other, report=report)
    with pytest.raises(RoutingError, match=r"^report: expected a verify.Report or a report file"):
        routing.prepare(contract, report={"status": "proved"})


def test_weights_never_exceed_the_cap_in_their_dtype():
    c = Fraction(11, 10)
    below = routing.cap_below(c, np.float32)
    assert Fraction(below) <= c < Fraction(float(np.nextafter(np.float32(below), np.float32(2))))
    log_w = np.array([[0.2, 0.0953102, -1.0]], dtype=np.float32)
    w = routing.capped_weights(log_w, np.ones((1, 3), bool), c)
    assert w.dtype == np.float32
    assert all(Fraction(float(x)) <= c for x in w.ravel())
    assert w[0, 0] == np.float32(below)


# -- the same verdicts as the offline evaluation ----------------------------------------------


def test_a_batch_of_a_whole_log_gets_the_offline_verdicts():
    from kernel_contracts.evidence.logs import read_log
    from kernel_contracts.verify.decide import evaluate

    contract = contracts.load(ROOT / "contracts/examples/rollout-log.yaml")
    offline, _ = evaluate(contract)
    table = read_log(contract.evidence.logprobs.path, "generic", vocab_size=256)
    col = table.columns
    b, t = table.sequences, int(col["position"].max()) + 1
    train, infer = np.zeros((b, t)), np.zeros((b, t))
    mask = np.zeros((b, t), bool)
    train[col["sequence"], col["position"]] = col["train_logprob"]
    infer[col["sequence"], col["position"]] = col["rollout_logprob"]
    mask[col["sequence"], col["position"]] = True
    names = [table.prompt_names[col["prompt"][col["sequence"] == i][0]] for i in range(b)]
    d = routing.route(routing.prepare(contract), train, infer, mask, prompts=names)

    def fields(c):
        return dataclasses.replace(c, fingerprint="", source="")

    assert [fields(c) for c in d.clauses] == [fields(c) for c in offline]
    assert d.tokens == table.tokens == 4096


# -- bad input: one exception type, the argument named ----------------------------------------


def _error(router, *args, **kw) -> str:
    with pytest.raises(RoutingError) as err:
        routing.route(router, *args, **kw)
    return str(err.value)


def test_bad_batches_name_the_argument(router):
    ok = (TRAIN, INFER, MASK)
    assert _error(router, TRAIN, INFER[:, :3], MASK) == (
        "inference_logprobs: shape (3, 3) does not match train_logprobs (3, 4)"
    )
    nan = TRAIN.copy()
    nan[1, 2] = np.nan
    assert _error(router, nan, INFER, MASK) == (
        "train_logprobs: NaN log-prob at response token [batch, token] [1, 2]"
    )
    pos = INFER.copy()
    pos[2, 0] = 0.25
    assert _error(router, TRAIN, pos, MASK) == (
        "inference_logprobs: positive log-prob 0.25 > 0 at response token [batch, token] "
        "[2, 0]: log-probs must be ≤ 0"
    )
    inf = INFER.copy()
    inf[0, :3] = -np.inf
    assert _error(router, TRAIN, inf, MASK) == (
        "inference_logprobs: infinite log-prob at response token [batch, token] [0, 0], [0, 1], "
        "[0, 2]"
    )
    assert _error(router, TRAIN, INFER, MASK.astype(np.int64)) == (
        "response_mask: must be boolean, got dtype int64 (pass mask.astype(bool) if nonzero "
        "means a response token)"
    )
    assert _error(router, TRAIN[0], INFER, MASK).startswith(
        "train_logprobs: expected shape [batch, tokens], got shape (4,)"
    )
    assert _error(router, TRAIN.tolist(), INFER, MASK) == (
        "train_logprobs: expected a numpy or JAX array, got list"
    )
    assert _error(router, TRAIN.astype(np.int32), INFER, MASK) == (
        "train_logprobs: log-probs must be a floating-point array, got dtype int32"
    )
    assert _error(router, *ok, positions=np.full((3, 4), -1)).startswith(
        "positions: negative position at [batch, token] [0, 0], [0, 1], [0, 2] and 9 more"
    )
    assert _error(router, *ok, prompts=["a"]) == "prompts: 1 names for a batch of 3 sequences"
    assert _error(router, *ok, promotion="halted") == (
        "promotion: expected a PromotionState, got str"
    )
    assert _error("router", *ok).startswith(
        "router: expected verify.pipeline.routing.prepare(contract)"
    )


def test_every_problem_is_named_at_once(router):
    nan = TRAIN.copy()
    nan[0, 0] = np.nan
    with pytest.raises(RoutingError) as err:
        routing.route(router, nan, INFER[:2], MASK.astype(np.float32))
    assert err.value.problems == (
        "inference_logprobs: shape (2, 4) does not match train_logprobs (3, 4)",
        "response_mask: must be boolean, got dtype float32 (pass mask.astype(bool) if nonzero "
        "means a response token)",
    )


def test_padding_may_hold_anything(router):
    train, infer = TRAIN.copy(), INFER.copy()
    train[0, 3], infer[0, 3] = np.nan, 5.0
    d = routing.route(router, train, infer, MASK)
    assert routing.routing_json(d) | {"fingerprint": ""} == (
        routing.routing_json(routing.route(router, TRAIN, INFER, MASK)) | {"fingerprint": ""}
    )
    assert d.weights[0, 3] == 0.0


def test_routing_numpy_batches_never_imports_jax():
    code = (
        "import sys, numpy as np\n"
        "from kernel_contracts import contracts\n"
        "from kernel_contracts.verify.pipeline import routing\n"
        "c = contracts.load('contracts/examples/rollout-log.yaml')\n"
        "d = routing.route(routing.prepare(c), np.full((2, 3), -1.0), np.full((2, 3), -1.1),"
        " np.ones((2, 3), bool))\n"
        "print(d.status.label, sorted(m for m in sys.modules if m.split('.')[0] == 'jax'))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "inconclusive []\n"
