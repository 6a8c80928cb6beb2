"""The starter contract's text for one ``Setup``: a logit-drift premise and the guarantees it
buys, each ``max`` chosen so that the contract proves as written.

The premise's limit δ is the loosest one (``bounds.loosest``) under which every guarantee meets
its target, a little below it so the solver is not asked to decide an edge; a guarantee whose
bound cannot meet its target at any δ keeps the bound it has at δ, rounded up, with a comment
saying so. The text's comments say what each number is, which are assumptions, and what to
measure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType

from kernel_contracts.contracts.fields import ESTIMATOR_PARAMS

__all__ = ["DEFAULT_PARAMS", "LOG_FORMATS", "Setup", "starter_text"]

# each estimator parameter's value when the command line does not give one: verl's and TRL's
# defaults where they have one (truncation and masking at 2, a band of [0.5, 2], PPO's 0.2)
DEFAULT_PARAMS = MappingProxyType(
    {"cap": 2.0, "clip_epsilon": 0.2, "band": (0.5, 2.0), "threshold": 0.05}
)
# framework -> the log format its rollout dumps are read in (docs/evidence-schema.md)
LOG_FORMATS = MappingProxyType({"verl": "verl", "trl": "trl"})
_DRIFT = "N_drift"
_SHRINK = Fraction(99, 100)  # δ sits this far below the loosest value


@dataclass(frozen=True)
class Setup:
    """What ``python -m verify init`` is told; ``params`` maps the estimator's parameter names
    (``contracts.fields.ESTIMATOR_PARAMS``) to their values."""

    framework: str
    vocab_size: int
    temperature: float = 1.0
    preset: str = "h100-fp8"
    train_preset: str = "fp32"
    estimator: str = "tis"
    params: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    max_new_tokens: int = 4096
    token_tv: float = 0.01
    sequence_tv: float = 0.1
    pg_bias: float = 0.05

    def param(self, name: str):
        """The value of the estimator's parameter ``name`` (given, else the default)."""
        return self.params.get(name, DEFAULT_PARAMS[name])

    @property
    def needs(self) -> tuple[str, ...]:
        """The parameters the estimator takes."""
        return ESTIMATOR_PARAMS.get(self.estimator, ())


def _short(v: Fraction, digits: int = 3, *, up: bool) -> Fraction:
    """``v`` to ``digits`` significant decimal digits, rounded up or down."""
    if v <= 0:
        return Fraction(0)
    scale = Fraction(10) ** (digits - 1 - math.floor(math.log10(v)))
    n = math.ceil(v * scale) if up else math.floor(v * scale)
    return Fraction(n) / scale


def _decimal(v: Fraction | float) -> str:
    """``v`` in plain decimal notation with a point (YAML reads ``1e-05`` as a string), to six
    significant digits."""
    text = f"{float(f'{float(v):.6g}'):.15f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _param_lines(setup: Setup) -> list[str]:
    out = []
    for name in setup.needs:
        value = setup.param(name)
        shown = (
            f"[{_decimal(value[0])}, {_decimal(value[1])}]" if name == "band" else _decimal(value)
        )
        out.append(f"    {name}: {shown}")
    return out


def _body(setup: Setup, delta: Fraction, maxes: dict[str, Fraction], notes: dict[str, str]):
    def note(g: str) -> str:
        return f"  # {notes[g]}" if g in notes else ""

    lines = [
        "contract: 1",
        f"name: {setup.framework}-{setup.preset}-{setup.estimator}",
        "",
        "policy:",
        f"  temperature: {_decimal(setup.temperature)}",
        f"  vocab_size: {setup.vocab_size}",
        f"  max_new_tokens: {setup.max_new_tokens}        # the horizon L of G_sequence_tv",
        "",
        "kernels:",
        f"  train: {{preset: {setup.train_preset}}}",
        f"  inference: {{preset: {setup.preset}}}",
        "",
        "numerical:",
        f"  - id: {_DRIFT}                 # the one premise: measure it (see the top)",
        "    metric: logit_drift          # max |z_inference - z_train| over the vocabulary",
        f"    max: {_decimal(delta)}",
        "    slice: all",
        "",
        "guarantees:",
        "  - id: G_token_tv" + note("G_token_tv"),
        "    quantity: token_tv",
        f"    max: {_decimal(maxes['G_token_tv'])}",
        f"    from: [{_DRIFT}]",
        "  - id: G_sequence_tv" + note("G_sequence_tv"),
        "    quantity: sequence_tv",
        f"    max: {_decimal(maxes['G_sequence_tv'])}",
        f"    from: [{_DRIFT}]",
        "  - id: G_pg_bias" + note("G_pg_bias"),
        "    quantity: pg_bias",
        "    score_norm: 1.0               # per-token score norm G: an assumption, set yours",
        "    advantage: 1.0                # advantage bound A: an assumption, set yours",
        f"    estimator: {setup.estimator}",
        *_param_lines(setup),
        f"    max: {_decimal(maxes['G_pg_bias'])}",
        f"    from: [{_DRIFT}]",
    ]
    return "\n".join(lines) + "\n"


def _derive(text: str):
    from kernel_contracts import bounds, contracts

    return {d.guarantee: d for d in bounds.derive(contracts.loads(text))}


def starter_text(
    setup: Setup, command: str, name: str = "contract.yaml", no_export: str = ""
) -> str:
    """The starter contract of ``setup``, to be saved as ``name``; ``command`` is the command
    line that wrote it; ``no_export``, when given, is why the framework has no setting for the
    estimator (said instead of the export command)."""
    from kernel_contracts import bounds

    targets = {
        "G_token_tv": Fraction(str(setup.token_tv)),
        "G_sequence_tv": Fraction(str(setup.sequence_tv)),
        "G_pg_bias": Fraction(str(setup.pg_bias)),
    }
    # each derivation's route is the tightest at the δ it is derived at, so δ is sought twice:
    # from a loose draft, then from the routes that win near the first answer
    delta, found = Fraction(1, 10), []
    for _ in range(2):
        loosest = []
        for d in _derive(_body(setup, delta, targets, {})).values():
            best = bounds.loosest(d) or {}
            loosest += [best[v.name] for v in d.variables if v.name in best]
        delta = _short(min(loosest) * _SHRINK, up=False) if loosest else Fraction(0)
        if delta <= 0:
            break
        found.append(delta)
    # every route's bound holds at any δ, so each value found meets every target
    delta = max(found, default=Fraction(1, 100))
    at_delta = _derive(_body(setup, delta, targets, {}))
    maxes, notes = {}, {}
    for g, target in targets.items():
        d = at_delta[g]
        if d.expr is None:
            raise ValueError(f"{g}: no bound follows from a logit-drift limit ({d.reason})")
        if d.value <= target:
            maxes[g] = target
            notes[g] = f"the bound at {_DRIFT} <= {_decimal(delta)} is {d.value:.4g}"
        else:
            maxes[g] = _short(Fraction(d.value) * Fraction(101, 100), up=True)
            notes[g] = (
                f"target {_decimal(target)} not reachable by any drift limit: the bound at "
                f"{_decimal(delta)}, rounded up"
            )
    return (
        _header(setup, delta, command, name, no_export)
        + _body(setup, delta, maxes, notes)
        + _footer(setup)
    )


def _header(setup: Setup, delta: Fraction, command: str, name: str, no_export: str) -> str:
    export = (
        f"# {setup.framework} has no setting for {setup.estimator}: {no_export}."
        if no_export
        else f"# The settings this proves, for {setup.framework}:\n"
        f"#   python -m verify export {name} --to {setup.framework}"
    )
    return f"""\
# A starter contract for a {setup.framework} setup: vocabulary {setup.vocab_size}, sampling at
# T = {_decimal(setup.temperature)}, rollouts on the {setup.preset} kernel, training on the
# {setup.train_preset} kernel, the {setup.estimator} correction. Written by:
#   {command}
#
# As written, python -m verify proves every guarantee below from one premise, {_DRIFT}: the
# largest difference between the two kernels' logits stays within {_decimal(delta)} (the loosest
# limit under which every guarantee meets its target, a little below it). Until measured, that
# premise is an assumption. What to measure:
#   - the logit drift of your model on both kernels, by emulation: add
#       evidence: {{emulate: {{model: tiny-lm, prompts: 64, max_new_tokens: 64, seed: 0}}}}
#     (or your own model, docs/kernels.md), then run python -m verify on this file;
#   - your rollouts' log-probs, logged from both policies (docs/evidence-schema.md): a log
#     bounds the drift from below, so it can show the premise is broken, never that it holds;
#     run python -m verify {name} --evidence rollouts.jsonl.
# Different targets: python -m verify synth {name} gives the loosest drift limit that proves
# the maxes you set.
{export}
#
"""


def _footer(setup: Setup) -> str:
    fmt = LOG_FORMATS.get(setup.framework, "generic")
    return f"""
# With a log of your rollouts, uncomment (the path is relative to this file):
# evidence:
#   logprobs: {{path: rollouts.jsonl, format: {fmt}}}
"""
