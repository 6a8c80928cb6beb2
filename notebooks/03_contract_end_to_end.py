# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 3. A contract end to end
#
# Write a contract, verify it, read the proof-carrying report, re-check it without trusting
# it, tamper with it and watch the check fail, then synthesize the loosest thresholds that
# still prove every guarantee — and confirm they are the boundary. Everything goes through the
# command line's `verify.main` (the same code as `python -m verify`) or the public API.

# %%
import copy
import io
import json
import pathlib
import shutil
import sys
import tempfile
from fractions import Fraction

if (
    pathlib.Path.cwd().name == "notebooks"
    and (pathlib.Path.cwd().parent / "pyproject.toml").exists()
):
    sys.path.insert(0, str(pathlib.Path.cwd().parent))  # opened from notebooks/ without install

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

from kernel_contracts import bounds
from kernel_contracts import contracts
from kernel_contracts import verify

plt.rcParams.update({"figure.dpi": 90, "axes.grid": True, "grid.alpha": 0.3})


def cli(*argv):
    """Run ``python -m verify ARGV`` in-process; returns (exit code, stdout text)."""
    out, err = io.StringIO(), io.StringIO()  # stderr carries only progress bars here
    code = verify.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue()


# %% [markdown]
# ## 1. Write the contract
#
# FP8 rollouts (`h100-fp8`) scored by an fp32 trainer. One logit-drift limit N1 (δ ≤ 0.02)
# buys five guarantees; the evidence is a rollout log the toolkit ships (real log-probs of
# the shipped model under both kernels), checked against an importance-ratio cap of 2
# (|log w| ≤ log 2, the cap RL stacks commonly use) and a tail quantile per slice. If the cap
# is broken, Π routes rollouts to the training kernel.

# %%
CONTRACT = """\
contract: 1
name: notebook-fp8-rollouts
description: FP8 rollouts scored by an fp32 trainer, with a rollout log as evidence.
policy: {temperature: 1.0, vocab_size: 256, max_new_tokens: 64}
kernels:
  train: {preset: fp32}
  inference: {preset: h100-fp8}
numerical:
  - {id: N1, metric: logit_drift, max: 0.02, slice: all}
  - {id: N_cap, metric: log_ratio, max: 0.6931, slice: all}
statistical:
  - id: S_tail
    metric: abs_log_ratio
    statistic: quantile
    q: 0.99
    max: 0.5
    confidence: 0.95
    min_samples: 500
    slices: [all, tail_tokens]
slices:
  tail_tokens: {token_prob: [0, 0.05]}
guarantees:
  - {id: G_tv, quantity: token_tv, max: 0.0101, from: [N1]}
  - {id: G_seq, quantity: sequence_tv, max: 0.12, from: [N1]}
  - {id: G_reward, quantity: reward_drift, reward_range: [0, 1], scope: sequence, max: 0.12,
     from: [N1]}
  - {id: G_pg, quantity: pg_bias, score_norm: 5.0, advantage: 1.0, estimator: plain,
     max: 0.101, from: [N1], assume: [support_overlap]}
  - {id: G_clip, quantity: clip_budget, clip_epsilon: 0.2, max: 0.25, from: [N1]}
escalation:
  - when: {clause: N_cap, status: [violated]}
    severity: critical
    action: route_to_train_kernel
evidence:
  logprobs: {path: rollout-sample.jsonl, format: generic}
"""
work = pathlib.Path(tempfile.mkdtemp(prefix="contract-"))
shutil.copy(pathlib.Path(contracts.__file__).parent / "examples" / "rollout-sample.jsonl", work)
contract_path = work / "contract.yaml"
contract_path.write_text(CONTRACT)
contract = contracts.load(str(contract_path))  # validated: a bad key would raise ContractError
print(
    f"{contract.name}: {len(contract.guarantees)} guarantees, "
    f"{len(contract.numerical)} numerical and {len(contract.statistical)} statistical clauses"
)

# %% [markdown]
# ## 2. Verify it
#
# `python -m verify contract.yaml --json report.json --markdown report.md`, in-process.

# %%
report_path, md_path = work / "report.json", work / "report.md"
code, text = cli(str(contract_path), "--json", str(report_path), "--markdown", str(md_path))
print(text)
print("exit code:", code)

# %% [markdown]
# The guarantees are proved; the evidence breaks the importance-ratio cap, so the verdict is
# *violated* (exit 1) and the escalation policy fires. (N1 is skipped: a sampled-token log
# holds no full-vocabulary logits, so the drift itself cannot be measured from it.)
#
# ## 3. Read the proof-carrying report

# %%
report = json.loads(report_path.read_text())
assert code == 1 and all(o["status"] == "proved" for o in report["obligations"])
assert {c["id"]: c["status"] for c in report["clauses"]}["N_cap"] == "violated"
print("status:", report["status"], "| contract sha256:", report["contract"]["sha256"][:16], "…")
print("solvers:", report["solvers"])
for e in report["escalation"]:
    print(
        f"escalation: {e['clause']} {e['observed']} → {e['action']} ({e['severity']}), "
        f"fired: {e['fired']}"
    )

fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 3.8))
status_color = {
    "proved": "tab:green",
    "held": "tab:green",
    "refuted": "tab:red",
    "violated": "tab:red",
    "unknown": "tab:orange",
    "inconclusive": "tab:orange",
    "skipped": "lightgray",
}
obs = report["obligations"]
ax.barh(
    [o["id"] for o in obs],
    [o["bound"] / o["threshold"]["float"] for o in obs],
    color=[status_color[o["status"]] for o in obs],
)
ax.axvline(1.0, color="k")
ax.set(xlabel="proved bound ÷ guarantee max", title="Obligations (green: proved)")
cl = [c for c in report["clauses"] if c.get("threshold") is not None]
ax2.barh(
    [f"{c['id']}[{c['slice']}]" for c in cl],
    [(c["bound"] or 0.0) / c["threshold"] for c in cl],
    color=[status_color[c["status"]] for c in cl],
)
for i, c in enumerate(cl):
    if c["status"] == "skipped":
        ax2.text(0.02, i, "skipped: " + c["reason"][:60], va="center", fontsize=8, color="dimgray")
ax2.axvline(1.0, color="k")
ax2.set(xlabel="evidence bound ÷ clause max (gray: skipped)", title="Evidence clauses")
plt.tight_layout()
plt.show()

# %% [markdown]
# Each obligation carries its statement, the lemma chain, the symbolic bound, the bound as an
# exact rational interval, the premises the solver's unsat core used, and a self-contained
# SMT-LIB2 query with its expected answer, so it can be re-run anywhere.

# %%
o = obs[0]
print(o["statement"])
print("chain:", " → ".join(o["chain"]), "| premises used:", o["premises_used"])
lo, hi = (Fraction(v) for v in o["bound_interval"])
print(
    f"bound ∈ [{float(lo):.15g}, {float(hi):.15g}] (width {float(hi - lo):.1e}), "
    f"max {o['threshold']['rational']}"
)
display(Markdown(f"symbolic bound: ${o['symbolic']['latex']}$"))
q = o["smtlib"][0]
print({k: v for k, v in q.items() if k != "text"})
print("\n".join(q["text"].splitlines()[:8]), "\n…", len(q["text"]), "characters")

# %%
display(Markdown("\n".join(md_path.read_text().splitlines()[:24])))

# %% [markdown]
# ## 4. Re-check it
#
# `python -m verify check report.json` trusts nothing in the report: it re-runs every SMT-LIB2
# query in fresh solvers, recomputes every numeric bound, and recomputes the contract hash.

# %%
code, text = cli("check", str(report_path))
print(text)
print("exit code:", code)
assert code == 0

# %% [markdown]
# ## 5. Tamper with it
#
# Three edits a careless (or hopeful) hand might make: make a proved bound look smaller, raise
# a guarantee's max, and quietly change the contract's canonical text. Each must fail the check.


# %%
def tampered(name, edit):
    data = copy.deepcopy(report)
    edit(data)
    path = work / f"tampered-{name}.json"
    path.write_text(json.dumps(data))
    return cli("check", str(path))


def halve_bound(d):
    d["obligations"][0]["bound"] /= 2


def raise_max(d):
    d["obligations"][1]["threshold"]["float"] *= 10
    d["obligations"][1]["threshold"]["rational"] = str(
        Fraction(d["obligations"][1]["threshold"]["rational"]) * 10
    )


def edit_contract(d):
    d["contract"]["canonical"] = d["contract"]["canonical"].replace("0.0101", "0.0202")


results = {}
for name, edit in [
    ("halve a bound", halve_bound),
    ("raise a max", raise_max),
    ("edit the contract", edit_contract),
]:
    code, text = tampered(name.replace(" ", "-"), edit)
    results[name] = code
    diffs = [line for line in text.splitlines() if line.startswith("DIFFERENCE")]
    print(f"{name}: exit {code}, {len(diffs)} difference(s)")
    for line in diffs[:3]:
        print("   ", line[:160])
    assert code == 1 and diffs, f"tampering ({name}) was not detected"

# %% [markdown]
# ## 6. Synthesize the loosest thresholds
#
# `python -m verify synth contract.yaml`: for each guarantee, the largest N1 limit that still
# implies it, proved before it is printed.

# %%
code, text = cli("synth", str(contract_path))
print(text)
syn = [s for s in verify.synthesize(contract) if s.value is not None]
for s in syn:
    print(f"{s.guarantee:<9} {s.clause}: max ≤ {float(s.value):.6g}  ({s.status.label})")

# %% [markdown]
# The binding guarantee is the one with the smallest loosest limit (a short decimal, rounded
# down from the exact boundary). Set N1 to that value and every guarantee is proved; nudge it
# 1% above and the binding guarantee is refuted, with a counterexample z3 found and exact
# interval arithmetic confirmed.

# %%
tightest = min(syn, key=lambda s: s.value)
limits = {"synthesized": tightest.value, "1% above": tightest.value * Fraction(101, 100)}
outcomes = {}
for label, value in limits.items():
    text_c = CONTRACT.replace("max: 0.02, slice", f"max: {float(value)!r}, slice")
    p = work / f"contract-{label.replace(' ', '-').replace('%', 'pct')}.yaml"
    p.write_text(text_c)
    rp = work / f"report-{p.stem}.json"
    cli(str(p), "--json", str(rp))
    outcomes[label] = {o["id"]: o for o in json.loads(rp.read_text())["obligations"]}
    statuses = {k: v["status"] for k, v in outcomes[label].items()}
    print(f"N1 max = {float(value):.6g} ({label}): {statuses}")
assert all(o["status"] == "proved" for o in outcomes["synthesized"].values())
refuted = outcomes["1% above"][tightest.guarantee]
assert refuted["status"] == "refuted"
cx = refuted["counterexample"]
print("counterexample:", cx["point"], "value", cx["value"], "from", cx["source"])

# %%
g = next(x for x in outcomes["synthesized"].values() if x["id"] == tightest.guarantee)
(var,) = g["variables"]
derivation = {d.guarantee: d for d in bounds.derive(contract)}[g["id"]]
consts = dict(derivation.constants)  # e.g. T = 1
f_all = bounds.numpy_function(derivation.expr, [var["name"], *consts])


def f(x):  # the bound as a function of the N1 limit
    return f_all(x, *(float(v) for v in consts.values()))


# the bound as a function of the N1 limit
d_grid = np.linspace(0.0, float(limits["1% above"]) * 1.3, 300)
x_cx = float(Fraction(cx["point"][var["name"]]))
fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
zoom = (0.98 * float(tightest.value), 1.02 * float(tightest.value))
for ax, (x0, x1) in zip(axes, [(0.0, d_grid[-1]), zoom], strict=True):
    xs = np.linspace(x0, x1, 300)
    ax.plot(xs, f(xs), "k", label=f"{g['id']} bound: {g['symbolic']['text']}")
    ax.axhline(g["threshold"]["float"], color="tab:red", ls="--", label="guarantee max")
    ax.axvline(0.02, color="gray", ls=":", label="N1 as written (0.02)")
    ax.axvline(float(tightest.value), color="tab:green", label="synthesized loosest N1")
    ax.axvline(float(limits["1% above"]), color="tab:orange", label="1% above: refuted")
    ax.plot([x_cx], [cx["value"]], "rx", ms=10, mew=2, label="confirmed counterexample")
    ax.set(xlim=(x0, x1), xlabel=f"N1 limit ({var['name']})", ylabel=g["quantity"])
axes[0].set_title("The synthesized threshold is the boundary")
axes[1].set(ylim=(f(zoom[0]), f(zoom[1])), title="zoomed in")
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()
