"""A training loop that lets its kernel contract act, batch by batch (``verify.pipeline.routing``).

    python examples/routing_loop.py                  # recorded FP8 rollouts, about 3 s
    python examples/routing_loop.py --source model   # the shipped tiny-lm, about 20 s

Each step takes a batch of rollouts: the sampled tokens' log-probs under the inference kernel
(K_inf, emulated h100-fp8) and under the training kernel (K_train, fp32). ``--source log``
replays the recorded ones of ``contracts/examples/rollout-sample.jsonl`` (64 sequences of 64
tokens); ``--source model`` generates each batch with the shipped policy through both kernels.
The contract (``examples/routing_loop.yaml``) is prepared once: its TIS cap is proved before
the first step. Then every step calls ``routing.route`` and carries out what the decision asks:
tokens left out of the loss, sequences re-scored with K_train, importance weights min(w, c),
promotion halted. The printed lines say what each action did.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

import numpy as np

from kernel_contracts import contracts
from kernel_contracts.verify.pipeline import routing

HERE = pathlib.Path(__file__).resolve().parent
CONTRACT = HERE / "routing_loop.yaml"
LOG = HERE.parent / "contracts" / "examples" / "rollout-sample.jsonl"


def recorded_batches(contract, batch: int, steps: int):
    """[batch, tokens] arrays of the recorded log, ``batch`` sequences per step."""
    from kernel_contracts.evidence.logs import read_log

    table = read_log(str(LOG), "generic", vocab_size=contract.policy.vocab_size)
    c = table.columns
    width = int(c["position"].max()) + 1
    for step in range(min(steps, table.sequences // batch)):
        rows = (c["sequence"] >= step * batch) & (c["sequence"] < (step + 1) * batch)
        seq, pos = c["sequence"][rows] - step * batch, c["position"][rows]
        train, infer = np.zeros((batch, width)), np.zeros((batch, width))
        mask = np.zeros((batch, width), bool)
        train[seq, pos], infer[seq, pos] = c["train_logprob"][rows], c["rollout_logprob"][rows]
        mask[seq, pos] = True
        yield train, infer, mask, np.broadcast_to(np.arange(width), mask.shape)


def model_batches(contract, batch: int, steps: int, tokens: int = 32):
    """Fresh rollouts of the shipped policy each step: K_inf generates, K_train re-scores."""
    from kernel_contracts.contracts.model import EmulateEvidence, Evidence
    from kernel_contracts.evidence.emulate import emulate_contract

    for step in range(steps):
        ev = EmulateEvidence(prompts=batch, max_new_tokens=tokens, seed=step)
        table = emulate_contract(dataclasses.replace(contract, evidence=Evidence(emulate=ev)))
        shape = (batch, tokens)  # rows come prompt by prompt, each its generated tokens
        prompt = np.asarray(table["prompt"]).reshape(shape)
        assert (prompt == np.arange(batch)[:, None]).all()
        train = np.log(np.asarray(table["token_prob"], np.float64)).reshape(shape)
        log_w = np.asarray(table["log_ratio"], np.float64).reshape(shape)
        # log π_inf(y) = log π_train(y) − log w; float32 rounding may leave it a hair above 0
        infer = np.minimum(train - log_w, 0.0)
        positions = np.asarray(table["position"], np.int64).reshape(shape)
        yield np.minimum(train, 0.0), infer, np.ones(shape, bool), positions


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _verdicts(d) -> str:
    return ", ".join(f"{c.id} {c.status.label}" for c in d.clauses)


def main(argv=None, *, stdout=None) -> int:
    out = stdout if stdout is not None else sys.stdout
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=("log", "model"), default="log")
    parser.add_argument("--batch", type=_positive, default=16, help="sequences per step")
    parser.add_argument("--steps", type=_positive, default=4)
    args = parser.parse_args(argv)

    contract = contracts.load(CONTRACT)
    router = routing.prepare(contract)  # proves G_pg_tis here: no proved cap, no loop
    out.write(
        f"{contract.name}: {len(contract.escalation)} escalation rules; TIS cap "
        f"{float(router.cap):g} from {router.cap_guarantee} (proved, {router.statuses_from})\n"
    )
    batches = recorded_batches if args.source == "log" else model_batches
    promotion = routing.PromotionState(stage="canary")
    for step, (train, infer, mask, positions) in enumerate(
        batches(contract, args.batch, args.steps)
    ):
        d = routing.route(router, train, infer, mask, positions=positions, promotion=promotion)
        fired = f"rule {d.rule} ({d.severity}, {d.action})" if d.actions else "no rule fired"
        out.write(
            f"step {step}: {d.sequences} sequences, {d.tokens} tokens: {_verdicts(d)}; {fired}\n"
        )
        loss_mask = mask
        if d.token_mask is not None:
            loss_mask = mask & ~d.token_mask
            where = [tuple(map(int, i)) for i in np.argwhere(d.token_mask)]
            out.write(f"  mask_tokens: {len(where)} token(s) left out of the loss at {where}\n")
        if d.rescore is not None:
            # K_train re-scores these sequences: their log-probs become the trainer's own
            infer = np.where(d.rescore[:, None], train, infer)
            out.write(
                f"  route_to_train_kernel: sequences {list(d.rescore_indices)} re-scored by "
                "K_train (their ratios are now 1)\n"
            )
        if d.weights is not None:
            # the weights of the batch as trained: after re-scoring, with the proved cap
            log_w = routing.log_ratio(train, infer)
            weights = routing.capped_weights(log_w, loss_mask, d.cap)
            kept = weights[loss_mask]
            out.write(
                f"  tis_correct: weights min(w, {float(d.cap):g}) on {kept.size} tokens: "
                f"mean {kept.mean():.4f}, max {kept.max():.4f}, "
                f"{int((np.exp(log_w[loss_mask]) > float(d.cap)).sum())} capped\n"
            )
        if d.promotion is not promotion:
            out.write(f"  promotion: {d.promotion.stage} halted: {d.promotion.reason}\n")
        elif "log" in d.actions:
            out.write("  log: the decision is recorded, nothing else to do\n")
        promotion = d.promotion
    state = "halted" if promotion.halted else "may proceed"
    out.write(f"promotion from {promotion.stage}: {state}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
