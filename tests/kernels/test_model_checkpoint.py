"""The shipped checkpoint: loads from package data, reproduces its logged held-out loss, is peaked;
and the training command's pieces (corpus split, a short run, save/load round trip)."""

from __future__ import annotations

import math
from importlib import resources

import jax.numpy as jnp
import numpy as np
import pytest

from kernel_contracts.kernels.model.tinylm import (
    CHECKPOINTS,
    ModelConfig,
    TinyLM,
    load_checkpoint,
    load_pretrained,
    pretrained_extra,
    pretrained_log,
    save_checkpoint,
)
from kernel_contracts.kernels.model.train import TrainConfig, evaluate, load_corpus, train


@pytest.fixture(scope="module")
def shipped():
    return load_pretrained("tiny-lm"), pretrained_extra("tiny-lm"), pretrained_log("tiny-lm")


def test_checkpoint_is_package_data_and_small():
    for weights, log in CHECKPOINTS.values():
        folder = resources.files("kernel_contracts.kernels").joinpath("checkpoints")
        assert folder.joinpath(weights).is_file()
        assert folder.joinpath(log).is_file()
        assert len(folder.joinpath(weights).read_bytes()) <= 10 * 2**20


def test_heldout_loss_reproduces_the_log(shipped):
    model, extra, log = shipped
    windows = extra["heldout_windows"].astype(np.int32)
    assert windows.shape == (log["heldout"]["windows"], log["heldout"]["window_bytes"])
    got = evaluate(model, windows)
    assert got["loss"] == pytest.approx(log["heldout"]["loss_nats"], rel=1e-5)
    assert got["mean_entropy"] == pytest.approx(log["heldout"]["mean_entropy_nats"], rel=1e-4)
    assert got["bits_per_byte"] == pytest.approx(got["loss"] / math.log(2))


def test_trained_model_is_peaked(shipped):
    _, extra, log = shipped
    uniform = math.log(256)
    assert log["heldout"]["uniform_entropy_nats"] == pytest.approx(uniform)
    # far from uniform: under half the entropy of the uniform distribution, under 3.5 bits/byte
    assert log["heldout"]["mean_entropy_nats"] < 0.5 * uniform
    assert log["heldout"]["bits_per_byte"] < 3.5
    # and the random-weight model it started from is near-uniform
    fresh = TinyLM(ModelConfig(), seed=0)
    windows = extra["heldout_windows"][:64].astype(np.int32)
    assert evaluate(fresh, windows)["mean_entropy"] > 0.95 * uniform


def test_training_log_is_complete(shipped):
    _, _, log = shipped
    curve = np.array(log["loss_curve"])
    assert curve.shape == (log["steps_done"], 2)
    assert curve[-20:, 1].mean() < curve[:20, 1].mean() - 1.0  # it learned
    assert log["wall_seconds"]["total"] <= 600
    assert len(log["data"]["fingerprint_sha256"]) == 64
    assert log["data"]["heldout_files"] > 0 and log["data"]["train_files"] > 0
    assert log["model"] == {
        "vocab": 256, "d_model": 128, "layers": 4, "heads": 4, "d_ff": 512, "context": 128,
    }  # fmt: skip


def test_unknown_pretrained_name_is_a_clear_error():
    with pytest.raises(KeyError, match="unknown pretrained model 'gpt-9'"):
        load_pretrained("gpt-9")


def _tiny_stdlib(tmp_path):
    for i in range(12):
        sub = tmp_path / ("pkg" if i % 3 else "")
        sub.mkdir(exist_ok=True)
        (sub / f"mod{i}.py").write_text(
            f'"""Module {i}."""\n\ndef f{i}(x):\n    return x + {i}\n' * 20
        )
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "skipped.py").write_text("x = 1\n")
    return tmp_path


def test_corpus_split_is_deterministic_and_by_file(tmp_path):
    root = _tiny_stdlib(tmp_path)
    a, b = load_corpus(str(root)), load_corpus(str(root))
    assert a.fingerprint == b.fingerprint
    assert np.array_equal(a.train, b.train) and np.array_equal(a.heldout, b.heldout)
    assert a.train_files + a.heldout_files == 12  # site-packages is skipped
    assert a.heldout_files >= 1  # with 12 files and a 1-in-10 hash split, seeded by the names
    assert b"x = 1" not in a.train.tobytes() + a.heldout.tobytes()
    (root / "mod0.py").write_text("changed\n")
    assert load_corpus(str(root)).fingerprint != a.fingerprint


@pytest.mark.standard_promotion  # optax's Adam: a Python float to an int32 power
def test_short_training_run_and_checkpoint_round_trip(tmp_path):
    corpus = load_corpus(str(_tiny_stdlib(tmp_path)))
    cfg = ModelConfig(d_model=32, layers=1, heads=2, d_ff=64, context=16)
    tcfg = TrainConfig(steps=6, batch=4, warmup=2, eval_windows=8, eval_every=3)
    model, record, heldout = train(cfg, tcfg, corpus)
    losses = [loss for _, loss in record["loss_curve"]]
    assert len(losses) == 6 and all(np.isfinite(losses))
    assert [e["step"] for e in record["probe_evals"]] == [3, 6]
    path = tmp_path / "m.npz"
    save_checkpoint(model, path, {"heldout_windows": heldout})
    loaded, extra = load_checkpoint(path)
    assert np.array_equal(extra["heldout_windows"], heldout)
    assert evaluate(loaded, heldout)["loss"] == pytest.approx(record["heldout"]["loss_nats"])
    tokens = jnp.asarray(heldout[:2, :-1])
    assert np.array_equal(np.asarray(loaded(tokens)), np.asarray(model(tokens)))


def test_mismatched_checkpoint_is_rejected(tmp_path):
    model = TinyLM(ModelConfig(d_model=32, layers=1, heads=2, d_ff=64, context=16),
                   seed=0)  # fmt: skip
    path = tmp_path / "m.npz"
    save_checkpoint(model, path)
    with np.load(path) as data:
        arrays = dict(data)
    arrays["params/head"] = np.zeros((3, 3), np.float32)
    del arrays["params/embed"]
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=r"missing \['embed'\].*wrong shape \['head'\]"):
        load_checkpoint(path)
