"""docs/framework-logs.md runs as shown: each framework's code block, executed as written
against a stand-in of the framework class it subclasses (fed the recorded batches of
tests/data/frameworks), writes a log that the page's commands then decide a contract on."""

from __future__ import annotations

import json
import pathlib
import re
import shlex
import sys
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernel_contracts.evidence.logs import read_log
from tests.support.framework_batches import skyrl_batch, trl_output, verl_batch, verl_v1_batch

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "framework-logs.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```$", PAGE, re.S | re.M)
PYTHON = [body for lang, body in BLOCKS if lang == "python"]
SHELL = [body.strip() for lang, body in BLOCKS if lang == "bash"]
YAML = [body for lang, body in BLOCKS if lang == "yaml"]
STEPS = (1, 2)


def _block(module: str) -> str:
    (body,) = [b for b in PYTHON if f"from {module} import" in b]
    return body


def _install(monkeypatch, name: str, **attrs) -> None:
    """Put a module ``name`` (and its parents) with ``attrs`` in ``sys.modules``."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        monkeypatch.setitem(sys.modules, ".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    for key, value in attrs.items():
        setattr(sys.modules[name], key, value)


DECOUPLED = {"algorithm": {"rollout_correction": {"bypass_mode": False}}}


def _run_verl(monkeypatch):
    class RayPPOTrainer:  # fit() calls _update_actor once a step with the step's batch
        config = DECOUPLED

        def _update_actor(self, batch):
            return "updated"

    _install(monkeypatch, "verl.trainer.ppo.ray_trainer", RayPPOTrainer=RayPPOTrainer)
    space: dict = {}
    exec(_block("verl.trainer.ppo.ray_trainer"), space)
    trainer = space["LoggingTrainer"]()
    for step in STEPS:
        trainer.global_steps = step
        assert trainer._update_actor(verl_batch()) == "updated"
    trainer.logprob_log.close()


def _run_verl_v1(monkeypatch):
    registry, queues = {}, []

    class PPOTrainerSync:  # _step_once calls _update_actor(batch, metrics) once a step
        config = DECOUPLED

        def _update_actor(self, batch, metrics):
            return batch

    def register_trainer(name):
        return lambda cls: registry.setdefault(name, cls)

    def kv_batch_get(**kwargs):  # the transfer queue holding the current step's sequences
        return queues[-1].kv_batch_get(**kwargs)

    _install(monkeypatch, "transfer_queue", kv_batch_get=kv_batch_get)
    _install(
        monkeypatch,
        "verl.trainer.ppo.v1",
        PPOTrainerSync=PPOTrainerSync,
        register_trainer=register_trainer,
    )
    space: dict = {}
    exec(_block("verl.trainer.ppo.v1"), space)
    trainer = registry["sync_logged"]()  # trainer.v1.trainer_mode=sync_logged
    for step in STEPS:
        meta, queue = verl_v1_batch()
        queues.append(queue)
        trainer.global_steps = step
        assert trainer._update_actor(meta, {}) is meta
    trainer.logprob_log.close()


def _run_trl(monkeypatch):
    from transformers import TrainerControl, TrainerState
    from transformers.trainer_callback import CallbackHandler

    class GRPOConfig:
        def __init__(self, **kwargs):
            self.__dict__.update(kwargs)

    class GRPOTrainer:  # train(): a generation per step (steps_per_generation 1), then the end
        def __init__(self, *, model, reward_funcs, args, train_dataset):
            self.args, self.state = args, TrainerState()
            self.accelerator = types.SimpleNamespace(process_index=0)
            self.callback_handler = CallbackHandler([], model, None, None, None)

        def add_callback(self, callback):
            self.callback_handler.add_callback(callback)

        def _generate_and_score_completions(self, inputs):
            return trl_output()

        def _prepare_inputs(self, inputs):
            return self._generate_and_score_completions(inputs)

        def train(self):
            for step in STEPS:
                self.state.global_step = step - 1  # the optimiser steps done before
                self._prepare_inputs([{"prompt": "p"}])
            self.callback_handler.on_train_end(self.args, self.state, TrainerControl())

    _install(monkeypatch, "trl", GRPOConfig=GRPOConfig, GRPOTrainer=GRPOTrainer)
    space = {"model": None, "reward_len": len, "dataset": []}
    exec(_block("trl"), space)


def _run_skyrl(monkeypatch):
    class RayPPOTrainer:
        cfg = types.SimpleNamespace(
            trainer=types.SimpleNamespace(algorithm=types.SimpleNamespace(policy_loss_type="dppo"))
        )

        def _skip_policy_forward(self, training_input):  # dppo, no correction: skipped
            return training_input.get("rollout_logprobs") is not None

        def fwd_logprobs_values_reward(self, training_input):
            assert not self._skip_policy_forward(training_input)
            return training_input  # SkyRL adds action_log_probs here; the recording has them

    _install(monkeypatch, "skyrl.train.trainer", RayPPOTrainer=RayPPOTrainer)
    space: dict = {}
    exec(_block("skyrl.train.trainer"), space)
    trainer = space["LoggingTrainer"]()
    for step in STEPS:
        trainer.global_step = step
        trainer.fwd_logprobs_values_reward(skyrl_batch())
    trainer.logprob_log.close()


@pytest.mark.parametrize(
    "run, log, fmt",
    [
        (_run_verl, "rollouts.jsonl", "verl"),
        (_run_verl_v1, "rollouts.jsonl", "verl"),
        (_run_trl, "rollouts-0.jsonl", "trl"),
        (_run_skyrl, "rollouts.jsonl", "generic"),
    ],
    ids=["verl", "verl-v1", "trl", "skyrl"],
)
def test_each_framework_block_writes_a_log(tmp_path, monkeypatch, run, log, fmt):
    monkeypatch.chdir(tmp_path)
    run(monkeypatch)
    table = read_log(log, None, vocab_size=256)
    assert table.format == fmt and table.sequences == 4 * len(STEPS)
    assert table.malformed_count == 0
    steps = [json.loads(line)["step"] for line in pathlib.Path(log).read_text().splitlines()]
    assert steps == [s for s in STEPS for _ in range(4)]


def _contract(extra: str = "") -> None:
    text = (ROOT / "contracts/examples/rollout-log.yaml").read_text()
    old = "logprobs: {path: rollout-sample.jsonl, format: generic}"
    assert old in text
    pathlib.Path("contract.yaml").write_text(text.replace(old, f"logprobs: {{{extra}}}"))


def _clauses(cli, argv):
    code, out, err = cli(*argv, "--json", "report.json")
    assert code != 2 and "Traceback" not in out + err, out + err
    report = json.loads(pathlib.Path("report.json").read_text())
    return code, [
        (c["id"], c["slice"], c["status"], c["samples"], c["value"]) for c in report["clauses"]
    ]


def test_the_pages_commands_decide_the_contract_on_the_hook_logs(tmp_path, monkeypatch, cli):
    """``--evidence rollouts.jsonl`` on the verl hook's log, ``--evidence rollouts.parquet`` on
    its Parquet copy, and the page's ``file_format`` key: the same verdicts on every token."""
    monkeypatch.chdir(tmp_path)
    _run_verl(monkeypatch)
    rows = [json.loads(line) for line in pathlib.Path("rollouts.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), "rollouts.parquet")
    pq.write_table(pa.Table.from_pylist(rows), "rollouts.data")
    tokens = read_log("rollouts.jsonl", "verl").tokens
    (keyed,) = YAML
    spelled = re.search(r"logprobs: \{(.*)\}", keyed).group(1)
    _contract(spelled)
    assert "file_format: parquet" in spelled
    results = {}
    for command in SHELL:
        argv = shlex.split(command)
        assert argv[:3] == ["python", "-m", "verify"], command
        results[argv[-1]] = _clauses(cli, argv[3:])
    results["key"] = _clauses(cli, ["contract.yaml"])
    assert set(results) == {"rollouts.jsonl", "rollouts.parquet", "key"}
    assert results["rollouts.parquet"] == results["rollouts.jsonl"] == results["key"]
    # 30 tokens: the cap is met on every one, too few for the statistical clauses (exit 3)
    code, clauses = results["key"]
    assert code == 3 and ("N_is_cap", "all", "inconclusive", tokens) in [c[:4] for c in clauses]
