"""Re-checking a report's evidence sources against the contract and against their own fields
(part of ``verify check``).

The evidence is not re-read, so what a source measured is taken as given; what the contract or
a documented rule decides from it is re-derived and must be equal:

- which sources there are: a log source exactly when the contract declares
  ``evidence.logprobs`` (or ``--evidence`` gave logs: then it may be there undeclared), at
  most one, listed first; emulation sources exactly when the contract declares
  ``evidence.emulate``; each with exactly the fields of its kind;
- an emulation source's model, prompts, generated tokens, seed and presets: the contract's;
  whether it is one setting of a runtime sweep: whether the runtime clauses declare a batch
  size or length range; its label the one these and its setting give;
- a log source's fingerprint (the sha256 of its one file, or of the files' sorted sha256s),
  label (the files' paths), token, sequence and problem counts (the sums over its files);
- its truncated-support shift: ``tokens`` the source's, ``declared`` by the contract's policy,
  ``corrected_with_log_kept_mass`` by that and the tokens that log log S, ``detected`` by the
  detection rule applied to the recorded sign test, share and median
  (``evidence.logs.shift``), ``estimated_log_kept_mass`` minus the median exactly when
  detected, and ``positive_share`` a count of the tokens divided by their number;
- its runtime envelope against the contract's runtime clauses and its own extent
  (``verify.proving.check.envelope``);
- ``evidence.assumptions`` (``verify.decide.ASSUMPTIONS`` when there is a source) and
  ``evidence.sweep`` (the swept emulation sources).

Every helper reports differences through ``diff(where, message)``.
"""

from __future__ import annotations

import hashlib

from kernel_contracts.evidence.envelope import CONDITIONS
from kernel_contracts.evidence.logs.shift import shift_corrected, shift_declared, shift_detected
from kernel_contracts.verify.decide import ASSUMPTIONS
from kernel_contracts.verify.proving.check.envelope import check_envelope
from kernel_contracts.verify.proving.check.parts import check_keys
from kernel_contracts.verify.proving.check.values import is_count, is_real

__all__ = ["EMULATE_KEYS", "LOG_KEYS", "check_sources", "source_index"]

LOG_KEYS = frozenset(
    ("kind", "fingerprint", "tokens", "sequences", "files", "malformed_lines",
     "token_id_mismatches", "unpaired_records", "notes", "framework_metrics",
     "weight_diagnostics", "weight_diagnostics_skipped", "truncated_support_shift", "runtime",
     "label", "clamped_logprobs")
)  # fmt: skip
EMULATE_KEYS = frozenset(
    ("kind", "fingerprint", "config_sha256", "checkpoint_sha256", "model", "prompts",
     "max_new_tokens", "seed", "train", "inference", "tokens", "batch_size", "sequence_length",
     "sweep", "runtime", "label")
)  # fmt: skip
_SHIFT_KEYS = frozenset(
    ("tokens", "detected", "positive_share", "sign_test_z", "sign_test_p", "median_shift",
     "estimated_log_kept_mass", "quantiles", "zero_rollout_logprob_tokens",
     "kept_mass_logged_tokens", "mean_log_kept_mass", "declared",
     "corrected_with_log_kept_mass")
)  # fmt: skip
# a log source's totals: the sum of each file's field (a count, or a problem list's count)
_TOTALS = (
    ("tokens", "tokens"),
    ("sequences", "sequences"),
    ("malformed_lines", "malformed"),
    ("token_id_mismatches", "token_id_mismatches"),
    ("unpaired_records", "unpaired"),
)
_EVIDENCE_KEYS = frozenset(("sources", "assumptions"))


def _keys(value, allowed, where: str, diff) -> bool:
    kind = value.get("kind", "such") if isinstance(value, dict) else "such"
    return check_keys(value, allowed, where, diff, owner=f"{kind} source")


def source_index(evidence) -> dict[tuple, int]:
    """``(label, fingerprint)`` of each source of a report's ``evidence`` → its index."""
    listed = evidence.get("sources") if isinstance(evidence, dict) else None
    out: dict[tuple, int] = {}
    for i, s in enumerate(listed if isinstance(listed, list) else []):
        if isinstance(s, dict):
            out.setdefault((s.get("label"), s.get("fingerprint")), i)
    return out


def _kinds(sources: list, contract, diff) -> None:
    """Which sources there are, against what the contract declares."""
    kinds = [s.get("kind") if isinstance(s, dict) else None for s in sources]
    declared = contract.evidence
    for i, kind in enumerate(kinds):
        where = f"evidence.sources[{i}].kind"
        if kind not in ("logprobs", "emulate"):
            diff(where, f"{kind!r} is no kind of source (logprobs | emulate)")
        elif kind == "emulate" and declared.emulate is None:
            diff(where, "emulate, but the contract declares no evidence.emulate")
        elif kind == "logprobs" and i > 0:
            diff(where, "logprobs, but a log source is the first and only one of its kind")
    if declared.emulate is not None and "emulate" not in kinds:
        diff("evidence.sources", "no emulate source, but the contract declares evidence.emulate")
    if declared.logprobs is not None and "logprobs" not in kinds:
        diff("evidence.sources", "no logprobs source, but the contract declares "
             "evidence.logprobs")  # fmt: skip


def _emulated(s: dict, contract, where: str, diff) -> None:
    """An emulation source's settings against the contract's ``evidence.emulate``."""
    ev = contract.evidence.emulate
    if ev is None:
        return  # reported with the kinds
    preset = contract.kernels.inference.preset
    want = {
        "model": ev.model,
        "prompts": ev.prompts,
        "max_new_tokens": ev.max_new_tokens,
        "seed": ev.seed,
        "train": contract.kernels.train.preset,
        "inference": preset,
    }
    for key, value in want.items():
        if s.get(key) != value:
            diff(f"{where}.{key}", f"{s.get(key)!r} but the contract's evidence.emulate gives "
                 f"{value!r}")  # fmt: skip
    sweep = s.get("sweep")
    swept = sweep.get("swept") if isinstance(sweep, dict) else None
    ranged = any(getattr(c, k) is not None for c in contract.runtime for k in CONDITIONS)
    if swept is not ranged:
        declare = "declare" if ranged else "declare no"
        diff(f"{where}.sweep.swept", f"{swept!r} but the contract's runtime clauses {declare} "
             "batch sizes or lengths to sweep")  # fmt: skip
    label = f"emulate:{ev.model}/{preset}"
    if swept is True:
        if s.get("sequence_length") is None:
            return  # a setting without tokens is labelled by the length it asked for
        label += f"@batch{s.get('batch_size')},length{s.get('sequence_length')}"
    if s.get("label") != label:
        diff(f"{where}.label", f"{s.get('label')!r} but its settings give {label!r}")


def _logged(s: dict, where: str, diff) -> None:
    """A log source's fingerprint, label and totals against its files."""
    files = s.get("files")
    if not isinstance(files, list) or not files or not all(isinstance(f, dict) for f in files):
        diff(f"{where}.files", "not a list of the files read")
        return
    shas = [f.get("sha256") for f in files]
    if all(isinstance(h, str) for h in shas):
        joined = "\n".join(sorted(shas))
        digest = shas[0] if len(shas) == 1 else hashlib.sha256(joined.encode()).hexdigest()
        if s.get("fingerprint") != f"sha256:{digest}":
            diff(f"{where}.fingerprint", f"{s.get('fingerprint')!r} but its files give "
                 f"'sha256:{digest}'")  # fmt: skip
    paths = [f.get("path") for f in files]
    if all(isinstance(p, str) for p in paths) and s.get("label") != ", ".join(paths):
        diff(f"{where}.label", f"{s.get('label')!r} but its files are {', '.join(paths)!r}")
    for total, field in _TOTALS:
        parts = [f.get(field) for f in files]
        parts = [p.get("count") if isinstance(p, dict) else p for p in parts]
        if all(is_count(p) for p in parts) and s.get(total) != sum(parts):
            diff(f"{where}.{total}", f"{s.get(total)!r} but its files' {field} add up to "
                 f"{sum(parts)}")  # fmt: skip
    # log-probs read as 0 by the lower bounds: at most three a token (train, rollout, kept mass)
    clamped, tokens = s.get("clamped_logprobs"), s.get("tokens")
    if not is_count(clamped) or (is_count(tokens) and clamped > 3 * tokens):
        diff(f"{where}.clamped_logprobs", f"{clamped!r}: not a count of at most three log-probs "
             f"for each of {tokens!r} tokens")  # fmt: skip


def _shift(s: dict, contract, where: str, diff) -> None:
    """A log source's truncated-support shift against the contract and the detection rule."""
    where = f"{where}.truncated_support_shift"
    shift = s.get("truncated_support_shift")
    if not _keys(shift, _SHIFT_KEYS, where, diff):
        return
    n = shift["tokens"]
    if n != s.get("tokens"):
        diff(f"{where}.tokens", f"{n!r} but the source holds {s.get('tokens')!r} tokens")
    declared = shift_declared(contract.policy)
    if shift["declared"] is not declared:
        diff(f"{where}.declared", f"{shift['declared']!r} but the contract's policy gives "
             f"{declared} (logprobs {contract.policy.logprobs}, top_p {contract.policy.top_p}, "
             f"top_k {contract.policy.top_k})")  # fmt: skip
    logged = shift["kept_mass_logged_tokens"]
    if is_count(n) and is_count(logged):
        corrected = shift_corrected(declared, n, logged)
        if shift["corrected_with_log_kept_mass"] is not corrected:
            diff(f"{where}.corrected_with_log_kept_mass",
                 f"{shift['corrected_with_log_kept_mass']!r} but declared {declared} with "
                 f"log S logged on {logged} of {n} tokens gives {corrected}")  # fmt: skip
    else:
        diff(f"{where}.kept_mass_logged_tokens", f"{logged!r} (of {n!r} tokens): not counts")
        return
    z, share, median = shift["sign_test_z"], shift["positive_share"], shift["median_shift"]
    if not all(map(is_real, (z, share, median))):
        diff(where, f"sign_test_z {z!r}, positive_share {share!r}, median_shift {median!r}: "
             "not finite numbers")  # fmt: skip
        return
    positive = round(share * n)
    if not 0 <= positive <= n or (positive / n if n else 0.0) != share:
        diff(f"{where}.positive_share", f"{share!r} is no count of {n} tokens divided by {n}")
    detected = shift_detected(z, share, median)
    if shift["detected"] is not detected:
        diff(f"{where}.detected", f"{shift['detected']!r} but the detection rule gives "
             f"{detected} on its sign_test_z {z!r}, positive_share {share!r} and median_shift "
             f"{median!r}")  # fmt: skip
    estimated = -median if detected else None
    if shift["estimated_log_kept_mass"] != estimated:
        diff(f"{where}.estimated_log_kept_mass", f"{shift['estimated_log_kept_mass']!r} but "
             f"{'minus the median shift' if detected else 'no shift detected'} gives "
             f"{estimated!r}")  # fmt: skip


def _sweep(evidence: dict, sources: list, diff) -> None:
    swept = [
        {"source": s.get("label")}
        | {k: s.get(k) for k in ("batch_size", "sequence_length", "tokens")}
        for s in sources
        if isinstance(s, dict) and s.get("kind") == "emulate"
        and isinstance(s.get("sweep"), dict) and s["sweep"].get("swept") is True
    ]  # fmt: skip
    if evidence.get("sweep") != (swept or None):
        diff("evidence.sweep", f"{evidence.get('sweep')!r} but its swept emulation sources "
             f"give {swept or None!r}")  # fmt: skip
    # every setting of the sweep is one emulation source, and each names how many there are
    emulated = [
        (i, s) for i, s in enumerate(sources) if isinstance(s, dict) and s.get("kind") == "emulate"
    ]
    for i, s in emulated:
        settings = s["sweep"].get("settings") if isinstance(s.get("sweep"), dict) else None
        if settings != len(emulated):
            diff(f"evidence.sources[{i}].sweep.settings", f"{settings!r} but the report has "
                 f"{len(emulated)} emulation source(s), one per setting")  # fmt: skip


def check_sources(evidence, contract, diff) -> None:
    """Check a report's ``evidence`` section (see the module docstring); ``None`` (no evidence)
    is checked with the clause verdicts."""
    if not isinstance(evidence, dict):
        return
    extra = sorted(set(evidence) - _EVIDENCE_KEYS - {"sweep"})
    missing = sorted(_EVIDENCE_KEYS - set(evidence))
    if extra or missing:
        diff("evidence", f"fields {sorted(evidence)}, not {sorted(_EVIDENCE_KEYS)} (and sweep)")
    sources = evidence.get("sources")
    if not isinstance(sources, list):
        diff("evidence.sources", "not a list")
        return
    want = list(ASSUMPTIONS) if sources else []
    if evidence.get("assumptions") != want:
        diff("evidence.assumptions", f"{evidence.get('assumptions')!r} but the run states "
             f"{want!r}")  # fmt: skip
    _kinds(sources, contract, diff)
    pairs = [(s.get("label"), s.get("fingerprint")) for s in sources if isinstance(s, dict)]
    if len(set(pairs)) != len(pairs):
        diff("evidence.sources", "two sources with one label and fingerprint")
    for i, s in enumerate(sources):
        where = f"evidence.sources[{i}]"
        kind = s.get("kind") if isinstance(s, dict) else None
        keys = {"logprobs": LOG_KEYS, "emulate": EMULATE_KEYS}.get(kind)
        if keys is None:
            if not isinstance(s, dict):
                diff(where, "not an object")
            continue  # an unknown kind is reported with the kinds
        if not _keys(s, keys, where, diff):
            continue
        check_envelope(s, contract, where, diff)
        if kind == "emulate":
            _emulated(s, contract, where, diff)
        else:
            _logged(s, where, diff)
            _shift(s, contract, where, diff)
    _sweep(evidence, sources, diff)
