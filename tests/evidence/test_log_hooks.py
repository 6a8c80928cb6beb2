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
from tests.support.framework_batches import (
    Tensor,
    skyrl_batch,
    trl_output,
    verl_batch,
    verl_v1_batch,
)


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
    """``attach`` wraps the trainer's ``_prepare_inputs`` and registers a ``transformers``
    ``TrainerCallback``; transformers' own ``CallbackHandler`` closes the log at the end."""
    from transformers import TrainerCallback, TrainerControl, TrainerState
    from transformers.trainer_callback import CallbackHandler

    class Trainer:  # the parts of GRPOTrainer that attach touches
        def __init__(self):
            self.state, self.accelerator = TrainerState(), SimpleNamespace(process_index=1)
            self.handler = CallbackHandler([], None, None, None, None)

        def _prepare_inputs(self, inputs):  # steps_per_generation 1: a generation a step
            return trl_output()

        def add_callback(self, callback):
            self.handler.add_callback(callback)

    trainer = Trainer()
    hook = TrlLogHook(tmp_path / "rank{rank}.jsonl")
    assert hook.attach(trainer) is trainer
    assert isinstance(trainer.handler.callbacks[-1], TrainerCallback)
    for step in (0, 1):
        trainer.state.global_step = step  # optimiser steps done before this one
        out = trainer._prepare_inputs([{"prompt": "x"}])
        assert set(out) >= {"completion_ids", "sampling_per_token_logps"}
    trainer.handler.on_train_end(None, trainer.state, TrainerControl())
    assert hook.sink is None  # closed by the callback
    lines = (tmp_path / "rank1.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1] * 4 + [2] * 4


def test_the_trl_hook_refuses_a_trainer_without_the_input_step(tmp_path):
    with pytest.raises(HookError, match="no method _prepare_inputs"):
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
    after = path.read_bytes()
    assert after.startswith(whole) and after.count(b"\n") == 2 * whole.count(b"\n")
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
    after = path.read_bytes()
    assert after.startswith(whole) and after.count(b"\n") == 2 * whole.count(b"\n")
    table = read_log(path, "verl")
    assert table.sequences == 8 and table.malformed_count == 0


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


# --- verl's V1 trainer (the default from 0.9.0) ---------------------------------------------

DECOUPLED = {"algorithm": {"rollout_correction": {"bypass_mode": False}}}


@pytest.mark.parametrize("rows", [(0, 1, 2, 3), (0, 2)], ids=["nested", "plain-2d"])
def test_a_verl_v1_batch_logs_what_the_legacy_batch_logs(tmp_path, rows):
    """The same sequences, as the V1 trainer keeps them (one unpadded tensor per key in the
    transfer queue, a no-op padding row added) and as the legacy ``DataProto`` holds them, give
    the same log token for token; the padding row is not data."""
    meta, queue = verl_v1_batch(rows)
    v1 = VerlLogHook(tmp_path / "v1.jsonl", config=DECOUPLED, fetch=queue.kv_batch_get)
    assert v1(meta, step=5) == len(rows)
    v1.close()
    legacy = verl_batch()
    with JsonlSink(tmp_path / "legacy.jsonl") as sink:
        sink.write([r for i, r in enumerate(verl_records(legacy)) if i in rows])
    got, want = read_log(tmp_path / "v1.jsonl", None), read_log(tmp_path / "legacy.jsonl", None)
    assert got.format == "verl" and got.sequences == len(rows) and got.malformed_count == 0
    assert _read(got) == _read(want) and len(_read(got)) > 0
    assert got.prompt_names == want.prompt_names
    lines = [json.loads(x) for x in (tmp_path / "v1.jsonl").read_text().splitlines()]
    assert {x["step"] for x in lines} == {5} and "pad0" not in {x["uid"] for x in lines}


def test_a_verl_v1_batch_needs_the_config_and_the_queue(tmp_path):
    meta, _ = verl_v1_batch()
    hook = VerlLogHook(tmp_path / "x.jsonl")
    with pytest.raises(HookError, match=r"V1 batch \(KVBatchMeta\) needs config and fetch"):
        hook(meta)
    hook = VerlLogHook(tmp_path / "x.jsonl", config=DECOUPLED)
    with pytest.raises(HookError, match="needs fetch"):
        hook(meta)
    hook.close()
    assert (tmp_path / "x.jsonl").read_text() == ""


def test_a_verl_v1_batch_of_unequal_lengths_is_refused(tmp_path):
    meta, queue = verl_v1_batch()
    sample = queue.samples[("train", meta.keys[1])]
    sample["old_log_probs"] = sample["old_log_probs"][:-1]
    hook = VerlLogHook(tmp_path / "x.jsonl", config=DECOUPLED, fetch=queue.kv_batch_get)
    with pytest.raises(HookError, match=r"data\['old_log_probs'\]\[1\] \(key 'uid-a_1_0'\): 3 "):
        hook(meta)


def test_verl_bypass_mode_is_refused_when_the_hook_is_made(tmp_path):
    """Bypass mode: the V1 trainer puts a *copy* of the rollout's log-probs under
    ``old_log_probs``, which no check on the batch tells from a real gap of zero; the config
    does, before any step."""
    config = {"algorithm": {"rollout_correction": {"bypass_mode": True}}}
    with pytest.raises(HookError, match=r"bypass_mode=True: .* gap of zero by construction"):
        VerlLogHook(tmp_path / "x.jsonl", config=SimpleNamespace(**config))
    with pytest.raises(HookError, match="bypass_mode=True"):
        VerlLogHook(tmp_path / "x.jsonl", config=config)
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_verl_v1_asynchronous_modes_are_refused_when_the_hook_is_made(tmp_path, mode):
    """The rollout of an asynchronous V1 trainer may lag the weights ``old_log_probs`` are
    computed with: the gap would hold the lag. The synchronous mode is taken."""
    config = DECOUPLED | {"trainer": {"use_v1": True, "v1": {"trainer_mode": mode}}}
    with pytest.raises(HookError, match=f"trainer_mode={mode}: .*trainer_mode=sync"):
        VerlLogHook(tmp_path / "x.jsonl", config=config)
    assert not (tmp_path / "x.jsonl").exists()
    config["trainer"]["v1"]["trainer_mode"] = "sync"
    VerlLogHook(tmp_path / "x.jsonl", config=config).close()


def test_a_verl_v1_record_carries_the_weight_versions_of_its_rollout(tmp_path):
    meta, queue = verl_v1_batch()
    for i, tag in enumerate(meta.tags):
        tag.update(min_global_steps=4, max_global_steps=4 + i)
    hook = VerlLogHook(tmp_path / "v1.jsonl", config=DECOUPLED, fetch=queue.kv_batch_get)
    hook(meta, step=5)
    hook.close()
    lines = [json.loads(x) for x in (tmp_path / "v1.jsonl").read_text().splitlines()]
    assert [(x["min_global_steps"], x["max_global_steps"]) for x in lines] == [
        (4, 4),
        (4, 5),
        (4, 6),
        (4, 7),
    ]


# --- SkyRL: the policy forward pass skipped -------------------------------------------------


def _skyrl_trainer(loss: str, *, correction=None, kl_in_reward=False, anchor="old"):
    """A SkyRL ``RayPPOTrainer`` stand-in: its config, and ``_skip_policy_forward`` written from
    its definition at a9564572 (skyrl/train/trainer.py: the loss reads only the rollout's
    log-probs, which are present, the KL reward is off and no off-policy correction is on)."""
    correction = correction or {}
    algorithm = SimpleNamespace(
        policy_loss_type=loss,
        use_kl_in_reward=kl_in_reward,
        cispo=SimpleNamespace(cispo_anchor=anchor),
        off_policy_correction=SimpleNamespace(
            tis_ratio_type=correction.get("tis_ratio_type"),
            sequence_mask_metric=None,
            outlier_token_is_threshold_low=None,
            outlier_token_is_threshold_high=None,
            token_mask_is_threshold_low=None,
            token_mask_is_threshold_high=None,
        ),
    )

    class RayPPOTrainer:
        cfg = SimpleNamespace(trainer=SimpleNamespace(algorithm=algorithm))

        def _skip_policy_forward(self, training_input):
            a = self.cfg.trainer.algorithm
            c = a.off_policy_correction
            correcting = (
                c.tis_ratio_type is not None
                or c.sequence_mask_metric is not None
                or c.outlier_token_is_threshold_low is not None
                or c.outlier_token_is_threshold_high is not None
                or (
                    c.token_mask_is_threshold_low is not None
                    and c.token_mask_is_threshold_high is not None
                )
            )
            without_old = (
                a.cispo.cispo_anchor == "rollout"
                if a.policy_loss_type == "cispo"
                else a.policy_loss_type in ("rollout_is", "dppo")
            )
            return (
                without_old
                and training_input.get("rollout_logprobs", None) is not None
                and not a.use_kl_in_reward
                and not correcting
            )

    return RayPPOTrainer()


@pytest.mark.parametrize(
    "loss, anchor", [("dppo", "old"), ("rollout_is", "old"), ("cispo", "rollout")]
)
def test_skyrl_losses_that_skip_the_policy_forward_are_refused_at_set_up(tmp_path, loss, anchor):
    """With these losses and no correction SkyRL never computes ``action_log_probs``: the hook
    says so when it is made, naming the setting and the override that brings them back."""
    trainer = _skyrl_trainer(loss, anchor=anchor)
    with pytest.raises(HookError) as err:
        SkyrlLogHook(tmp_path / "x.jsonl", trainer=trainer)
    message = str(err.value)
    assert f"policy_loss_type={loss!r}" in message and "_skip_policy_forward" in message
    assert not (tmp_path / "x.jsonl").exists()


def test_skyrl_hook_takes_a_trainer_that_runs_the_policy_forward(tmp_path):
    """A correction on, the KL reward on, a loss that reads the old log-probs, or the trainer
    subclass overriding ``_skip_policy_forward``: the pass runs and the hook logs."""
    runs = [
        _skyrl_trainer("dppo", correction={"tis_ratio_type": "token"}),
        _skyrl_trainer("rollout_is", kl_in_reward=True),
        _skyrl_trainer("regular"),
        _skyrl_trainer("cispo", anchor="old"),
    ]
    forced = _skyrl_trainer("dppo")
    forced._skip_policy_forward = lambda training_input: False
    for i, trainer in enumerate([*runs, forced]):
        hook = SkyrlLogHook(tmp_path / f"log{i}.jsonl", trainer=trainer)
        assert hook(skyrl_batch(), step=1) == 4
        hook.close()


# --- TRL: one generation batch, several optimiser steps ----------------------------------------


class _GRPOTrainer:
    """The loop of TRL's ``GRPOTrainer`` (trl/trainer/grpo_trainer.py at f2cd5771) that decides
    which rows each optimiser step trains on: ``_prepare_inputs`` generates every
    ``steps_per_generation × num_iterations`` micro-steps, shuffles the rows, splits them into
    ``steps_per_generation`` slices and returns slice ``_step % steps_per_generation``;
    ``global_step`` grows by one every ``gradient_accumulation_steps`` micro-steps."""

    def __init__(self, steps_per_generation, gradient_accumulation_steps, num_iterations):
        self.args = SimpleNamespace(
            steps_per_generation=steps_per_generation,
            gradient_accumulation_steps=gradient_accumulation_steps,
        )
        self.num_iterations = num_iterations
        self.state = SimpleNamespace(global_step=0)
        self.accelerator = SimpleNamespace(process_index=0)
        self.model = SimpleNamespace(training=True)
        self._step, self._buffered_inputs, self.callbacks, self.generated = 0, None, [], []

    def add_callback(self, callback):
        self.callbacks.append(callback)

    def _generate_and_score_completions(self, inputs):
        out = {k: Tensor(t.array + 0, t.dtype) for k, t in trl_output().items()}
        out["completion_ids"].array[:, 0] = 100 + len(self.generated) * 4 + np.arange(4)
        self.generated.append(out)
        return out

    def _prepare_inputs(self, generation_batch):
        spg = self.args.steps_per_generation
        if self._step % (spg * self.num_iterations) == 0 or self._buffered_inputs is None:
            out = self._generate_and_score_completions(generation_batch)
            order = np.array([3, 0, 2, 1])  # shuffle_sequence_dict: one permutation of the rows
            rows = len(order) // spg
            self._buffered_inputs = [
                {
                    k: Tensor(t.array[order[i * rows : (i + 1) * rows]], t.dtype)
                    if t.array.ndim
                    else t
                    for k, t in out.items()
                }
                for i in range(spg)
            ]
        return self._buffered_inputs[self._step % spg]

    def train(self, micro_steps):
        for _ in range(micro_steps):
            self._prepare_inputs([{"prompt": "p"}])
            self._step += 1
            if self._step % self.args.gradient_accumulation_steps == 0:
                self.state.global_step += 1


@pytest.mark.parametrize(
    "spg, accumulation, iterations", [(4, 2, 1), (4, 2, 2), (2, 1, 1), (1, 2, 1), (4, 4, 1)]
)
def test_trl_records_each_completion_once_at_the_step_that_trains_it(
    tmp_path, spg, accumulation, iterations
):
    """``steps_per_generation > 1``: one generation batch serves several optimiser steps. Each
    completion is logged once, with the (1-based) optimiser step whose update first uses it."""
    trainer = _GRPOTrainer(spg, accumulation, iterations)
    hook = TrlLogHook(tmp_path / "log.jsonl")
    hook.attach(trainer)
    micro = 16
    trainer.train(micro)
    hook.close()
    lines = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    logged = {x["completion_ids"][0]: x["step"] for x in lines}
    assert len(lines) == len(logged) == 4 * len(trainer.generated)  # each once, none twice
    want = {}
    rows = 4 // spg
    for step in range(micro):
        gen, used = divmod(step, spg * iterations)
        if used < spg:  # the first pass over the generation's slices
            for r in [3, 0, 2, 1][used * rows : (used + 1) * rows]:
                want[100 + gen * 4 + r] = step // accumulation + 1
    assert logged == want
    if spg > accumulation:  # a generation's rows are trained in more than one step
        assert len({logged[100 + r] for r in range(4)}) > 1


# --- a batch cut short ------------------------------------------------------------------------


def _cut_batch(tmp_path, records, whole_lines: int) -> bytes:
    """The bytes a hook killed inside its write leaves: the batch's first ``whole_lines`` lines
    and half of the next."""
    with JsonlSink(tmp_path / "one-batch.jsonl") as sink:
        sink.write(records)
    lines = (tmp_path / "one-batch.jsonl").read_bytes().splitlines(keepends=True)
    return b"".join(lines[:whole_lines]) + lines[whole_lines][: len(lines[whole_lines]) // 2]


def test_a_batch_cut_short_at_the_end_of_the_file_is_never_data(tmp_path):
    """Two whole batches, then a third whose writer was killed after two of its four lines:
    the third batch's whole lines are left out with the torn one and counted, not read."""
    path = tmp_path / "log.jsonl"
    records = verl_records(verl_batch())
    with JsonlSink(path) as sink:
        sink.write(records)
        sink.write(records)
    with open(path, "ab") as f:
        f.write(_cut_batch(tmp_path, records, 2))
    table = read_log(path, "verl")
    assert table.sequences == 8 and table.partial_batches == 1
    assert table.malformed_count == 3  # two whole lines of the cut batch, and the torn one
    reasons = sorted((p.line, p.reason) for p in table.malformed)
    assert [line for line, _ in reasons] == [9, 10, 11]
    assert reasons[0][1].startswith("part of a hook batch cut short (2 of its 4 records read")
    assert reasons[2][1].startswith("truncated record at end of file")
    assert table.malformed_tokens == sum(len(r["responses"]) for r in records[:2])


def test_a_batch_cut_short_inside_the_file_is_never_data(tmp_path):
    """The next hook cuts the torn line off and appends: the cut batch's whole lines, now
    followed by another batch, are still left out."""
    path = tmp_path / "log.jsonl"
    records = verl_records(verl_batch())
    with JsonlSink(path) as sink:
        sink.write(records)
    with open(path, "ab") as f:
        f.write(_cut_batch(tmp_path, records, 3))
    with JsonlSink(path) as sink:
        assert sink.repaired_bytes > 0
        sink.write(records)
    table = read_log(path, "verl")
    assert table.sequences == 8 and table.partial_batches == 1 and table.malformed_count == 3
    assert [p.line for p in table.malformed] == [5, 6, 7]
    assert "another batch follows" in table.malformed[0].reason


def test_a_log_without_batch_frames_reads_as_before(tmp_path):
    """A log written before the frame existed, or by anything but a hook: every record counts."""
    path = tmp_path / "old.jsonl"
    records = verl_records(verl_batch())
    path.write_text("".join(json.dumps(r) + "\n" for r in records * 2))
    table = read_log(path, "verl")
    assert table.sequences == 8 and table.malformed_count == 0 and table.partial_batches == 0


def test_a_parquet_copy_of_a_hook_log_keeps_its_frames(tmp_path):
    """The frame is a struct column in Parquet: a batch cut short there is left out too."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = verl_records(verl_batch())
    with JsonlSink(tmp_path / "log.jsonl") as sink:
        sink.write(records)
        sink.write(records)
    rows = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows[:6]), tmp_path / "log.parquet")
    table = read_log(tmp_path / "log.parquet", "verl")
    assert table.sequences == 4 and table.partial_batches == 1 and table.malformed_count == 2


def test_a_batch_missing_a_middle_record_or_with_a_bad_frame_is_never_data(tmp_path):
    """A batch whose second record is gone (its indices skip), and a batch with a record whose
    frame is not one: left out and counted, even as the first records of the file; the whole
    batch after them is read."""
    records = verl_records(verl_batch())
    with JsonlSink(tmp_path / "log.jsonl") as sink:
        for _ in range(3):
            sink.write(records)
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    bad = json.loads(lines[5]) | {"hook_batch": {"id": 7, "index": 1, "size": 4}}
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join([lines[0], *lines[2:5], json.dumps(bad), *lines[6:]]) + "\n")
    table = read_log(path, None)
    assert table.sequences == 4 and table.partial_batches == 3 and table.malformed_count == 7
    assert {p.line for p in table.malformed} == set(range(1, 8))
    reasons = {p.line: p.reason for p in table.malformed}
    assert "a record of it is missing" in reasons[1]
    assert reasons[5] == "'hook_batch' must hold a string id and integer index and size"
    assert table.malformed_tokens == sum(
        len(r["responses"]) for r in [records[0], *records[2:], *records]
    )
