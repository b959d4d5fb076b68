"""A software WebAuthn authenticator: the test fixture that stands where a
person's passkey does.

It keeps one key pair (ES256 or Ed25519) and answers a ceremony as a real
authenticator and browser together would: ``register`` the
``PublicKeyCredential`` JSON of ``navigator.credentials.create`` (a 'none'
attestation whose authenticatorData carries the credential's COSE key),
``assertion`` that of ``navigator.credentials.get`` (authenticatorData,
clientDataJSON and the signature over both). Every byte is built as the
WebAuthn specification lays it out, so guardd's verification (the
``webauthn`` library) and ``audit verify`` check it like any other.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import struct
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agents_runtime.log.passkeys import b64url

UP, UV, AT = 0x01, 0x04, 0x40


class Authenticator:
    def __init__(
        self,
        origin: str,
        rp_id: str = "localhost",
        alg: str = "ES256",
        *,
        seed: bytes | None = None,
        credential_id: bytes | None = None,
    ) -> None:
        self.origin = origin
        self.rp_id = rp_id
        self.alg = alg
        self.key: Any
        if alg == "ES256":
            self.key = ec.generate_private_key(ec.SECP256R1())
        elif seed is not None:  # a fixed key: the worked example of tests/data
            self.key = Ed25519PrivateKey.from_private_bytes(seed)
        else:
            self.key = Ed25519PrivateKey.generate()
        self.credential_id = credential_id or secrets.token_bytes(16)
        self.sign_count = 0  # 0: keeps no counter; set it to count

    @property
    def id(self) -> str:
        return b64url(self.credential_id)

    def cose_key(self) -> bytes:
        if self.alg == "ES256":
            numbers = self.key.public_key().public_numbers()
            return cbor2.dumps(
                {
                    1: 2,
                    3: -7,
                    -1: 1,
                    -2: numbers.x.to_bytes(32, "big"),
                    -3: numbers.y.to_bytes(32, "big"),
                }
            )
        raw = self.key.public_key().public_bytes_raw()
        return cbor2.dumps({1: 1, 3: -8, -1: 6, -2: raw})

    def _sign(self, data: bytes) -> bytes:
        if self.alg == "ES256":
            return self.key.sign(data, ec.ECDSA(hashes.SHA256()))  # type: ignore[no-any-return]
        return self.key.sign(data)  # type: ignore[no-any-return]

    def _auth_data(self, rp_id: str, flags: int, attested: bytes = b"") -> bytes:
        rp_hash = hashlib.sha256(rp_id.encode()).digest()
        return rp_hash + bytes([flags]) + struct.pack(">I", self.sign_count) + attested

    @staticmethod
    def _client_data(kind: str, challenge: str, origin: str) -> bytes:
        return json.dumps(
            {"type": kind, "challenge": challenge, "origin": origin, "crossOrigin": False},
            separators=(",", ":"),
        ).encode()

    def register(
        self, options: dict[str, Any], *, origin: str | None = None, rp_id: str | None = None
    ) -> dict[str, Any]:
        """The credential JSON answering creation ``options``."""
        attested = (
            bytes(16)  # AAGUID: none
            + struct.pack(">H", len(self.credential_id))
            + self.credential_id
            + self.cose_key()
        )
        auth_data = self._auth_data(rp_id or options["rp"]["id"], UP | UV | AT, attested)
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        client_data = self._client_data(
            "webauthn.create", options["challenge"], origin or self.origin
        )
        return {
            "id": self.id,
            "rawId": self.id,
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(client_data),
                "attestationObject": b64url(attestation),
                "transports": ["internal"],
            },
            "clientExtensionResults": {},
            "authenticatorAttachment": "platform",
        }

    def assertion(
        self,
        challenge: str,
        *,
        origin: str | None = None,
        rp_id: str | None = None,
        flags: int = UP | UV,
        kind: str = "webauthn.get",
    ) -> dict[str, Any]:
        """The credential JSON of ``navigator.credentials.get`` for ``challenge`` (base64url)."""
        if self.sign_count:
            self.sign_count += 1
        auth_data = self._auth_data(rp_id or self.rp_id, flags)
        client_data = self._client_data(kind, challenge, origin or self.origin)
        signature = self._sign(auth_data + hashlib.sha256(client_data).digest())
        return {
            "id": self.id,
            "rawId": self.id,
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(client_data),
                "authenticatorData": b64url(auth_data),
                "signature": b64url(signature),
                "userHandle": None,
            },
            "clientExtensionResults": {},
            "authenticatorAttachment": "platform",
        }
