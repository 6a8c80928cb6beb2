"""bounds: the lemmas of the bound chain, their symbolic derivation, witnesses and statistics.

Grouped by subject: ``bounds.token`` (logit drift to per-token log ratio, TV and KL),
``bounds.sequence`` (token to sequence TV), ``bounds.stats`` (confidence bounds and sample
sizes) and ``bounds.pg`` (policy-gradient bias for every estimator, the clip budget). The chain
itself (lemmas, premises, routes, derivation, evaluation, synthesis) and the kernels' a priori
drift (``apriori``, ``intexact``) sit at the top.

Importing this package does not import JAX: JAX is loaded only by :func:`jax_function` (and
``Lemma.jax``) when a JAX evaluator is built.
"""

from kernel_contracts.bounds._derive import derive
from kernel_contracts.bounds._evaluate import evaluate, evaluate_mp, jax_function, numpy_function
from kernel_contracts.bounds.apriori import (
    DriftBound,
    MatmulError,
    apriori_logit_drift,
    matmul_error,
    unit_roundoff,
)
from kernel_contracts.bounds.catalog import LEMMAS
from kernel_contracts.bounds.derivation import Alternative, Derivation, Variable
from kernel_contracts.bounds.lemma import SYMBOLS, Lemma, Witness
from kernel_contracts.bounds.pg.evaluate import pg_bias_bound, pg_bias_supremum
from kernel_contracts.bounds.stats.confidence import (
    clopper_pearson_upper,
    mean_ucb,
    min_samples_quantile,
    min_samples_rate,
    quantile_ucb,
)
from kernel_contracts.bounds.synth import loosest

__all__ = [
    "LEMMAS",
    "SYMBOLS",
    "Alternative",
    "Derivation",
    "DriftBound",
    "Lemma",
    "MatmulError",
    "Variable",
    "Witness",
    "apriori_logit_drift",
    "clopper_pearson_upper",
    "derive",
    "evaluate",
    "evaluate_mp",
    "jax_function",
    "loosest",
    "matmul_error",
    "mean_ucb",
    "min_samples_quantile",
    "min_samples_rate",
    "numpy_function",
    "pg_bias_bound",
    "pg_bias_supremum",
    "quantile_ucb",
    "unit_roundoff",
]
