"""An independent verifier of guard logs, written from the format description
alone (docs/log-format.md; DECISIONS.md section 4). It shares no code with
agents_runtime and uses only hashlib, nacl, rfc8785 and json, so a test that
passes with it shows the log can be checked by someone who has only the
document and the public key.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

import nacl.exceptions
import nacl.signing
import rfc8785

FORMAT = "guard-log/1"
SIGNING_PREFIX = b"guard-log/1 record\n"  # 19 bytes, then the 32 raw bytes of the hash
ZERO_HASH = "0" * 64
MAX_INT = 2**53 - 1
HEX64 = re.compile(r"[0-9a-f]{64}")
HEX128 = re.compile(r"[0-9a-f]{128}")
TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


class Invalid(Exception):
    """The first bad record: 1-based line, its seq when readable, and why."""

    def __init__(self, line: int, seq: int | None, reason: str) -> None:
        super().__init__(f"line {line} (seq {seq}): {reason}")
        self.line, self.seq, self.reason = line, seq, reason


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key")
    return dict(pairs)


def _int(text: str) -> int:
    value = int(text)
    if abs(value) > MAX_INT:
        raise ValueError("integer beyond 2^53-1")
    return value


def _constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def parse(line: bytes) -> Any:
    """Strict JSON: UTF-8, no duplicate keys, no NaN or infinities, integers within 2^53-1."""
    return json.loads(
        line.decode("utf-8"),
        object_pairs_hook=_no_duplicates,
        parse_int=_int,
        parse_constant=_constant,
    )


def content_hash(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k not in ("hash", "sig")}
    return hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def verify(
    lines: Iterable[bytes], *, public_key_hex: str, log_id: str
) -> tuple[int, dict[str, Any]]:
    """Verify a whole log (lines without their newlines) against a trusted key.
    Returns the record count and the head ``{seq, hash}``; raises Invalid."""
    key = nacl.signing.VerifyKey(bytes.fromhex(public_key_hex))
    head: dict[str, Any] | None = None
    count = 0
    for number, line in enumerate(lines, start=1):
        try:
            record = parse(line)
        except (UnicodeDecodeError, ValueError):
            raise Invalid(number, None, "not valid JSON") from None
        if not isinstance(record, dict) or type(record.get("seq")) is not int:
            raise Invalid(number, None, "record is malformed")
        seq = record["seq"]
        if not (
            isinstance(record.get("kind"), str)
            and isinstance(record.get("ts"), str)
            and TS.fullmatch(record["ts"])
            and HEX64.fullmatch(str(record.get("prev")))
            and HEX64.fullmatch(str(record.get("hash")))
            and HEX128.fullmatch(str(record.get("sig")))
        ):
            raise Invalid(number, seq, "record is malformed")
        try:
            canonical = rfc8785.dumps(record)
        except rfc8785.CanonicalizationError:
            raise Invalid(number, seq, "not canonical JSON") from None
        if canonical != line:
            raise Invalid(number, seq, "not canonical JSON")
        if content_hash(record) != record["hash"]:
            raise Invalid(number, seq, "hash does not match content")
        expected_seq = 0 if head is None else head["seq"] + 1
        if seq != expected_seq:
            raise Invalid(number, seq, "seq out of order")
        if record["prev"] != (ZERO_HASH if head is None else head["hash"]):
            raise Invalid(number, seq, "prev does not match previous hash")
        if seq == 0:
            if (record["kind"], record.get("format")) != ("genesis", FORMAT):
                raise Invalid(number, seq, "genesis is malformed")
            if record.get("log_id") != log_id:
                raise Invalid(number, seq, "log_id does not match")
            if record.get("public_key") != public_key_hex:
                raise Invalid(number, seq, "public key does not match")
        elif record["kind"] == "genesis":
            raise Invalid(number, seq, "genesis is malformed")
        message = SIGNING_PREFIX + bytes.fromhex(record["hash"])
        try:
            key.verify(message, bytes.fromhex(record["sig"]))
        except nacl.exceptions.BadSignatureError:
            raise Invalid(number, seq, "bad signature") from None
        head = {"seq": seq, "hash": record["hash"]}
        count += 1
    if head is None:
        raise Invalid(1, None, "empty log")
    return count, head


def verify_file(data: bytes, *, public_key_hex: str, log_id: str) -> tuple[int, dict[str, Any]]:
    """A log file: one canonical record per line, every line ending in a newline."""
    if not data.endswith(b"\n"):
        raise Invalid(data.count(b"\n") + 1, None, "last line has no newline")
    return verify(data.split(b"\n")[:-1], public_key_hex=public_key_hex, log_id=log_id)


def verify_records(
    records: list[dict[str, Any]], *, public_key_hex: str, log_id: str
) -> tuple[int, dict[str, Any]]:
    """Records as parsed from the log endpoint: each written back in canonical form."""
    lines = [rfc8785.dumps(record) for record in records]
    return verify(lines, public_key_hex=public_key_hex, log_id=log_id)


def write_log(log_id: str, bodies: list[dict[str, Any]], *, seed: bytes, ts: str) -> bytes:
    """A log file written from the format description alone: genesis, then one
    record per body (each holds ``kind`` and that kind's fields)."""
    key = nacl.signing.SigningKey(seed)
    public_key_hex = bytes(key.verify_key).hex()
    genesis = {"kind": "genesis", "format": FORMAT, "log_id": log_id, "public_key": public_key_hex}
    out: list[bytes] = []
    prev = ZERO_HASH
    for seq, body in enumerate([genesis, *bodies]):
        record = {**body, "seq": seq, "ts": ts, "prev": prev}
        record["hash"] = prev = content_hash(record)
        record["sig"] = key.sign(SIGNING_PREFIX + bytes.fromhex(prev)).signature.hex()
        out.append(rfc8785.dumps(record) + b"\n")
    return b"".join(out)
