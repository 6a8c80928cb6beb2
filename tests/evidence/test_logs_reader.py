"""JSONL log readers: the three formats, split records, and every kind of bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernel_contracts.evidence.logs import (
    FORMATS,
    LogError,
    LoggedSequence,
    read_log,
    record,
    write_log,
)


def _sequences(n_seq=5, length=7, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for s in range(n_seq):
        train = -rng.exponential(1.0, length)
        rollout = train + rng.normal(0, 0.01, length)
        rollout = np.minimum(rollout, 0.0)
        ids = rng.integers(0, 256, length)
        out.append(LoggedSequence(f"p{s // 2}", s % 2, ids.tolist(), train, rollout, 3 * s))
    return out


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_roundtrip_every_format(tmp_path, fmt):
    seqs = _sequences()
    path = tmp_path / f"log.{fmt}.jsonl"
    write_log(path, seqs, fmt)
    table = read_log(path, fmt)
    assert table.format == fmt
    assert table.sequences == 5 and table.tokens == 35
    assert table.malformed_count == 0 and table.mismatch_count == 0
    c = table.columns
    np.testing.assert_array_equal(c["train_logprob"], np.concatenate([s.train for s in seqs]))
    np.testing.assert_array_equal(c["rollout_logprob"], np.concatenate([s.rollout for s in seqs]))
    np.testing.assert_array_equal(c["token"], np.concatenate([s.ids for s in seqs]))
    np.testing.assert_array_equal(
        c["position"], np.concatenate([np.arange(7) + 3 * i for i in range(5)])
    )
    np.testing.assert_array_equal(c["line"], np.repeat(np.arange(1, 6), 7))
    assert [table.prompt_names[k] for k in c["prompt"][::7]] == ["p0", "p0", "p1", "p1", "p2"]
    # auto-detection finds the same format
    assert read_log(path, None).format == fmt


def test_sha256_is_of_the_file_bytes(tmp_path):
    import hashlib

    path = tmp_path / "a.jsonl"
    write_log(path, _sequences())
    assert read_log(path).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_verl_padding_is_not_data(tmp_path):
    rec = {
        "uid": "u1",
        "responses": [5, 6, 0, 0],
        "old_log_probs": [-0.5, -1.0, 0.0, 0.0],
        "rollout_log_probs": [-0.6, -1.0, 0.0, 0.0],
        "response_mask": [1, 1, 0, 0],
    }
    path = tmp_path / "v.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    table = read_log(path, "verl")
    assert table.tokens == 2 and table.padding_tokens == 2
    assert table.prompt_names == ("u1",)
    np.testing.assert_array_equal(table.columns["rollout_logprob"], [-0.6, -1.0])


def _write_lines(path, lines, end="\n"):
    path.write_bytes((end.join(lines) + end).encode())


def _good(i=0):
    return json.dumps(
        {
            "prompt_id": f"p{i}",
            "response_ids": [1, 2, 3],
            "train_logprobs": [-0.1, -0.2, -0.3],
            "rollout_logprobs": [-0.1, -0.25, -0.3],
        }
    )


def test_malformed_lines_are_counted_with_line_numbers(tmp_path):
    bad_nan = _good().replace("-0.25", "NaN")
    bad_len = json.dumps(
        {
            "prompt_id": "x",
            "response_ids": [1, 2],
            "train_logprobs": [-1.0],
            "rollout_logprobs": [-1.0, -2.0],
        }
    )
    missing = json.dumps({"prompt_id": "x", "response_ids": [1], "train_logprobs": [-1.0]})
    lines = [_good(0), "{not json", bad_nan, "[1, 2]", "", bad_len, missing, _good(1)]
    path = tmp_path / "bad.jsonl"
    _write_lines(path, lines)
    table = read_log(path)
    assert table.sequences == 2 and table.tokens == 6
    assert table.blank_lines == 1
    assert table.malformed_count == 5
    got = [(p.line, p.reason) for p in table.malformed]
    assert got == [
        (2, "invalid JSON: Expecting property name enclosed in double quotes (column 2)"),
        (3, "'rollout_logprobs'[1] is nan: log-probabilities must be finite"),
        (4, "not a JSON object (got list)"),
        (6, "'train_logprobs' has 1 entries, 'response_ids' 2"),
        (7, "missing key 'rollout_logprobs' (generic format)"),
    ]


POSITIVE = (
    "> 0: log-probabilities must be ≤ 0 (up to +0.001 of rounding); a larger value is not a "
    "rounding of a log-softmax: look for a value written before normalisation or with the "
    "wrong sign"
)


def test_a_log_prob_beyond_the_tolerance_makes_the_log_unusable(tmp_path):
    # not a rounding artefact: no line of such a log is trusted, and the error names the line
    path = tmp_path / "pos.jsonl"
    _write_lines(path, [_good(0), "{oops", _good(1).replace("-0.3]", "0.5]", 1), _good(2)])
    with pytest.raises(LogError) as err:
        read_log(path)
    assert str(err.value) == f"{path}:3: 'train_logprobs'[2] = 0.5 {POSITIVE}"
    kept = tmp_path / "kept.jsonl"
    _write_lines(kept, [json.dumps(json.loads(_good()) | {"log_kept_mass": [0.0, 0.01, 0.0]})])
    with pytest.raises(LogError) as err:
        read_log(kept)
    assert str(err.value) == (
        f"{kept}:1: 'log_kept_mass'[1] = 0.01 > 0: log kept mass must be ≤ 0 (up to +0.001 of "
        "rounding); a larger value is not a rounding of a log-softmax: look for a value written "
        "before normalisation or with the wrong sign"
    )


def test_a_log_prob_within_the_tolerance_is_kept_as_logged(tmp_path):
    path = tmp_path / "hair.jsonl"
    _write_lines(path, [_good(0).replace("-0.3]", "0.001]", 1), _good(1)])
    table = read_log(path)
    assert table.malformed_count == 0 and table.tokens == 6
    assert table.columns["train_logprob"][2] == 0.001  # read as 0 by the lower bounds only


def test_truncated_last_line(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_bytes((_good(0) + "\n" + _good(1)[:30]).encode())
    table = read_log(path)
    assert table.sequences == 1
    assert [(p.line, p.reason) for p in table.malformed] == [
        (2, "truncated record at end of file: Unterminated string starting at (column 21)")
    ]


def test_token_id_mismatch_in_joined_record(tmp_path):
    rec = json.loads(_good())
    rec["rollout_response_ids"] = [1, 9, 3]
    path = tmp_path / "m.jsonl"
    _write_lines(path, [_good(0), json.dumps(rec)])
    table = read_log(path)
    assert table.sequences == 1 and table.mismatch_count == 1
    assert table.mismatches[0].line == 2
    assert table.mismatches[0].reason == (
        "token ids differ between train and rollout (first at token 1: train id 2, rollout id 9)"
    )


def test_split_records_join_and_flag(tmp_path):
    def side(s, pid, sid, ids, lp):
        return json.dumps(
            {"side": s, "prompt_id": pid, "sample_id": sid, "response_ids": ids, "logprobs": lp}
        )

    lines = [
        side("rollout", "a", 0, [1, 2], [-0.5, -0.7]),
        side("rollout", "a", 1, [3, 4], [-0.1, -0.2]),
        side("train", "a", 0, [1, 2], [-0.4, -0.8]),
        side("train", "a", 1, [3, 5], [-0.1, -0.2]),  # mismatch with line 2
        side("rollout", "b", 0, [7], [-0.3]),  # unpaired
        side("rollout", "b", 0, [7], [-0.3]),  # duplicate side
    ]
    path = tmp_path / "split.jsonl"
    _write_lines(path, lines)
    table = read_log(path)
    assert table.sequences == 1
    np.testing.assert_array_equal(table.columns["train_logprob"], [-0.4, -0.8])
    np.testing.assert_array_equal(table.columns["rollout_logprob"], [-0.5, -0.7])
    assert table.columns["line"].tolist() == [1, 1]
    assert table.mismatch_count == 1
    assert table.mismatches[0].reason == (
        "token ids differ between train record (line 4) and rollout record (line 2) "
        "(first at token 1: train id 5, rollout id 4)"
    )
    assert [(p.line, p.reason) for p in table.malformed] == [
        (6, "second rollout record for prompt 'b' sample 0 (first at line 5)")
    ]
    assert [(p.line, p.reason) for p in table.unpaired] == [
        (5, "rollout record for prompt 'b' sample 0 has no train record")
    ]


def test_missing_file(tmp_path):
    with pytest.raises(LogError) as err:
        read_log(tmp_path / "nope.jsonl")
    assert str(err.value) == f"{tmp_path / 'nope.jsonl'}: evidence file not found"


def test_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    with pytest.raises(LogError) as err:
        read_log(path)
    assert str(err.value) == f"{path}: the log file is empty"


def test_only_blank_lines(tmp_path):
    path = tmp_path / "blank.jsonl"
    path.write_bytes(b"\n\n  \n")
    with pytest.raises(LogError) as err:
        read_log(path)
    assert str(err.value) == f"{path}: no JSON record in the file (3 lines, 0 invalid)"


def test_not_utf8(tmp_path):
    path = tmp_path / "bin.jsonl"
    path.write_bytes(_good().encode() + b"\n" + b'{"a": "\xff"}\n')
    with pytest.raises(LogError) as err:
        read_log(path)
    assert str(err.value) == (
        f"{path}:2: not UTF-8 text (byte 0xff at column 8); a JSONL log must be UTF-8"
    )


def test_unknown_format_name(tmp_path):
    path = tmp_path / "a.jsonl"
    write_log(path, _sequences())
    with pytest.raises(LogError) as err:
        read_log(path, "openrlhf")
    assert str(err.value) == (
        f"{path}: unknown log format 'openrlhf' (expected one of: generic, verl, trl)"
    )


def test_wrong_declared_format_says_which_fits(tmp_path):
    path = tmp_path / "t.jsonl"
    write_log(path, _sequences(), "trl")
    with pytest.raises(LogError) as err:
        read_log(path, "verl")
    assert str(err.value) == (
        f"{path}: no record has the verl fields; the records look like the trl format "
        "(declare format: trl)"
    )


def test_undetectable_records(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"foo": 1, "bar": 2}\n')
    with pytest.raises(LogError) as err:
        read_log(path, None)
    assert str(err.value).startswith(f"{path}:1: the record has none of the known field sets")
    assert "its keys: bar, foo" in str(err.value)


def test_directory_is_not_a_log(tmp_path):
    with pytest.raises(LogError) as err:
        read_log(tmp_path)
    assert str(err.value) == f"{tmp_path}: is a directory, not a log file"


def test_record_writer_uses_framework_names():
    seq = _sequences(1)[0]
    assert set(record(seq, "verl")) >= {"responses", "old_log_probs", "rollout_log_probs"}
    assert set(record(seq, "trl")) >= {
        "completion_ids",
        "old_per_token_logps",
        "sampling_per_token_logps",
        "completion_mask",
    }


def test_progress_callback_reaches_the_end(tmp_path):
    path = tmp_path / "a.jsonl"
    write_log(path, _sequences(50))
    seen = []
    read_log(path, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (path.stat().st_size, path.stat().st_size)


GOOD = '"response_ids": [1, 2], "train_logprobs": [-0.5, -0.25], "rollout_logprobs": [-0.5, -0.3]'
DEEP = 100_000


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        # position_offset: a non-negative integer whose positions stay exact doubles
        (
            f'{{{GOOD}, "position_offset": 1e30}}',
            "'position_offset' must be a non-negative integer",
        ),
        (f'{{{GOOD}, "position_offset": -1}}', "'position_offset' must be a non-negative integer"),
        (f'{{{GOOD}, "position_offset": NaN}}', "'position_offset' must be a non-negative integer"),
        (
            f'{{{GOOD}, "position_offset": true}}',
            "'position_offset' must be a non-negative integer",
        ),
        (f'{{{GOOD}, "position_offset": "3"}}', "'position_offset' must be a non-negative integer"),
        (
            f'{{{GOOD}, "position_offset": {"9" * 30}}}',
            "'position_offset' is too large (positions must stay below 2^53)",
        ),
        (
            f'{{{GOOD}, "position_offset": {2**53 - 1}}}',
            "'position_offset' is too large (positions must stay below 2^53)",
        ),
        # nesting Python cannot read, and integers of more digits than it converts
        (
            "[" * DEEP + "]" * DEEP,
            "invalid JSON: nested too deeply to read (a record is one flat object)",
        ),
        (
            '{"a": ' * DEEP + "1" + "}" * DEEP,
            "invalid JSON: nested too deeply to read (a record is one flat object)",
        ),
        (f'{{{GOOD}, "prompt_id": {"9" * 5000}}}', "invalid JSON: an integer has too many digits"),
        # a key given twice is ambiguous, at any depth
        (
            f'{{{GOOD}, "rollout_logprobs": [-0.1, -0.1]}}',
            "invalid JSON: duplicate key 'rollout_logprobs' in one object",
        ),
        (
            f'{{{GOOD}, "meta": {{"a": 1, "a": 2}}}}',
            "invalid JSON: duplicate key 'a' in one object",
        ),
        # log-probabilities are numbers: not strings, booleans, null or arrays
        (
            GOOD.join("{}").replace("[-0.5, -0.25]", '[-0.5, "-0.25"]'),
            "'train_logprobs'[1] is a string: log-probabilities must be numbers",
        ),
        (
            GOOD.join("{}").replace("[-0.5, -0.3]", "[false, -0.3]"),
            "'rollout_logprobs'[0] is a boolean: log-probabilities must be numbers",
        ),
        (
            GOOD.join("{}").replace("[-0.5, -0.25]", "[-0.5, null]"),
            "'train_logprobs'[1] is null: log-probabilities must be numbers",
        ),
        (
            GOOD.join("{}").replace("[-0.5, -0.25]", "[[-0.5], -0.25]"),
            "'train_logprobs'[0] is an array: log-probabilities must be numbers",
        ),
        (
            GOOD.join("{}").replace("[-0.5, -0.25]", f"[-0.5, -{'9' * 400}]"),
            "'train_logprobs'[1] is beyond the range of a double: log-probabilities must be finite",
        ),
        (
            GOOD.join("{}").replace("[-0.5, -0.3]", "[-0.5, -Infinity]"),
            "'rollout_logprobs'[1] is -inf: log-probabilities must be finite",
        ),
        # token ids: integers in [0, vocab_size)
        (
            GOOD.join("{}").replace("[1, 2]", "[1, true]"),
            "'response_ids'[1] is a boolean: token ids must be integers",
        ),
        (
            GOOD.join("{}").replace("[1, 2]", "[1.0, 2]"),
            "'response_ids'[0] is 1.0: token ids must be integers",
        ),
        (
            GOOD.join("{}").replace("[1, 2]", '[1, "2"]'),
            "'response_ids'[1] is a string: token ids must be integers",
        ),
        (
            GOOD.join("{}").replace("[1, 2]", "[1, -2]"),
            "'response_ids'[1] is negative: token ids must be ≥ 0",
        ),
        (
            GOOD.join("{}").replace("[1, 2]", "[1, 256]"),
            "'response_ids'[1] = 256 is not a token id of the vocabulary (vocab_size 256)",
        ),
        (
            GOOD.join("{}").replace("[1, 2]", f"[{2**63}, 2]"),
            "'response_ids'[0] is too large for a token id",
        ),
        (
            f'{{{GOOD}, "rollout_response_ids": [1, 300]}}',
            "'rollout_response_ids'[1] = 300 is not a token id of the vocabulary (vocab_size 256)",
        ),
        (f'{{{GOOD}, "mask": [1, {"9" * 30}]}}', "'mask' must be an array of 0/1"),
        (f'{{{GOOD}, "mask": [1, 1.0]}}', "'mask' must be an array of 0/1"),
    ],
)
def test_a_bad_field_is_a_counted_bad_line(tmp_path, line, reason):
    path = tmp_path / "bad.jsonl"
    _write_lines(path, [_good(0), line, _good(1)])
    table = read_log(path, vocab_size=256)
    assert table.sequences == 2 and table.tokens == 6
    assert table.malformed_count == 1
    assert [(p.line, p.reason) for p in table.malformed] == [(2, reason)]


def test_split_records_check_token_ids_and_offsets(tmp_path):
    def side(s, ids, lp, **more):
        rec = {"side": s, "prompt_id": "a", "sample_id": 0, "response_ids": ids, "logprobs": lp}
        return json.dumps(rec | more)

    lines = [
        side("rollout", [1, 999], [-0.5, -0.7]),
        side("train", [1, 2], [-0.4, -0.8], position_offset=2**53),
        side("train", [1, 2], [-0.4, True]),
    ]
    path = tmp_path / "split.jsonl"
    _write_lines(path, lines)
    with pytest.raises(LogError) as err:
        read_log(path, vocab_size=512)
    assert str(err.value) == (
        f"{path}: no usable record in 3 non-blank lines (3 malformed); "
        "line 1: 'response_ids'[1] = 999 is not a token id of the vocabulary (vocab_size 512); "
        "line 2: 'position_offset' is too large (positions must stay below 2^53); "
        "line 3: 'logprobs'[1] is a boolean: log-probabilities must be numbers"
    )


def test_token_ids_are_unbounded_above_without_a_vocabulary(tmp_path):
    path = tmp_path / "big.jsonl"
    _write_lines(path, [GOOD.join("{}").replace("[1, 2]", "[1, 250000]")])
    assert read_log(path).columns["token"].tolist() == [1, 250000]


def test_a_log_without_one_usable_record_is_an_error(tmp_path):
    rec = json.loads(_good())
    rec["rollout_response_ids"] = [1, 9, 3]
    lines = [
        _good().replace("-0.25", '"-0.25"'),
        "",
        '{"a": 1, "a": 2}',
        json.dumps(rec),
        "{oops",
        _good().replace("[1, 2, 3]", "[1, 2, 300]"),
    ]
    path = tmp_path / "bad.jsonl"
    _write_lines(path, lines)
    with pytest.raises(LogError) as err:
        read_log(path, vocab_size=256)
    assert str(err.value) == (
        f"{path}: no usable record in 5 non-blank lines (4 malformed, 1 with train and rollout "
        "token ids that differ); line 1: 'rollout_logprobs'[1] is a string: log-probabilities "
        "must be numbers; line 3: invalid JSON: duplicate key 'a' in one object; line 4: token "
        "ids differ between train and rollout (first at token 1: train id 2, rollout id 9) "
        "(and 2 more)"
    )


def test_a_log_of_unpaired_split_records_is_an_error(tmp_path):
    rec = {"side": "rollout", "prompt_id": "a", "sample_id": 0, "response_ids": [1]}
    path = tmp_path / "half.jsonl"
    _write_lines(path, [json.dumps(rec | {"logprobs": [-0.5]})])
    with pytest.raises(LogError) as err:
        read_log(path)
    assert str(err.value) == (
        f"{path}: no usable record in 1 non-blank line (1 unpaired); "
        "line 1: rollout record for prompt 'a' sample 0 has no train record"
    )


def test_a_log_of_non_objects_names_the_bad_lines(tmp_path):
    path = tmp_path / "arrays.jsonl"
    _write_lines(path, ["[1, 2]", "[" * DEEP + "]" * DEEP])
    with pytest.raises(LogError) as err:
        read_log(path)
    assert str(err.value) == (
        f"{path}: no usable record in 2 non-blank lines (2 malformed); line 1: not a JSON "
        "object (got list); line 2: invalid JSON: nested too deeply to read (a record is one "
        "flat object)"
    )


def test_a_key_one_slip_from_a_field_gets_a_hint(tmp_path):
    path = tmp_path / "x.jsonl"
    record = {"responses": [1], "old_logprobs": [-0.5], "rollout_log_probs": [-0.5], "reward": 1}
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(LogError) as err:
        read_log(path, None)
    assert str(err.value).endswith(
        "its keys: old_logprobs, responses, reward, rollout_log_probs; "
        "did you mean 'old_log_probs' for 'old_logprobs'?"
    )
