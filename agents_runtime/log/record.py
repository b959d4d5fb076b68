"""The log record: fields, hash, signature and the chain that links records.

A record is a JSON object with at least ``seq``, ``kind``, ``ts``, ``prev``,
``hash`` and ``sig``. ``hash`` is the SHA-256 of the canonical bytes of the
record without ``hash`` and ``sig``; ``sig`` is an Ed25519 signature of
``SIGNING_PREFIX + hash``. A line of a log file is the canonical bytes of the
whole record followed by a newline. See docs/log-format.md.
"""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from typing import Any

import attrs

from agents_runtime.log import canonical
from agents_runtime.log.keys import Signer
from agents_runtime.log.kinds import Kind

FORMAT = "guard-log/1"
SIGNING_PREFIX = b"guard-log/1 record\n"
ZERO_HASH = "0" * 64
SEALED_FIELDS = frozenset({"hash", "sig"})


@attrs.frozen
class Head:
    """The last record of a log: its seq and hash. An empty log has seq -1."""

    seq: int
    hash: str

    @classmethod
    def empty(cls) -> Head:
        return cls(-1, ZERO_HASH)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "hash": self.hash}

    def checkpoint(self) -> str:
        return f"{self.seq}:{self.hash}"


@attrs.frozen
class Sealed:
    """A record ready to append: the dict as written and its line bytes."""

    record: dict[str, Any]
    line: bytes  # canonical JSON plus b"\n"

    @property
    def head(self) -> Head:
        return Head(self.record["seq"], self.record["hash"])


def timestamp(now: datetime) -> str:
    """ISO 8601 UTC with microseconds and Z, the form of every ``ts``."""
    # isoformat, not strftime: the same text for less work, on every record.
    return now.astimezone(UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def timestamp_micros(micros: int) -> str:
    """``timestamp`` of the moment ``micros`` microseconds after the epoch;
    the text of one second is made once, since every batch needs a ts."""
    global _second
    second, fraction = divmod(micros, 1_000_000)
    last = _second
    if second != last[0]:
        last = _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{last[1]}.{fraction:06d}Z"


_second = (-1, "")  # the last second timestamp_micros wrote, and its text


def content_hash(record: dict[str, Any]) -> str:
    """Lowercase hex SHA-256 of the canonical record without hash and sig."""
    body = {k: v for k, v in record.items() if k not in SEALED_FIELDS}
    return hashlib.sha256(canonical.dumps(body)).hexdigest()


def signing_message(hash_hex: str) -> bytes:
    return SIGNING_PREFIX + bytes.fromhex(hash_hex)


def seal(fields: dict[str, Any], *, prev: Head, ts: str, signer: Signer) -> Sealed:
    """Chain ``fields`` (which holds ``kind`` and the kind's own fields) onto
    ``prev``, then hash and sign it."""
    if "kind" not in fields:
        raise ValueError("a record needs a kind")
    record = dict(fields)
    record["seq"] = prev.seq + 1
    record["ts"] = ts
    record["prev"] = prev.hash
    digest = content_hash(record)
    record["hash"] = digest
    record["sig"] = signer.sign(signing_message(digest)).hex()
    return Sealed(record, canonical.dumps(record) + b"\n")


def genesis_fields(log_id: str, public_key_hex: str) -> dict[str, Any]:
    return {"kind": Kind.GENESIS, "format": FORMAT, "log_id": log_id, "public_key": public_key_hex}
