"""kernels.measurement: the full-vocabulary columns of a pair of logits, per token.

- ``_measure``: ``measure`` and its NumPy twin ``measure_numpy`` (private: the function shares
  the module's name), choosing among the implementations below;
- ``measure_fused``, ``measure_pallas``, ``measure_cpu`` (Numba) and ``measure_portable``
  (binary64, the same bits everywhere): the implementations;
- ``columns``: the table's columns;
- ``flipstats``: top-1 flip prediction and its scores.
"""
