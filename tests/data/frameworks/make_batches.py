"""Write the framework batches the log-hook tests read (tests/data/frameworks/*.npz).

    python tests/data/frameworks/make_batches.py

Each file holds one rollout batch laid out as the framework's own code lays it out (README.md
beside this script names the source files and versions): every tensor under
``<container>/<key>`` with its torch dtype under ``dtype/<container>/<key>``, string columns as
numpy strings, and the metadata as JSON under ``meta``. The numbers are synthetic (a seeded
generator: log-probs in [-6, 0], an inference engine that differs from the trainer by a few
1e-3), the structure is the framework's: the padding sides, the masks with their multi-turn
holes, the prompt groups, the padding values.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
PAD = 0  # the tokenizer's pad token id
VOCAB = 256
# (prompt length, response length, masked columns inside the response: a tool's tokens)
ROWS = ((3, 6, ()), (3, 4, ()), (5, 6, (2, 3)), (5, 1, ()))
GROUPS = ("uid-a", "uid-a", "uid-b", "uid-b")  # two samples of each of two prompts


def _logprobs(rng, n):
    train = -rng.gamma(0.6, 1.0, n).clip(0, 6)
    rollout = np.minimum(train + rng.normal(0, 3e-3, n), 0.0)
    return train.astype(np.float32), rollout.astype(np.float32)


def _rows(seed):
    rng = np.random.default_rng(seed)
    out, prompts = [], {}
    for group, (p, r, holes) in zip(GROUPS, ROWS, strict=True):
        prompt = prompts.setdefault(group, rng.integers(1, VOCAB, p))  # a group shares it
        response = rng.integers(1, VOCAB, r)
        train, rollout = _logprobs(rng, r)
        mask = np.ones(r, np.int64)
        mask[list(holes)] = 0
        rollout[list(holes)] = 0.0  # engines report nothing for a tool's tokens: padded with 0
        out.append((prompt, response, train, rollout, mask))
    return out


def _save(name, arrays, dtypes, meta):
    np.savez(
        HERE / name,
        **arrays,
        **{f"dtype/{k}": np.str_(v) for k, v in dtypes.items()},
        meta=np.str_(json.dumps(meta, sort_keys=True)),
    )


def verl_batch():
    """A ``DataProto`` after ``RayPPOTrainer.fit``'s old-log-prob pass (decoupled mode):
    prompts left-padded, responses right-padded to ``rollout.response_length``, the rollout's
    log-probs padded with 0.0 (``agent_loop``), ``response_mask`` 0 on a tool's tokens."""
    rows, P, R = _rows(1), 5, 6
    b = len(rows)
    prompts, responses = np.full((b, P), PAD, np.int64), np.full((b, R), PAD, np.int64)
    attention, response_mask = np.zeros((b, P + R), np.int64), np.zeros((b, R), np.int64)
    old, roll = np.zeros((b, R), np.float32), np.zeros((b, R), np.float32)
    for i, (prompt, response, train, rollout, mask) in enumerate(rows):
        p, r = len(prompt), len(response)
        prompts[i, P - p :] = prompt
        responses[i, :r] = response
        attention[i, P - p : P + r] = 1
        response_mask[i, :r] = mask
        old[i, :r], roll[i, :r] = train, rollout
        old[i, r:] = -0.6931  # the trainer's log-probs of padding: not data, any value
    position = np.clip(np.cumsum(attention, axis=1) - 1, 0, None)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": np.concatenate([prompts, responses], axis=1),
        "attention_mask": attention,
        "position_ids": position,
        "response_mask": response_mask,
        "old_log_probs": old,
        "rollout_log_probs": roll,
    }
    arrays = {f"batch/{k}": v for k, v in tensors.items()}
    arrays["non_tensor_batch/uid"] = np.array(GROUPS)
    arrays["non_tensor_batch/data_source"] = np.array(["synthetic"] * b)
    dtypes = {f"batch/{k}": f"torch.{v.dtype}" for k, v in tensors.items()}
    _save("verl_dataproto.npz", arrays, dtypes, {"global_steps": 3, "temperature": 1.0})


def trl_output():
    """The dict ``GRPOTrainer._generate_and_score_completions`` returns with vLLM importance
    sampling: prompts left-padded (``prompt_mask``), completions right-padded
    (``completion_mask``), ``sampling_per_token_logps`` padded with 0.0, ``tool_mask`` 0 on a
    tool's tokens."""
    rows, P, C = _rows(2), 5, 6
    b = len(rows)
    prompt_ids, completion_ids = np.full((b, P), PAD, np.int64), np.full((b, C), PAD, np.int64)
    prompt_mask, completion_mask = np.zeros((b, P), np.int64), np.zeros((b, C), np.int64)
    tool_mask = np.ones((b, C), np.int64)
    old, sampling = np.zeros((b, C), np.float32), np.zeros((b, C), np.float32)
    for i, (prompt, response, train, rollout, mask) in enumerate(rows):
        p, r = len(prompt), len(response)
        prompt_ids[i, P - p :], prompt_mask[i, P - p :] = prompt, 1
        completion_ids[i, :r], completion_mask[i, :r] = response, 1
        tool_mask[i, :r] = mask
        old[i, :r], sampling[i, :r] = train, rollout
        old[i, r:] = -0.6931
    ratio = (np.exp(old - sampling) * completion_mask).astype(np.float32)
    tensors = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": np.array([0.5, -0.5, 1.0, -1.0], np.float32),
        "num_items_in_batch": np.array(int(completion_mask.sum()), np.int64),
        "old_per_token_logps": old,
        "importance_sampling_ratio": ratio,
        "sampling_per_token_logps": sampling,
        "tool_mask": tool_mask,
    }
    arrays = {f"output/{k}": v for k, v in tensors.items()}
    dtypes = {f"output/{k}": f"torch.{v.dtype}" for k, v in tensors.items()}
    _save("trl_generation.npz", arrays, dtypes, {})


def skyrl_batch():
    """A ``TrainingInputBatch`` after ``fwd_logprobs_values_reward``: prompt and response one
    left-padded block (``convert_prompts_responses_to_batch_tensors``), response tensors
    right-aligned, ``loss_mask`` 0 on an environment's tokens."""
    rows = _rows(3)
    b = len(rows)
    R = max(len(r[1]) for r in rows)
    T = max(len(r[0]) + len(r[1]) for r in rows)
    sequences, attention = np.full((b, T), PAD, np.int64), np.zeros((b, T), np.int64)
    response_mask, loss_mask = np.zeros((b, R), np.int64), np.zeros((b, R), np.int64)
    action, roll = np.zeros((b, R), np.float32), np.zeros((b, R), np.float32)
    rewards = np.zeros((b, R), np.float32)
    for i, (prompt, response, train, rollout, mask) in enumerate(rows):
        p, r = len(prompt), len(response)
        sequences[i, T - p - r :] = np.concatenate([prompt, response])
        attention[i, T - p - r :] = 1
        response_mask[i, R - r :], loss_mask[i, R - r :] = 1, mask
        action[i, R - r :], roll[i, R - r :] = train, rollout
        action[i, : R - r] = -2.0  # the policy's log-probs of prompt tokens in the window
        rewards[i, R - 1] = 1.0
    tensors = {
        "sequences": sequences,
        "attention_mask": attention,
        "response_mask": response_mask,
        "rewards": rewards,
        "loss_mask": loss_mask,
        "rollout_logprobs": roll,
        "action_log_probs": action,
    }
    arrays = {f"batch/{k}": v for k, v in tensors.items()}
    # keys the batch holds as None in this configuration (no critic, no reference model, text)
    arrays["none"] = np.array(
        ["rollout_expert_indices", "router_padding_mask", "pixel_values", "image_grid_thw",
         "base_action_log_probs", "values"]
    )  # fmt: skip
    dtypes = {f"batch/{k}": f"torch.{v.dtype}" for k, v in tensors.items()}
    meta = {"uids": list(GROUPS), "response_length": R, "avg_response_length": 4.25}
    _save("skyrl_training_input.npz", arrays, dtypes, meta)


if __name__ == "__main__":
    verl_batch()
    trl_output()
    skyrl_batch()
