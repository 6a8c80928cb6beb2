"""Record what the RL frameworks' own correction code gives on two batches (recorded.npz, .json).

For each framework at one commit this script imports the framework's own functions and calls
them on the same log-probs, masks and advantages, in the roles its trainer gives them:

- verl 1dda039b: ``verl/trainer/ppo/rollout_corr_helper.py``
  ``compute_rollout_correction_and_rejection_mask`` (decoupled mode: ``old_log_prob`` the
  trainer's log-probs, ``rollout_log_prob`` the engine's), and ``verl/trainer/ppo/core_algos.py``
  ``compute_policy_loss_vanilla`` (dual clip), ``compute_policy_loss_dppo_tv`` / ``_kl`` in
  bypass mode (``old_log_prob`` = the engine's log-probs, ``log_prob`` the trainer's).
- TRL f2cd5771: ``trl/trainer/grpo_trainer.py``. Its vLLM importance-sampling correction and the
  metrics it logs are two blocks inside ``GRPOTrainer._generate_and_score_completions``; the
  script reads the blocks from the file at run time and executes them with the trainer's
  variables (``old_per_token_logps`` the trainer's, ``sampling_per_token_logps`` the engine's,
  ``completion_mask``, ``tool_mask``) and a ``self`` carrying the options; ``accelerator.gather``
  is the identity (one process) and ``nanmin``/``nanmax`` of one number are that number.
  ``GRPOTrainer.get_off_policy_mask`` (opsm) is read and called the same way, with
  ``per_token_logps`` the trainer's. VESPO (``loss_type: vespo``) runs the IS block with the
  export's ``token_truncate`` at 5e8, then the loss statements of ``_compute_loss`` with the
  trainer's log-probs as the current and the old ones (a batch's first step) and
  ``GRPOTrainer.get_gamma_weights`` read from the file; its (k, λ) pairs are ``VESPO_GAMMA``.
- NeMo-RL 7ea279ab: ``nemo_rl/algorithms/loss/loss_functions.py`` ``ClippedPGLossFn``, with
  ``prev_logprobs`` the trainer's log-probs, ``generation_logprobs`` the engine's and the
  current log-probs equal to ``prev_logprobs`` (the first step after the old-log-prob pass);
  for the dual clip ``prev_logprobs`` = ``generation_logprobs`` = the engine's log-probs and
  the current ones the trainer's (the ratio is then w = π/π'), without the IS correction.
- SkyRL a9564572: ``skyrl/backends/skyrl_train/utils/ppo_utils.py`` ``ppo_policy_loss``
  (``policy_loss_type: regular`` with the off-policy correction; ``dual_clip``) and
  ``dppo_policy_loss``, with ``old_log_probs`` the trainer's, ``rollout_logprobs`` the engine's
  and ``log_probs`` (current) the trainer's; for the dual clip ``old_log_probs`` the engine's
  and no rollout log-probs (the ratio is then w; the export refuses SkyRL's and NeMo-RL's dual
  clip because their trainers pass the trainer's old log-probs there).

The rollout-anchored losses (our ``gspo``, ``cispo``, ``sapo``): verl's
``compute_policy_loss_gspo``/``_cispo``/``_sapo``, TRL's ``_compute_loss`` (its statements from the
log-ratio to the normalised loss, read and executed as the IS block is) with
``importance_sampling_level: sequence`` or ``loss_type: cispo``/``sapo``, NeMo-RL's
``ClippedPGLossFn`` with ``sequence_level_importance_ratios`` or ``use_cispo``, SkyRL's
``gspo_policy_loss``, ``compute_policy_loss_cispo`` and ``sapo_policy_loss``, each with the old
log-probs set to the engine's (r = w, what our weight rule models; each case's ``anchor`` in the
JSON says so), except SkyRL's cispo, which runs with its own ``cispo_anchor: rollout``. A third
batch, ``seq_edge``, holds the ties of GSPO's sequence ratio and the log clamps (±10, ±20).

The weight ω of a token is the multiplier of ∇log π · A: where a function returns the weight
and the mask (verl's ``rollout_is_weights`` and modified response mask, TRL's
``importance_sampling_ratio``), ω is their product over the real tokens; for a loss, ω is
obtained by autograd: −∂loss/∂log π divided by A and by the loss's normalisation (verl's and
NeMo-RL's token mean: 1/number of real tokens; SkyRL's ``reduce_loss`` sums, its trainer scales
the advantages for the reduction beforehand: 1). TRL's opsm is the ratio times
``get_off_policy_mask``'s mask, as ``_compute_loss`` applies both. Each case uses the settings
``verify export`` writes for the estimator (verl's ``kl_reject``: ``rollout_is`` token level at
5e8, which truncates nothing, with the ``rollout_rs`` criteria). One more verl case,
``tis_mask@0.8_1.25``, runs ``tis_mask`` at the band [K1_LO, K1_HI], whose ends (unlike 0.5 and
2) have float32 log-ratios that torch's exp rounds onto the end while ``token_k1`` drops them;
the last two ``edge`` rows hold them.

Files: ``recorded.npz`` holds, for each batch ``b`` (``seeded``, ``edge``, ``seq_edge``), the inputs
``b/logp_train``, ``b/logp_inf``, ``b/mask``, ``b/adv`` (float32, B × T; NaN on the padding of
some ``edge`` rows) and one output ``b/<case>`` per case; ``recorded.json`` names for each case the
framework, its commit, the function, the options (the framework's own key names), the
estimator and parameters of ours it corresponds to, what the output is, and the metrics the
framework returned (``metrics/<batch>/<case>``), and for each framework the torch it ran under
(``torch``), the one it pins (``pinned_torch``) and that torch's ``clamp_end_gradient``. No
framework code is stored.

How to run. The frameworks need torch; the project does not depend on it. Each framework runs
under the torch it pins at its commit (``PINNED_TORCH``: 2.11.0 for verl, NeMo-RL and SkyRL;
TRL pins none), since the gradient torch's ``clamp`` gives at its ends changed between
versions (``clamp_end_gradient``: 1 in 2.11.0, 0 in 2.14.1), and ties at 1 ± ε follow it. Make
one environment per torch (``python -m venv ENV``, then ``ENV/bin/python -m pip install
torch==2.11.0 numpy omegaconf pydantic loguru jaxtyping tensordict``, and another with a
current torch for TRL), get each framework at its commit::

    git clone https://github.com/verl-project/verl && git -C verl checkout 1dda039b
    git clone https://github.com/huggingface/trl && git -C trl checkout f2cd5771
    git clone https://github.com/NVIDIA-NeMo/RL nemo-rl && git -C nemo-rl checkout 7ea279ab
    git clone https://github.com/NovaSky-AI/SkyRL && git -C SkyRL checkout a9564572

and run from the repository root ``python tests/data/frameworks/record_outputs.py --verl verl
--trl trl --nemo-rl nemo-rl --skyrl SkyRL --python verl=ENV/bin/python --python
nemo-rl=ENV/bin/python --python skyrl=ENV/bin/python`` (or set ``VERL_SRC``, ``TRL_SRC``,
``NEMO_RL_SRC``, ``SKYRL_SRC``). The script runs each framework in a child process of its
``--python`` (default: the interpreter running the script), which refuses a torch other than
the pinned one, and merges the children's outputs; every child builds the same batches, and
the merge checks that their inputs are equal bit for bit. ``recorded.json`` records the torch
each framework ran under. The imports the functions do not use (ray, vllm, logging back-ends,
image and model code) are replaced by inert stand-in modules; the functions themselves run as
the framework wrote them. The batches are seeded: a rerun writes the same files, byte for
byte. tests/kernels/test_rl_recorded_frameworks.py reads them without torch.
"""

from __future__ import annotations

import argparse
import ast
import collections
import importlib.abc
import importlib.machinery
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import types
import typing

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent
COMMITS = {"verl": "1dda039b", "trl": "f2cd5771", "nemo-rl": "7ea279ab", "skyrl": "a9564572"}
CAP, LO, HI, EPS = 2.0, 0.5, 2.0, 0.2  # the thresholds every case uses
TV, KL = 0.05, 0.02  # DPPO's thresholds
TAU_POS, TAU_NEG = 1.0, 1.05  # SAPO's temperatures
# CISPO from 0 (ε_low = 1): there the ±20 clamp of log w before exp shows (exp(−20), not w)
CISPO_FROM_0 = f"cispo@0_{1 + EPS}"
# the rollout-anchored losses (gspo, cispo, sapo): what played the old policy
ROLLOUT_ANCHOR = (
    "old log-probs = the engine's (rollout-anchored: r = w, the case our weight rule models); "
    "the framework's trainer passes its own recomputed log-probs there, so the export refuses"
)
REJECT = ("token_k1,seq_mean_k3,seq_max_k2", "0.5_2.0,0.002,0.08")
# a band whose ends have float32 log-ratios that torch's exp rounds onto the end while verl's
# token_k1 (−log w against float32(log(1/hi)), float32(log(1/lo))) drops them; at 0.5 and 2 no
# such log-ratio exists (one float32 log w rounds to each)
K1_LO, K1_HI = 0.8, 1.25
# VESPO's (k_pos, λ_pos, k_neg, λ_neg): four different numbers, so that a swapped pair or order
# shows; C_max above e^20 (what the export writes: the clamp of log w at 20 acts first)
VESPO_GAMMA = (2.0, 3.0, 2.5, 1.5)
VESPO_NO_TRUNCATION = 5e8


# ---- stand-ins for the imports the functions do not use -----------------------------------
class _Inert:
    """Anything: callable (a decorator returns its function), indexable, a base class."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else _Inert()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Inert()

    def __getitem__(self, key):
        return _Inert()

    def __mro_entries__(self, bases):
        return (object,)

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __or__(self, other):
        return _Inert()

    __ror__ = __or__


class _InertModule(types.ModuleType):
    __path__: typing.ClassVar[list[str]] = []

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Inert()


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names):
        self.names = tuple(names)

    def find_spec(self, name, path, target=None):
        if any(name == n or name.startswith(n + ".") for n in self.names):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _InertModule(spec.name)

    def exec_module(self, module):
        pass


def _bare_packages(root: pathlib.Path, *names: str) -> None:
    """Packages whose ``__init__`` would import the whole framework: their folders, no init."""
    for name in names:
        module = types.ModuleType(name)
        module.__path__ = [str(root.joinpath(*name.split(".")))]
        sys.modules[name] = module


UNUSED = (
    "ray",
    "vllm",
    "codetiming",
    "hydra",
    "megatron",
    "orjson",
    "wandb",
    "mlflow",
    "swanlab",
    "tensorboard",
    "datasets",
    "peft",
    "accelerate",
    "torchdata",
    "pyarrow",
    "pandas",
    "sglang",
    "liger_kernel",
    "flash_attn",
    "cachetools",
    "cloudpickle",
    "cloudpathlib",
    "skyrl.train.config",
    "nemo_rl.models",
    "nemo_rl.distributed.model_utils",
    "nemo_rl.distributed.batched_data_dict",
    "nemo_rl.algorithms.x_token",
    "nemo_rl.utils.logger",
    "nemo_rl.data",
)


# ---- the batches ------------------------------------------------------------------------
def _tie(lq: float, target: float) -> tuple[np.float32, np.float32]:
    """Log-probs (lp, lq') in float32, lq' = lq or a few ulps from it, with exp(lp − lq') =
    target exactly in torch's float32 (the ratio a framework compares with the threshold)."""
    goal, q = np.float32(target), np.float32(lq)
    for _ in range(16):
        lp = np.float32(q + np.float32(math.log(target)))
        for _ in range(8):
            got = np.float32(torch.exp(torch.tensor(lp) - torch.tensor(q)).item())
            if got == goal:
                return lp, q
            lp = np.nextafter(lp, np.float32(np.inf if got < goal else -np.inf), dtype=np.float32)
        q = np.nextafter(q, np.float32(0.0), dtype=np.float32)
    raise RuntimeError(f"no float32 tie at {target}")


def _beyond(target: float, up: bool) -> np.float32:
    """The float32 log-ratio farthest beyond log(target) (above it if ``up``) whose exp in
    torch's float32 is still exactly ``target``."""
    goal, step = np.float32(target), np.float32(np.inf if up else -np.inf)
    x = np.float32(math.log(target))
    while np.float32(torch.exp(torch.tensor(np.nextafter(x, step))).item()) == goal:
        x = np.nextafter(x, step, dtype=np.float32)
    if np.float32(torch.exp(torch.tensor(x)).item()) != goal:
        raise RuntimeError(f"no float32 log-ratio rounds to {target}")
    return x


def _with_log_ratio(lq: float, x: np.float32) -> tuple[np.float32, np.float32]:
    """Log-probs (lp, lq) in float32 whose float32 difference lp − lq is exactly ``x``."""
    q = np.float32(lq)
    lp = np.float32(q + x)
    for _ in range(8):
        got = np.float32(lp - q)
        if got == x:
            return lp, q
        lp = np.nextafter(lp, np.float32(np.inf if got < x else -np.inf), dtype=np.float32)
    raise RuntimeError(f"no float32 pair at log-ratio {x}")


def seeded_batch():
    rng = np.random.default_rng(38)
    b, t = 16, 24
    lengths = rng.integers(2, t + 1, b)
    mask = (np.arange(t)[None] < lengths[:, None]).astype(np.float32)
    x = rng.normal(-1.0, 2.0, (b, t))
    step = rng.normal(0, 0.05, (b, t)) + rng.normal(0, 0.8, (b, t)) * (rng.random((b, t)) < 0.15)
    lq = -np.logaddexp(0.0, -x)
    lp = -np.logaddexp(0.0, -(x + step))
    adv = np.repeat(rng.normal(0, 1, (b, 1)), t, axis=1)
    return tuple(np.asarray(a, np.float32) for a in (lp, lq, mask, adv))


def edge_batch():
    """Rows (T = 8), each kind once with A = 1 and once with A = −1: ties at 2 and 0.5 and at
    1 ± ε (w exactly the threshold in torch's float32), log-space ties (log w = ±float32(log 2)),
    π = 1, π' = 1 and both, one-token rows at W = 2 and W = 0.5; then an empty row, a row with
    mask gaps holding garbage, and NaN-padded copies of a tie row and a one-token row. Padding
    holds 0.0 (as the engines pad) except in the rows marked NaN."""
    t = 8
    rows = []  # (trainer log-probs, engine log-probs, mask, advantage, padding)
    for a in (1.0, -1.0):
        ties = [_tie(-1.0, HI), _tie(-1.0, LO), _tie(-0.7, 1 + EPS), _tie(-0.15, 1 - EPS)]
        lp, lq = [p for p, _ in ties] + [-0.3, -2.0], [q for _, q in ties] + [-0.3, -2.0]
        rows.append((lp, lq, [1] * 6, a, 0.0))
        # log w = ±float32(log 2) exactly (π = 1 or π' = 1), and one ulp above log 2, where
        # w still rounds to 2 but −log w < float32(log(1/2))
        ln2 = np.float32(math.log(2.0))
        up = np.nextafter(ln2, np.float32(1.0), dtype=np.float32)
        lp, lq = [0.0, -ln2, 0.0, -2.4, -0.45], [-ln2, 0.0, -up, -2.5, -0.4]
        rows.append((lp, lq, [1] * 5, a, 0.0))
        rows.append(([0.0, 0.0, -0.05, -1e-7, -0.2], [0.0, -0.05, 0.0, 0.0, -0.2], [1] * 5, a, 0.0))
        for lq, target in ((-0.8, HI), (-0.6, LO)):
            p, q = _tie(lq, target)
            rows.append(([p], [q], [1], a, 0.0))
    rows.append(([-0.5] * 3, [-0.5] * 3, [0, 0, 0], 1.0, 0.0))  # empty: no real token
    gaps = [-0.4, 55.0, -1.1, -1e4, -0.2, -0.3]  # the masked ones hold garbage
    rows.append((gaps, [-0.45, -60.0, -1.0, 3e3, -0.25, -0.3], [1, 0, 1, 0, 1, 1], -0.5, np.nan))
    rows.append((*rows[0][:4], np.nan))
    rows.append((*rows[8][:4], np.nan))
    k1 = [np.float32(math.log(K1_HI)), _beyond(K1_HI, True)]
    k1 += [np.float32(math.log(K1_LO)), _beyond(K1_LO, False)]
    engine = (-0.3, -0.3125, -(2.0**-6), -(2.0**-7))  # lp − lq exact in float32 for these
    pairs = [_with_log_ratio(q, x) for q, x in zip(engine, k1, strict=True)]
    for a in (1.0, -1.0):
        rows.append(([p for p, _ in pairs], [q for _, q in pairs], [1] * 4, a, 0.0))
    b = len(rows)
    lp, lq = np.zeros((b, t), np.float32), np.zeros((b, t), np.float32)
    mask, adv = np.zeros((b, t), np.float32), np.zeros((b, t), np.float32)
    for i, (p, q, m, a, pad) in enumerate(rows):
        n = len(p)
        lp[i, :n], lq[i, :n], mask[i, :n], adv[i, :] = p, q, m, a
        lp[i, n:], lq[i, n:] = pad, pad
    return lp, lq, mask, adv


def _nearest_log(target: float) -> np.float32:
    """float32(log target), checked to have exp exactly ``target`` in torch's float32 (it lies
    well inside the rounding interval, so any faithful exp agrees)."""
    x = np.float32(math.log(target))
    if np.float32(torch.exp(torch.tensor(x)).item()) != np.float32(target):
        raise RuntimeError(f"float32(log {target}) does not round back to {target}")
    return x


def sequence_edge_batch():
    """Rows (T = 8), each with A = 1 and A = −1, for the sequence ratio s = exp(mean log w) and
    the log-ratio clamps: s exactly 1 + ε and 1 − ε in float32 (one token; two equal tokens;
    two tokens x ± 2⁻⁶ whose sum is exactly 2x), mean log w = 12 (beyond verl's and SkyRL's
    clamp of log s at 10) and exactly 10, a row with log w = −25 and −24 (a sum of −49, beyond
    the ±20 clamp of a sequence's sum), and a row with log w = ±25 (beyond the ±20 clamps) and
    exactly ±20. Padding holds 0.0."""
    t = 8
    rows = []
    d = np.float32(2.0**-6)  # x ± d stays in x's binade for both ties: every sum is exact
    for a in (1.0, -1.0):
        for target in (1 + EPS, 1 - EPS):
            x = _nearest_log(target)
            q = -0.375 if x > 0 else -(2.0**-8)  # lp = q + x on a grid as fine as x's
            for lrs in ([x], [x, x], [x + d, x - d]):
                pairs = [_with_log_ratio(q, np.float32(r)) for r in lrs]
                rows.append(([p for p, _ in pairs], [q for _, q in pairs], a))
        rows.append(([-0.5, -0.25], [-12.5, -12.25], a))  # log w = 12, 12
        rows.append(([-0.5], [-10.5], a))  # log s = 10 exactly
        # log w = −25, −24: a sum of −49 (below the ±20 clamp of a sequence's sum) of tokens
        # each beyond the clamp
        rows.append(([-25.5, -24.75], [-0.5, -0.75], a))
        lrs = (25.0, -25.0, 20.0, -20.0)
        rows.append(([-0.5, -25.5, -0.5, -20.5, -0.3], [-25.5, -0.5, -20.5, -0.5, -0.4], a))
        exact = zip(rows[-1][0][:4], rows[-1][1][:4], lrs, strict=True)
        assert all(np.float32(p) - np.float32(q) == r for p, q, r in exact)
    b = len(rows)
    lp, lq = np.zeros((b, t), np.float32), np.zeros((b, t), np.float32)
    mask, adv = np.zeros((b, t), np.float32), np.zeros((b, t), np.float32)
    for i, (p, q, a) in enumerate(rows):
        n = len(p)
        lp[i, :n], lq[i, :n], mask[i, :n], adv[i, :] = p, q, 1.0, a
    return lp, lq, mask, adv


# ---- the frameworks ---------------------------------------------------------------------
class Cfg(dict):
    """A config read both as ``cfg.key`` and ``cfg.get(key)`` (OmegaConf's surface)."""

    __getattr__ = dict.get


def _t(a):
    return torch.tensor(np.asarray(a), dtype=torch.float32)


def _omega_from_loss(loss_of, lp, adv, n_real):
    """ω = −∂loss/∂log π · N / A on every token (NaN where A = 0); ``n_real`` is N, a number
    or an array of one normalisation per token."""
    x = _t(lp).requires_grad_(True)
    loss = loss_of(x)
    (g,) = torch.autograd.grad(loss, x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (-g.numpy().astype(np.float64) * n_real / adv).astype(np.float32)


def _per_sequence(mask):
    """The normalisation of a sequence-mean of token-means: n_i · B on row i."""
    return mask.sum(axis=1, keepdims=True).astype(np.float64) * mask.shape[0]


def _scalars(metrics):
    out = {}
    for k, v in metrics.items():
        v = v.item() if isinstance(v, torch.Tensor) else v
        if isinstance(v, int | float):
            out[k] = float(v) if math.isfinite(v) else str(v)
    return out


def verl_cases(src, lp, lq, mask, adv):
    sys.path.insert(0, str(src))
    from verl.trainer.ppo import core_algos, rollout_corr_helper

    fn = rollout_corr_helper.compute_rollout_correction_and_rejection_mask
    is_cases = {
        "tis": ({"cap": CAP}, "token", CAP, False, None),
        "mis": ({"cap": CAP}, "token", f"1e-09_{CAP}", False, None),
        "icepop": ({"band": [LO, HI]}, "token", f"{LO}_{HI}", False, None),
        "seq_tis": ({"cap": CAP}, "sequence", CAP, False, None),
        "seq_mask": ({"band": [LO, HI]}, "sequence", f"{LO}_{HI}", False, None),
        "tis_norm": ({"cap": CAP}, "token", CAP, True, None),
        "tis_mask": (
            {"cap": CAP, "band": [LO, HI]},
            "token",
            CAP,
            False,
            ("token_k1", f"{1 / HI}_{1 / LO}"),
        ),
        f"tis_mask@{K1_LO}_{K1_HI}": (  # the band whose ends verl's k1 and the ratio disagree on
            {"cap": CAP, "band": [K1_LO, K1_HI]},
            "token",
            CAP,
            False,
            ("token_k1", f"{1 / K1_HI}_{1 / K1_LO}"),
        ),
        "kl_reject": (  # the export's importance part: token level, truncating nothing
            {"reject": REJECT[0], "reject_threshold": REJECT[1]},
            "token",
            5e8,
            False,
            REJECT,
        ),
    }
    for name, (params, level, threshold, normalize, rs) in is_cases.items():
        options = {
            "rollout_is": level,
            "rollout_is_threshold": threshold,
            "rollout_is_batch_normalize": normalize,
            "rollout_rs": rs[0] if rs else None,
            "rollout_rs_threshold": rs[1] if rs else None,
        }
        weights, new_mask, metrics = fn(_t(lp), _t(lq), _t(mask), **options)
        options["bypass_mode"] = False  # decoupled: the trainer's log-probs are the old ones
        keep = new_mask.numpy()
        out = weights.batch["rollout_is_weights"].numpy() * keep * mask
        what = "rollout_is_weights × modified response mask"
        yield (
            name,
            params,
            "rollout_corr_helper.compute_rollout_correction_and_rejection_mask",
            (options, out, what, _scalars(metrics)),
        )

    n = float(mask.sum())
    info = {"dp_size": 1, "batch_num_tokens": n, "global_batch_size": float(mask.shape[0])}
    dual = Cfg(clip_ratio=EPS, clip_ratio_low=EPS, clip_ratio_high=EPS, clip_ratio_c=CAP)
    dual["global_batch_info"] = info
    loss = lambda x: core_algos.compute_policy_loss_vanilla(  # noqa: E731
        _t(lq), x, _t(adv), _t(mask), "token-mean", dual
    )[0]
    yield (
        "dual_clip",
        {"clip_epsilon": EPS, "cap": CAP},
        "core_algos.compute_policy_loss_vanilla",
        (
            {k: v for k, v in dual.items() if k != "global_batch_info"}
            | {
                "bypass_mode": True,
                "rollout_is": None,
                "rollout_rs": None,
                "rollout_rs_threshold": None,
            },
            _omega_from_loss(loss, lp, adv, n),
            "−∂loss/∂log π · N / A (autograd)",
            {},
        ),
    )
    for kind, delta in (("tv", TV), ("kl", KL)):
        cfg = Cfg(clip_ratio=delta, clip_ratio_low=delta, clip_ratio_high=delta, clip_ratio_c=1e9)
        cfg["global_batch_info"] = info
        f = getattr(core_algos, f"compute_policy_loss_dppo_{kind}")
        loss = lambda x, f=f, cfg=cfg: f(_t(lq), x, _t(adv), _t(mask), "token-mean", cfg)[0]  # noqa: E731
        yield (
            f"dppo_{kind}",
            {"threshold": delta},
            f"core_algos.compute_policy_loss_dppo_{kind}",
            (
                {k: v for k, v in cfg.items() if k != "global_batch_info"} | {"bypass_mode": True},
                _omega_from_loss(loss, lp, adv, n),
                "−∂loss/∂log π · N / A (autograd)",
                {},
            ),
        )

    # the rollout-anchored losses: old_log_prob = the engine's log-probs
    def actor(low):
        return core_algos.ActorConfig(
            strategy="fsdp",
            rollout_n=1,
            ppo_micro_batch_size_per_gpu=1,
            global_batch_info=info,
            clip_ratio=EPS,
            clip_ratio_low=low,
            clip_ratio_high=EPS,
            tau_pos=TAU_POS,
            tau_neg=TAU_NEG,
        )

    clip_keys = ("clip_ratio_low", "clip_ratio_high")
    losses = {
        "gspo": ({"clip_epsilon": EPS}, _per_sequence(mask), clip_keys, EPS),
        "cispo": ({"band": [1 - EPS, 1 + EPS]}, n, (*clip_keys, "loss_agg_mode"), EPS),
        CISPO_FROM_0: ({"band": [0.0, 1 + EPS]}, n, (*clip_keys, "loss_agg_mode"), 1.0),
        "sapo": (
            {"temperatures": [TAU_POS, TAU_NEG]},
            _per_sequence(mask),
            ("tau_pos", "tau_neg"),
            EPS,
        ),
    }
    for case, (params, norm, keys, low) in losses.items():
        name, config = case.partition("@")[0], actor(low)
        f = getattr(core_algos, f"compute_policy_loss_{name}")
        loss = lambda x, f=f, c=config: f(_t(lq), x, _t(adv), _t(mask), "token-mean", c)[0]  # noqa: E731
        what = "−∂loss/∂log π · N / A (autograd)"
        if name != "cispo":  # gspo and sapo aggregate seq-mean-token-mean whatever is asked
            what = "−∂loss/∂log π · n_i · B / A (autograd; n_i the row's tokens, B rows)"
        options = {"policy_loss.loss_mode": name} | {k: getattr(config, k) for k in keys}
        yield (
            case,
            params,
            f"core_algos.compute_policy_loss_{name}",
            (options, _omega_from_loss(loss, lp, adv, norm), what, {}, ROLLOUT_ANCHOR),
        )


def _trl_blocks(src):
    """The IS-correction block and the metrics block of ``_generate_and_score_completions``
    and the source of ``get_off_policy_mask``, compiled from TRL's file."""
    path = pathlib.Path(src, "trl", "trainer", "grpo_trainer.py")
    tree = ast.parse(path.read_text())
    method = opsm = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_generate_and_score_completions":
            method = node
        if isinstance(node, ast.FunctionDef) and node.name == "get_off_policy_mask":
            opsm = node
    test = "self.use_vllm and self.vllm_importance_sampling_correction"
    blocks = [n for n in ast.walk(method) if isinstance(n, ast.If) and ast.unparse(n.test) == test]
    compute = next(b for b in blocks if "torch.exp(logps_diff)" in ast.unparse(b))
    log = next(b for b in blocks if "importance_sampling_ratio/min" in ast.unparse(b))
    opsm.decorator_list = []

    def code(node):
        return compile(ast.Module([node], []), str(path), "exec")

    return code(compute), code(log), code(opsm)


def _trl_loss_block(src):
    """The statements of ``GRPOTrainer._compute_loss`` from the log-ratio to the normalised
    loss (after the model's forward pass, before the entropy bonus), compiled from TRL's file."""
    path = pathlib.Path(src, "trl", "trainer", "grpo_trainer.py")
    tree = ast.parse(path.read_text())
    method = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_compute_loss"
    )
    body = method.body
    start = next(
        i
        for i, n in enumerate(body)
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "log_ratio"
    )
    test = "self.loss_type in ['grpo', 'sapo']"
    end = next(
        i for i, n in enumerate(body) if isinstance(n, ast.If) and ast.unparse(n.test) == test
    )
    return compile(ast.Module(body[start : end + 1], []), str(path), "exec")


def trl_loss_cases(src, lp, lq, mask, adv):
    """TRL's GRPO loss with the old log-probs set to vLLM's (rollout-anchored), no IS block."""
    block = _trl_loss_block(src)
    n = float(mask.sum())
    losses = {
        "gspo": (
            {"clip_epsilon": EPS},
            {"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": EPS},
            _per_sequence(mask),
        ),
        # TRL's cispo caps w at epsilon_high itself, from above only: at 1 + ε it is ours'
        # upper end (the test states the missing lower clamp)
        "cispo": (
            {"band": [1 - EPS, 1 + EPS]},
            {"loss_type": "cispo", "importance_sampling_level": "token", "epsilon_high": 1 + EPS},
            n,
        ),
        "sapo": (
            {"temperatures": [TAU_POS, TAU_NEG]},
            {
                "loss_type": "sapo",
                "importance_sampling_level": "token",
                "sapo_temperature_pos": TAU_POS,
                "sapo_temperature_neg": TAU_NEG,
            },
            _per_sequence(mask),
        ),
    }
    for name, (params, options, norm) in losses.items():
        eps_low = options.get("epsilon", EPS)
        trainer = types.SimpleNamespace(
            importance_sampling_level=options["importance_sampling_level"],
            loss_type=options["loss_type"],
            epsilon_low=eps_low,
            epsilon_high=options.get("epsilon_high", eps_low),
            beta=0.0,
            off_policy_mask_threshold=None,
            use_vllm=False,  # no separate IS weight: the old log-probs are vLLM's already
            vllm_importance_sampling_correction=False,
            model=types.SimpleNamespace(training=True),
            current_gradient_accumulation_steps=1,
            accelerator=types.SimpleNamespace(num_processes=1),
            args=types.SimpleNamespace(
                delta=None,
                use_bias_correction_kl=False,
                sapo_temperature_pos=TAU_POS,
                sapo_temperature_neg=TAU_NEG,
            ),
        )

        def loss(x, trainer=trainer):
            scope = {
                "self": trainer,
                "torch": torch,
                "per_token_logps": x,
                "old_per_token_logps": _t(lq),
                "advantages": _t(adv[:, :1]),
                "mask": _t(mask).long(),
                "entropy_mask": None,
                "inputs": {"num_items_in_batch": torch.tensor(n)},
            }
            exec(block, scope)
            return scope["loss"]

        what = "−∂loss/∂log π · N / A (autograd)"
        if name != "cispo":
            what = "−∂loss/∂log π · n_i · B / A (autograd; n_i the row's tokens, B rows)"
        yield (
            name,
            params,
            "GRPOTrainer._compute_loss (from the log-ratio to the loss)",
            (options, _omega_from_loss(loss, lp, adv, norm), what, {}, ROLLOUT_ANCHOR),
        )


def trl_cases(src, lp, lq, mask, adv):
    compute, log, opsm_code = _trl_blocks(src)
    modes = {
        "tis": ({"cap": CAP}, "token_truncate", None, CAP),
        "mis": ({"cap": CAP}, "token_mask", None, CAP),
        "icepop": ({"band": [LO, HI]}, "token_mask", LO, HI),
        "seq_tis": ({"cap": CAP}, "sequence_truncate", None, CAP),
        "seq_mask": ({"band": [LO, HI]}, "sequence_mask", LO, HI),
        "tis_clip": ({"band": [LO, HI]}, "token_truncate", LO, HI),
        "opsm": ({"threshold": KL}, "token_truncate", 0.0, None),  # untruncated w, and the mask
    }
    scope = {"torch": torch}
    exec(opsm_code, scope)
    off_policy_mask = scope["get_off_policy_mask"]
    for name, (params, mode, lo, hi) in modes.items():
        options = {
            "vllm_importance_sampling_mode": mode,
            "vllm_importance_sampling_clip_min": lo,
            "vllm_importance_sampling_clip_max": hi,
            "off_policy_mask_threshold": KL if name == "opsm" else None,
        }
        metrics = collections.defaultdict(lambda: collections.defaultdict(list))
        trainer = types.SimpleNamespace(
            use_vllm=True,
            vllm_importance_sampling_correction=True,
            accelerator=types.SimpleNamespace(gather=lambda x: x),
            _metrics=metrics,
            **options,
        )
        scope = {
            "self": trainer,
            "torch": torch,
            "math": math,
            "mode": "train",
            "device": "cpu",
            "nanmin": lambda x: x,
            "nanmax": lambda x: x,
            "completion_mask": _t(mask).long(),
            "tool_mask": None,
            "old_per_token_logps": _t(lp),
            "sampling_per_token_logps": _t(lq),
        }
        exec(compute, scope)
        exec(log, scope)
        ratio = scope["vllm_importance_sampling_ratio"].numpy()
        out = np.broadcast_to(ratio, mask.shape) * mask
        function, what = "GRPOTrainer._generate_and_score_completions (IS block)", ""
        if name == "opsm":  # _compute_loss multiplies the loss by the mask and the ratio
            keep = off_policy_mask(_t(adv[:, :1]), _t(lp), _t(lq), _t(mask), KL).numpy()
            out = out * keep
            function += " and GRPOTrainer.get_off_policy_mask"
            what = " × the off-policy mask"
        logged = {k: v[0] for k, v in metrics["train"].items()}
        what = f"importance_sampling_ratio{what} × completion_mask"
        yield name, params, function, (options, out, what, _scalars(logged))
    yield from trl_loss_cases(src, lp, lq, mask, adv)
    yield trl_vespo_case(src, lp, lq, mask, adv)


def trl_vespo_case(src, lp, lq, mask, adv):
    """TRL's VESPO as its trainer runs it at a batch's first step: the IS block with the
    settings ``verify export`` writes (``token_truncate`` at C_max = 5e8, no C_min) gives
    ``importance_sampling_ratio`` from the trainer's and vLLM's log-probs, then the loss
    statements with ``loss_type: vespo``, the trainer's log-probs as both the current and the
    old ones (ratio 1) and that ratio in ``inputs`` (``get_gamma_weights`` reads it)."""
    compute, _, _ = _trl_blocks(src)
    block = _trl_loss_block(src)
    k_pos, lam_pos, k_neg, lam_neg = VESPO_GAMMA
    options = {
        "loss_type": "vespo",
        "importance_sampling_level": "token",
        "vespo_k_pos": k_pos,
        "vespo_lambda_pos": lam_pos,
        "vespo_k_neg": k_neg,
        "vespo_lambda_neg": lam_neg,
        "vllm_importance_sampling_mode": "token_truncate",
        "vllm_importance_sampling_clip_max": VESPO_NO_TRUNCATION,
        "vllm_importance_sampling_clip_min": None,
        "off_policy_mask_threshold": None,
    }
    is_self = types.SimpleNamespace(
        use_vllm=True,
        vllm_importance_sampling_correction=True,
        **{k: v for k, v in options.items() if k.startswith(("vllm_", "off_"))},
    )
    scope = {
        "self": is_self,
        "torch": torch,
        "math": math,
        "completion_mask": _t(mask).long(),
        "tool_mask": None,
        "old_per_token_logps": _t(lp),
        "sampling_per_token_logps": _t(lq),
    }
    exec(compute, scope)
    ratio = scope["vllm_importance_sampling_ratio"]
    n = float(mask.sum())
    trainer = types.SimpleNamespace(
        importance_sampling_level="token",
        loss_type="vespo",
        epsilon_low=EPS,
        epsilon_high=EPS,
        beta=0.0,
        off_policy_mask_threshold=None,
        use_vllm=True,
        vllm_importance_sampling_correction=True,
        model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        accelerator=types.SimpleNamespace(num_processes=1),
        get_gamma_weights=_trl_gamma_weights(src),
        args=types.SimpleNamespace(
            delta=None,
            use_bias_correction_kl=False,
            vespo_k_pos=k_pos,
            vespo_lambda_pos=lam_pos,
            vespo_k_neg=k_neg,
            vespo_lambda_neg=lam_neg,
        ),
    )

    def loss(x):
        scope = {
            "self": trainer,
            "torch": torch,
            "per_token_logps": x,
            "old_per_token_logps": _t(lp),
            "advantages": _t(adv[:, :1]),
            "mask": _t(mask).long(),
            "entropy_mask": None,
            "inputs": {"num_items_in_batch": torch.tensor(n), "importance_sampling_ratio": ratio},
        }
        exec(block, scope)
        return scope["loss"]

    return (
        "vespo",
        {"gamma": list(VESPO_GAMMA)},
        "GRPOTrainer._generate_and_score_completions (IS block), GRPOTrainer._compute_loss "
        "(from the log-ratio to the loss) and GRPOTrainer.get_gamma_weights",
        (options, _omega_from_loss(loss, lp, adv, n), "−∂loss/∂log π · N / A (autograd)", {}),
    )


def _trl_gamma_weights(src):
    """``GRPOTrainer.get_gamma_weights`` compiled from TRL's file (a static method: its
    decorators, ``staticmethod`` and ``torch.no_grad``, are applied here)."""
    path = pathlib.Path(src, "trl", "trainer", "grpo_trainer.py")
    tree = ast.parse(path.read_text())
    node = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.name == "get_gamma_weights"
    )
    assert [ast.unparse(d) for d in node.decorator_list] == ["staticmethod", "torch.no_grad()"]
    node.decorator_list = []
    scope = {"torch": torch, "math": math}
    exec(compile(ast.Module([node], []), str(path), "exec"), scope)
    return torch.no_grad()(scope["get_gamma_weights"])


def nemo_cases(src, lp, lq, mask, adv):
    _bare_packages(src, "nemo_rl", "nemo_rl.algorithms", "nemo_rl.algorithms.loss")
    sys.path.insert(0, str(src))
    from nemo_rl.algorithms.loss.loss_functions import ClippedPGLossConfig, ClippedPGLossFn

    def pad(a):  # the loss reads data[...][:, 1:]: one leading column
        return torch.cat([torch.zeros(a.shape[0], 1), _t(a)], dim=1)

    n = float(mask.sum())
    base = {
        "ratio_clip_min": EPS,
        "ratio_clip_max": EPS,
        "ratio_clip_c": None,
        "reference_policy_kl_penalty": 0.0,
        "token_level_loss": True,
        "sequence_level_importance_ratios": False,
    }
    cases = {
        "tis": ({"cap": CAP}, "tis", CAP, None),
        "tis_clip": ({"band": [LO, HI]}, "tis", HI, LO),
        "mis": ({"cap": CAP}, "icepop", CAP, 0.0),
        "icepop": ({"band": [LO, HI]}, "icepop", HI, LO),
        "geo_mask": ({"band": [LO, HI]}, "seq-mask-tis", HI, LO),
        "dual_clip": ({"clip_epsilon": EPS, "cap": CAP}, None, None, None),
    }
    for name, (params, kind, upper, lower) in cases.items():
        dual = name == "dual_clip"
        cfg = base | {
            "use_importance_sampling_correction": not dual,
            "truncated_importance_sampling_type": kind,
            "truncated_importance_sampling_ratio": upper,
            "truncated_importance_sampling_ratio_min": lower,
            "ratio_clip_c": CAP if dual else None,
        }
        loss_fn = ClippedPGLossFn(ClippedPGLossConfig(**cfg))
        prev = lq if dual else lp
        data = {
            "token_mask": pad(mask),
            "sample_mask": torch.ones(mask.shape[0]),
            "advantages": pad(adv),
            "prev_logprobs": pad(prev),
            "generation_logprobs": pad(lq),
        }
        seen = {}

        def loss(x, loss_fn=loss_fn, data=data, seen=seen):
            value, metrics = loss_fn(x, data, torch.tensor(mask.shape[0]), torch.tensor(n))
            seen.update(metrics)
            return value

        omega = _omega_from_loss(loss, lp, adv, n)
        yield (
            name,
            params,
            "ClippedPGLossFn.__call__",
            (cfg, omega, "−∂loss/∂log π · N / A (autograd)", _scalars(seen)),
        )
    # the rollout-anchored losses: prev_logprobs = generation_logprobs = the engine's
    losses = {
        "gspo": (
            {"clip_epsilon": EPS},
            {"sequence_level_importance_ratios": True, "token_level_loss": False},
            _per_sequence(mask),
        ),
        "cispo": ({"band": [1 - EPS, 1 + EPS]}, {"use_cispo": True}, n),
        CISPO_FROM_0: ({"band": [0.0, 1 + EPS]}, {"use_cispo": True, "ratio_clip_min": 1.0}, n),
    }
    for case, (params, extra, norm) in losses.items():
        name = case.partition("@")[0]
        cfg = base | {"use_importance_sampling_correction": False} | extra
        loss_fn = ClippedPGLossFn(ClippedPGLossConfig(**cfg))
        data = {
            "token_mask": pad(mask),
            "sample_mask": torch.ones(mask.shape[0]),
            "advantages": pad(adv),
            "prev_logprobs": pad(lq),
            "generation_logprobs": pad(lq),
        }
        seen = {}

        def loss(x, loss_fn=loss_fn, data=data, seen=seen):
            value, metrics = loss_fn(x, data, torch.tensor(mask.shape[0]), torch.tensor(n))
            seen.update(metrics)
            return value

        what = "−∂loss/∂log π · N / A (autograd)"
        if name == "gspo":
            what = "−∂loss/∂log π · n_i · B / A (autograd; n_i the row's tokens, B rows)"
        omega = _omega_from_loss(loss, lp, adv, norm)
        anchor = ROLLOUT_ANCHOR.replace("old log-probs", "prev_logprobs and generation_logprobs")
        yield case, params, "ClippedPGLossFn.__call__", (cfg, omega, what, {}, anchor)


def skyrl_cases(src, lp, lq, mask, adv):
    _bare_packages(
        src,
        "skyrl",
        "skyrl.backends",
        "skyrl.backends.skyrl_train",
        "skyrl.backends.skyrl_train.utils",
    )
    sys.path.insert(0, str(src))
    from skyrl.backends.skyrl_train.utils import ppo_utils

    def correction(tis=None, token=None, seq=None, token_mask=None, product=None, outlier=None):
        return Cfg(
            tis_ratio_type=tis,
            token_tis_ratio_clip_high=token,
            sequence_tis_ratio_clip_high=seq,
            sequence_mask_metric="product" if product else None,
            product_mask_low=product[0] if product else None,
            product_mask_high=product[1] if product else None,
            geo_mask_low=None,
            geo_mask_high=None,
            token_mask_is_threshold_low=token_mask[0] if token_mask else None,
            token_mask_is_threshold_high=token_mask[1] if token_mask else None,
            outlier_token_is_threshold_low=outlier[0] if outlier else None,
            outlier_token_is_threshold_high=outlier[1] if outlier else None,
        )

    cases = {
        "tis": ({"cap": CAP}, "regular", correction("token", token=CAP)),
        "mis": ({"cap": CAP}, "regular", correction("token", token=CAP, token_mask=(0.0, CAP))),
        "icepop": ({"band": [LO, HI]}, "regular", correction("token", HI, token_mask=(LO, HI))),
        "seq_tis": ({"cap": CAP}, "regular", correction("sequence", seq=CAP)),
        "seq_mask": (
            {"band": [LO, HI]},
            "regular",
            correction("sequence", seq=HI, product=(LO, HI)),
        ),
        "seq_outlier": ({"band": [LO, HI]}, "regular", correction("token", HI, outlier=(LO, HI))),
        "tis_mask": (
            {"cap": CAP, "band": [LO, HI]},
            "regular",
            correction("token", CAP, token_mask=(LO, HI)),
        ),
        "dual_clip": ({"clip_epsilon": EPS, "cap": CAP}, "dual_clip", correction()),
        "dppo_tv": ({"threshold": TV}, "dppo", correction()),
        "dppo_kl": ({"threshold": KL}, "dppo", correction()),
    }
    for name, (params, loss_type, corr) in cases.items():
        # the export adds to the KL threshold the 1e-8 SkyRL's binary KL adds inside its log
        delta = TV if name == "dppo_tv" else KL + 1e-8
        # only the AlgorithmConfig keys the loss reads (a key left out reads as None): the
        # PPO clip for ppo_policy_loss, clip_ratio_c for its dual clip, the dppo block for
        # dppo_policy_loss, the off-policy correction for both
        config = Cfg(policy_loss_type=loss_type, off_policy_correction=corr)
        if loss_type == "dppo":
            config["dppo"] = Cfg(
                dppo_type="binary_tv" if name == "dppo_tv" else "binary_kl",
                delta_low=delta,
                delta_high=delta,
            )
        else:
            config.update(eps_clip_low=EPS, eps_clip_high=EPS)
        if loss_type == "dual_clip":
            config["clip_ratio_c"] = CAP
        dual = loss_type == "dual_clip"
        old = lq if dual else lp  # dual clip: the ratio against the engine's log-probs
        fn = ppo_utils.dppo_policy_loss if loss_type == "dppo" else ppo_utils.ppo_policy_loss
        seen = {}

        def loss(x, fn=fn, config=config, old=old, seen=seen, rollout=None if dual else lq):
            rollout = None if rollout is None else _t(rollout)
            value, metrics = fn(
                x, _t(old), _t(adv), config, loss_mask=_t(mask), rollout_logprobs=rollout
            )
            seen.update(metrics)
            return value

        options = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
        yield (
            name,
            params,
            f"ppo_utils.{fn.__name__}",
            (
                options,
                _omega_from_loss(loss, lp, adv, 1.0),
                "−∂loss/∂log π / A (autograd)",
                _scalars(seen),
            ),
        )
    yield from skyrl_loss_cases(ppo_utils, correction(), lp, lq, mask, adv)


def skyrl_loss_cases(ppo_utils, no_correction, lp, lq, mask, adv):
    """SkyRL's gspo and sapo with old_log_probs = the engine's, and its cispo with its own
    ``cispo_anchor: rollout`` (old_log_probs the trainer's, rollout_logprobs the engine's)."""
    losses = {
        "gspo": (
            {"clip_epsilon": EPS},
            Cfg(loss_reduction="sequence_mean", eps_clip_low=EPS, eps_clip_high=EPS),
            ppo_utils.gspo_policy_loss,
        ),
        "cispo": (
            {"band": [1 - EPS, 1 + EPS]},
            Cfg(cispo=Cfg(cispo_anchor="rollout", cispo_eps_clip_low=EPS, cispo_eps_clip_high=EPS)),
            ppo_utils.compute_policy_loss_cispo,
        ),
        CISPO_FROM_0: (
            {"band": [0.0, 1 + EPS]},
            Cfg(cispo=Cfg(cispo_anchor="rollout", cispo_eps_clip_low=1.0, cispo_eps_clip_high=EPS)),
            ppo_utils.compute_policy_loss_cispo,
        ),
        "sapo": (
            {"temperatures": [TAU_POS, TAU_NEG]},
            Cfg(loss_reduction="sequence_mean", sapo=Cfg(tau_pos=TAU_POS, tau_neg=TAU_NEG)),
            ppo_utils.sapo_policy_loss,
        ),
    }
    for case, (params, config, fn) in losses.items():
        name = case.partition("@")[0]
        config = Cfg(policy_loss_type=name, off_policy_correction=no_correction) | config
        config = Cfg(config)
        rollout_anchor = name == "cispo"  # SkyRL's own option: old stays the trainer's
        old, rollout = (lp, lq) if rollout_anchor else (lq, None)
        seen = {}

        def loss(x, fn=fn, config=config, old=old, rollout=rollout, seen=seen):
            value, metrics = fn(
                x,
                _t(old),
                _t(adv),
                config,
                loss_mask=_t(mask),
                rollout_logprobs=None if rollout is None else _t(rollout),
            )
            seen.update(metrics)
            return value

        options = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
        anchor = ROLLOUT_ANCHOR
        if rollout_anchor:
            anchor = (
                "cispo_anchor: rollout: the ratio is over rollout_logprobs = the engine's (r = w, "
                "the case our weight rule models); old_log_probs = the trainer's, as its trainer "
                "passes them (read only by the off-policy correction, off here)"
            )
        yield (
            case,
            params,
            f"ppo_utils.{fn.__name__}",
            (
                options,
                _omega_from_loss(loss, lp, adv, 1.0),
                "−∂loss/∂log π / A (autograd)",
                _scalars(seen),
                anchor,
            ),
        )


# ---- the covariance losses (clip_cov, kl_cov) ---------------------------------------------
# Clip-Cov draws its tokens at random among the candidates: "@all" picks a share (1) that
# drops every candidate, so the weight is determined; "@draw" keeps a small share, seeded, and
# only the candidates' count of zeros is determined. KL-Cov's top-k is determined but for ties.
COV_BAND = (0.5, 3.0)  # covariances of the batches fall on both sides of it
COV_DRAW = 0.02  # max(⌊0.02·n⌋, 1) drawn
KL_COV = (0.1, 0.5)  # kl_cov's share of tokens and κ
COV_SEED = 38
COV_NOTE = f"torch.manual_seed({COV_SEED}) before the call (Clip-Cov's draw)"


def _cov_settings():
    """(case, our parameters, framework options) of each covariance case."""
    clip = {"clip_epsilon": EPS, "cov_band": list(COV_BAND)}
    return (
        ("clip_cov@all", clip | {"cov_fraction": 1.0}, {"ratio": 1.0}),
        ("clip_cov@draw", clip | {"cov_fraction": COV_DRAW}, {"ratio": COV_DRAW}),
        ("kl_cov", {"cov_fraction": KL_COV[0], "kl_coef": KL_COV[1]}, {"ratio": KL_COV[0]}),
    )


def verl_cov_cases(src, lp, lq, mask, adv):
    """verl's ``compute_policy_loss_clip_cov`` / ``_kl_cov`` with old_log_prob = the engine's
    log-probs (rollout-anchored, r = w), token-mean; torch seeded before each call."""
    sys.path.insert(0, str(src))
    from verl.trainer.ppo import core_algos
    from verl.workers.config.actor import PolicyLossConfig

    n = float(mask.sum())
    info = {"dp_size": 1, "batch_num_tokens": n, "global_batch_size": float(mask.shape[0])}
    for case, params, opt in _cov_settings():
        name = case.partition("@")[0]
        keys = {"loss_mode": name}
        if name == "clip_cov":
            keys |= {"clip_cov_ratio": opt["ratio"], "clip_cov_lb": COV_BAND[0],
                     "clip_cov_ub": COV_BAND[1]}  # fmt: skip
        else:
            keys |= {"kl_cov_ratio": opt["ratio"], "ppo_kl_coef": KL_COV[1]}
        config = core_algos.ActorConfig(
            strategy="fsdp",
            rollout_n=1,
            ppo_micro_batch_size_per_gpu=1,
            global_batch_info=info,
            clip_ratio=EPS,
            clip_ratio_low=EPS,
            clip_ratio_high=EPS,
            policy_loss=PolicyLossConfig(**keys),
        )
        f = getattr(core_algos, f"compute_policy_loss_{name}")
        seen = {}

        def loss(x, f=f, config=config, seen=seen):
            value, metrics = f(_t(lq), x, _t(adv), _t(mask), "token-mean", config)
            seen.update(metrics)
            return value

        torch.manual_seed(COV_SEED)
        options = {f"policy_loss.{k}": v for k, v in keys.items()}
        if name == "clip_cov":
            options |= {"clip_ratio_low": EPS, "clip_ratio_high": EPS}
        yield (
            case,
            params,
            f"core_algos.compute_policy_loss_{name}",
            (options, _omega_from_loss(loss, lp, adv, n), "−∂loss/∂log π · N / A (autograd)",
             _scalars(seen), f"{ROLLOUT_ANCHOR}; {COV_NOTE}"),
        )  # fmt: skip


def skyrl_cov_cases(src, lp, lq, mask, adv):
    """SkyRL's ``compute_policy_loss_clip_cov`` / ``_kl_cov`` with old_log_probs = the engine's
    log-probs; the padding is zeroed first (its ``masked_mean`` multiplies NaN padding by 0, and
    every covariance would be NaN; its trainer pads with 0.0)."""
    _bare_packages(
        src, "skyrl", "skyrl.backends", "skyrl.backends.skyrl_train",
        "skyrl.backends.skyrl_train.utils",
    )  # fmt: skip
    sys.path.insert(0, str(src))
    from skyrl.backends.skyrl_train.utils import ppo_utils

    real = mask > 0
    lp0, lq0 = np.where(real, lp, 0.0), np.where(real, lq, 0.0)
    for case, params, opt in _cov_settings():
        name = case.partition("@")[0]
        if name == "clip_cov":
            sub = Cfg(clip_ratio=opt["ratio"], clip_cov_lb=COV_BAND[0], clip_cov_ub=COV_BAND[1])
        else:
            sub = Cfg(kl_cov_frac=opt["ratio"], ppo_kl_coef=KL_COV[1])
        config = Cfg(policy_loss_type=name, **{name: sub})
        if name == "clip_cov":
            config |= {"eps_clip_low": EPS, "eps_clip_high": EPS}
        config = Cfg(config)
        fn = getattr(ppo_utils, f"compute_policy_loss_{name}")
        seen = {}

        def loss(x, fn=fn, config=config, seen=seen):
            value, metrics = fn(x, _t(lq0), _t(adv), config, loss_mask=_t(mask))
            seen.update(metrics)
            return value

        torch.manual_seed(COV_SEED)
        options = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
        yield (
            case,
            params,
            f"ppo_utils.{fn.__name__}",
            (options, _omega_from_loss(loss, lp0, adv, 1.0), "−∂loss/∂log π / A (autograd)",
             _scalars(seen), f"{ROLLOUT_ANCHOR}; {COV_NOTE}; the padding zeroed first"),
        )  # fmt: skip


def _clamp_end_gradient() -> float:
    """d clamp(x, 0.5, 2)/dx at x = 2 in this torch: 1 in torch 2.11.0 (what verl, NeMo-RL and
    SkyRL pin), 0 in 2.14.1 (the end counts as clipped). The dual-clip weights at w = 1 ± ε
    and GSPO's at s = 1 ± ε follow it."""
    x = torch.tensor(2.0, requires_grad=True)
    (g,) = torch.autograd.grad(torch.clamp(x, 0.5, 2.0), x)
    return float(g)


# ---- one framework per environment, then the merge ------------------------------------------
FRAMEWORKS = ("verl", "trl", "nemo-rl", "skyrl")
RUNS = {
    "verl": (verl_cases, verl_cov_cases),
    "trl": (trl_cases,),
    "nemo-rl": (nemo_cases,),
    "skyrl": (skyrl_cases, skyrl_cov_cases),
}
SOURCES = {"verl": "VERL_SRC", "trl": "TRL_SRC", "nemo-rl": "NEMO_RL_SRC", "skyrl": "SKYRL_SRC"}
# the torch each framework pins at its commit for Linux (verl: pyproject.toml's extras and
# uv.lock, 2.11.0; NeMo-RL: pyproject.toml, 2.11.0; SkyRL: pyproject.toml's fsdp and megatron
# extras and uv.lock, 2.11.0); TRL pins none (torch comes through accelerate, unbounded above)
PINNED_TORCH = {"verl": "2.11.0", "trl": None, "nemo-rl": "2.11.0", "skyrl": "2.11.0"}
BATCHES = (("seeded", seeded_batch), ("edge", edge_batch), ("seq_edge", sequence_edge_batch))
INPUTS = ("logp_train", "logp_inf", "mask", "adv")


def record_one(framework, src, part):
    """Run one framework's cases on every batch in this environment; write ``part``.npz (the
    inputs and outputs) and ``part``.json (the cases, this torch and its clamp gradient)."""
    pinned = PINNED_TORCH[framework]
    if pinned is not None and torch.__version__.split("+")[0] != pinned:
        raise SystemExit(
            f"{framework} pins torch {pinned}; this environment has {torch.__version__}: "
            f"name one with --python {framework}=PYTHON"
        )
    sys.meta_path.insert(0, _StandIns(UNUSED))
    arrays, cases = {}, {}
    for batch, make in BATCHES:
        lp, lq, mask, adv = make()
        for key, value in zip(INPUTS, make(), strict=True):
            arrays[f"{batch}/{key}"] = value
        results = (r(pathlib.Path(src).resolve(), lp, lq, mask, adv) for r in RUNS[framework])
        for name, params, function, (options, out, what, metrics, *anchor) in (
            item for result in results for item in result
        ):
            case = f"{framework}/{name}"
            arrays[f"{batch}/{case}"] = np.asarray(out, np.float32)
            cases.setdefault(
                case,
                {
                    "framework": framework,
                    "commit": COMMITS[framework],
                    "function": function,
                    "options": options,
                    "estimator": name.partition("@")[0],
                    "params": params,
                    "output": what,
                }
                | ({"anchor": anchor[0]} if anchor else {}),
            )
            cases[case].setdefault("metrics", {})[batch] = metrics
    np.savez(f"{part}.npz", **arrays)
    meta = {"torch": torch.__version__, "clamp_end_gradient": _clamp_end_gradient(), "cases": cases}
    pathlib.Path(f"{part}.json").write_text(json.dumps(meta, sort_keys=True))


def merge(parts):
    """One ``recorded.npz``/``.json`` from the frameworks' parts (``parts``: framework -> path).
    Every part must hold the same inputs, bit for bit: the batches do not depend on the torch
    that built them (their ties are checked in each)."""
    loaded = {}
    for framework, part in parts.items():
        with np.load(f"{part}.npz") as npz:
            loaded[framework] = {k: npz[k] for k in npz.files}
    arrays = {}
    for batch, _ in BATCHES:
        for key in INPUTS:
            first, *others = (loaded[f][f"{batch}/{key}"] for f in parts)
            for other in others:
                if first.dtype != other.dtype or first.tobytes() != other.tobytes():
                    raise SystemExit(f"the environments built different {batch}/{key} inputs")
            arrays[f"{batch}/{key}"] = first
        for framework in parts:
            prefix = f"{batch}/{framework}/"
            arrays |= {k: v for k, v in loaded[framework].items() if k.startswith(prefix)}
    np.savez(HERE / "recorded.npz", **arrays)
    metas = {f: json.loads(pathlib.Path(f"{p}.json").read_text()) for f, p in parts.items()}
    meta = {
        "thresholds": {"cap": CAP, "band": [LO, HI], "clip_epsilon": EPS, "tv": TV, "kl": KL},
        "torch": {f: m["torch"] for f, m in metas.items()},
        "pinned_torch": PINNED_TORCH,
        "clamp_end_gradient": {f: m["clamp_end_gradient"] for f, m in metas.items()},
        "cases": {k: v for m in metas.values() for k, v in m["cases"].items()},
    }
    (HERE / "recorded.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for framework, env in SOURCES.items():
        parser.add_argument(f"--{framework}", default=os.environ.get(env))
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="FRAMEWORK=PYTHON",
        help="the interpreter of the environment a framework runs in (default: this one)",
    )
    parser.add_argument("--only", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--part", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sources = {f: getattr(args, f.replace("-", "_")) for f in FRAMEWORKS}
    if args.only:  # a child: one framework in this environment
        record_one(args.only, sources[args.only], args.part)
        return
    missing = [f"--{f} (or {SOURCES[f]})" for f in FRAMEWORKS if not sources[f]]
    pythons = dict(item.split("=", 1) for item in args.python)
    unknown = sorted(set(pythons) - set(FRAMEWORKS))
    if missing or unknown:
        parser.error(f"missing {', '.join(missing)}; unknown --python {', '.join(unknown)}")
    with tempfile.TemporaryDirectory() as tmp:
        parts = {f: os.path.join(tmp, f) for f in FRAMEWORKS}
        for f in FRAMEWORKS:
            command = [pythons.get(f, sys.executable), __file__, "--only", f, "--part", parts[f]]
            done = subprocess.run([*command, f"--{f}", str(pathlib.Path(sources[f]).resolve())])
            if done.returncode:
                raise SystemExit(f"recording {f} failed (exit {done.returncode}); nothing written")
        merge(parts)


if __name__ == "__main__":
    main()
