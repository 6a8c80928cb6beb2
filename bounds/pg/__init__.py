"""Policy-gradient bias under a kernel mismatch, for every estimator, and the PPO clip budget.

One subject, one room: each estimator's closed form, lemma, witness and routes sit here.

- ``links``: reward drift, the plain, TIS (c > 1) and MIS bias lemmas, the clip budget;
- ``closed_forms``: the other estimators' forms and exact suprema (TIS with c ≤ 1, ppo_clip,
  icepop, geo_mask, tv_mask, kl_mask, seq_is, seq_tis, and the frameworks' dppo_tv, dppo_kl,
  dual_clip, seq_mask, seq_outlier, tis_mask, opsm, kl_reject);
- ``lemmas``: their lemmas (built on the lemma registry's first use: sympy takes a second);
- ``witnesses``: the explicit instances that attain or approach each supremum;
- ``routes``: every estimator's bias bound from the premises a guarantee names;
- ``evaluate``: numbers for plots, the bound an obligation uses and the exact supremum.
"""

from kernel_contracts.bounds.pg.evaluate import pg_bias_bound, pg_bias_supremum
from kernel_contracts.bounds.pg.routes import pg_bias_notes, pg_bias_routes

__all__ = ["pg_bias_bound", "pg_bias_notes", "pg_bias_routes", "pg_bias_supremum"]
