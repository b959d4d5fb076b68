"""``verify_receipt``: check, offline and before acting, that the guard allowed
this exact call.

A receipt is the two signed log lines of one allowed action, as they are in
the agent's log: its ``action_requested`` record, then its ``action_allowed``
record, which names the request by hash (``request_hash``) and the agent by
its log ID (``log_id``). The log's own signatures are the proof; nothing else
is signed. The checks follow the log format (docs/log-format.md) and
docs/receipts.md, with PyNaCl and ``rfc8785`` only, imported when a receipt
is first checked so that a client that never checks one does not need them.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from client_sdk._passkey import check_passkey
from client_sdk.errors import ReceiptError

SIGNING_PREFIX = b"guard-log/1 record\n"  # then the 32 raw bytes of the record's hash
REQUESTED = "action_requested"
ALLOWED = "action_allowed"
_HEX = frozenset("0123456789abcdef")


def _hex(value: Any, length: int) -> bool:
    return isinstance(value, str) and len(value) == length and set(value) <= _HEX


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise ValueError("duplicate key")
    return dict(pairs)


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _plain(value: Any) -> Any:
    """``value`` as JSON reads it back: a tuple is an array, and a Decimal
    the double the guard writes for it (RFC 8785 numbers are doubles)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _canonical(value: Any) -> bytes:
    import rfc8785

    return rfc8785.dumps(_plain(value))


def _record(line: Any, n: int) -> dict[str, Any]:
    """Line ``n`` (1 or 2) of a receipt, parsed, checked canonical and its
    hash recomputed; its signature is checked by the caller."""
    import rfc8785

    if not isinstance(line, str):
        raise ReceiptError(f"line {n} is not a string")
    try:
        data = line.encode()
        record = json.loads(line, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        raise ReceiptError(f"line {n} is not valid JSON") from None
    if not isinstance(record, dict):
        raise ReceiptError(f"line {n} is not a JSON object")
    try:
        canonical = rfc8785.dumps(record)
    except (rfc8785.CanonicalizationError, ValueError, RecursionError):
        canonical = b""  # e.g. a number RFC 8785 cannot write: never canonical
    if canonical != data:
        raise ReceiptError(f"line {n} is not canonical JSON")
    fields = (record.get("kind"), record.get("ts"), record.get("action_id"))
    if not all(isinstance(f, str) for f in fields):
        raise ReceiptError(f"line {n} is malformed")
    if not (_hex(record.get("hash"), 64) and _hex(record.get("sig"), 128)):
        raise ReceiptError(f"line {n} is malformed")
    body = {k: v for k, v in record.items() if k not in ("hash", "sig")}
    if hashlib.sha256(rfc8785.dumps(body)).hexdigest() != record["hash"]:
        raise ReceiptError(f"line {n}: hash does not match content")
    return record


def _check_signature(record: dict[str, Any], n: int, key: Any) -> None:
    import nacl.exceptions

    message = SIGNING_PREFIX + bytes.fromhex(record["hash"])
    try:
        key.verify(message, bytes.fromhex(record["sig"]))
    except nacl.exceptions.BadSignatureError:
        raise ReceiptError(f"line {n}: signature does not verify") from None


def _verify_key(public_key: str) -> Any:
    import nacl.signing

    if not _hex(public_key, 64):
        raise ValueError("public_key must be 64 lowercase hex characters (GET /v1/public-key)")
    return nacl.signing.VerifyKey(bytes.fromhex(public_key))


def _timestamp(record: dict[str, Any]) -> float:
    ts = record["ts"]
    try:
        if not ts.endswith("Z"):
            raise ValueError(ts)
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:
        raise ReceiptError("line 2 is malformed") from None


def verify_receipt(
    receipt: Sequence[str],
    public_key: str,
    *,
    agent_id: str,
    tool: str,
    input: Any,
    max_age_secs: float,
    now: float | None = None,
    passkeys: Iterable[Mapping[str, Any]] | None = None,
) -> str:
    """Check that ``receipt`` proves the guard allowed agent ``agent_id`` to
    call ``tool`` with exactly ``input``, at most ``max_age_secs`` seconds ago
    (``now``: seconds since the epoch, the system clock by default).

    ``public_key`` is the guard's key as hex (``GET /v1/public-key``, or
    ``keys/audit.pub`` of its data directory), obtained through a channel you
    trust. Returns the action ID (``act-N``), which is unique per agent: keep
    the IDs you have acted on to refuse a receipt used twice. Raises
    ``ReceiptError`` with ``reason`` when the receipt does not prove that;
    ``ValueError`` for a malformed ``public_key`` or ``max_age_secs``.

    ``passkeys``: the ``passkey_registered`` records (of the guard's operators
    log) of the approvers you trust. Given, the allowance must also carry
    the approver's passkey assertion, signed by one of them over this very
    allowance (docs/receipts.md, "Passkey-approved actions").
    """
    key = _verify_key(public_key)
    if not (isinstance(max_age_secs, int | float) and max_age_secs >= 0):
        raise ValueError(f"max_age_secs must be a number >= 0, not {max_age_secs!r}")
    if isinstance(receipt, str | bytes) or not isinstance(receipt, Sequence) or len(receipt) != 2:
        raise ReceiptError("a receipt is a list of two record lines")
    requested = _record(receipt[0], 1)
    allowed = _record(receipt[1], 2)
    _check_signature(requested, 1, key)
    _check_signature(allowed, 2, key)
    if requested["kind"] != REQUESTED:
        raise ReceiptError(f"line 1 is {requested['kind']}, not {REQUESTED}")
    if allowed["kind"] != ALLOWED:
        raise ReceiptError(f"line 2 is {allowed['kind']}, not {ALLOWED}")
    if "request_hash" not in allowed or "log_id" not in allowed:
        raise ReceiptError("the allowance names no request (written before receipts existed)")
    if (
        allowed["request_hash"] != requested["hash"]
        or allowed["action_id"] != (requested["action_id"])
    ):
        raise ReceiptError("the allowance is for another request")
    if allowed["log_id"] != agent_id:
        raise ReceiptError(f"receipt is for agent {allowed['log_id']!r}, not {agent_id!r}")
    if requested.get("tool") != tool:
        raise ReceiptError(f"receipt is for tool {requested.get('tool')!r}, not {tool!r}")
    try:
        given = _canonical(input)
    except Exception as exc:  # the package's errors and TypeError for a non-JSON value
        raise ReceiptError(f"input cannot be written as canonical JSON: {exc}") from None
    if _canonical(requested.get("input")) != given:
        raise ReceiptError("receipt is for another input")
    age = (time.time() if now is None else now) - _timestamp(allowed)
    if not age <= max_age_secs or math.isnan(age):
        raise ReceiptError(
            f"receipt expired: allowed at {allowed['ts']}, more than {max_age_secs:g} seconds ago"
        )
    if passkeys is not None:
        check_passkey(allowed, passkeys, _canonical)
    return str(allowed["action_id"])
