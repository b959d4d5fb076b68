"""An independent verifier of guard logs, written from the format description
alone (docs/log-format.md). It shares no code with
agents_runtime and uses only hashlib, nacl, rfc8785 and json, so a test that
passes with it shows the log can be checked by someone who has only the
document and the public key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

import nacl.exceptions
import nacl.signing
import rfc8785

FORMAT = "guard-log/1"
SIGNING_PREFIX = b"guard-log/1 record\n"  # 19 bytes, then the 32 raw bytes of the hash
ZERO_HASH = "0" * 64
MAX_INT = 2**53 - 1
MAX_DEPTH = 64
INFINITY = float("inf")


def _hex(value: Any, length: int) -> bool:
    return (
        isinstance(value, str)
        and len(value) == length
        and all(c in "0123456789abcdef" for c in value)
    )


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


def _float(text: str) -> float:
    value = float(text)
    if abs(value) == INFINITY or (value.is_integer() and 2**53 <= abs(value) < 1e21):
        raise ValueError("number RFC 8785 cannot write back")
    return value


def _constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _check_values(value: Any) -> None:
    """Nesting at most MAX_DEPTH; no lone surrogate in any string or key."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            item.encode("utf-8")  # UnicodeEncodeError (a ValueError) for a lone surrogate
        elif isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise ValueError("nested too deep")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def parse(line: bytes) -> Any:
    """Strict JSON as the format requires: UTF-8, no duplicate keys, no NaN or
    infinities, integers within 2^53-1, no whole-number double from 2^53 to
    below 10^21, no lone surrogate, nesting at most 64 levels."""
    try:
        value = json.loads(
            line.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_int=_int,
            parse_float=_float,
            parse_constant=_constant,
        )
    except RecursionError:
        raise ValueError("nested too deep") from None
    _check_values(value)
    return value


def content_hash(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k not in ("hash", "sig")}
    return hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def verify(
    lines: Iterable[bytes],
    *,
    public_key_hex: str,
    log_id: str,
    checkpoint: tuple[int, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """Verify a whole log (lines without their newlines) against a trusted key,
    and a checkpoint ``(seq, hash)`` if given. Returns the record count and the
    head ``{seq, hash}``; raises Invalid."""
    key = nacl.signing.VerifyKey(bytes.fromhex(public_key_hex))
    head: dict[str, Any] | None = None
    count = 0
    reached = checkpoint is None
    for number, line in enumerate(lines, start=1):
        try:
            record = parse(line)
        except ValueError:  # UnicodeDecodeError and UnicodeEncodeError included
            raise Invalid(number, None, "not valid JSON") from None
        if not isinstance(record, dict) or type(record.get("seq")) is not int:
            raise Invalid(number, None, "record is malformed")
        seq = record["seq"]
        if seq < 0:
            raise Invalid(number, None, "record is malformed")
        if not (
            isinstance(record.get("kind"), str)
            and isinstance(record.get("ts"), str)
            and _hex(record.get("prev"), 64)
            and _hex(record.get("hash"), 64)
            and _hex(record.get("sig"), 128)
        ):
            raise Invalid(number, seq, "record is malformed")
        if rfc8785.dumps(record) != line:
            raise Invalid(number, seq, "not canonical JSON")
        if content_hash(record) != record["hash"]:
            raise Invalid(number, seq, "hash does not match content")
        if head is None:
            if seq != 0:
                raise Invalid(number, seq, "seq out of order")  # a slice: not a whole log
            if record["prev"] != ZERO_HASH:
                raise Invalid(number, seq, "prev does not match previous hash")
        else:
            if seq != head["seq"] + 1:
                raise Invalid(number, seq, "seq out of order")
            if record["prev"] != head["hash"]:
                raise Invalid(number, seq, "prev does not match previous hash")
        if seq == 0:
            if not (
                record["kind"] == "genesis"
                and record.get("format") == FORMAT
                and isinstance(record.get("log_id"), str)
                and _hex(record.get("public_key"), 64)
            ):
                raise Invalid(number, seq, "genesis is malformed")
            if record["log_id"] != log_id:
                raise Invalid(number, seq, "log_id does not match")
            if record["public_key"] != public_key_hex:
                raise Invalid(number, seq, "public key does not match")
        elif record["kind"] == "genesis":
            raise Invalid(number, seq, "genesis is malformed")
        message = SIGNING_PREFIX + bytes.fromhex(record["hash"])
        try:
            key.verify(message, bytes.fromhex(record["sig"]))
        except nacl.exceptions.BadSignatureError:
            raise Invalid(number, seq, "bad signature") from None
        if checkpoint is not None and seq == checkpoint[0]:
            if record["hash"] != checkpoint[1]:
                raise Invalid(number, seq, "checkpoint hash mismatch")
            reached = True
        head = {"seq": seq, "hash": record["hash"]}
        count += 1
    if not reached:
        assert checkpoint is not None
        raise Invalid(count + 1, checkpoint[0], "truncated before checkpoint")
    if head is None:
        raise Invalid(1, None, "empty log")
    return count, head


def verify_file(
    data: bytes, *, public_key_hex: str, log_id: str, checkpoint: tuple[int, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """A log file: one canonical record per line, each ending in a line feed.
    Final bytes without a line feed that do not parse are a torn tail, not
    verified and not a failure; if they parse, they are the last record."""
    lines = data.split(b"\n")
    tail = lines.pop()
    if tail:
        try:
            parse(tail)
        except ValueError:
            tail = b""
    if tail:
        lines.append(tail)
    return verify(lines, public_key_hex=public_key_hex, log_id=log_id, checkpoint=checkpoint)


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


class Refused(Exception):
    """A receipt that does not prove the call was allowed, and why."""


def check_receipt(
    receipt: Any, *, public_key_hex: str, log_id: str, tool: str, tool_input: Any
) -> str:
    """A decision receipt, checked by the steps of the format description
    (Decision receipts) alone; returns the action ID or raises Refused.
    Freshness is the checker's own rule and is left to the caller."""
    if not (isinstance(receipt, list) and len(receipt) == 2):
        raise Refused("not two lines")
    key = nacl.signing.VerifyKey(bytes.fromhex(public_key_hex))
    records = []
    for n, line in enumerate(receipt, start=1):
        if not isinstance(line, str):
            raise Refused(f"line {n} is not a string")
        data = line.encode()
        try:
            record = parse(data)
        except ValueError:
            raise Refused(f"line {n} is not valid JSON") from None
        if not isinstance(record, dict) or rfc8785.dumps(record) != data:
            raise Refused(f"line {n} is not canonical JSON")
        if not (_hex(record.get("hash"), 64) and _hex(record.get("sig"), 128)):
            raise Refused(f"line {n} is malformed")
        if content_hash(record) != record["hash"]:
            raise Refused(f"line {n}: hash does not match content")
        try:
            key.verify(SIGNING_PREFIX + bytes.fromhex(record["hash"]), bytes.fromhex(record["sig"]))
        except nacl.exceptions.BadSignatureError:
            raise Refused(f"line {n}: signature does not verify") from None
        records.append(record)
    requested, allowed = records
    if (requested.get("kind"), allowed.get("kind")) != ("action_requested", "action_allowed"):
        raise Refused("not a request and its allowance")
    if allowed.get("request_hash") != requested["hash"]:
        raise Refused("the allowance is for another request")
    if allowed.get("action_id") != requested.get("action_id"):
        raise Refused("the allowance is for another action")
    if allowed.get("log_id") != log_id:
        raise Refused("another agent's receipt")
    if requested.get("tool") != tool or rfc8785.dumps(requested.get("input")) != rfc8785.dumps(
        tool_input
    ):
        raise Refused("another call's receipt")
    return str(allowed["action_id"])


def checkpoint_head(data: bytes, *, public_key_hex: str, log_id: str) -> tuple[int, str]:
    """The head ``(seq, hash hex)`` a signed checkpoint file vouches for, read
    as docs/log-format.md ("guardd's checkpoint files") says: split at the
    first blank line, find the ``guardd`` signature with the key's ID, verify
    it over the text, check the origin. Raises Invalid (line 0) otherwise."""
    import base64

    public_key = bytes.fromhex(public_key_hex)
    text, sep, signatures = data.partition(b"\n\n")
    text += b"\n"
    lines = text.decode("utf-8").split("\n")
    if not sep or len(lines) != 4 or lines[3] != "":
        raise Invalid(0, None, "not a signed checkpoint")
    origin, size, root = lines[:3]
    wanted = hashlib.sha256(b"guardd\n\x01" + public_key).digest()[:4]
    for line in signatures.decode("utf-8").splitlines():
        dash, _, rest = line.partition(" ")
        name, _, blob_b64 = rest.partition(" ")
        blob = base64.b64decode(blob_b64)
        if dash != "\u2014" or name != "guardd" or blob[:4] != wanted:
            continue
        try:
            nacl.signing.VerifyKey(public_key).verify(text, blob[4:])
        except nacl.exceptions.BadSignatureError:
            raise Invalid(0, None, "checkpoint signature does not verify") from None
        break
    else:
        raise Invalid(0, None, "checkpoint signature does not verify")
    if origin != f"guardd/{log_id}":
        raise Invalid(0, None, "checkpoint is for another log")
    return int(size) - 1, base64.b64decode(root).hex()
