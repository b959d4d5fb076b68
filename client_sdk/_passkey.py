"""The approver's passkey on a receipt: with ``verify_receipt(...,
passkeys=...)`` an executor checks that the allowance was approved by a
person whose passkey it trusts, over this very call.

The allowance (a receipt's second line) names everything the passkey
signed (docs/log-format.md, "Passkey-signed decisions"): the binding is
SHA-256 of the RFC 8785 form of ``{log_id, action_id, request_hash,
decision: "approve", by_id}``, all fields of that line. The COSE key
parsing and the signature check are the ``webauthn`` library's, imported
only when a passkey is checked.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from client_sdk.errors import ReceiptError

_FIELDS = ("credential_id", "authenticator_data", "client_data_json", "signature")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def _bytes(value: Any, what: str) -> bytes:
    if not isinstance(value, str) or not _BASE64URL.fullmatch(value):
        raise ReceiptError(f"passkey {what} is not base64url")
    bare = value.rstrip("=")
    try:
        return base64.urlsafe_b64decode(bare + "=" * (-len(bare) % 4))
    except (binascii.Error, ValueError):
        raise ReceiptError(f"passkey {what} is not base64url") from None


def check_passkey(
    allowed: dict[str, Any],
    passkeys: Iterable[Mapping[str, Any]],
    canonical: Callable[[Any], bytes],
) -> None:
    """ReceiptError unless ``allowed`` carries an assertion of one of
    ``passkeys`` (``passkey_registered`` records, as the operators log has
    them) over its own binding."""
    proof = allowed.get("passkey")
    if not isinstance(proof, dict) or set(proof) != set(_FIELDS):
        raise ReceiptError("the allowance carries no passkey assertion")
    by_id = allowed.get("by_id")
    trusted = {p.get("credential_id"): p for p in passkeys if isinstance(p, Mapping)}.get(
        proof["credential_id"]
    )
    if trusted is None:
        raise ReceiptError("the allowance's passkey is not one you trust")
    if trusted.get("by_id") != by_id:
        raise ReceiptError(f"the allowance's passkey is {trusted.get('by_id')}'s, not {by_id}'s")
    fields = {
        "log_id": allowed["log_id"],
        "action_id": allowed["action_id"],
        "request_hash": allowed["request_hash"],
        "decision": "approve",
        "by_id": by_id,
    }
    challenge = hashlib.sha256(canonical(fields)).digest()
    client_bytes = _bytes(proof["client_data_json"], "client_data_json")
    try:
        client = json.loads(client_bytes)
        kind, said, origin = client["type"], client["challenge"], client["origin"]
    except (ValueError, KeyError, TypeError):
        raise ReceiptError("passkey clientDataJSON is malformed") from None
    if kind != "webauthn.get" or _bytes(said, "challenge") != challenge:
        raise ReceiptError("passkey challenge is not the binding of this approval")
    if origin != trusted.get("origin"):
        raise ReceiptError(f"passkey origin {origin} is not {trusted.get('origin')}")
    data = _bytes(proof["authenticator_data"], "authenticator_data")
    rp_id = str(trusted.get("rp_id"))
    if len(data) < 37 or data[:32] != hashlib.sha256(rp_id.encode()).digest():
        raise ReceiptError(f"passkey rp ID hash is not that of {rp_id}")
    if data[32] & 0x05 != 0x05:
        raise ReceiptError("passkey assertion lacks user presence or verification")
    signature = _bytes(proof["signature"], "signature")
    from webauthn.helpers import decode_credential_public_key, decoded_public_key_to_cryptography
    from webauthn.helpers.verify_signature import verify_signature

    try:
        decoded = decode_credential_public_key(_bytes(trusted.get("public_key"), "public key"))
        verify_signature(
            public_key=decoded_public_key_to_cryptography(decoded),
            signature_alg=decoded.alg,
            signature=signature,
            data=data + hashlib.sha256(client_bytes).digest(),
        )
    except Exception:  # InvalidSignature, or a key the library cannot read
        raise ReceiptError("passkey signature does not verify") from None
