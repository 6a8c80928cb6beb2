"""kernels.numerics: number formats and the arithmetic every kernel is built from.

- ``formats``: float32, bfloat16, float16, the FP8 formats and int8, saturating casts;
- ``scaling``: per-tensor, per-row, block and MX scales;
- ``bitround``: rounding by integer bit operations (no compiler may erase it);
- ``portable``: the operations between the kernels, with the same bits on every backend;
- ``blocked``: float32 matmuls summed block by block (the plain kernel's, closer to exact);
- ``ulp``: distances in units in the last place;
- ``castlint`` and ``portlint``: the lints of lowered programs (erasable narrowing, results
  that depend on the backend).

Nothing here imports another room of ``kernels``.
"""
