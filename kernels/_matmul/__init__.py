"""Emulated low-precision matmul: one definition of the arithmetic, three implementations.

``matmul(x, w, spec)`` computes ``x @ w`` the way an inference kernel with the arithmetic of
``spec`` (a ``contracts.MatmulSpec``) does. The definition below is normative; the NumPy
reference (``impl="numpy"``), the pure-JAX fast path (``impl="jax"``) and the Pallas kernel
(``impl="pallas"``) all perform exactly these binary64/binary32 operations in exactly this order,
so they agree bit for bit on every input format (NaN payloads aside).

The arithmetic
--------------
Let ``x`` be M×K and ``w`` K×N (leading axes of ``x`` are flattened into M).

1. **Quantize** (``kernels.numerics.scaling``): ``x`` row-wise and ``w`` column-wise, to
   ``spec.inputs`` with saturating casts, giving values ``x̂, ŵ`` and float32 scales ``sx`` (per row
   of ``x``, per scale run along K) and ``sw`` (per column of ``w``, per run). Binary32 subnormals
   are flushed to +0 everywhere (``kernels.numerics.formats``).
2. **Parts** (split-K). Let the *unit* be ``C`` when chunks are bounded (below) and ``group``
   otherwise. K is cut into ``ceil(K / unit)`` units; consecutive units are dealt to parts of
   ``ceil(units / splits)`` units each (so at most ``splits`` non-empty parts). Every part is
   reduced on its own, as if it were a matmul over its slice of K.
3. **Chunks.** The chunk length is ``C = promote_every``; with block or MX scaling the scale
   block ``B`` also bounds it, ``C = min(promote_every, B)`` (they must divide one another).
   With neither, a part is one chunk. Chunks start at the part's start.
4. **Groups.** A chunk is cut into groups of ``group`` consecutive elements (the last one may
   be shorter). The chunk's accumulator ``a`` starts at +0. For each group, in order:

       t = ((p_1 + p_2) + ...) + p_g     with p_i = x̂_i · ŵ_i
       a = round(a + t)

   where the products and the two sums are binary64 operations and ``round`` rounds to the
   accumulator format: ``mantissa_bits`` (m, 1 to 23) explicit fraction bits, binary32's
   exponent range [-126, 127], rounding ``nearest_even`` or ``toward_zero`` as if the exponent
   were unbounded, then: a result of magnitude below ``2**-126`` becomes +0 (no subnormals; a
   zero is always +0); on overflow ``nearest_even`` gives ±inf and ``toward_zero`` gives
   ±(2 - 2**-m)·2**127 (IEEE-754 semantics); ±inf and NaN pass through (inf - inf is NaN).
5. **Promotion.** At the end of each chunk, ``a`` (exactly a binary32 number) joins the part's
   binary32 sum ``f`` (starting at +0): ``f = flush(f + term)`` in binary32, where ``term = a``,
   or, with block/MX scaling, ``term = flush(fl32(a · c))`` with ``c = flush(fl32(sx[r] · sw[r]))``
   for the chunk's scale run ``r`` (the products taken exactly in binary64, then rounded once).
6. **Join.** The parts' sums are added left to right into a binary32 total starting at +0
   (``flush`` after each addition). Scales that do not vary along K (per tensor, per row) are
   applied here, once: ``total = flush(fl32(total · c))`` with ``c`` as above.
7. **Output**: ``cast_output(total, spec.output)`` (round to nearest even, not saturating),
   returned as float32.

Exactness of the binary64 sums. The written operations are binary64, and they compute the
*exact* real sum ``a + p_1 + ... + p_g`` whenever that is representable. Products are exact for
every format (at most 24 × 24 significant bits). For ``float8_e4m3fn`` inputs every value is a
multiple of ``2**-9`` and at most 448 in magnitude, so every product, partial sum and rounded
accumulator (an m-bit rounding of a multiple of ``2**-18`` is one again) is a multiple of
``2**-18``; all of them are exact while their magnitudes stay below ``2**35`` (35 + 18 = 53
bits). Sufficient: ``toward_zero`` never increases a magnitude, so ``C ≤ 2**17`` suffices
(``C · 448**2 < 2**35``); ``nearest_even`` grows it by at most ``(1 + 2**-(m+1))`` per rounding,
so ``C · 448**2 · (1 + 2**-(m+1))**ceil(C / group) < 2**35`` suffices. All presets meet these
(``h100-fp8``: C = 128; ``h100-fp8-fast-accum``: C = K ≤ 2**17; ``mxfp8``: C = 32, m = 23).
For e5m2, bfloat16, float16 and float32 inputs the terms can span more than 53 bits; the sum is
then the binary64 sum written above, which can differ from the real sum
(``tests/kernels/test_matmul_exact.py`` compares with exact rational arithmetic).

Int8 inputs
-----------
A spec with ``inputs: int8`` (``spec.is_int8``) has its own arithmetic, with no groups, chunks
or promotion (``kernels._matmul.int8``; NumPy reference ``kernels._matmul.int8_reference``; no
Pallas kernel):

1. **Quantize** (``kernels.numerics.scaling.quantize_rows_int8``): ``x`` per row (per token) and
   ``w`` per column (per output channel), or each per tensor, to symmetric int8 values ``q`` in
   [-127, 127] with stored scales ``ŝ`` in ``epilogue.scales`` (float32, bfloat16 or float16).
2. **Accumulate**: ``S = Σ_k q_x[k]·q_w[k]``, the exact integer sum. K must not exceed
   ``spec.k_max``.
3. **Wrap**: the int32 accumulator holds ``A = ((S + 2**31) mod 2**32) - 2**31``: a hardware
   int32 accumulator wraps (two's complement), and wrapping commutes with addition, so this is
   its value whatever its summation order or split of K. ``A ≠ S`` exactly when ``S`` leaves
   the int32 range; ``int8_matmul`` returns that mask, and ``matmul`` refuses a K with
   ``K·127² > 2**31 - 1`` (where some inputs wrap) instead of wrapping silently.
4. **Epilogue** (``kernels._matmul.epilogue``), with ``R`` = ``epilogue.rounding``: the
   conversion ``a = fl32(A)`` (to nearest, ties to even: exact when ``|A| <= 2**24``); then,
   fused, ``y = R_out(a·ŝ_x·ŝ_w)``, the exact product rounded once to ``spec.output``; or, not
   fused, each multiplication rounded to float32 with ``R`` in the spec's order,
   ``acc_sx_sw``: ``R32(R32(a·ŝ_x)·ŝ_w)``, ``acc_sw_sx``: ``R32(R32(a·ŝ_w)·ŝ_x)``,
   ``acc_sxsw``: ``R32(a·R32(ŝ_x·ŝ_w))``, and the result rounded to ``spec.output`` with ``R``.
   Each rounding is of an exact value, to the format's precision; overflow gives ±inf to
   nearest and ±max toward zero; float32 and bfloat16 results below ``2**-126`` become +0.
   A NaN scale (a non-finite input in its run) makes its outputs NaN.

With ``K·127² <= 2**31 - 1`` no sum wraps and with ``K·127² <= 2**24`` the conversion is exact;
then the output differs from ``ŝ_x·ŝ_w·S`` only by the epilogue's roundings. ``verify`` proves
both conditions for the contract's ``k_max`` (or refutes them with a witness).

References:
    DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv 2412.19437, §3.3.2 (narrow FP8
    accumulation on Hopper and promotion to FP32 every N_C = 128 elements).
    N. J. Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., ch. 3 (block
    summation error bounds).
"""

from kernel_contracts.kernels._matmul.api import (
    QuantizedWeight,
    emulated_dot_general,
    matmul,
    quantize_weight,
)
from kernel_contracts.kernels._matmul.int8 import int8_matmul
from kernel_contracts.kernels._matmul.int8_reference import Int8Product, epilogue_np
from kernel_contracts.kernels._matmul.plan import Plan, make_plan
from kernel_contracts.kernels._matmul.reference import matmul_reference
from kernel_contracts.kernels._matmul.rounding import round_accumulator, round_accumulator_np

__all__ = [
    "Int8Product",
    "Plan",
    "QuantizedWeight",
    "emulated_dot_general",
    "epilogue_np",
    "int8_matmul",
    "make_plan",
    "matmul",
    "matmul_reference",
    "quantize_weight",
    "round_accumulator",
    "round_accumulator_np",
]
