"""Train the shipped byte-level policy on the Python standard library's own sources.

``python -m kernel_contracts.kernels.model.train`` reads every ``.py`` file of the standard library
(found through ``sysconfig``), splits the files deterministically into train and held-out sets
by a hash of their relative path, trains ``TinyLM`` with AdamW on random windows of the train
bytes, and writes ``kernels/checkpoints/tiny-lm.npz`` (the weights plus the held-out evaluation
windows) and ``tiny-lm.json`` (config, loss curve, held-out loss and bits per byte, mean
entropy, wall time and a fingerprint of the data).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from kernel_contracts.kernels.model.tinylm import ModelConfig, TinyLM, save_checkpoint

__all__ = ["Corpus", "TrainConfig", "evaluate", "load_corpus", "main", "train"]

_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idlelib"}


@dataclass(frozen=True)
class Corpus:
    train: np.ndarray  # uint8 bytes of the train files, concatenated
    heldout: np.ndarray  # uint8 bytes of the held-out files, concatenated
    train_files: int
    heldout_files: int
    fingerprint: str  # sha256 over (relative path, content sha256) of every file used
    root: str


def _heldout(relpath: str, every: int) -> bool:
    return hashlib.sha256(relpath.encode()).digest()[0] % every == 0


def load_corpus(root: str | None = None, heldout_every: int = 10) -> Corpus:
    """The standard library's ``.py`` files, split by file into train and held-out bytes."""
    root = root or sysconfig.get_paths()["stdlib"]
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        paths.extend(Path(dirpath, f) for f in sorted(filenames) if f.endswith(".py"))
    if not paths:
        raise FileNotFoundError(f"no .py files under {root}")
    digest = hashlib.sha256()
    parts: dict[bool, list[bytes]] = {True: [], False: []}
    for path in sorted(paths, key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        digest.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
        parts[_heldout(rel, heldout_every)].append(data + b"\n")
    as_array = lambda chunks: np.frombuffer(b"".join(chunks), np.uint8)  # noqa: E731
    return Corpus(
        train=as_array(parts[False]),
        heldout=as_array(parts[True]),
        train_files=len(parts[False]),
        heldout_files=len(parts[True]),
        fingerprint=digest.hexdigest(),
        root=root,
    )


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 450
    batch: int = 32
    lr: float = 3e-3
    warmup: int = 50
    weight_decay: float = 0.01
    seed: int = 0
    eval_windows: int = 512
    eval_every: int = 100
    max_seconds: float = 540.0


def _windows(data: np.ndarray, count: int, length: int) -> np.ndarray:
    """``count`` windows of ``length`` bytes spread evenly over ``data``."""
    starts = np.linspace(0, len(data) - length, count).astype(np.int64)
    return np.stack([data[s : s + length] for s in starts]).astype(np.int32)


def _loss(model: TinyLM, batch):
    logits = model(batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()


@nnx.jit
def _train_step(model: TinyLM, optimizer: nnx.Optimizer, batch):
    loss, grads = nnx.value_and_grad(_loss)(model, batch)
    optimizer.update(model, grads)
    return loss


@nnx.jit
def _eval_batch(model: TinyLM, batch):
    logits = model(batch[:, :-1])
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, batch[:, 1:, None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    return nll.sum(), entropy.sum()


def evaluate(model: TinyLM, windows: np.ndarray, chunk: int = 64) -> dict[str, float]:
    """Mean next-byte loss (nats), bits per byte and mean entropy (nats) over ``windows``."""
    nll = ent = 0.0
    for i in range(0, len(windows), chunk):
        a, b = _eval_batch(model, jnp.asarray(windows[i : i + chunk]))
        nll += float(a)
        ent += float(b)
    tokens = windows.shape[0] * (windows.shape[1] - 1)
    return {
        "loss": nll / tokens,
        "bits_per_byte": nll / tokens / math.log(2),
        "mean_entropy": ent / tokens,
    }


def train(model_cfg: ModelConfig, cfg: TrainConfig, corpus: Corpus, log=None):
    """Train a fresh model; returns (model, training log dict, held-out evaluation windows)."""
    t0 = time.perf_counter()
    model = TinyLM(model_cfg, seed=cfg.seed)
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, cfg.lr, cfg.warmup, max(cfg.steps, cfg.warmup + 1), end_value=cfg.lr * 0.05
    )
    tx = optax.chain(
        optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=cfg.weight_decay)
    )
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    length = model_cfg.context + 1
    heldout = _windows(corpus.heldout, cfg.eval_windows, length)
    probe = heldout[:: max(1, len(heldout) // 64)][:64]
    rng = np.random.default_rng(cfg.seed)
    curve, evals, steps_done = [], [], 0
    for step in range(1, cfg.steps + 1):
        starts = rng.integers(0, len(corpus.train) - length, cfg.batch)
        batch = np.stack([corpus.train[s : s + length] for s in starts]).astype(np.int32)
        loss = float(_train_step(model, optimizer, jnp.asarray(batch)))
        steps_done = step
        curve.append([step, round(loss, 5)])
        if step % cfg.eval_every == 0 or step == cfg.steps:
            ev = evaluate(model, probe)
            evals.append({"step": step, **{k: round(v, 5) for k, v in ev.items()}})
            if log:
                log(f"step {step}: train loss {loss:.4f}, probe held-out {ev['loss']:.4f} nats")
        if time.perf_counter() - t0 > cfg.max_seconds:
            if log:
                log(f"stopping at step {step}: time budget of {cfg.max_seconds} s spent")
            break
    train_seconds = time.perf_counter() - t0
    final = evaluate(model, heldout)
    record = {
        "model": asdict(model_cfg),
        "train": asdict(cfg),
        "steps_done": steps_done,
        "loss_curve": curve,
        "probe_evals": evals,
        "heldout": {
            "windows": len(heldout),
            "window_bytes": int(length),
            "loss_nats": final["loss"],
            "bits_per_byte": final["bits_per_byte"],
            "mean_entropy_nats": final["mean_entropy"],
            "uniform_entropy_nats": math.log(model_cfg.vocab),
        },
        "wall_seconds": {"train": train_seconds, "total": time.perf_counter() - t0},
        "data": {
            "source": "python standard library .py files (sysconfig stdlib path)",
            "fingerprint_sha256": corpus.fingerprint,
            "train_files": corpus.train_files,
            "heldout_files": corpus.heldout_files,
            "train_bytes": len(corpus.train),
            "heldout_bytes": len(corpus.heldout),
            "split": "sha256(relative path)[0] % 10 == 0 is held out",
        },
        "environment": {
            "python": platform.python_version(),
            "jax": jax.__version__,
            "platform": platform.platform(),
            "devices": [str(d) for d in jax.devices()],
        },
        "parameters": int(sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))),
    }
    return model, record, heldout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernel_contracts.kernels.model.train", description=__doc__
    )
    parser.add_argument("--out", default=str(Path(__file__).parents[1] / "checkpoints"))
    parser.add_argument("--name", default="tiny-lm")
    parser.add_argument("--steps", type=int, default=TrainConfig.steps)
    parser.add_argument("--batch", type=int, default=TrainConfig.batch)
    parser.add_argument("--lr", type=float, default=TrainConfig.lr)
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    parser.add_argument("--max-seconds", type=float, default=TrainConfig.max_seconds)
    parser.add_argument("--d-model", type=int, default=ModelConfig.d_model)
    parser.add_argument("--layers", type=int, default=ModelConfig.layers)
    parser.add_argument("--heads", type=int, default=ModelConfig.heads)
    parser.add_argument("--d-ff", type=int, default=ModelConfig.d_ff)
    parser.add_argument("--context", type=int, default=ModelConfig.context)
    args = parser.parse_args(argv)
    model_cfg = ModelConfig(
        d_model=args.d_model,
        layers=args.layers,
        heads=args.heads,
        d_ff=args.d_ff,
        context=args.context,
    )
    cfg = TrainConfig(
        steps=args.steps,
        batch=args.batch,
        lr=args.lr,
        seed=args.seed,
        max_seconds=args.max_seconds,
    )
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    corpus = load_corpus()
    say(f"corpus: {len(corpus.train)} train bytes, {len(corpus.heldout)} held-out bytes")
    model, record, heldout = train(model_cfg, cfg, corpus, log=say)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_checkpoint(model, out / f"{args.name}.npz", {"heldout_windows": heldout.astype(np.uint8)})
    (out / f"{args.name}.json").write_text(json.dumps(record, indent=1) + "\n")
    h = record["heldout"]
    say(
        f"held-out: {h['loss_nats']:.4f} nats/byte, {h['bits_per_byte']:.4f} bits/byte, "
        f"mean entropy {h['mean_entropy_nats']:.3f} nats (uniform {h['uniform_entropy_nats']:.3f})"
        f"; {record['steps_done']} steps in {record['wall_seconds']['train']:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
