"""evidence.hooks: verl, TRL and SkyRL batches written as logs that read back token for token.

The batches are the recorded framework structures of tests/data/frameworks (README.md there),
each array wrapped in a stand-in with torch's ``detach().cpu().numpy()`` surface
(``framework_batches``), so the hooks take the path they take on real tensors.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

from kernel_contracts.evidence.hooks import (
    HookError,
    JsonlSink,
    SkyrlLogHook,
    TrlLogHook,
    VerlLogHook,
    skyrl_records,
    to_numpy,
    trl_records,
    verl_records,
)
from kernel_contracts.evidence.logs import framework_metrics, read_log
from tests.support.framework_batches import Tensor, skyrl_batch, trl_output, verl_batch


def _expected(ids, train, rollout, mask, offset, first):
    """(token, position, train, rollout) of every masked-in column, a row's response starting at
    column ``first[row]`` and position ``offset[row]``."""
    out = []
    for row in range(ids.shape[0]):
        for col in range(first[row], ids.shape[1]):
            if mask[row, col]:
                pos = offset[row] + col - first[row]
                out.append((ids[row, col], pos, train[row, col], rollout[row, col]))
    return out


def _read(table):
    c = table.columns
    return list(
        zip(c["token"], c["position"], c["train_logprob"], c["rollout_logprob"], strict=True)
    )


def test_a_verl_batch_reads_back_token_for_token(tmp_path):
    data = verl_batch()
    hook = VerlLogHook(tmp_path / "verl-{rank}.jsonl", rank=2)
    assert hook(data) == 4
    hook.close()
    table = read_log(tmp_path / "verl-2.jsonl", None, vocab_size=256)
    b = {k: t.array for k, t in data.batch.items()}
    prompt_len = b["attention_mask"][:, : b["prompts"].shape[1]].sum(axis=1)
    want = _expected(
        b["responses"],
        b["old_log_probs"],
        b["rollout_log_probs"],
        b["response_mask"],
        prompt_len,
        [0] * 4,
    )
    assert table.format == "verl" and table.sequences == 4 and table.malformed_count == 0
    assert _read(table) == want  # float32 values widen exactly
    assert table.prompt_names == ("uid-a", "uid-b")
    first = json.loads((tmp_path / "verl-2.jsonl").read_text().splitlines()[0])
    assert first["step"] == 3  # meta_info["global_steps"]


def test_the_log_of_a_verl_batch_gives_verls_own_debug_metric(tmp_path):
    """verl's ``training/rollout_probs_diff_max``, written from its definition
    (verl/utils/debug/metrics.py: |e^old − e^rollout| over the response mask), equals the one
    computed on the log."""
    data = verl_batch()
    with JsonlSink(tmp_path / "log.jsonl") as sink:
        sink.write(verl_records(data))
    b = {k: t.array.astype(np.float64) for k, t in data.batch.items()}
    keep = b["response_mask"] != 0
    diff = np.abs(np.exp(b["old_log_probs"]) - np.exp(b["rollout_log_probs"]))[keep]
    c = read_log(tmp_path / "log.jsonl", "verl").columns
    got = framework_metrics(c["train_logprob"], c["rollout_logprob"], c["sequence"])
    assert got["training/rollout_probs_diff_max"] == pytest.approx(diff.max(), rel=1e-12)
    assert got["training/rollout_probs_diff_mean"] == pytest.approx(diff.mean(), rel=1e-12)


def test_a_trl_batch_reads_back_with_the_tool_tokens_masked(tmp_path):
    out = trl_output()
    hook = TrlLogHook(tmp_path / "trl.jsonl")
    assert hook.write(out, step=7) == 4
    hook.close()
    table = read_log(tmp_path / "trl.jsonl", None, vocab_size=256)
    o = {k: t.array for k, t in out.items()}
    want = _expected(
        o["completion_ids"],
        o["old_per_token_logps"],
        o["sampling_per_token_logps"],
        o["completion_mask"] * o["tool_mask"],
        o["prompt_mask"].sum(axis=1),
        [0] * 4,
    )
    assert table.format == "trl" and _read(table) == want
    # the prompt id is a digest of the prompt's tokens: the two samples of a prompt share it
    assert len(table.prompt_names) == 2
    assert table.padding_tokens == 2  # the tool's two tokens


def test_the_trl_hook_attaches_through_a_real_trainer_callback(tmp_path):
    """``attach`` wraps the trainer's generation and registers a ``transformers``
    ``TrainerCallback``; transformers' own ``CallbackHandler`` closes the log at the end."""
    from transformers import TrainerCallback, TrainerControl, TrainerState
    from transformers.trainer_callback import CallbackHandler

    class Trainer:  # the parts of GRPOTrainer that attach touches
        def __init__(self):
            self.state, self.accelerator = TrainerState(), SimpleNamespace(process_index=1)
            self.handler = CallbackHandler([], None, None, None, None)

        def _generate_and_score_completions(self, inputs):
            return trl_output()

        def add_callback(self, callback):
            self.handler.add_callback(callback)

    trainer = Trainer()
    hook = TrlLogHook(tmp_path / "rank{rank}.jsonl")
    assert hook.attach(trainer) is trainer
    assert isinstance(trainer.handler.callbacks[-1], TrainerCallback)
    for step in (1, 2):
        trainer.state.global_step = step
        out = trainer._generate_and_score_completions([{"prompt": "x"}])
        assert set(out) >= {"completion_ids", "sampling_per_token_logps"}
    trainer.handler.on_train_end(None, trainer.state, TrainerControl())
    assert hook.sink is None  # closed by the callback
    lines = (tmp_path / "rank1.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1] * 4 + [2] * 4


def test_the_trl_hook_refuses_a_trainer_without_the_generation_step(tmp_path):
    with pytest.raises(HookError, match="no method _generate_and_score_completions"):
        TrlLogHook(tmp_path / "x.jsonl").attach(SimpleNamespace())
    assert not (tmp_path / "x.jsonl").exists()


def test_a_skyrl_batch_reads_back_with_its_right_aligned_responses(tmp_path):
    batch = skyrl_batch()
    hook = SkyrlLogHook(tmp_path / "skyrl.jsonl")
    assert hook(batch, step=1) == 4
    hook.close()
    table = read_log(tmp_path / "skyrl.jsonl", None, vocab_size=256)
    b = {k: t.array for k, t in batch.items() if t is not None}
    cols = b["response_mask"].shape[1]
    length = b["response_mask"].sum(axis=1)
    want = _expected(
        b["sequences"][:, -cols:],
        b["action_log_probs"],
        b["rollout_logprobs"],
        b["loss_mask"],
        b["attention_mask"].sum(axis=1) - length,
        cols - length,
    )
    assert table.format == "generic" and _read(table) == want
    assert table.prompt_names == ("uid-a", "uid-b")


def test_missing_keys_are_all_named():
    data = verl_batch()
    for key in ("old_log_probs", "rollout_log_probs"):
        del data.batch[key]
    with pytest.raises(HookError) as err:
        verl_records(data)
    assert str(err.value).startswith(
        "batch['old_log_probs']: missing; batch['rollout_log_probs']: missing (the batch has: "
    )
    out = trl_output()
    del out["sampling_per_token_logps"]
    with pytest.raises(HookError, match=r"output\['sampling_per_token_logps'\]: missing"):
        trl_records(out)
    batch = skyrl_batch()
    batch["action_log_probs"] = None
    with pytest.raises(HookError, match=r"batch\['action_log_probs'\]: None"):
        skyrl_records(batch)


def test_verl_bypass_mode_is_refused():
    """verl's bypass mode makes ``old_log_probs`` the rollout tensor itself: nothing to log."""
    data = verl_batch()
    data.batch["old_log_probs"] = data.batch["rollout_log_probs"]
    with pytest.raises(HookError, match="bypass mode"):
        verl_records(data)


def test_misshapen_tensors_are_all_named():
    data = verl_batch()
    for key in ("old_log_probs", "response_mask"):
        t = data.batch[key]
        data.batch[key] = Tensor(t.array[:, :-1], t.dtype)
    with pytest.raises(HookError) as err:
        verl_records(data)
    assert str(err.value) == (
        "batch['old_log_probs']: shape (4, 5), expected (4, 6); "
        "batch['response_mask']: shape (4, 5), expected (4, 6)"
    )


def test_bfloat16_tensors_are_widened_before_numpy():
    t = Tensor(np.array([-0.5, -1.25], dtype=ml_dtypes.bfloat16), "torch.bfloat16")
    out = to_numpy(t)
    assert out.dtype == np.float32 and out.tolist() == [-0.5, -1.25]


def test_a_torn_last_line_is_cut_before_the_next_batch(tmp_path):
    """A writer killed inside its write leaves a torn line: the reader counts it, and the next
    sink cuts it off so that no later line is glued to it."""
    path = tmp_path / "log.jsonl"
    records = verl_records(verl_batch())
    with JsonlSink(path) as sink:
        sink.write(records)
    whole = path.read_bytes()
    torn = json.dumps(records[0]).encode()[:40]
    path.write_bytes(whole + torn)
    assert read_log(path, "verl").malformed[0].reason.startswith("truncated record at end")
    with JsonlSink(path) as sink:
        assert sink.repaired_bytes == len(torn)
        sink.write(records)
    assert path.read_bytes() == whole * 2
    table = read_log(path, "verl")
    assert table.sequences == 8 and table.malformed_count == 0


def test_each_batch_is_one_write_call(tmp_path, monkeypatch):
    writes = []
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(len(data)) or real(fd, data))
    with JsonlSink(tmp_path / "log.jsonl") as sink:
        sink.write(verl_records(verl_batch()))
        sink.write(trl_records(trl_output()))
    assert len(writes) == 2 and sum(writes) == (tmp_path / "log.jsonl").stat().st_size


def test_a_failed_write_takes_its_batch_back(tmp_path, monkeypatch):
    """A full disk part way through a batch: the part written is cut off before the error
    reaches the caller, and the next batch follows the last whole one."""
    import errno

    path = tmp_path / "log.jsonl"
    records = verl_records(verl_batch())
    with JsonlSink(path) as sink:
        sink.write(records)
        whole = path.read_bytes()
        real = os.write
        calls = []

        def full_disk(fd, data):
            calls.append(len(data))
            if len(calls) == 1:
                return real(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "write", full_disk)
        with pytest.raises(OSError, match="No space left"):
            sink.write(records)
        assert len(calls) == 2 and path.read_bytes() == whole
        monkeypatch.setattr(os, "write", real)
        sink.write(records)
    assert path.read_bytes() == whole * 2
    assert read_log(path, "verl").malformed_count == 0


def test_a_failed_write_leaves_another_appenders_lines(tmp_path, monkeypatch):
    """When another appender wrote after the failed part, nothing is cut: its bytes stay."""
    import errno

    path = tmp_path / "log.jsonl"
    records = verl_records(verl_batch())
    other = b'{"other": 1}\n'
    with JsonlSink(path) as sink:
        real = os.write

        def interleaved(fd, data):
            if fd == sink._fd and not interleaved.done:
                interleaved.done = True
                n = real(fd, bytes(data[:10]))
                with open(path, "ab") as f:  # the other appender
                    f.write(other)
                return n
            raise OSError(errno.ENOSPC, "No space left on device")

        interleaved.done = False
        monkeypatch.setattr(os, "write", interleaved)
        with pytest.raises(OSError):
            sink.write(records)
    assert path.read_bytes() == json.dumps(records[0], separators=(",", ":")).encode()[:10] + other
