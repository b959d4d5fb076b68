"""Passkey-signed approvals: the binding an approver's passkey signs, and the
check of a WebAuthn assertion against it (docs/log-format.md, "Passkeys").

The binding ties one decision of one person on one call:
SHA-256 of the RFC 8785 form of ``{"log_id", "action_id", "request_hash",
"decision", "by_id"}``, where ``request_hash`` is the hash of the call's
``action_requested`` record (which covers the tool and its exact input) and
``decision`` is ``approve`` or ``reject``. It is the challenge of the WebAuthn
request, so the authenticator's signature covers it.

Pure computation, verify-or-raise: guardd checks an assertion before it writes
the approval, and ``audit verify`` checks it again from the logs alone. The
parsing of COSE keys, clientDataJSON and authenticatorData, and the signature
check, are the ``webauthn`` library's.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any

import attrs
from cryptography.exceptions import InvalidSignature
from webauthn.helpers import (
    decode_credential_public_key,
    decoded_public_key_to_cryptography,
    parse_authenticator_data,
    parse_client_data_json,
)
from webauthn.helpers.exceptions import InvalidAuthenticatorDataStructure
from webauthn.helpers.structs import ClientDataType
from webauthn.helpers.verify_signature import verify_signature

from agents_runtime.errors import PasskeyError
from agents_runtime.log import canonical

APPROVE, REJECT = "approve", "reject"
DECISIONS = (APPROVE, REJECT)
# The assertion's fields as an approval record carries them (``passkey``), each base64url.
PROOF_FIELDS = ("credential_id", "authenticator_data", "client_data_json", "signature")
MAX_PROOF_FIELD = 8192  # characters: far above any real authenticator's output

SIGNATURE_FAILS = "passkey signature does not verify"
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def binding_fields(
    log_id: str, action_id: str, request_hash: str, decision: str, by_id: str
) -> dict[str, str]:
    return {
        "log_id": log_id,
        "action_id": action_id,
        "request_hash": request_hash,
        "decision": decision,
        "by_id": by_id,
    }


def binding(log_id: str, action_id: str, request_hash: str, decision: str, by_id: str) -> bytes:
    """The 32 bytes an approver's passkey signs for this decision (its challenge)."""
    fields = binding_fields(log_id, action_id, request_hash, decision, by_id)
    return hashlib.sha256(canonical.dumps(fields)).digest()


def b64url(data: bytes) -> str:
    """base64url without padding, as WebAuthn writes it."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str, what: str) -> bytes:
    """The bytes of base64url ``text`` (padding optional), or PasskeyError naming ``what``."""
    if not isinstance(text, str) or not _BASE64URL.fullmatch(text):
        raise PasskeyError(f"passkey {what} is not base64url")
    bare = text.rstrip("=")
    try:
        return base64.urlsafe_b64decode(bare + "=" * (-len(bare) % 4))
    except (binascii.Error, ValueError):
        raise PasskeyError(f"passkey {what} is not base64url") from None


@attrs.frozen
class Credential:
    """A passkey as its ``passkey_registered`` record has it."""

    credential_id: str  # base64url
    by_id: str  # whose it is
    public_key: bytes  # the COSE key
    alg: int  # its COSE algorithm (-7 ES256, -8 EdDSA)
    rp_id: str
    origin: str
    registered_at: str
    revoked_at: str | None = None

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Credential:
        return cls(
            credential_id=record["credential_id"],
            by_id=record["by_id"],
            public_key=unb64url(record["public_key"], "public key"),
            alg=record["alg"],
            rp_id=record["rp_id"],
            origin=record["origin"],
            registered_at=record["ts"],
        )


def proof_of(value: Any) -> dict[str, str]:
    """An approval record's ``passkey`` field, checked for shape: an object of
    the four base64url strings. PasskeyError naming what is wrong."""
    if not isinstance(value, dict) or set(value) != set(PROOF_FIELDS):
        raise PasskeyError(f"passkey must be an object of {', '.join(PROOF_FIELDS)}")
    for name in PROOF_FIELDS:
        text = value[name]
        if not isinstance(text, str) or not 1 <= len(text) <= MAX_PROOF_FIELD:
            raise PasskeyError(f"passkey {name} must be a base64url string")
        unb64url(text, name)
    return value


def check_assertion(
    proof: dict[str, str],
    credential: Credential,
    challenge: bytes,
    *,
    origins: tuple[str, ...],
    sign_count: int = 0,
) -> int:
    """Check the assertion ``proof`` (``proof_of``'s shape) made with
    ``credential`` for ``challenge`` (the binding), from one of ``origins``,
    its counter past ``sign_count`` when the authenticator keeps one. Returns
    the assertion's sign count; PasskeyError naming the first check that fails."""
    if proof["credential_id"] != credential.credential_id:
        raise PasskeyError("passkey credential is not the one registered")
    client_data_bytes = unb64url(proof["client_data_json"], "client_data_json")
    try:
        client_data = parse_client_data_json(client_data_bytes)
    except Exception:  # the library raises several kinds for one malformed input
        raise PasskeyError("passkey clientDataJSON is malformed") from None
    if client_data.type != ClientDataType.WEBAUTHN_GET:
        raise PasskeyError(f"passkey clientDataJSON type is {client_data.type}, not webauthn.get")
    if client_data.challenge != challenge:
        raise PasskeyError("passkey challenge is not the binding of this decision")
    if client_data.origin not in origins:
        raise PasskeyError(
            f"passkey origin {client_data.origin} is not {' or '.join(origins) or 'known'}"
        )
    data = unb64url(proof["authenticator_data"], "authenticator_data")
    try:
        auth_data = parse_authenticator_data(data)
    except (InvalidAuthenticatorDataStructure, ValueError, IndexError):
        raise PasskeyError("passkey authenticatorData is malformed") from None
    if auth_data.rp_id_hash != hashlib.sha256(credential.rp_id.encode()).digest():
        raise PasskeyError(f"passkey rp ID hash is not that of {credential.rp_id}")
    if not auth_data.flags.up:
        raise PasskeyError("passkey assertion lacks user presence")
    if not auth_data.flags.uv:
        raise PasskeyError("passkey assertion lacks user verification")
    count = auth_data.sign_count
    if (count > 0 or sign_count > 0) and count <= sign_count:
        raise PasskeyError(
            f"passkey sign counter did not move forward ({count} after {sign_count})"
        )
    signature = unb64url(proof["signature"], "signature")
    try:
        decoded = decode_credential_public_key(credential.public_key)
        key = decoded_public_key_to_cryptography(decoded)
        verify_signature(
            public_key=key,
            signature_alg=decoded.alg,
            signature=signature,
            data=data + hashlib.sha256(client_data_bytes).digest(),
        )
    except InvalidSignature:
        raise PasskeyError(SIGNATURE_FAILS) from None
    except Exception:  # a key or signature the library cannot read
        raise PasskeyError(SIGNATURE_FAILS) from None
    return count
