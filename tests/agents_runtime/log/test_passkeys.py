"""The passkey binding and assertion check (agents_runtime.log.passkeys),
and the worked example of docs/log-format.md ("Passkey-signed decisions"),
tests/data/passkey_approval.json, checked twice: by the module, and by hand
with nothing but hashlib, cbor2 and an Ed25519 verify, as an independent
verifier written from the document would."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import cbor2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agents_runtime.errors import PasskeyError
from agents_runtime.log.passkeys import (
    Credential,
    b64url,
    binding,
    check_assertion,
    proof_of,
)

EXAMPLE = json.loads((Path(__file__).parents[2] / "data" / "passkey_approval.json").read_text())


def _bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _credential(example: dict[str, Any]) -> Credential:
    registered = example["passkey_registered"]
    return Credential.from_record({**registered, "ts": "2026-01-01T00:00:00.000000Z"})


def test_the_worked_binding_is_sha256_of_the_canonical_fields() -> None:
    fields = EXAMPLE["binding"]
    text = EXAMPLE["binding_jcs"].encode()
    assert text == json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    assert hashlib.sha256(text).hexdigest() == EXAMPLE["binding_sha256_hex"]
    assert binding(**fields).hex() == EXAMPLE["binding_sha256_hex"]
    assert b64url(binding(**fields)) == EXAMPLE["challenge"]


def test_the_worked_assertion_passes_the_module_check() -> None:
    proof = proof_of(EXAMPLE["passkey"])
    challenge = bytes.fromhex(EXAMPLE["binding_sha256_hex"])
    origin = EXAMPLE["passkey_registered"]["origin"]
    assert check_assertion(proof, _credential(EXAMPLE), challenge, origins=(origin,)) == 0


def test_the_worked_assertion_checks_by_hand() -> None:
    registered, proof = EXAMPLE["passkey_registered"], EXAMPLE["passkey"]
    client_data = _bytes(proof["client_data_json"])
    assert client_data.decode() == EXAMPLE["client_data_json_text"]
    collected = json.loads(client_data)
    assert collected["type"] == "webauthn.get"
    assert collected["challenge"] == EXAMPLE["challenge"]
    assert collected["origin"] == registered["origin"]
    auth_data = _bytes(proof["authenticator_data"])
    assert auth_data.hex() == EXAMPLE["authenticator_data_hex"]
    assert auth_data[:32] == hashlib.sha256(registered["rp_id"].encode()).digest()
    flags = auth_data[32]
    assert flags & 0x01  # user present
    assert flags & 0x04  # user verified
    cose = cbor2.loads(_bytes(registered["public_key"]))
    assert (cose[1], cose[3], cose[-1]) == (1, -8, 6)  # OKP, EdDSA, Ed25519
    key = Ed25519PublicKey.from_public_bytes(cose[-2])
    key.verify(_bytes(proof["signature"]), auth_data + hashlib.sha256(client_data).digest())


@pytest.mark.parametrize(
    ("field", "decision", "error"),
    [
        pytest.param("action_id", None, "passkey challenge is not the binding", id="action"),
        pytest.param("request_hash", None, "passkey challenge is not the binding", id="input"),
        pytest.param("by_id", None, "passkey challenge is not the binding", id="approver"),
        pytest.param(None, "reject", "passkey challenge is not the binding", id="decision"),
    ],
)
def test_the_worked_assertion_proves_no_other_decision(
    field: str | None, decision: str | None, error: str
) -> None:
    fields = dict(EXAMPLE["binding"])
    if field is not None:
        fields[field] = fields[field] + "x"
    if decision is not None:
        fields["decision"] = decision
    origin = EXAMPLE["passkey_registered"]["origin"]
    with pytest.raises(PasskeyError, match=rf"^{error}"):
        check_assertion(
            proof_of(EXAMPLE["passkey"]), _credential(EXAMPLE), binding(**fields), origins=(origin,)
        )


def test_an_assertion_with_a_changed_signature_does_not_verify() -> None:
    proof = dict(EXAMPLE["passkey"])
    signature = bytearray(_bytes(proof["signature"]))
    signature[5] ^= 0x10
    proof["signature"] = b64url(bytes(signature))
    challenge = bytes.fromhex(EXAMPLE["binding_sha256_hex"])
    origin = EXAMPLE["passkey_registered"]["origin"]
    with pytest.raises(PasskeyError, match=r"^passkey signature does not verify$"):
        check_assertion(proof, _credential(EXAMPLE), challenge, origins=(origin,))


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="null"),
        pytest.param({"credential_id": "x"}, id="missing-fields"),
        pytest.param({**EXAMPLE["passkey"], "signature": "not base64!"}, id="not-base64url"),
        pytest.param({**EXAMPLE["passkey"], "extra": "x"}, id="extra-field"),
    ],
)
def test_a_malformed_passkey_field_is_refused(value: Any) -> None:
    with pytest.raises(PasskeyError):
        proof_of(value)
