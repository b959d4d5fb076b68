"""State snapshots: an agent's folded state at one record, signed.

A snapshot lets a start fold only the records after it; the log stays the
only source of truth. Its bytes (docs/log-format.md, "State snapshots") are
two lines:

    <canonical JSON (RFC 8785) of {format, hash, log_id, schema, seq, state}>
    <Ed25519 signature, 128 lowercase hex>

The signature, by the audit key, is of ``SIGNING_PREFIX`` followed by the
SHA-256 of the first line (without its line feed): a prefix of its own, so
that no snapshot signature can pass for a record's or a checkpoint's.
``seq`` and ``hash`` name the record the state was folded up to; ``state``
is written by ``agents_runtime.core.snapshot`` (this layer does not know
what a state holds), and ``schema`` names that layout.

Reading is verify-or-raise: ``open_snapshot`` returns the verified snapshot
or raises ``SnapshotError`` with a short phrase; the runtime then ignores
the snapshot, with a warning, and folds the log from genesis. The log's own
verification is unchanged by a snapshot: every record's hash and link is
still checked, and a snapshot whose hash is not the log's at its seq is
ignored too.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import attrs
import nacl.bindings
import nacl.exceptions

from agents_runtime.errors import CanonicalError
from agents_runtime.log import canonical
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import Head

FORMAT = "guardd-snapshot/1"
SIGNING_PREFIX = b"guardd-snapshot/1 state\n"
SNAPSHOT_SUFFIX = ".snapshot"

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX128 = re.compile(rb"[0-9a-f]{128}")
_MEMBERS = frozenset({"format", "hash", "log_id", "schema", "seq", "state"})


class SnapshotError(ValueError):
    """A snapshot that cannot be used: the message says why, in a phrase."""


@attrs.frozen
class Snapshot:
    """A verified snapshot: signed by the key, for the agent asked about."""

    log_id: str
    head: Head  # the record the state was folded up to
    schema: str
    state: Any  # JSON values, for agents_runtime.core.snapshot.state_from_json


def signing_message(body: bytes) -> bytes:
    return SIGNING_PREFIX + hashlib.sha256(body).digest()


def seal_snapshot(
    log_id: str, head: Head, schema: str, state: dict[str, Any], signer: Signer
) -> bytes:
    """The bytes of a snapshot of ``state`` (JSON values) at ``head``."""
    body = canonical.dumps(
        {
            "format": FORMAT,
            "hash": head.hash,
            "log_id": log_id,
            "schema": schema,
            "seq": head.seq,
            "state": state,
        }
    )
    return body + b"\n" + signer.sign(signing_message(body)).hex().encode("ascii") + b"\n"


def open_snapshot(data: bytes, public_key: bytes, log_id: str) -> Snapshot:
    """Verify a snapshot's bytes for ``log_id``'s log under ``public_key``:
    the snapshot, or SnapshotError saying why it cannot be used."""
    body, sep, rest = data.partition(b"\n")
    if not sep or not rest.endswith(b"\n") or not _HEX128.fullmatch(rest[:-1]):
        raise SnapshotError("not a snapshot: a JSON line and a signature line")
    try:
        nacl.bindings.crypto_sign_open(
            bytes.fromhex(rest[:-1].decode("ascii")) + signing_message(body), public_key
        )
    except (nacl.exceptions.BadSignatureError, ValueError):
        raise SnapshotError("its signature does not verify under the audit key") from None
    try:
        # Signed by the key's holder, who writes canonical JSON only.
        value = canonical.loads_trusted(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, CanonicalError):
        raise SnapshotError("its first line is not JSON") from None
    if not isinstance(value, dict) or set(value) != _MEMBERS:
        raise SnapshotError(f"its members must be {', '.join(sorted(_MEMBERS))}")
    if value["format"] != FORMAT:
        raise SnapshotError(f"its format is {value['format']!r}, not {FORMAT!r}")
    if value["log_id"] != log_id:
        raise SnapshotError(f"it is the snapshot of {value['log_id']!r}, not of {log_id!r}")
    seq, digest, schema = value["seq"], value["hash"], value["schema"]
    if type(seq) is not int or seq < 1 or not isinstance(digest, str):
        raise SnapshotError("its seq or hash is malformed")
    if not _HEX64.fullmatch(digest) or not isinstance(schema, str):
        raise SnapshotError("its hash or schema is malformed")
    return Snapshot(log_id, Head(seq, digest), schema, value["state"])


__all__ = [
    "FORMAT",
    "SIGNING_PREFIX",
    "SNAPSHOT_SUFFIX",
    "Snapshot",
    "SnapshotError",
    "open_snapshot",
    "seal_snapshot",
]
