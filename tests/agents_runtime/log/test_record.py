"""agents_runtime.log.record, and the worked example of docs/log-format.md.

The worked example is checked by an independent mini-verifier built from the
document's rules with only hashlib, PyNaCl and rfc8785, so the document, the
fixture and our writer cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from agents_runtime.core.state import parse_ts
from agents_runtime.log import canonical, record, verify
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import Head

ROOT = Path(__file__).parents[3]
DATA = ROOT / "tests" / "data"
DOC = (ROOT / "docs" / "log-format.md").read_text(encoding="utf-8")
EXAMPLE = (DATA / "worked-example.jsonl").read_bytes()
SEED = bytes.fromhex((DATA / "worked-example.key").read_text().strip())
PREFIX = b"guard-log/1 record\n"


# --- the independent mini-verifier ---------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), "duplicate key"
    return dict(pairs)


def independent_check(data: bytes, public_key: bytes) -> list[dict[str, Any]]:
    """Verify a whole log by the rules of docs/log-format.md; return, per
    record, the values the document shows."""
    assert data.endswith(b"\n")
    key = nacl.signing.VerifyKey(public_key)
    prev = "0" * 64
    shown = []
    for seq, line in enumerate(data[:-1].split(b"\n")):
        rec = json.loads(line, object_pairs_hook=_no_duplicates)
        assert rfc8785.dumps(rec) == line
        assert rec["seq"] == seq
        assert rec["prev"] == prev
        body = {k: v for k, v in rec.items() if k not in ("hash", "sig")}
        hash_input = rfc8785.dumps(body)
        digest = hashlib.sha256(hash_input).hexdigest()
        assert rec["hash"] == digest
        message = PREFIX + bytes.fromhex(digest)
        key.verify(message, bytes.fromhex(rec["sig"]))
        if seq == 0:
            assert rec["kind"] == "genesis"
            assert rec["format"] == "guard-log/1"
            assert bytes.fromhex(rec["public_key"]) == public_key
        prev = digest
        shown.append(
            {"hash_input": hash_input, "hash": digest, "message": message, "sig": rec["sig"]}
        )
    return shown


def test_worked_example_passes_the_independent_verifier() -> None:
    public = bytes(nacl.signing.SigningKey(SEED).verify_key)
    assert len(independent_check(EXAMPLE, public)) == 3


def test_worked_example_passes_our_verifier_with_its_key_and_log_id() -> None:
    report = verify.verify_lines(
        EXAMPLE.splitlines(), public_key=Signer(SEED).public_key, log_id="worked-example"
    )
    assert report.ok
    assert report.key_trusted
    assert report.head == Head(2, json.loads(EXAMPLE.splitlines()[2])["hash"])


def test_worked_example_seed_is_bytes_00_to_1f() -> None:
    assert bytes(range(32)) == SEED


def test_document_shows_the_fixture_lines_verbatim() -> None:
    block = "\n".join(line.decode("utf-8") for line in EXAMPLE.splitlines())
    assert f"```json\n{block}\n```" in DOC


def test_document_shows_each_hash_input_hash_message_and_signature() -> None:
    public = bytes(nacl.signing.SigningKey(SEED).verify_key)
    assert f"public key  {public.hex()}" in DOC
    assert f"seed        {SEED.hex()}" in DOC
    for values in independent_check(EXAMPLE, public):
        text = values["hash_input"].decode("utf-8")
        assert f"```json\n{text}\n```" in DOC
        assert f"({len(values['hash_input'])} bytes" in DOC
        assert f"hash              {values['hash']}" in DOC
        assert f"signing message   {values['message'].hex()}" in DOC
        assert f"sig               {values['sig']}" in DOC


def test_document_code_sketch_checks_the_example(monkeypatch: pytest.MonkeyPatch) -> None:
    [code] = re.findall(r"```python\n(.*?)```", DOC, flags=re.DOTALL)
    monkeypatch.chdir(DATA)
    exec(code, {"PUBLIC_KEY_HEX": Signer(SEED).public_key_hex})  # noqa: S102 - our own doc


def test_document_lists_every_fixed_failure_reason() -> None:
    reasons = {
        name: value
        for name, value in vars(verify).items()
        if name.isupper() and isinstance(value, str) and name not in vars(record)
    }
    assert len(reasons) == 20
    for name, phrase in reasons.items():
        assert f"| `{phrase}` | `{name}` |" in DOC


def test_seal_reproduces_the_worked_example_byte_for_byte() -> None:
    """Our writer, given the example's fields and timestamps, writes the file."""
    signer = Signer(SEED)
    inputs = [
        (record.genesis_fields("worked-example", signer.public_key_hex), "00.000000"),
        (
            {
                "kind": "policy",
                "policy": {
                    "budget": 100,
                    "scar_limit": 10,
                    "tools": {
                        "web_search": {
                            "cost": Decimal("0.5"),
                            "requires_approval": False,
                            "max_calls": None,
                        }
                    },
                    "default": None,
                    "rate_limit": None,
                },
            },
            "00.000125",
        ),
        (
            {
                "kind": "action_requested",
                "action_id": "act-1",
                "tool": "web_search",
                "input": {"query": "café in Zürich", "max_results": 3},
                "requested_cost": None,
                "cost": Decimal("0.5"),
            },
            "05.250000",
        ),
    ]
    head = Head.empty()
    out = b""
    for fields, seconds in inputs:
        sealed = record.seal(fields, prev=head, ts=f"2025-03-01T12:00:{seconds}Z", signer=signer)
        out += sealed.line
        head = sealed.head
    assert out == EXAMPLE


# --- record ---------------------------------------------------------------------------


def test_seal_chains_hashes_and_signs() -> None:
    signer = Signer(SEED)
    prev = Head(4, "ab" * 32)
    sealed = record.seal({"kind": "scar", "severity": "minor"}, prev=prev, ts="T", signer=signer)
    rec = sealed.record
    assert (rec["seq"], rec["prev"], rec["ts"]) == (5, "ab" * 32, "T")
    assert rec["hash"] == record.content_hash(rec)
    assert signer.public_key == bytes(nacl.signing.SigningKey(SEED).verify_key)
    nacl.signing.VerifyKey(signer.public_key).verify(
        PREFIX + bytes.fromhex(rec["hash"]), bytes.fromhex(rec["sig"])
    )
    assert sealed.line == canonical.dumps(rec) + b"\n"
    assert sealed.head == Head(5, rec["hash"])


def test_seal_does_not_change_the_fields_given() -> None:
    fields = {"kind": "outcome", "outcome": "success"}
    record.seal(fields, prev=Head.empty(), ts="T", signer=Signer(SEED))
    assert fields == {"kind": "outcome", "outcome": "success"}


def test_seal_refuses_fields_without_a_kind() -> None:
    with pytest.raises(ValueError, match=r"^a record needs a kind$"):
        record.seal({"tool": "x"}, prev=Head.empty(), ts="T", signer=Signer(SEED))


def test_content_hash_ignores_hash_and_sig_only() -> None:
    base = {"kind": "k", "seq": 0}
    assert record.content_hash(base) == record.content_hash({**base, "hash": "x", "sig": "y"})
    assert record.content_hash(base) != record.content_hash({**base, "ts": "T"})
    assert record.content_hash(base) == hashlib.sha256(b'{"kind":"k","seq":0}').hexdigest()


def test_signing_message_is_prefix_and_raw_hash_bytes() -> None:
    digest = "0f" * 32
    message = record.signing_message(digest)
    assert message == b"guard-log/1 record\n" + b"\x0f" * 32
    assert len(record.SIGNING_PREFIX) == 19
    assert len(message) == 51


@pytest.mark.parametrize(
    ("now", "text"),
    [
        pytest.param(
            datetime(2025, 3, 1, 12, 0, 5, 250000, tzinfo=UTC),
            "2025-03-01T12:00:05.250000Z",
            id="utc",
        ),
        pytest.param(
            datetime(2025, 3, 1, 13, 0, tzinfo=timezone(timedelta(hours=1))),
            "2025-03-01T12:00:00.000000Z",
            id="utc-plus-1",
        ),
    ],
)
def test_timestamp_is_utc_with_microseconds_and_z(now: datetime, text: str) -> None:
    assert record.timestamp(now) == text


@given(st.integers(min_value=0, max_value=253402300799999999))  # up to 9999-12-31
def test_timestamp_micros_is_the_timestamp_of_that_moment_and_parses_back(micros: int) -> None:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    text = record.timestamp_micros(micros)
    assert text == record.timestamp(moment)
    assert parse_ts(text) == micros / 1_000_000


def test_head_of_an_empty_log_and_its_checkpoint_text() -> None:
    assert Head.empty() == Head(-1, "0" * 64)
    assert Head(7, "ab" * 32).checkpoint() == "7:" + "ab" * 32
    assert Head(7, "cd" * 32).to_json() == {"seq": 7, "hash": "cd" * 32}


def test_genesis_fields_name_format_log_id_and_key() -> None:
    assert record.genesis_fields("a", "00" * 32) == {
        "kind": "genesis",
        "format": "guard-log/1",
        "log_id": "a",
        "public_key": "00" * 32,
    }
