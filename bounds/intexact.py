"""Exactness preconditions of int8 kernels: no int32 overflow, exact int32 → float32 conversion.

An int8 kernel (``MatmulSpec.is_int8``) multiplies symmetric int8 values (|q| ≤ 127) and sums
K of the products in an int32 accumulator. With P = 127·127 = 16129 the largest |product|,
every partial sum after j products satisfies |s_j| ≤ j·P, and the bound is reached (all
inputs 127). So for every K ≤ k_max (the contract's declared reduction length):

- **int32 range** (``int32_range``): no partial sum leaves [−2^31, 2^31 − 1] iff
  k_max·P ≤ 2^31 − 1, i.e. k_max ≤ 133144;
- **exact conversion** (``fp32_exact``): every accumulator value converts to float32 exactly
  if k_max·P ≤ 2^24 (every integer of magnitude ≤ 2^24 is a float32), i.e. k_max ≤ 1040.
  Beyond it some reachable sum is an integer that float32 cannot hold (2^24 + 1 is odd and
  needs 25 bits), so the condition is also necessary for these inputs.

When both hold the int8 matmul's integer part is exact and the epilogue is the only source of
divergence (``bounds.apriori``). Each claim comes with a witness when it fails: int8 vectors
of length k_max, run-length encoded, whose exact sum breaks it; ``verify`` proves the claims
with z3 over the integers and confirms each witness with exact integer arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kernel_contracts.contracts import Contract, KernelSpec

__all__ = [
    "FP32_EXACT",
    "INT32_MAX",
    "QMAX",
    "Claim",
    "Witness",
    "claims",
    "describe",
    "fp32_exact_integer",
    "largest_k",
    "witness",
]

INT32_MAX = 2**31 - 1
FP32_EXACT = 2**24  # every integer of magnitude ≤ 2^24 is a float32
QMAX = 127  # symmetric int8 (kernels.numerics.formats)

Quantity = Literal["int32_range", "fp32_exact"]
_LIMITS: dict[str, int] = {"int32_range": INT32_MAX, "fp32_exact": FP32_EXACT}
_SUFFIX = {"int32_range": "int32", "fp32_exact": "fp32"}


@dataclass(frozen=True)
class Claim:
    """ "For every K ≤ k_max and int8 inputs, every partial sum s satisfies |s| ≤ limit"."""

    id: str  # "<side>:int32" or "<side>:fp32": a colon, so no clause id can clash
    side: Literal["train", "inference"]
    quantity: Quantity
    k_max: int
    qmax_x: int
    qmax_w: int
    limit: int

    @property
    def product(self) -> int:
        """P, the largest |x·w| of one product."""
        return self.qmax_x * self.qmax_w

    @property
    def worst(self) -> int:
        """k_max·P: the largest |partial sum|, reached when every input is at its largest."""
        return self.k_max * self.product

    @property
    def holds(self) -> bool:
        return self.worst <= self.limit

    @property
    def clause(self) -> str:
        """The contract key the premise K ≤ k_max comes from."""
        return f"kernels.{self.side}.matmul.k_max"

    @property
    def inputs_clause(self) -> str:
        return f"kernels.{self.side}.matmul.inputs"


@dataclass(frozen=True)
class Witness:
    """Inputs that break a claim: ``x`` and ``w`` as runs ``(value, count)`` of equal length."""

    x: tuple[tuple[int, int], ...]
    w: tuple[tuple[int, int], ...]
    total: int  # the exact sum Σ x_i·w_i
    first: int  # the number of products after which a partial sum first breaks the claim

    @property
    def length(self) -> int:
        return sum(n for _, n in self.x)


def largest_k(qmax_x: int, qmax_w: int, limit: int) -> int:
    """The largest K with K·qmax_x·qmax_w ≤ limit."""
    return limit // (qmax_x * qmax_w)


def fp32_exact_integer(n: int) -> bool:
    """Whether the integer ``n`` is a float32 number (at most 24 significant bits, in range)."""
    n = abs(n)
    if n <= FP32_EXACT:
        return True
    drop = n.bit_length() - 24
    return n % (1 << drop) == 0 and n < 2**128


def claims(contract: Contract) -> tuple[Claim, ...]:
    """The exactness claims of every int8 kernel of ``contract``, train side first."""
    out = []
    for side in ("train", "inference"):
        spec: KernelSpec = getattr(contract.kernels, side)
        if not spec.matmul.is_int8:
            continue
        for quantity in ("int32_range", "fp32_exact"):
            out.append(
                Claim(
                    id=f"{side}:{_SUFFIX[quantity]}",
                    side=side,
                    quantity=quantity,
                    k_max=spec.matmul.k_max,
                    qmax_x=QMAX,
                    qmax_w=QMAX,
                    limit=_LIMITS[quantity],
                )
            )
    return tuple(out)


def _breaks(claim: Claim, total: int) -> bool:
    if claim.quantity == "int32_range":
        return not -(2**31) <= total <= INT32_MAX
    return not fp32_exact_integer(total)


def witness(claim: Claim) -> Witness | None:
    """Inputs of length ``claim.k_max`` whose sum breaks the claim; ``None`` when it holds.

    int32: every input at its largest, k_max·P > 2^31 − 1. fp32: every input at its largest
    except the last product a·b, chosen (largest first) so that the sum is an integer above
    2^24 that float32 cannot hold; such a choice exists whenever k_max·P > 2^24.
    """
    if claim.holds:
        return None
    k, p = claim.k_max, claim.product
    qx, qw = claim.qmax_x, claim.qmax_w
    for a in range(qx, 0, -1):
        for b in range(qw, 0, -1):
            total = (k - 1) * p + a * b
            if not _breaks(claim, total):
                continue
            if (a, b) == (qx, qw) or k == 1:
                x, w = ((a, k),), ((b, k),)
            else:
                x, w = ((qx, k - 1), (a, 1)), ((qw, k - 1), (b, 1))
            return Witness(x, w, total, _first(claim, total, k, p))
    return None  # unreachable for the claims built here: a·b = P gives the worst sum


def _first(claim: Claim, total: int, k: int, p: int) -> int:
    """How many products of the witness it takes until a partial sum breaks the claim."""
    if claim.quantity == "int32_range":
        return min(claim.limit // p + 1, k)  # the partial sums grow by P each
    return k  # the witness is built so that its final sum is the inexact one


def describe(w: Witness) -> str:
    """The witness as text: runs of values and the sums it gives."""

    def runs(rs):
        return " then ".join(f"{v} ×{n}" for v, n in rs if n)

    return f"x = [{runs(w.x)}], w = [{runs(w.w)}]: Σ x_i·w_i = {w.total}"
