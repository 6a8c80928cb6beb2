"""Solver budgets in the solvers' deterministic units: the record, the command line, the report,
``verify check`` and the derivation cache (the run under load: ``test_budgets_under_load``)."""

from __future__ import annotations

import json
import math
import re

import pytest

from kernel_contracts import bounds, contracts
from kernel_contracts.verify.common import arguments
from kernel_contracts.verify.proving.check.recheck import check_data
from kernel_contracts.verify.proving.obligations import discharge
from kernel_contracts.verify.proving.solve import budget as budgets
from kernel_contracts.verify.proving.solve import smt
from kernel_contracts.verify.proving.solve.budget import Budget, BudgetError
from tests.support.cli_runner import run_cli

CONTRACT = """\
contract: 1
name: budgets
policy: {temperature: 1.0}
kernels: {train: {preset: fp32}, inference: {preset: h100-fp8}}
numerical:
  - {id: N1, metric: logit_drift, max: 0.02}
guarantees:
  - {id: G1, quantity: token_tv, max: 0.0100, from: [N1]}
"""


def test_the_default_budget_in_each_solvers_units():
    b = Budget()
    assert b.json() == {
        "z3": {"rlimit": 4_000_000},
        "cvc5": {"rlimit-per": 1_000_000},
        "hang_guard_s": 300.0,
    }
    assert Budget.from_json(json.loads(json.dumps(b.json()))) == b
    # a quarter of the budget per query, never more than is left, at least the floor
    assert b.allowance(b.rlimit) == 1_000_000
    assert b.allowance(5) == 5
    assert Budget(rlimit=40_000).allowance(40_000) == budgets.QUERY_FLOOR
    assert Budget(rlimit=7).allowance(7) == 7


def test_the_command_line_defaults_are_the_budgets():
    # verify.common may not import verify.proving, so the numbers live twice: kept equal here
    assert arguments.SOLVER_BUDGET == budgets.DEFAULT_RLIMIT
    assert arguments.HANG_GUARD_MS == budgets.DEFAULT_HANG_GUARD_S * 1000
    code, out, _ = run_cli("--help")
    text = " ".join(out.split())
    assert code == 0
    assert f"(default {budgets.DEFAULT_RLIMIT})" in text and "--solver-budget N" in text
    assert "hang guard: wall-clock milliseconds" in text
    assert f"(default {int(budgets.DEFAULT_HANG_GUARD_S * 1000)})" in text


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"z3": {"rlimit": 0}, "cvc5": {"rlimit-per": 1}, "hang_guard_s": 1},
         "solver_budget: rlimit must be an integer in [1, 4294967295], not 0"),
        ({"z3": {"rlimit": True}, "cvc5": {"rlimit-per": 1}, "hang_guard_s": 1},
         "solver_budget: rlimit must be an integer in [1, 4294967295], not True"),
        ({"z3": {"rlimit": 2**32}, "cvc5": {"rlimit-per": 1}, "hang_guard_s": 1},
         "solver_budget: rlimit must be an integer in [1, 4294967295], not 4294967296"),
        ({"z3": {"rlimit": 1}, "cvc5": {"rlimit-per": 1.5}, "hang_guard_s": 1},
         "solver_budget: cvc5_rlimit must be an integer in [1, 4294967295], not 1.5"),
        ({"z3": {"rlimit": 1}, "cvc5": {"rlimit-per": 1}, "hang_guard_s": math.nan},
         "solver_budget: hang_guard_s must be a positive number, not nan"),
        ({"z3": {"rlimit": 1}, "cvc5": {"rlimit-per": 1}},
         "solver_budget: must have exactly the keys z3, cvc5 and hang_guard_s"),
        ({"z3": {"timeout": 1}, "cvc5": {"rlimit-per": 1}, "hang_guard_s": 1},
         "solver_budget: z3 must have exactly the key rlimit"),
        ([], "solver_budget: must have exactly the keys z3, cvc5 and hang_guard_s"),
    ],
)  # fmt: skip
def test_a_malformed_budget_is_refused_with_its_key(data, message):
    with pytest.raises(BudgetError) as err:
        Budget.from_json(data)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("value", "message"),
    [("0", "must be positive: 0"), ("4294967296", "must be at most 4294967295: 4294967296"),
     ("1e6", "not an integer: '1e6'")],
)  # fmt: skip
def test_a_bad_solver_budget_is_a_usage_error(value, message):
    code, out, err = run_cli("--solver-budget", value, "x.yaml")
    assert (code, out) == (2, "")
    assert err.endswith(f"python -m verify: error: argument --solver-budget: {message}\n")


def test_the_same_query_spends_the_same_units_every_time():
    (d,) = bounds.derive(contracts.loads(CONTRACT))
    runs = [discharge(d) for _ in range(3)]
    assert {o.status.label for o in runs} == {"proved"}
    assert len({o.rlimit for o in runs}) == 1 and runs[0].rlimit > 0
    text = runs[0].queries[0].text
    spent = {smt.z3_check(text, rlimit=1_000_000).rlimit for _ in range(3)}
    assert len(spent) == 1


def test_a_query_within_fewer_units_than_it_needs_is_unknown_and_names_the_option():
    (d,) = bounds.derive(contracts.loads(CONTRACT))
    text = discharge(d).queries[0].text
    got = smt.z3_check(text, rlimit=100)
    assert got.answer == "unknown" and not got.hang_guard
    assert got.out_of_budget and got.reason.startswith(
        "z3 spent its allowance of 100 resource units (rlimit) on the query ("
    )


def test_a_spent_budget_is_unknown_on_the_command_line_and_says_which_option(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(CONTRACT, encoding="utf-8")
    report = tmp_path / "r.json"
    code, _, err = run_cli(path, "--solver-budget", "50", "--json", report, "--no-cache")
    assert (code, err) == (3, "")
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["solver_budget"] == {
        "z3": {"rlimit": 50},
        "cvc5": {"rlimit-per": budgets.DEFAULT_CVC5_RLIMIT},
        "hang_guard_s": budgets.DEFAULT_HANG_GUARD_S,
    }
    (o,) = data["obligations"]
    assert o["status"] == "unknown"
    assert re.fullmatch(
        r"solver budget of 50 z3 resource units \(rlimit\) spent with \d+ of \d+ pieces "
        r"undecided \(z3 answered unknown: z3 spent its allowance of \d+ resource units "
        r"\(rlimit\) on the query \([^)]*\)\); --solver-budget raises it",
        o["reason"],
    ), o["reason"]


def test_the_hang_guard_is_the_timeout_option_and_is_recorded(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(CONTRACT, encoding="utf-8")
    report = tmp_path / "r.json"
    code, _, err = run_cli(path, "--timeout-ms", "90000", "--json", report, "--no-cache")
    assert (code, err) == (0, "")
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["solver_budget"]["hang_guard_s"] == 90.0
    assert data["obligations"][0]["status"] == "proved"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("budget")
    path = tmp / "c.yaml"
    path.write_text(CONTRACT, encoding="utf-8")
    out = tmp / "r.json"
    code, _, err = run_cli(path, "--json", out, "--no-cache")
    assert (code, err) == (0, "")
    return json.loads(out.read_text(encoding="utf-8")), str(tmp)


def test_check_re_runs_every_query_within_the_budget_the_report_records(report):
    data, where = report
    assert data["solver_budget"] == Budget().json()
    assert check_data(data, report_dir=where).ok
    # a report that records too small a budget for its own queries does not re-check
    small = {**data, "solver_budget": {**data["solver_budget"], "z3": {"rlimit": 100}}}
    result = check_data(small, report_dir=where)
    assert "obligations[G1].smtlib[0]: recorded answer unsat, z3 now answers unknown" in (
        result.differences
    )


def test_check_refuses_a_malformed_or_missing_budget(report):
    data, where = report
    bad = {**data, "solver_budget": {"z3": {"rlimit": -1}}}
    result = check_data(bad, report_dir=where)
    assert result.differences == (
        "solver_budget: solver_budget: must have exactly the keys z3, cvc5 and hang_guard_s; "
        "re-checked with the default budget",
    )
    # a report made with wall-clock limits cannot be replayed as it was decided
    old = {k: v for k, v in data.items() if k != "solver_budget"}
    result = check_data(old, report_dir=where)
    assert result.differences == ("report: missing fields: ['solver_budget']",)
