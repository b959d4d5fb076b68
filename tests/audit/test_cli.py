"""``audit verify`` and ``audit show`` through ``main([...])``: every row of
the audit tool's documented output, each input format, and every exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agents_runtime.log import canonical, record
from agents_runtime.log.checkpoint import signed_checkpoint
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import Head
from audit.cli import main
from tests.audit.logs import OTHER, PUBLIC_KEY, SIGNER, build, head_of, response_body, write

NO_KEY_WARNING = (
    "warning: no --public-key given: this proves only that the file is internally "
    "consistent, nothing about who wrote it"
)
JSON_KEYS = {
    "ok",
    "records",
    "log_id",
    "public_key",
    "key_trusted",
    "head",
    "failure",
    "file",
    "format",
    "first_seq",
    "signatures_checked",
    "checkpoint",
    "checkpoint_checked",
    "checkpoint_signed",
    "expected_log_id",
    "torn_tail",
    "warnings",
}


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, dict[str, Any]]:
    status, out, _ = run(capsys, *argv, "--json")
    assert out.count("\n") == 1, "exactly one JSON object on one line"
    report = json.loads(out)
    assert set(report) == JSON_KEYS
    return status, report


@pytest.fixture
def lines() -> list[bytes]:
    return build(6)


@pytest.fixture
def log(tmp_path: Path, lines: list[bytes]) -> Path:
    return write(tmp_path / "agents" / "agent-1.jsonl", lines)


def tampered(lines: list[bytes], index: int, old: bytes, new: bytes) -> list[bytes]:
    changed = [*lines]
    assert old in changed[index]
    changed[index] = changed[index].replace(old, new, 1)
    return changed


# --- the audit table: file only / plus key / plus key and checkpoint ----------


def test_file_only_is_ok_with_a_warning_that_nothing_is_proven_about_the_writer(
    capsys: pytest.CaptureFixture[str], log: Path, lines: list[bytes]
) -> None:
    status, out, err = run(capsys, "verify", log)
    head = head_of(lines[-1])
    assert status == 0
    assert err == NO_KEY_WARNING + "\n"
    assert out.splitlines() == [
        "OK: 6 records (seq 0 to 5)",
        f"file:       {log} (log: canonical lines, checked byte for byte)",
        "log_id:     agent-1",
        f"head:       {head.seq}:{head.hash}",
        f"public key: {PUBLIC_KEY} (from the genesis record, not given)",
    ]


def test_file_only_json_says_the_key_is_not_trusted(
    capsys: pytest.CaptureFixture[str], log: Path, lines: list[bytes]
) -> None:
    status, report = run_json(capsys, "verify", log)
    assert status == 0
    assert report["ok"] is True
    assert report["records"] == 6
    assert report["log_id"] == "agent-1"
    assert report["public_key"] == PUBLIC_KEY
    assert report["key_trusted"] is False
    assert report["head"] == head_of(lines[-1]).to_json()
    assert report["failure"] is None
    assert report["warnings"] == [NO_KEY_WARNING.removeprefix("warning: ")]
    assert report["format"] == "log"
    assert report["first_seq"] == 0
    assert report["signatures_checked"] is True
    assert report["expected_log_id"] == "agent-1"
    assert report["torn_tail"] is None


def test_with_public_key_every_signature_is_trusted(
    capsys: pytest.CaptureFixture[str], log: Path
) -> None:
    status, out, err = run(capsys, "verify", log, "--public-key", PUBLIC_KEY)
    assert status == 0
    assert err == ""
    assert f"public key: {PUBLIC_KEY} (given; every signature matches it)" in out.splitlines()
    status, report = run_json(capsys, "verify", log, "--public-key", PUBLIC_KEY.upper())
    assert report["key_trusted"] is True
    assert report["warnings"] == []


def test_with_another_public_key_verification_fails(
    capsys: pytest.CaptureFixture[str], log: Path
) -> None:
    status, out, _ = run(capsys, "verify", log, "--public-key", OTHER.public_key_hex)
    assert status == 1
    assert out.splitlines()[:2] == [
        "FAILED: line 1 (seq 0): public key does not match",
        f"  the genesis record names public key {PUBLIC_KEY}, not the one given with --public-key",
    ]
    _, report = run_json(capsys, "verify", log, "--public-key", OTHER.public_key_hex)
    assert report["ok"] is False
    assert report["key_trusted"] is False
    assert report["failure"] == {"line": 1, "seq": 0, "reason": "public key does not match"}


def test_a_log_re_signed_with_another_key_fails_against_the_real_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path / "forged.jsonl", build(4, signer=OTHER))
    assert run(capsys, "verify", path)[0] == 0  # consistent, but says nothing of its writer
    status, report = run_json(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert status == 1
    assert report["failure"]["reason"] == "public key does not match"


def test_with_key_and_checkpoint_the_history_is_unchanged(
    capsys: pytest.CaptureFixture[str], log: Path, lines: list[bytes]
) -> None:
    checkpoint = head_of(lines[3]).checkpoint()
    status, out, _ = run(
        capsys, "verify", log, "--public-key", PUBLIC_KEY, "--checkpoint", checkpoint
    )
    assert status == 0
    assert f"checkpoint: {checkpoint} matches" in out.splitlines()
    _, report = run_json(
        capsys, "verify", log, "--public-key", PUBLIC_KEY, "--checkpoint", checkpoint
    )
    assert report["checkpoint_checked"] is True
    assert report["checkpoint"] == head_of(lines[3]).to_json()


def test_a_log_truncated_before_the_checkpoint_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = write(tmp_path / "agents" / "agent-1.jsonl", lines[:3])
    checkpoint = head_of(lines[4]).checkpoint()
    status, out, _ = run(
        capsys, "verify", path, "--public-key", PUBLIC_KEY, "--checkpoint", checkpoint
    )
    assert status == 1
    assert out.splitlines()[0] == "FAILED: line 4 (seq 4): truncated before checkpoint"
    assert "verified:   3 records before the failure (seq 0 to 2)" in out.splitlines()
    # Without the checkpoint the same file passes: truncation needs a checkpoint.
    assert run(capsys, "verify", path, "--public-key", PUBLIC_KEY)[0] == 0


def test_a_checkpoint_whose_hash_differs_fails(
    capsys: pytest.CaptureFixture[str], log: Path, lines: list[bytes]
) -> None:
    wrong = f"2:{head_of(lines[3]).hash}"
    status, report = run_json(capsys, "verify", log, "--checkpoint", wrong)
    assert status == 1
    assert report["failure"] == {"line": 3, "seq": 2, "reason": "checkpoint hash mismatch"}
    assert report["checkpoint_checked"] is False


# --- failures ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "old", "new", "failure"),
    [
        pytest.param(3, b'"remaining":9', b'"remaining":8', (4, 3, "hash does not match content"),
                     id="content"),
        pytest.param(2, b'"seq":2', b'"seq":3', (3, 3, "hash does not match content"), id="seq"),
        pytest.param(4, b'"sig":"', b'"sig":"0', (5, 4, "record is malformed"), id="sig-length"),
        pytest.param(4, b'"kind"', b'"kind" ', (5, 4, "not canonical JSON"), id="whitespace"),
        pytest.param(5, b"{", b"[", (6, None, "not valid JSON"), id="not-json"),
    ],
)  # fmt: skip
def test_a_changed_record_fails_at_its_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    lines: list[bytes],
    index: int,
    old: bytes,
    new: bytes,
    failure: tuple[int, int | None, str],
) -> None:
    path = write(tmp_path / "agents" / "agent-1.jsonl", tampered(lines, index, old, new))
    status, out, err = run(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    line, seq, reason = failure
    where = f"line {line} (seq {seq})" if seq is not None else f"line {line}"
    assert status == 1
    assert out.splitlines()[0] == f"FAILED: {where}: {reason}"
    assert f"verified:   {line - 1} records before the failure (seq 0 to {line - 2})" in out
    assert err == ""
    _, report = run_json(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert report["failure"] == {"line": line, "seq": seq, "reason": reason}
    assert report["records"] == line - 1
    assert report["head"] == head_of(lines[line - 2]).to_json()


def test_a_log_copied_from_another_agent_fails_by_its_file_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = write(tmp_path / "agents" / "agent-2.jsonl", lines)
    status, out, _ = run(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert status == 1
    assert out.splitlines()[:2] == [
        "FAILED: line 1 (seq 0): log_id does not match",
        "  the genesis record names 'agent-1'; "
        "the file name agents/agent-2.jsonl expects 'agent-2'",
    ]
    _, report = run_json(capsys, "verify", path)
    assert report["expected_log_id"] == "agent-2"
    assert report["log_id"] is None


def test_log_id_option_sets_the_expectation_anywhere(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = write(tmp_path / "copy.jsonl", lines)
    assert run(capsys, "verify", path)[0] == 0  # no expectation from this name
    status, report = run_json(capsys, "verify", path, "--log-id", "agent-9")
    assert status == 1
    assert report["failure"] == {"line": 1, "seq": 0, "reason": "log_id does not match"}
    assert run(capsys, "verify", path, "--log-id", "agent-1")[0] == 0


# --- slices --------------------------------------------------------------------------


def test_a_slice_verifies_its_own_chain_and_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = write(tmp_path / "slice.jsonl", lines[2:])
    status, out, err = run(capsys, "verify", path)
    assert status == 0
    assert "log_id:     unknown (no genesis record in a slice)" in out.splitlines()
    assert "public key: none: signatures not checked" in out.splitlines()
    assert (
        "slice:      starts at seq 2, not 0: verified its own chain only; "
        "records before seq 2 are not covered"
    ) in out.splitlines()
    assert err == (
        "warning: the records start at seq 2, not 0: with no genesis record to take the public "
        "key from and no --public-key, signatures were not checked; this proves only that the "
        "records chain together\n"
    )
    _, report = run_json(capsys, "verify", path)
    assert report["first_seq"] == 2
    assert report["signatures_checked"] is False
    assert report["public_key"] is None
    assert report["log_id"] is None


def test_a_slice_with_the_key_has_every_signature_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = write(tmp_path / "slice.jsonl", lines[2:])
    status, report = run_json(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert status == 0
    assert report["signatures_checked"] is True
    assert report["key_trusted"] is True
    status, report = run_json(capsys, "verify", path, "--public-key", OTHER.public_key_hex)
    assert status == 1
    assert report["failure"] == {"line": 1, "seq": 2, "reason": "bad signature"}


# --- saved from the log endpoint ----------------------------------------------------


@pytest.mark.parametrize(
    "dump",
    [pytest.param({}, id="compact"), pytest.param({"indent": 2}, id="pretty")],
)
def test_a_saved_response_body_verifies(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    lines: list[bytes],
    dump: dict[str, Any],
) -> None:
    path = tmp_path / "log.json"
    path.write_text(response_body(lines, **dump), encoding="utf-8")
    status, report = run_json(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert status == 0
    assert report["format"] == "response"
    assert report["records"] == 6
    assert report["head"] == head_of(lines[-1]).to_json()
    assert report["warnings"] == []


def test_a_tampered_record_in_a_response_body_fails_at_its_position(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = tmp_path / "log.json"
    path.write_text(response_body(tampered(lines, 4, b'"success"', b'"failure"'), indent=1))
    status, report = run_json(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert status == 1
    assert report["failure"] == {"line": 5, "seq": 4, "reason": "hash does not match content"}


def test_a_duplicate_key_in_a_response_record_is_not_valid_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    body = response_body(lines, indent=1).replace(
        '"outcome": "success"', '"outcome": "x", "outcome": "success"'
    )
    path = tmp_path / "log.json"
    path.write_text(body)
    status, report = run_json(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert status == 1
    assert report["failure"] == {"line": 5, "seq": None, "reason": "not valid JSON"}


def test_a_response_that_is_one_page_says_how_to_fetch_the_rest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = tmp_path / "page.json"
    path.write_text(response_body(lines[:4], head=head_of(lines[5])))
    status, _, err = run(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert status == 0
    assert err == (
        "warning: the response's head is seq 5 but its records end at seq 3: this is one page "
        "of the log; fetch the rest with ?after=3\n"
    )


def test_a_response_whose_head_hash_differs_is_flagged(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = tmp_path / "log.json"
    path.write_text(response_body(lines, head=Head(5, "0" * 64)))
    _, report = run_json(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert report["warnings"] == ["the response's head hash is not the hash of its last record"]


def test_saved_records_one_per_line_are_re_canonicalized(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    loose = "".join(json.dumps(json.loads(line), indent=None) + "\n" for line in lines)
    path = tmp_path / "records.jsonl"
    path.write_text(loose + "\n", encoding="utf-8")
    status, report = run_json(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert status == 0
    assert report["format"] == "records"
    assert report["records"] == 6
    assert report["warnings"] == [
        "the lines are not in canonical form, so this is not a data-dir log: each record was "
        "re-canonicalized before verification, which proves the records' content, not these bytes"
    ]


def test_saved_records_with_changed_content_fail(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    changed = tampered(lines, 3, b'"remaining":9', b'"remaining":90')
    loose = "\n\n".join(json.dumps(json.loads(line)) for line in changed)
    path = tmp_path / "records.jsonl"
    path.write_text(loose, encoding="utf-8")
    status, report = run_json(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert status == 1
    # Blank lines are skipped but still counted: record 4 is on line 7.
    assert report["failure"] == {"line": 7, "seq": 3, "reason": "hash does not match content"}


def test_a_data_dir_log_is_checked_byte_for_byte_even_when_a_line_is_loose(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    loose = json.dumps(json.loads(lines[0])).encode() + b"\n"
    path = write(tmp_path / "agents" / "agent-1.jsonl", [loose, *lines[1:]])
    _, report = run_json(capsys, "verify", path)
    assert report["failure"] == {"line": 1, "seq": 0, "reason": "not canonical JSON"}


# --- torn tails ---------------------------------------------------------------------


def test_a_torn_tail_is_reported_and_the_complete_lines_verified(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    torn = lines[5][:40]
    path = write(tmp_path / "agents" / "agent-1.jsonl", lines[:5], tail=torn)
    status, out, err = run(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert status == 0
    assert out.splitlines()[0] == "OK: 5 records (seq 0 to 4)"
    assert err == (
        "warning: line 6: torn tail of 40 bytes without a final newline that do not parse "
        "(a write cut short by a crash): not verified, not counted\n"
    )
    assert "torn tail:  line 6, 40 bytes, not verified" in out.splitlines()
    _, report = run_json(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert report["torn_tail"] == {"line": 6, "bytes": 40}
    assert report["records"] == 5


def test_a_last_line_without_newline_is_verified_with_a_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = write(tmp_path / "agents" / "agent-1.jsonl", [*lines[:5], lines[5][:-1]])
    status, report = run_json(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert status == 0
    assert report["records"] == 6
    assert report["warnings"] == [
        "the last line has no final newline (a crash cut the write after the record); "
        "the record itself was verified"
    ]


# --- unreadable input and usage errors: exit 2, one line ------------------------


UNREADABLE = [
    pytest.param(b"", "is empty: no records to read", id="empty"),
    pytest.param(b"\n \n", "is empty: no records to read", id="blank"),
    pytest.param(b"\xff\xfe\x00garbage\n", "is not UTF-8 text", id="binary"),
    pytest.param(
        b"hello\nworld\n",
        "is neither a log (one JSON record per line) nor a saved log response "
        '({"records": [...], "head": {...}})',
        id="text",
    ),
    pytest.param(b"[1, 2]\n", "is neither a log", id="json-array"),
    pytest.param(b'{"seq":0', "holds no complete record (only 8 torn bytes)", id="torn-only"),
    pytest.param(b'{"records": 5}', ': "records" is not a list', id="records-not-list"),
    pytest.param(b'{"records": []}', ': "records" is empty: no records to read', id="no-records"),
]


@pytest.mark.parametrize(("content", "message"), UNREADABLE)
def test_unreadable_input_is_one_line_on_stderr_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "input.jsonl"
    path.write_bytes(content)
    for command in ("verify", "show"):
        status, out, err = run(capsys, command, path)
        assert status == 2
        assert out == ""
        assert err.count("\n") == 1
        assert err.startswith(f"audit: error: {path}{' ' if message[0] != ':' else ''}{message}")


USAGE_ERRORS = [
    pytest.param(["verify", "{missing}"], "{missing}: no such file", id="missing"),
    pytest.param(["verify", "{dir}"], "{dir}: is a directory, not a log file", id="dir"),
    pytest.param(
        [],
        "the following arguments are required: COMMAND (see 'audit --help')",
        id="no-command",
    ),
    pytest.param(
        ["verify"],
        "give the log file to verify (or --store URL)",
        id="no-file",
    ),
    pytest.param(
        ["frobnicate"],
        "argument COMMAND: invalid choice: 'frobnicate'",
        id="bad-command",
    ),
    pytest.param(
        ["verify", "{log}", "--public-key", "abc"],
        "argument --public-key: must be 64 hex characters "
        "(an Ed25519 public key), not 'abc' (see 'audit verify --help')",
        id="bad-key",
    ),
    pytest.param(
        ["verify", "{log}", "--public-key", "g" * 64],
        "argument --public-key: must be 64 hex characters",
        id="non-hex-key",
    ),
    pytest.param(
        ["verify", "{log}", "--checkpoint", "5"],
        "argument --checkpoint: checkpoint must be <seq>:<64 hex characters>, not '5'",
        id="bad-checkpoint",
    ),
    pytest.param(
        ["verify", "{log}", "--log-id", "a b"],
        "argument --log-id: must be an agent ID (1 to 64 of A-Z a-z 0-9 _ -), not 'a b'",
        id="bad-log-id",
    ),
    pytest.param(
        ["verify", "{log}", "--frob"],
        "unrecognized arguments: --frob (see 'audit verify --help')",
        id="unknown-option",
    ),
    pytest.param(
        ["show", "{log}", "--public-key", PUBLIC_KEY],
        f"unrecognized arguments: --public-key {PUBLIC_KEY} (see 'audit show --help')",
        id="show-takes-no-key",
    ),
]


@pytest.mark.parametrize(("argv", "message"), USAGE_ERRORS)
def test_usage_errors_are_one_line_on_stderr_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, log: Path, argv: list[str], message: str
) -> None:
    names = {"missing": tmp_path / "nope.jsonl", "dir": tmp_path, "log": log}
    status, out, err = run(capsys, *[a.format(**names) for a in argv])
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("audit: error: " + message.format(**names))


def test_an_error_names_the_tool_once(capsys: pytest.CaptureFixture[str], log: Path) -> None:
    for argv in (["verify", log, "--public-key", "abc"], ["frobnicate"], ["verify", log, "-x"]):
        _, _, err = run(capsys, *argv)
        assert err.startswith("audit: error: ")
        assert "audit: error: audit" not in err
        assert err.count("audit") == 2  # the prefix and the help hint


@pytest.mark.parametrize(
    "flag",
    [
        pytest.param("--bogus", id="unknown"),
        pytest.param("--log", id="start-of-log-id"),
        pytest.param("--pub", id="start-of-public-key"),
        pytest.param("--js", id="start-of-json"),
    ],
)
def test_an_unknown_flag_is_refused_and_does_not_take_the_next_argument(
    capsys: pytest.CaptureFixture[str], log: Path, flag: str
) -> None:
    status, out, err = run(capsys, "verify", flag, log)
    assert status == 2
    assert out == ""
    assert err == f"audit: error: unrecognized arguments: {flag} (see 'audit verify --help')\n"


def test_a_file_that_cannot_be_read_is_exit_2(
    capsys: pytest.CaptureFixture[str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    status, _, err = run(capsys, "verify", log)
    assert status == 2
    assert err == f"audit: error: {log}: cannot read: Permission denied\n"


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "verify", "--help")
    assert status == 0
    assert "--public-key HEX" in out
    assert "--checkpoint SEQ:HASH" in out


# --- show ---------------------------------------------------------------------------


def test_show_prints_a_table_of_the_records(
    capsys: pytest.CaptureFixture[str], log: Path, lines: list[bytes]
) -> None:
    status, out, err = run(capsys, "show", log)
    assert status == 0
    assert err == ""
    rows = out.splitlines()
    assert rows[0].split() == ["SEQ", "KIND", "TS", "HASH", "SUMMARY"]
    assert len(rows) == 7
    genesis_hash = canonical.loads(lines[0])["hash"][:12]
    assert rows[1].split()[:4] == ["0", "genesis", "2025-03-01T12:00:00.000000Z", genesis_hash]
    assert "log_id=agent-1" in rows[1]
    assert rows[2].endswith("budget=10 scar_limit=5 tools=none")
    assert rows[3].endswith(
        "action_id=act-1 tool=web_search cost=0.5 requested_cost=null "
        'input={"max_results":3,"query":"café 2"}'
    )
    assert rows[4].endswith("action_id=act-1 cost=0.5 remaining=9")
    assert rows[5].endswith("action_id=act-1 outcome=success by=agent")


def test_show_json_prints_one_canonical_record_per_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = tmp_path / "log.json"
    path.write_text(response_body(lines, indent=2))
    status, out, _ = run(capsys, "show", path, "--json")
    assert status == 0
    assert out.encode() == b"".join(lines)


def test_show_marks_a_line_that_is_not_a_record_and_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = write(tmp_path / "agents" / "agent-1.jsonl", [lines[0], b"oops\n", *lines[2:]])
    status, out, _ = run(capsys, "show", path)
    assert status == 1
    assert out.splitlines()[2].split() == ["?", "?", "line", "2:", "not", "a", "JSON", "record"]
    status, out, err = run(capsys, "show", path, "--json")
    assert status == 1
    assert err == "warning: line 2 is not a JSON record; skipped\n"
    assert len(out.splitlines()) == 5


def test_show_escapes_terminal_control_characters(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = build(2)
    head = head_of(lines[-1])
    nasty = record.seal(
        {"kind": "scar\x1b[2J", "reason": "bad\x1b]0;pwned\x07 \u202eevil", "by": "x"},
        prev=head,
        ts="2025-03-01T12:00:01.000000Z",
        signer=SIGNER,
    )
    path = write(tmp_path / "log.jsonl", [*lines, nasty.line])
    status, out, _ = run(capsys, "show", path)
    assert status == 0
    assert "\x1b" not in out
    assert "\x07" not in out
    assert "\u202e" not in out
    assert "scar\\u001b[2J" in out


def test_show_reports_a_torn_tail(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = write(tmp_path / "agents" / "agent-1.jsonl", lines[:3], tail=b'{"seq":3,')
    status, out, err = run(capsys, "show", path)
    assert status == 0
    assert err == "warning: line 4: torn tail of 9 bytes, not shown\n"
    assert len(out.splitlines()) == 4


# --- the console script ---------------------------------------------------------------


def test_python_dash_m_audit_runs_the_cli(log: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "audit", "verify", str(log), "--public-key", PUBLIC_KEY, "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True


def test_main_reads_sys_argv_when_given_none(
    capsys: pytest.CaptureFixture[str], log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        sys, "argv", ["audit", "verify", str(log), "--public-key", SIGNER.public_key_hex]
    )
    assert main() == 0
    assert capsys.readouterr().out.startswith("OK: 6 records")


# --- checkpoint files and logs cut to their genesis ------------------------------------


def test_checkpoint_file_is_read_like_checkpoint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, log: Path, lines: list[bytes]
) -> None:
    checkpoint = tmp_path / "agent-1.checkpoint"
    checkpoint.write_text(head_of(lines[3]).checkpoint() + "\n")
    status, report = run_json(capsys, "verify", log, "--checkpoint-file", checkpoint)
    assert status == 0
    assert report["checkpoint_checked"] is True
    assert report["checkpoint"] == head_of(lines[3]).to_json()
    short = write(tmp_path / "agents" / "agent-1.jsonl", lines[:3])
    status, report = run_json(capsys, "verify", short, "--checkpoint-file", checkpoint)
    assert status == 1
    assert report["failure"] == {"line": 4, "seq": 3, "reason": "truncated before checkpoint"}


def test_a_signed_checkpoint_file_is_checked_for_signature_origin_and_head(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, log: Path, lines: list[bytes]
) -> None:
    checkpoint = tmp_path / "agent-1.checkpoint"
    checkpoint.write_bytes(signed_checkpoint("agent-1", head_of(lines[3]), SIGNER))
    argv = ["verify", log, "--public-key", PUBLIC_KEY, "--checkpoint-file", checkpoint]
    status, report = run_json(capsys, *argv)
    assert status == 0
    assert (report["checkpoint_checked"], report["checkpoint_signed"]) == (True, True)
    assert report["checkpoint"] == head_of(lines[3]).to_json()
    status, out, _ = run(capsys, *argv)
    assert f"checkpoint: {head_of(lines[3]).checkpoint()} matches (signed by that key, " in out
    # Without --public-key: the genesis record's key, not trusted (warned as ever).
    status, report = run_json(capsys, "verify", log, "--checkpoint-file", checkpoint)
    assert (status, report["checkpoint_signed"], report["key_trusted"]) == (0, True, False)
    # The log cut behind it.
    short = write(tmp_path / "agents" / "agent-1.jsonl", lines[:3])
    status, report = run_json(capsys, "verify", short, "--checkpoint-file", checkpoint)
    assert status == 1
    assert report["failure"] == {"line": 4, "seq": 3, "reason": "truncated before checkpoint"}
    assert report["checkpoint_signed"] is False


@pytest.mark.parametrize(
    ("writer", "agent_id", "reason", "detail"),
    [
        pytest.param(
            OTHER,
            "agent-1",
            "checkpoint signature does not verify",
            "the checkpoint file: it has no signature by the key guardd",
            id="forged",
        ),
        pytest.param(
            SIGNER,
            "agent-2",
            "checkpoint is for another log",
            "the checkpoint file names origin 'guardd/agent-2'; this log is 'agent-1'",
            id="another-agent",
        ),
    ],
)
def test_a_forged_or_copied_checkpoint_file_fails(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    log: Path,
    lines: list[bytes],
    writer: Signer,
    agent_id: str,
    reason: str,
    detail: str,
) -> None:
    checkpoint = tmp_path / "agent-1.checkpoint"
    checkpoint.write_bytes(signed_checkpoint(agent_id, head_of(lines[3]), writer))
    argv = ["verify", log, "--public-key", PUBLIC_KEY, "--checkpoint-file", checkpoint]
    status, report = run_json(capsys, *argv)
    assert status == 1
    assert report["failure"] == {"line": 0, "seq": None, "reason": reason}
    assert report["checkpoint_signed"] is False
    status, out, _ = run(capsys, *argv)
    assert out.splitlines()[0] == f"FAILED: checkpoint file: {reason}"
    assert out.splitlines()[1].startswith(f"  {detail}")


def test_an_old_unsigned_checkpoint_file_is_checked_with_a_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, log: Path, lines: list[bytes]
) -> None:
    checkpoint = tmp_path / "agent-1.checkpoint"
    checkpoint.write_text(head_of(lines[3]).checkpoint() + "\n")
    argv = ["verify", log, "--public-key", PUBLIC_KEY, "--checkpoint-file", checkpoint]
    status, report = run_json(capsys, *argv)
    assert (status, report["checkpoint_checked"], report["checkpoint_signed"]) == (0, True, False)
    assert any("checkpoint file is unsigned" in w for w in report["warnings"])
    status, out, err = run(capsys, *argv)
    assert "(unsigned: an older version's file)" in out
    assert "warning: the checkpoint file is unsigned" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "no such file: {path}", id="missing"),
        pytest.param(
            "5\n", "{path}: checkpoint must be <seq>:<64 hex characters>, not '5'", id="malformed"
        ),
        pytest.param(
            "5:" + "ab" * 32, "{path}: no final line feed: not a checkpoint", id="no-newline"
        ),
    ],
)
def test_a_bad_checkpoint_file_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, log: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "head.checkpoint"
    if content is not None:
        path.write_text(content)
    status, out, err = run(capsys, "verify", log, "--checkpoint-file", path)
    assert status == 2
    assert out == ""
    assert err == (
        f"audit: error: argument --checkpoint-file: {message.format(path=path)} "
        "(see 'audit verify --help')\n"
    )


def test_checkpoint_and_checkpoint_file_cannot_both_be_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, log: Path, lines: list[bytes]
) -> None:
    path = tmp_path / "head.checkpoint"
    path.write_text(head_of(lines[3]).checkpoint() + "\n")
    checkpoint = head_of(lines[3]).checkpoint()
    status, _, err = run(
        capsys, "verify", log, "--checkpoint", checkpoint, "--checkpoint-file", path
    )
    assert status == 2
    assert "not allowed with argument --checkpoint" in err


def test_an_agent_log_holding_only_its_genesis_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[bytes]
) -> None:
    path = write(tmp_path / "agents" / "agent-1.jsonl", lines[:1])
    status, out, _ = run(capsys, "verify", path, "--public-key", PUBLIC_KEY)
    assert status == 1
    assert out.splitlines()[0] == "FAILED: line 2 (seq 1): log has no policy record"
    # Saved records with no log_id to expect may be one page of a log: they pass.
    saved = write(tmp_path / "page.jsonl", lines[:1])
    assert run(capsys, "verify", saved, "--public-key", PUBLIC_KEY)[0] == 0
