"""Every parser of ``python -m verify``, built in one place from shared parts.

``Parser`` writes to the given streams and raises ``Stop`` instead of exiting. The shared
parents (``contract``, ``reports``, ``evidence``, ``solver``, ``model``) add the options
several commands take, in the order each command lists them; ``PARSERS`` maps each command
(``""`` for the main one) to the function that builds its parser. The argument types
(``positive``, ``count``, ``seconds``, ``traffic_share``, ``rlimit``) write the message a usage
error shows.
"""

from __future__ import annotations

import argparse
import math
import sys

from kernel_contracts.contracts import KernelContractsError

__all__ = [
    "EXIT_CODES",
    "PARSERS",
    "Parser",
    "Stop",
    "count",
    "init_parser",
    "number",
    "positive",
    "rlimit",
    "seconds",
    "temperature",
    "traffic_share",
    "vocabulary",
]


class Stop(KernelContractsError):
    """A parser is done (``--help``) or refused its arguments: exit with ``code``."""

    def __init__(self, code: int):
        self.code = code


class Parser(argparse.ArgumentParser):
    """An argument parser that writes to the given streams and raises instead of exiting."""

    def __init__(self, *args, out, err, **kwargs):
        super().__init__(*args, **kwargs)
        self._out, self._err = out, err

    def _print_message(self, message, file=None):
        if message:
            (self._err if file is sys.stderr else self._out).write(message)

    def exit(self, status=0, message=None):
        if message:
            self._err.write(message)
        raise Stop(status)

    def error(self, message):
        self._err.write(self.format_usage())
        self._err.write(f"{self.prog}: error: {message}\n")
        raise Stop(2)


def positive(text: str) -> int:
    """An argparse type: a positive integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return value


RLIMIT_MAX = 2**32 - 1  # z3 takes its rlimit as an unsigned 32-bit integer


def rlimit(text: str) -> int:
    """``--solver-budget``: a positive integer that z3 takes as its rlimit."""
    value = positive(text)
    if value > RLIMIT_MAX:
        raise argparse.ArgumentTypeError(f"must be at most {RLIMIT_MAX}: {value}")
    return value


def count(text: str) -> int:
    """An argparse type: a non-negative integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {value}")
    return value


def seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text}")
    return value


def traffic_share(text: str) -> float:
    """``--traffic``: a share of traffic in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a share in (0, 1]: {text}")
    return value


EXIT_CODES = (
    "exit codes: 0 every guarantee proved and every clause held (skipped ones say why); with "
    "evidence (an evidence: section or --evidence), also every premise of every guarantee held "
    "by that evidence. 1 something refuted or violated, including a premise the evidence "
    "contradicts. 2 unusable input, or a contract naming code to import without --trust-code; "
    "no report written. 3 nothing refuted or violated, but "
    "something unknown or inconclusive, or a guarantee resting on a premise the given evidence "
    "did not decide (listed under 'premises unchecked' and in the report's support[])."
)


# the shared parents: each adds the options several commands take


def contract(p: Parser) -> None:
    p.add_argument("contract", metavar="CONTRACT.yaml")


def reports(p: Parser) -> None:
    p.add_argument("--json", metavar="PATH", help="write the JSON report here")
    p.add_argument("--markdown", metavar="PATH", help="write the Markdown report here")
    p.add_argument("--html", metavar="PATH", help="write the HTML report here")


def evidence(p: Parser, help: str | None = None) -> None:
    p.add_argument("--evidence", metavar="PATH", nargs="+", action="extend", default=[],
                   help=help)  # fmt: skip


# the defaults of verify.proving.solve.budget (a test keeps them equal): z3 resource units per
# obligation, and the hang guard's milliseconds per solver call
SOLVER_BUDGET, HANG_GUARD_MS = 4_000_000, 300_000


def solver(p: Parser) -> None:
    """``--solver-budget`` (what decides verdicts) and ``--timeout-ms`` (the hang guard)."""
    p.add_argument("--solver-budget", type=rlimit, default=SOLVER_BUDGET, metavar="N",
                   help="solver budget per obligation in z3 resource units (rlimit), the same "
                   f"on every machine under any load (default {SOLVER_BUDGET}); an obligation "
                   "that spends it is unknown")  # fmt: skip
    p.add_argument("--timeout-ms", type=positive, default=HANG_GUARD_MS, metavar="N",
                   help="hang guard: wall-clock milliseconds after which one solver call is "
                   f"stopped and its obligation reported unknown (default {HANG_GUARD_MS}); "
                   "it only catches a solver that stops counting, the budget decides")  # fmt: skip


def model(p: Parser, help: str) -> None:
    p.add_argument("--model", metavar="NAME|module:function|hf:PATH|gguf:PATH", help=help)
    p.add_argument("--params", metavar="PATH", help="the entry point's params (.npz)")
    trust(p)


def trust(p: Parser) -> None:
    p.add_argument("--trust-code", action="store_true",
                   help="allow importing and running the Python a contract names (evidence."
                   "emulate.model: package.module:function), as does "
                   "KERNEL_CONTRACTS_TRUST_CODE=1; without either, such a contract exits 2 "
                   "before anything is imported (hf: and gguf: checkpoints and shipped models need "
                   "no consent)")  # fmt: skip


# one builder per command


def main_parser(out, err) -> Parser:
    from kernel_contracts.contracts.fields import STAGES

    p = Parser(
        prog="python -m verify",
        description="Prove a kernel contract's guarantees and check its clauses. "
        "Other commands: check REPORT.json | synth CONTRACT.yaml | schema | monitor ... | "
        "export CONTRACT.yaml --to verl|nemo-rl|trl|skyrl | localize CONTRACT.yaml | "
        "measure [--model NAME|hf:FOLDER|gguf:FILE] [--prompts FILE] | conformance CONTRACT.yaml | "
        "init --framework NAME --vocab N",
        epilog=EXIT_CODES,
        out=out,
        err=err,
    )
    contract(p)
    reports(p)
    evidence(p)
    solver(p)
    trust(p)
    p.add_argument("--quiet", action="store_true", help="print only the overall verdict")
    p.add_argument("--no-cache", action="store_true",
                   help="derive every obligation afresh; neither read nor write the derivation "
                   "cache (KERNEL_CONTRACTS_CACHE: its directory, or off)")  # fmt: skip
    p.add_argument("--jax-cache", metavar="DIR",
                   help="JAX compilation cache directory, or off (default: "
                   "KERNEL_CONTRACTS_JAX_CACHE, else JAX's own JAX_COMPILATION_CACHE_DIR, else "
                   "$XDG_CACHE_HOME/kernel-contracts/jax); the emulation compiles its programs "
                   "once and later runs load them")  # fmt: skip
    p.add_argument("--stage", choices=STAGES, help="run this promotion stage")
    p.add_argument("--promotion-dir", metavar="DIR", help="where stage records are kept")
    p.add_argument("--traffic", type=traffic_share, metavar="SHARE",
                   help="share of production traffic the evidence comes from")  # fmt: skip
    return p


def check_parser(out, err) -> Parser:
    p = Parser(prog="python -m verify check", out=out, err=err)
    p.add_argument("report", metavar="REPORT.json")
    return p


def synth_parser(out, err) -> Parser:
    p = Parser(prog="python -m verify synth", out=out, err=err)
    contract(p)
    solver(p)
    return p


def schema_parser(out, err) -> Parser:
    return Parser(prog="python -m verify schema", out=out, err=err)


def export_parser(out, err, *, frameworks: str) -> Parser:
    """``export``; ``frameworks`` lists the names ``--to`` takes."""
    p = Parser(
        prog="python -m verify export",
        description="Write a training framework's rollout-correction settings whose values the "
        "contract proves (importance-sampling mode, caps, masks, clip range).",
        out=out,
        err=err,
    )
    contract(p)
    p.add_argument("--to", required=True, metavar="FRAMEWORK", help=frameworks)
    p.add_argument("--out", metavar="PATH", help="write here instead of standard output")
    p.add_argument("--format", metavar="FORMAT",
                   help="verl, nemo-rl, skyrl: yaml (default) or overrides; trl: yaml "
                   "(default) or json")  # fmt: skip
    p.add_argument("--guarantee", metavar="ID", action="append", default=[],
                   help="export only this guarantee (repeatable)")  # fmt: skip
    p.add_argument("--check-version", metavar="X.Y",
                   help="the framework release the settings are for (X.Y, X.Y.Z, or "
                   "main@COMMIT for the main-branch commit that was read): refused (exit 2) "
                   "outside the released versions the keys were checked against")  # fmt: skip
    solver(p)
    evidence(p, help="log(s) to check the premises against (replaces the contract's "
             "evidence.logprobs path)")  # fmt: skip
    trust(p)
    p.epilog = (
        "exit codes: 0 written; 1 a setting's guarantee is refuted or unknown, or rests on a "
        "premise the evidence violates (nothing written); 2 unusable input, a "
        "--check-version outside the checked releases, or a contract naming code to import "
        "without --trust-code (nothing written); "
        "3 written, but the given evidence left one of its premises unchecked"
    )
    return p


def localize_parser(out, err) -> Parser:
    p = Parser(
        prog="python -m verify localize",
        description="Compare the contract's training and inference kernels matmul by matmul on "
        "shared operands, and score the logit margin as a predictor of top-1 flips.",
        out=out,
        err=err,
    )
    contract(p)
    model(p, "a shipped model or an entry point (default: the contract's)")
    p.add_argument("--sequences", type=positive, default=8, metavar="N",
                   help="sequences compared site by site (default 8)")  # fmt: skip
    p.add_argument("--length", type=positive, default=64, metavar="N",
                   help="tokens per sequence (default 64)")  # fmt: skip
    p.add_argument("--replay", type=count, default=32, metavar="N",
                   help="sequences replayed end to end for flip prediction (default 32; 0: "
                   "none)")  # fmt: skip
    p.add_argument("--seed", type=count, default=0, metavar="N", help="token sampling seed")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    return p


def _names(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"not a comma-separated list of names: {text!r}")
    return names


def _sizes(text: str) -> list[int]:
    return [positive(t.strip()) for t in text.split(",")]


def measure_parser(out, err) -> Parser:
    p = Parser(
        prog="python -m verify measure",
        description="Measure a model through each inference preset at each serving batch "
        "against the training kernel, token by token over the full vocabulary, and print the "
        "drift table: per preset, batch and sequence-length slice, the logit drift, TV, "
        "|log w| quantiles and top-1 flip rate.",
        epilog="exit codes: 0 done; 2 unusable input (nothing written)",
        out=out,
        err=err,
    )
    p.add_argument("--model", default="tiny-lm", metavar="NAME|hf:FOLDER|gguf:FILE",
                   help="the shipped model (default tiny-lm), a Hugging Face checkpoint "
                   "folder or a GGUF file (gguf:package:DIST/FILE: one an installed package "
                   "ships)")  # fmt: skip
    p.add_argument("--prompts", metavar="FILE",
                   help="UTF-8 prompts, one per non-blank line (default: held-out text of the "
                   "shipped model)")  # fmt: skip
    p.add_argument("--chat-template", action="store_true",
                   help="render each line of --prompts as a user message through the GGUF "
                   "model's chat template, served whole")  # fmt: skip
    p.add_argument("--count", type=positive, default=16, metavar="N",
                   help="held-out prompts without --prompts (default 16)")  # fmt: skip
    p.add_argument("--presets", type=_names, metavar="P,P,...",
                   help="inference presets (default fp32,bf16,h100-fp8,h100-fp8-fast-accum,"
                   "mxfp8)")  # fmt: skip
    p.add_argument("--train", default="fp32", metavar="PRESET",
                   help="the training kernel's preset (default fp32)")  # fmt: skip
    p.add_argument("--batch", type=_sizes, default=[1, 16], metavar="B,B,...",
                   help="serving batch sizes (default 1,16)")  # fmt: skip
    p.add_argument("--new-tokens", type=positive, default=32, metavar="N",
                   help="tokens generated per prompt (default 32)")  # fmt: skip
    p.add_argument("--temperature", type=float, default=1.0, metavar="T",
                   help="sampling temperature (default 1)")  # fmt: skip
    p.add_argument("--seed", type=count, default=0, metavar="N", help="sampling seed")
    p.add_argument("--csv", metavar="PATH", help="write the table as CSV here")
    p.add_argument("--json", metavar="PATH", help="write the table and settings as JSON here")
    p.add_argument("--tokens", metavar="PATH", help="write every measured token as CSV here")
    return p


def conformance_parser(out, err) -> Parser:
    p = Parser(
        prog="python -m verify conformance",
        description="Run the conformance checks on a kernel of the contract with every fault "
        "of the fault-injection set, and print which check detects which fault.",
        out=out,
        err=err,
    )
    contract(p)
    p.add_argument("--kernel", choices=("inference", "train"), default="inference",
                   help="the kernel under test (default inference)")  # fmt: skip
    model(p, "model of the top-1 check (default: the contract's)")
    p.add_argument("--sequences", type=count, default=4, metavar="N",
                   help="sequences of the top-1 check (default 4; 0: no model)")  # fmt: skip
    p.add_argument("--length", type=count, default=64, metavar="N",
                   help="tokens per sequence (default 64)")  # fmt: skip
    p.add_argument("--seed", type=count, default=0, metavar="N", help="probe and token seed")
    p.add_argument("--json", metavar="PATH", help="write the table as JSON here")
    return p


def monitor_parser(out, err) -> Parser:
    p = Parser(
        prog="python -m verify monitor",
        description="Check a contract's numerical and statistical clauses online, window by "
        "window, over a growing rollout log, and apply its escalation policy.",
        out=out,
        err=err,
    )
    contract(p)
    p.add_argument("--stream", required=True, metavar="PATH|-",
                   help="a log file, a directory of rotating log files, or - for "
                   "stdin")  # fmt: skip
    p.add_argument("--out", metavar="PATH", help="append the JSON lines here (default: stdout)")
    p.add_argument("--checkpoint", metavar="PATH",
                   help="resume from and update this file (one monitor at a time; a lock "
                   "beside it)")  # fmt: skip
    follow = p.add_mutually_exclusive_group()
    follow.add_argument("--follow", dest="follow", action="store_true", default=True,
                        help="at the end of the file, wait for more (the default)")  # fmt: skip
    follow.add_argument("--no-follow", "--until-eof", dest="follow", action="store_false",
                        help="stop at the end of the input, deciding the last window")  # fmt: skip
    p.add_argument("--idle-timeout", type=seconds, metavar="SECONDS",
                   help="stop (deciding the partial window) when no line came for this "
                   "long")  # fmt: skip
    p.add_argument("--format", choices=("generic", "verl", "trl"),
                   help="the log format (default: the contract's evidence.logprobs, else "
                   "detected)")  # fmt: skip
    p.add_argument("--observability", metavar="ID", help="the O clause that sets the windows")
    p.add_argument("--poll", type=seconds, default=0.1, metavar="SECONDS",
                   help="how often to look for new lines when following (default 0.1)")  # fmt: skip
    return p


def temperature(text: str) -> float:
    """An argparse type: a sampling temperature (positive and finite)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be positive and finite: {text}")
    return value


def vocabulary(text: str) -> int:
    """An argparse type: a vocabulary size (an integer of at least 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"a vocabulary has at least 2 tokens, got {value}")
    return value


def number(text: str) -> float:
    """An argparse type: a finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be finite: {text}")
    return value


def init_parser(out, err, *, frameworks, presets, estimators) -> Parser:
    """``init``; the lists are the names ``--framework``, ``--preset`` and ``--estimator`` take."""
    p = Parser(
        prog="python -m verify init",
        description="Write a commented starter contract for a named setup. As written it proves "
        "every guarantee it states from one premise, a logit-drift limit, and its comments say "
        "how to measure that premise.",
        epilog="exit codes: 0 written; 2 unusable input (nothing written)",
        out=out,
        err=err,
    )
    p.add_argument("--framework", required=True, choices=frameworks, metavar="NAME",
                   help=f"the training framework: {', '.join(frameworks)} (log format and "
                   "export target)")  # fmt: skip
    p.add_argument("--vocab", required=True, type=vocabulary, metavar="N",
                   help="the model's vocabulary size")  # fmt: skip
    p.add_argument("--temperature", type=temperature, default=1.0, metavar="T",
                   help="the sampling temperature (default 1.0)")  # fmt: skip
    p.add_argument("--preset", choices=presets, default="h100-fp8", metavar="PRESET",
                   help="the inference kernel's preset (default h100-fp8; one of "
                   f"{', '.join(presets)})")  # fmt: skip
    p.add_argument("--train-preset", choices=presets, default="fp32", metavar="PRESET",
                   help="the training kernel's preset (default fp32)")  # fmt: skip
    p.add_argument("--estimator", choices=estimators, default="tis", metavar="NAME",
                   help="the rollout correction (default tis; one of "
                   f"{', '.join(estimators)})")  # fmt: skip
    p.add_argument("--cap", type=number, metavar="C", help="the estimator's cap (default 2)")
    p.add_argument("--clip-epsilon", type=number, metavar="EPS",
                   help="the estimator's clip range (default 0.2)")  # fmt: skip
    p.add_argument("--band", type=number, nargs=2, metavar=("LO", "HI"),
                   help="the estimator's band (default 0.5 2)")  # fmt: skip
    p.add_argument("--threshold", type=number, metavar="X",
                   help="the estimator's threshold (default 0.05)")  # fmt: skip
    p.add_argument("--max-new-tokens", type=positive, default=4096, metavar="L",
                   help="the horizon of the sequence guarantee (default 4096)")  # fmt: skip
    p.add_argument("-o", "--out", metavar="PATH", help="write here instead of standard output")
    p.add_argument("--force", action="store_true", help="replace --out when it exists")
    return p


PARSERS = {
    "": main_parser,
    "check": check_parser,
    "synth": synth_parser,
    "schema": schema_parser,
    "export": export_parser,
    "localize": localize_parser,
    "measure": measure_parser,
    "conformance": conformance_parser,
    "monitor": monitor_parser,
    "init": init_parser,
}
