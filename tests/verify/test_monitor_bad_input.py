"""Bad input to ``python -m verify monitor``: exit 2 with one clear line naming the file (and line
or key), never a traceback, and neither the output nor the checkpoint created or changed."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from tests.support.cli_runner import run_cli

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "contracts" / "examples"
SAMPLE = EXAMPLES / "rollout-sample.jsonl"
USAGE_TAIL = "python -m verify monitor: error: "


def _without_evidence(text: str) -> str:
    return text[: text.rindex("\nevidence:") + 1]


def _contract(tmp_path, extra: str = "", *, evidence: bool = True) -> pathlib.Path:
    text = (EXAMPLES / "rollout-log.yaml").read_text(encoding="utf-8")
    text = text.replace("path: rollout-sample.jsonl", f"path: {SAMPLE}")
    if not evidence:
        text = _without_evidence(text)
    path = tmp_path / "c.yaml"
    path.write_text(text + extra, encoding="utf-8")
    return path


def _run(*args):
    return run_cli("monitor", *args)


def _untouched(tmp_path, before: dict) -> None:
    now = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert now == before


def _files(tmp_path) -> dict:
    return {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}


def _usage(err: str, message: str) -> None:
    assert err.startswith("usage: python -m verify monitor")
    assert err.endswith(f"{USAGE_TAIL}{message}\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "the following arguments are required: CONTRACT.yaml, --stream"),
        (["C"], "the following arguments are required: --stream"),
        (
            ["C", "--stream", "S", "--idle-timeout", "-1"],
            "argument --idle-timeout: must be a positive number of seconds: -1",
        ),
        (
            ["C", "--stream", "S", "--idle-timeout", "nan"],
            "argument --idle-timeout: must be a positive number of seconds: nan",
        ),
        (
            ["C", "--stream", "S", "--poll", "0"],
            "argument --poll: must be a positive number of seconds: 0",
        ),
        (
            ["C", "--stream", "S", "--format", "xyz"],
            "argument --format: invalid choice: 'xyz' (choose from generic, verl, trl)",
        ),
        (
            ["C", "--stream", "S", "--follow", "--no-follow"],
            "argument --no-follow/--until-eof: not allowed with argument --follow",
        ),
    ],
)
def test_usage_errors(tmp_path, args, message):
    contract = _contract(tmp_path)
    before = _files(tmp_path)
    args = [str(contract) if a == "C" else str(SAMPLE) if a == "S" else a for a in args]
    code, out, err = _run(*args)
    assert (code, out) == (2, "")
    if "invalid choice" in message:  # argparse quotes the choices on some versions
        message = message.replace("generic, verl, trl", "'generic', 'verl', 'trl'")
        if not err.endswith(f"{USAGE_TAIL}{message}\n"):
            message = message.replace("'generic', 'verl', 'trl'", "generic, verl, trl")
    _usage(err, message)
    _untouched(tmp_path, before)


def test_bad_input_corpus(tmp_path):
    """Each case: exit 2, the exact one-line message, nothing written."""
    contract = _contract(tmp_path)
    bare = tmp_path / "bare.yaml"
    bare.write_text(
        _without_evidence((EXAMPLES / "rollout-log.yaml").read_text(encoding="utf-8"))
        + "observability:\n  - {id: O1, log: [log_ratio]}\n",
        encoding="utf-8",
    )
    no_clauses = tmp_path / "no-clauses.yaml"
    text = bare.read_text(encoding="utf-8")
    no_clauses.write_text(
        text[: text.index("\nnumerical:")] + text[text.index("\nslices:") :], encoding="utf-8"
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    logs = tmp_path / "logs"
    logs.mkdir()
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text('\n{"tokens": [1], "lp": [-0.5]}\n', encoding="utf-8")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    not_json = tmp_path / "not-json.ckpt"
    not_json.write_text("{", encoding="utf-8")
    other_format = tmp_path / "other.ckpt"
    other_format.write_text('{"format": "something-else"}', encoding="utf-8")
    dup = tmp_path / "dup.ckpt"
    dup.write_text('{"format": 1, "format": 2}', encoding="utf-8")
    out, ck = tmp_path / "out.jsonl", tmp_path / "ck.json"
    s, c = str(SAMPLE), str(contract)
    cases = [
        (
            [c, "--stream", str(tmp_path / "nope.jsonl")],
            f"{tmp_path}/nope.jsonl: no such file or directory",
        ),
        ([str(tmp_path / "nope.yaml"), "--stream", s], f"{tmp_path}/nope.yaml: no such file"),
        (
            [c, "--stream", str(fifo)],
            f"{fifo}: is a FIFO (named pipe), not a log file or a directory of log files (give a "
            "pipe as --stream -)",
        ),
        (
            [c, "--stream", s, "--out", c],
            f"verify: cannot write {c}: it is the contract ({c}); a report never overwrites "
            "its input",
        ),
        (
            [c, "--stream", s, "--out", s],
            f"verify: cannot write {s}: it is the stream ({s}); a report never overwrites "
            "its input",
        ),
        (
            [c, "--stream", s, "--out", str(out), "--checkpoint", str(out)],
            f"verify: cannot write {out}: --out {out} is the same file; each report needs a "
            "file of its own",
        ),
        (
            [c, "--stream", s, "--checkpoint", str(tmp_path)],
            f"verify: cannot write {tmp_path}: is a directory",
        ),
        (
            [c, "--stream", s, "--checkpoint", "/dev/null"],
            "verify: cannot write /dev/null: a checkpoint must be a file",
        ),
        (
            [c, "--stream", s, "--out", str(tmp_path / "no" / "out.jsonl")],
            f"verify: cannot write {tmp_path}/no/out.jsonl: no such directory",
        ),
        (
            [c, "--stream", str(logs), "--out", str(logs / "out.jsonl")],
            f"verify: cannot write {logs}/out.jsonl: it lies in the monitored directory {logs} and "
            "would be read as a log",
        ),
        (
            [c, "--stream", s, "--observability", "O9"],
            f"{c}: --observability O9: no such observability clause (the contract has: none)",
        ),
        (
            [str(no_clauses), "--stream", s],
            f"{no_clauses}: no numerical or statistical clause to monitor",
        ),
        (
            [str(bare), "--stream", str(unknown), "--no-follow"],
            f"{unknown}:2: the record has none of the known field sets (generic: response_ids, "
            "train_logprobs, rollout_logprobs; verl: responses, old_log_probs, rollout_log_probs; "
            "trl: completion_ids, old_per_token_logps, sampling_per_token_logps); its keys: lp, "
            "tokens",
        ),
        ([c, "--stream", str(empty), "--no-follow"], f"{empty}: no line to monitor"),
        (
            [c, "--stream", s, "--checkpoint", str(not_json)],
            f"{not_json}: not a usable monitor checkpoint: it is not one JSON object",
        ),
        (
            [c, "--stream", s, "--checkpoint", str(dup)],
            f"{dup}: not a usable monitor checkpoint: it is not one JSON object",
        ),
        (
            [c, "--stream", s, "--checkpoint", str(other_format)],
            f"{other_format}: not a usable monitor checkpoint: its format is not "
            "kernel-contracts/monitor-checkpoint/2",
        ),
    ]
    before = _files(tmp_path)
    for args, message in cases:
        code, text, err = _run(*args)
        assert (code, text, err) == (2, "", message + "\n"), args
        _untouched(tmp_path, before)
        assert not out.exists() and not ck.exists()
    assert not (logs / "out.jsonl").exists()


def _decided(tmp_path, contract, stream, out, ck) -> dict:
    code, text, err = _run(
        contract, "--stream", stream, "--out", out, "--checkpoint", ck, "--no-follow"
    )
    assert (code, text, err) == (1, "", "")
    return json.loads(ck.read_text(encoding="utf-8"))


def test_a_checkpoint_from_another_contract_stream_or_output_is_refused(tmp_path):
    contract = _contract(tmp_path)
    out, ck = tmp_path / "out.jsonl", tmp_path / "ck.json"
    state = _decided(tmp_path, contract, SAMPLE, out, ck)
    other = tmp_path / "other.jsonl"
    other.write_bytes(SAMPLE.read_bytes())
    before = _files(tmp_path)
    code, _, err = _run(contract, "--stream", other, "--out", out, "--checkpoint", ck)
    assert (code, err) == (
        2,
        f"{ck}: the checkpoint was written for another stream ('{SAMPLE}', now '{other}'); give "
        "a new checkpoint path to start over\n",
    )
    contract.write_text(contract.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    before = _files(tmp_path)
    code, _, err = _run(contract, "--stream", SAMPLE, "--out", out, "--checkpoint", ck)
    sha = state["binding"]["contract_sha256"]
    assert code == 2 and err.startswith(
        f"{ck}: the checkpoint was written for another contract sha256 ('{sha}', now '"
    )
    code, _, err = _run(contract, "--stream", SAMPLE, "--checkpoint", ck)
    assert code == 2 and "another contract sha256" in err
    _untouched(tmp_path, before)


def test_an_output_shorter_than_the_checkpoint_says_is_refused(tmp_path):
    contract = _contract(tmp_path)
    out, ck = tmp_path / "out.jsonl", tmp_path / "ck.json"
    state = _decided(tmp_path, contract, SAMPLE, out, ck)
    out.write_bytes(out.read_bytes()[:100])
    before = _files(tmp_path)
    code, text, err = _run(contract, "--stream", SAMPLE, "--out", out, "--checkpoint", ck)
    assert (code, text, err) == (
        2,
        "",
        f"cannot resume: --out {out} has 100 bytes, and the checkpoint says "
        f"{state['out_length']} bytes were written to it; give a new checkpoint path to start "
        "over\n",
    )
    out.unlink()
    code, _, err = _run(contract, "--stream", SAMPLE, "--out", out, "--checkpoint", ck)
    assert code == 2 and err.startswith(f"cannot resume: --out {out} is gone, and the checkpoint")
    _untouched(tmp_path, {k: v for k, v in before.items() if k != "out.jsonl"})


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.pop("window"), "missing key 'window'"),
        (lambda s: s.update(window=-1), "'window' must be a non-negative integer"),
        (
            lambda s: s["position"].update(offset="0"),
            "'position.offset' must be a non-negative integer",
        ),
        (
            lambda s: s["position"].update(identity=[1]),
            "'position.identity' must be [device, inode]",
        ),
        (lambda s: s["position"].update(head=1), "'position.head' must be a sha256"),
        (lambda s: s["position"].update(files={}), "'position.files' must be a list"),
        (
            lambda s: s["position"].update(files=[{"name": "x"}]),
            "'position.files[].head' and '.digest' must be sha256s",
        ),
        (lambda s: s["position"].update(digest=1), "'position.digest' must be a sha256"),
        (lambda s: s.update(worst="great"), "'worst' must be a verdict"),
        (lambda s: s.update(reader=[]), "'reader' must hold the pending records"),
        (lambda s: s["reader"].update(pending=[{"key": 1}]), "its pending records cannot be read"),
    ],
)
def test_a_damaged_checkpoint_is_refused(tmp_path, edit, message):
    contract = _contract(tmp_path)
    out, ck = tmp_path / "out.jsonl", tmp_path / "ck.json"
    state = _decided(tmp_path, contract, SAMPLE, out, ck)
    edit(state)
    ck.write_text(json.dumps(state), encoding="utf-8")
    before = _files(tmp_path)
    code, text, err = _run(contract, "--stream", SAMPLE, "--out", out, "--checkpoint", ck)
    assert (code, text, err) == (2, "", f"{ck}: not a usable monitor checkpoint: {message}\n")
    _untouched(tmp_path, before)


def test_a_truncated_or_replaced_file_is_an_error_not_lost_lines(tmp_path):
    contract = _contract(tmp_path)
    stream, out, ck = tmp_path / "log.jsonl", tmp_path / "out.jsonl", tmp_path / "ck.json"
    stream.write_bytes(SAMPLE.read_bytes())
    _decided(tmp_path, contract, stream, out, ck)
    stream.write_bytes(SAMPLE.read_bytes()[:1000])  # copied away and truncated in place
    before = _files(tmp_path)
    code, _, err = _run(
        contract, "--stream", stream, "--out", out, "--checkpoint", ck, "--no-follow"
    )
    assert (code, err) == (
        2,
        f"{stream}: the file has 1000 bytes, fewer than the {len(SAMPLE.read_bytes())} already "
        "read: it was truncated, and lines written after line 64 may have been lost\n",
    )
    fresh = tmp_path / "fresh.jsonl"
    fresh.write_bytes(SAMPLE.read_bytes())
    os.replace(fresh, stream)  # a new file under the old name (rotated by renaming)
    code, _, err = _run(
        contract, "--stream", stream, "--out", out, "--checkpoint", ck, "--no-follow"
    )
    assert (code, err) == (
        2,
        f"{stream}: the file was replaced since the checkpoint was written; its rest cannot be "
        "read (rotate into a directory, or start with a new checkpoint)\n",
    )
    _untouched(tmp_path, before | {"log.jsonl": SAMPLE.read_bytes()})


def test_a_replaced_file_is_told_apart_by_its_first_bytes_when_the_inode_is_reused(tmp_path):
    contract = _contract(tmp_path)
    stream, out, ck = tmp_path / "log.jsonl", tmp_path / "out.jsonl", tmp_path / "ck.json"
    stream.write_bytes(SAMPLE.read_bytes())
    state = _decided(tmp_path, contract, stream, out, ck)
    stream.write_bytes(b"\n" + SAMPLE.read_bytes())  # other bytes in the same file
    st = os.stat(stream)
    state["position"]["identity"] = [st.st_dev, st.st_ino]
    ck.write_text(json.dumps(state), encoding="utf-8")
    before = _files(tmp_path)
    code, text, err = _run(
        contract, "--stream", stream, "--out", out, "--checkpoint", ck, "--no-follow"
    )
    assert (code, text, err) == (
        2,
        "",
        f"{stream}: the file was replaced since the checkpoint was written (its first bytes "
        "differ); its rest cannot be read (rotate into a directory, or start with a new "
        "checkpoint)\n",
    )
    _untouched(tmp_path, before)
