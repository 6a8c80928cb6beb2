"""Re-checking a source's runtime envelope (``evidence.sources[].runtime``) against the contract
and against itself (part of ``verify check``).

The runtime verdicts are recomputed from the envelope's counts of sequences certainly outside
and certainly inside each runtime clause's ranges (``verify.common.static_clauses``), and those
counts are raw. What ``evidence.envelope.observe`` determines from the contract and from the
envelope's own extent must still hold:

- one entry per runtime clause and condition it declares, in the contract's order;
- every length is recorded (``sequence_length.recorded`` is ``sequences``), the exact ones and
  the recorded batch sizes at most that; ``min`` and ``max`` exist exactly when something was
  recorded, ``min`` ≤ ``max``;
- batch sizes: ``outside`` + ``inside`` is ``recorded``; none outside when [min, max] lies in
  the range, some when it sticks out, all when it misses the range;
- lengths (a length without ``position_offset`` is a lower bound: it can lie certainly above a
  range, never certainly inside): ``outside`` + ``inside`` at most ``recorded``, ``inside`` at
  most ``exact``; some outside when ``max`` is above the range, all when ``min`` is, every
  exact one when ``max`` is below it; none outside and every exact one inside when [min, max]
  lies in the range; a log's envelope counts at most the log's sequences;
- an emulation serves every sequence at its one ``batch_size`` and records exact lengths, the
  longest its ``sequence_length``.
"""

from __future__ import annotations

from kernel_contracts.evidence.envelope import CONDITIONS
from kernel_contracts.verify.proving.check.values import is_count

__all__ = ["check_envelope"]

_EXTENT = {"batch_size": ("recorded", "min", "max"),
           "sequence_length": ("recorded", "exact", "min", "max")}  # fmt: skip


def _shape(r, where: str, diff) -> bool:
    """The envelope's fields are there and are counts (min and max: counts or null)."""
    if not isinstance(r, dict) or set(r) != {"sequences", *CONDITIONS, "clauses"}:
        diff(where, f"not a runtime envelope: {sorted(r) if isinstance(r, dict) else r!r}")
        return False
    ok = is_count(r["sequences"]) and isinstance(r["clauses"], list)
    for condition, keys in _EXTENT.items():
        e = r[condition]
        ok = ok and isinstance(e, dict) and set(e) == set(keys)
        ok = ok and all(is_count(e[k]) or (k in ("min", "max") and e[k] is None) for k in keys)
    for c in r["clauses"] if isinstance(r["clauses"], list) else ():
        ok = ok and isinstance(c, dict) and set(c) == {"clause", "condition", "outside", "inside"}
        ok = ok and is_count(c.get("outside")) and is_count(c.get("inside"))
    if not ok:
        diff(where, "not a runtime envelope: a field is missing or not a count")
    return ok


def _extent(r: dict, where: str, diff) -> None:
    n = r["sequences"]
    length, batch = r["sequence_length"], r["batch_size"]
    if length["recorded"] != n:
        diff(f"{where}.sequence_length.recorded", f"{length['recorded']} but every one of the "
             f"{n} sequences has a length")  # fmt: skip
    for key, what in (("sequence_length.exact", length["exact"]),
                      ("batch_size.recorded", batch["recorded"])):  # fmt: skip
        if what > n:
            diff(f"{where}.{key}", f"{what} of {n} sequences")
    for condition in CONDITIONS:
        e = r[condition]
        if (e["min"] is None) != (e["recorded"] == 0) or (e["max"] is None) != (e["min"] is None):
            diff(f"{where}.{condition}", f"min {e['min']!r}, max {e['max']!r} of "
                 f"{e['recorded']} recorded values")  # fmt: skip
        elif e["min"] is not None and e["min"] > e["max"]:
            diff(f"{where}.{condition}", f"min {e['min']} above max {e['max']}")


def _counts(entry: dict, e: dict, lo: int, hi: int, where: str, diff) -> None:
    """One (clause, condition) entry's counts against the condition's extent ``e``."""
    out, inside, recorded = entry["outside"], entry["inside"], e["recorded"]
    length = entry["condition"] == "sequence_length"
    if not length and out + inside != recorded:
        diff(where, f"{out} outside and {inside} inside, but {recorded} batch sizes recorded")
    if length and (out + inside > recorded or inside > e["exact"]):
        diff(where, f"{out} outside and {inside} inside, but {recorded} lengths recorded, "
             f"{e['exact']} exact")  # fmt: skip
    if e["min"] is None or not isinstance(e["max"], int):
        return
    shown = f"[{e['min']}, {e['max']}] recorded against [{lo}, {hi}]"
    within = lo <= e["min"] and e["max"] <= hi
    if within and (out or (inside != (e["exact"] if length else recorded))):
        diff(where, f"{out} outside and {inside} inside, but every value lies within: {shown}")
    missed = e["min"] > hi or (not length and e["max"] < lo)
    if missed and out != recorded:
        diff(where, f"{out} outside, but every value lies outside: {shown}")
    elif length and e["max"] < lo and out != e["exact"]:
        diff(where, f"{out} outside, but every one of the {e['exact']} exact lengths lies "
             f"outside: {shown}")  # fmt: skip
    elif not out and (e["max"] > hi or (not length and e["min"] < lo)):
        diff(where, f"none outside, but a value lies outside: {shown}")


def check_envelope(s: dict, contract, where: str, diff) -> None:
    """Check source ``s``'s ``runtime`` (see the module docstring); ``where`` names ``s``."""
    where = f"{where}.runtime"
    r = s.get("runtime")
    if not _shape(r, where, diff):
        return
    _extent(r, where, diff)
    declared = [(c, cond, getattr(c, cond)) for c in contract.runtime for cond in CONDITIONS
                if getattr(c, cond) is not None]  # fmt: skip
    listed = [(e.get("clause"), e.get("condition")) for e in r["clauses"]]
    if listed != [(c.id, cond) for c, cond, _ in declared]:
        diff(f"{where}.clauses", f"{listed} but the contract's runtime clauses declare "
             f"{[(c.id, cond) for c, cond, _ in declared]}")  # fmt: skip
        return
    for i, (entry, (_, cond, (lo, hi))) in enumerate(zip(r["clauses"], declared, strict=True)):
        _counts(entry, r[cond], lo, hi, f"{where}.clauses[{i}]", diff)
    if s.get("kind") != "emulate":
        if is_count(s.get("sequences")) and r["sequences"] > s["sequences"]:
            diff(f"{where}.sequences", f"{r['sequences']} but the log holds {s['sequences']}")
        return
    n, batch, length = r["sequences"], r["batch_size"], r["sequence_length"]
    served = {"recorded": n, "min": s.get("batch_size"), "max": s.get("batch_size")}
    if n and batch != served:
        diff(f"{where}.batch_size", f"{batch!r} but the emulation serves each of its {n} "
             f"sequences in batches of {s.get('batch_size')!r}")  # fmt: skip
    if length["exact"] != n or length["max"] != s.get("sequence_length"):
        diff(f"{where}.sequence_length", f"{length!r} but the emulation's {n} lengths are exact, "
             f"the longest {s.get('sequence_length')!r}")  # fmt: skip
