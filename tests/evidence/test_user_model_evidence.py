"""``evidence: emulate`` with a user's model: ``model: "module:function"`` and ``params: PATH``.

The DSL keys (parsed, resolved, tied to each other, canonical round trip); every unusable
model (not importable, not callable, wrong output, failing, params missing or unreadable)
exits 2 with the contract's file:line:col of the key at fault and writes nothing; the decoding
loop is exact (the same kernel on both sides gives zero drift on every token); the shipped
Flax Linen example runs through the command line and reports its params file's sha256.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib

import numpy as np
import pytest

from kernel_contracts.contracts import ContractError, loads
from kernel_contracts.contracts.canonical import canonical_json, from_canonical
from tests.support.cli_runner import run_cli

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "user_model"

MODELS = """
import jax.numpy as jnp

not_a_function = 3


def flat(params, tokens):  # logits without a vocabulary axis
    return jnp.zeros(tokens.shape)


def failing(params, tokens):
    raise RuntimeError("no weights for this shape")


def bigram(params, tokens):  # a causal model: logits from the current token only
    return params["table"][tokens] @ params["w"]
"""


def contract_text(model: str, params: str | None, *, inference="h100-fp8", extra="") -> str:
    lines = [
        "contract: 1",
        "name: user-model",
        "kernels:",
        "  train: {preset: fp32}",
        f"  inference: {{preset: {inference}}}",
        "numerical:",
        "  - {id: N1, metric: logit_drift, max: 1.0}",
        "evidence:",
        "  emulate:",
        f'    model: "{model}"',
        *([f"    params: {params}"] if params is not None else []),
        "    prompts: 3",
        "    max_new_tokens: 4",
        "    seed: 1",
        *([extra] if extra else []),
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "user_models_for_tests.py").write_text(MODELS)
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "params.npz",
        **{
            "table": rng.normal(size=(16, 8)).astype(np.float32),
            "w": rng.normal(size=(8, 16)).astype(np.float32),
            "extra/prompts": rng.integers(0, 16, (4, 10)).astype(np.int32),
        },
    )
    return tmp_path


def run(args):
    # these contracts name their model's code: consent is given (test_trust_code.py shows the
    # refusal without it)
    return run_cli(*args, "--quiet", "--trust-code")


# ------------------------------------------------------------------------- the DSL


def test_params_resolve_against_the_contract_and_round_trip(folder):
    path = folder / "c.yaml"
    path.write_text(contract_text("user_models_for_tests:bigram", "params.npz"))
    contract = loads(path.read_text(), str(path))
    ev = contract.evidence.emulate
    assert (ev.model, ev.params) == ("user_models_for_tests:bigram", str(folder / "params.npz"))
    rebuilt = from_canonical(contract.source.canonical)  # params relative to the folder
    assert rebuilt.source.canonical == contract.source.canonical
    assert rebuilt.evidence.emulate == dataclasses.replace(ev, params="params.npz")
    shipped = loads(contract_text("tiny-lm", None))
    assert shipped.evidence.emulate.params is None
    assert from_canonical(canonical_json(shipped)).evidence == shipped.evidence


@pytest.mark.parametrize(
    ("model", "params", "key", "line", "col", "message"),
    [
        ("tiny-lm", "p.npz", "params", 11, 5, "applies only to an entry point model "
         "(package.module:function)"),
        ("pkg.mod:fn", None, "model", 10, 5, "an entry point model needs params: PATH "
         "(an .npz file)"),
        ("pkg.mod:", "p.npz", "model", 10, 5, "expected a shipped model name or an entry "
         "point package.module:function; got 'pkg.mod:'"),
        ("pkg..mod:fn", "p.npz", "model", 10, 5, "expected a shipped model name or an entry "
         "point package.module:function; got 'pkg..mod:fn'"),
    ],
)  # fmt: skip
def test_keys_that_do_not_fit_together_are_contract_errors(model, params, key, line, col, message):
    with pytest.raises(ContractError) as info:
        loads(contract_text(model, params), "c.yaml")
    assert str(info.value) == f"c.yaml:{line}:{col}: evidence.emulate.{key}: {message}"


# ------------------------------------------------------------------ unusable models


@pytest.mark.parametrize(
    ("model", "params", "key", "message"),
    [
        ("no_such_module_here:fn", "params.npz", "model",
         "cannot import module 'no_such_module_here': ModuleNotFoundError: No module named "
         "'no_such_module_here'"),
        ("user_models_for_tests:missing", "params.npz", "model",
         "module 'user_models_for_tests' has no attribute 'missing'"),
        ("user_models_for_tests:not_a_function", "params.npz", "model",
         "user_models_for_tests:not_a_function is not callable (it is of type int)"),
        ("user_models_for_tests:flat", "params.npz", "model",
         "user_models_for_tests:flat must return float logits of shape (batch, seq, vocab) = "
         "(1, 1, vocab >= 2) for tokens of shape (1, 1); got float32 (1, 1)"),
        ("user_models_for_tests:failing", "params.npz", "model",
         "user_models_for_tests:failing fails on tokens of shape (1, 1): RuntimeError: no "
         "weights for this shape"),
        ("user_models_for_tests:bigram", "missing.npz", "params",
         "no such file: {folder}/missing.npz"),
        ("user_models_for_tests:bigram", "c.yaml", "params",
         "cannot read {folder}/c.yaml as an .npz archive: "),
    ],
)  # fmt: skip
def test_an_unusable_model_exits_2_at_its_key(folder, model, params, key, message):
    path = folder / "c.yaml"
    path.write_text(contract_text(model, params))
    report = folder / "report.json"
    code, out, err = run([str(path), "--json", str(report)])
    line, col = (10, 5) if key == "model" else (11, 5)
    want = f"{path}:{line}:{col}: evidence.emulate.{key}: {message.format(folder=folder)}"
    assert (code, out) == (2, "")
    assert err.startswith(want) and err.count("\n") == 1, err
    assert not report.exists()


def test_prompt_windows_outside_the_vocabulary_are_refused(folder):
    np.savez(
        folder / "params.npz",
        table=np.zeros((16, 8), np.float32),
        w=np.zeros((8, 16), np.float32),
        **{"extra/prompts": np.full((2, 6), 16, np.int32)},
    )
    path = folder / "c.yaml"
    path.write_text(contract_text("user_models_for_tests:bigram", "params.npz"))
    code, _, err = run([str(path)])
    assert code == 2
    assert err == (
        f"{path}:11:5: evidence.emulate.params: extra/prompts holds token ids outside the "
        "vocabulary [0, 16)\n"
    )


def test_two_folders_with_a_module_of_the_same_name_each_get_their_own(tmp_path):
    """A model module is imported from its contract's folder even when a module of that name
    was imported before from another folder; both functions keep working afterwards."""
    from kernel_contracts.kernels.model.user_model import load_entry

    funcs = []
    for value in (1, 2):
        place = tmp_path / f"contract{value}"
        (place / "pkg_for_tests").mkdir(parents=True)
        (place / "pkg_for_tests" / "__init__.py").write_text("")
        (place / "pkg_for_tests" / "lm.py").write_text(
            f"def f(params, tokens):\n    return {value}\n"
        )
        (place / "twin_for_tests.py").write_text(f"def f(params, tokens):\n    return {value}\n")
        funcs.append(
            (
                load_entry("twin_for_tests:f", str(place), trust_code=True),
                load_entry("pkg_for_tests.lm:f", str(place), trust_code=True),
            )
        )
    assert [(a(None, None), b(None, None)) for a, b in funcs] == [(1, 1), (2, 2)]
    # the same folder again: the module already imported from it is reused
    again = load_entry("twin_for_tests:f", str(tmp_path / "contract2"), trust_code=True)
    assert again is funcs[1][0]


# ------------------------------------------------------------------------ measuring


def test_the_same_kernel_on_both_sides_gives_zero_drift(folder):
    """K_inf decodes by rerunning the model on a padded buffer, K_train teacher-forces the
    finished sequences: with one kernel on both sides every logit must agree exactly, so the
    decoding loop reads the right position at every step."""
    from kernel_contracts.evidence.emulate import emulate_contract

    path = folder / "c.yaml"
    text = contract_text("user_models_for_tests:bigram", "params.npz", inference="fp32")
    path.write_text(
        text.replace("max: 1.0}", "max: 1.0}\nruntime:\n  - {id: R, batch_size: [2, 2]}")
    )
    contract = loads(path.read_text(), str(path))
    table = emulate_contract(contract, trust_code=True)
    assert table["logit_drift"].shape == (12,)  # 3 prompts x 4 tokens, batches of 2
    assert np.all(table["logit_drift"] == 0) and np.all(table["top1_flip"] == 0)
    assert sorted(set(table["position"].tolist())) == [10, 11, 12, 13]  # prompts of 10
    assert np.all((table["token"] >= 0) & (table["token"] < 16))


def test_the_shipped_example_runs_through_the_command_line(tmp_path):
    text = (EXAMPLE / "contract.yaml").read_text()
    text = text.replace("prompts: 8", "prompts: 2").replace(
        "max_new_tokens: 16\n    seed", "max_new_tokens: 4\n    seed"
    )
    text = text.replace("params: params.npz", f"params: {EXAMPLE / 'params.npz'}")
    text = text.replace("min_samples: 100", "min_samples: 8")
    path = tmp_path / "contract.yaml"
    path.write_text(text)
    (tmp_path / "tiny_linen_lm.py").write_text((EXAMPLE / "tiny_linen_lm.py").read_text())
    report = tmp_path / "report.json"
    code, _, err = run([str(path), "--json", str(report)])
    assert code in (0, 1, 3), err  # 8 tokens may leave the quantile clause inconclusive
    source = json.loads(report.read_text())["evidence"]["sources"][0]
    digest = hashlib.sha256((EXAMPLE / "params.npz").read_bytes()).hexdigest()
    assert source["label"] == "emulate:tiny_linen_lm:logits/h100-fp8"
    assert (source["tokens"], source["checkpoint_sha256"]) == (8, digest)
    assert (EXAMPLE / "params.npz").stat().st_size < 200_000
