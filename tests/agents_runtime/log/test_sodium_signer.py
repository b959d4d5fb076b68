"""agents_runtime.log._sodium_signer makes PyNaCl's signatures, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import nacl.bindings
import nacl.signing
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents_runtime.log import _sodium_signer, keys
from agents_runtime.log.keys import Signer

DATA = Path(__file__).parents[2] / "data"
VECTORS = json.loads((DATA / "ed25519-rfc8032.json").read_text(encoding="utf-8"))["vectors"]
SIGN = _sodium_signer.gil_holding_sign(keys.pynacl_sign)


def test_signing_goes_straight_to_libsodium_holding_the_gil() -> None:
    """Where PyNaCl's libsodium can be loaded (every platform we ship to),
    signatures are made through ctypes, which keeps the GIL."""
    assert SIGN is not None
    assert keys._sign is not keys.pynacl_sign


@given(st.binary(min_size=32, max_size=32), st.binary(max_size=2000))
def test_signatures_are_the_bytes_pynacl_makes(seed: bytes, message: bytes) -> None:
    assert SIGN is not None
    _, secret = nacl.bindings.crypto_sign_seed_keypair(seed)
    expected = nacl.signing.SigningKey(seed).sign(message).signature
    assert keys.pynacl_sign(message, secret) == expected
    assert SIGN(message, secret) == expected
    signer = Signer(seed)
    assert signer.sign(message) == expected
    assert signer.public_key == bytes(nacl.signing.SigningKey(seed).verify_key)


@pytest.mark.parametrize("vector", [pytest.param(v, id=v["name"]) for v in VECTORS])
def test_rfc8032_vectors(vector: dict[str, str]) -> None:
    assert SIGN is not None
    _, secret = nacl.bindings.crypto_sign_seed_keypair(bytes.fromhex(vector["secret_key"]))
    assert SIGN(bytes.fromhex(vector["message"]), secret).hex() == vector["signature"]


def test_a_signing_that_differs_from_the_reference_is_not_used() -> None:
    """The check at import: a library giving other bytes than the reference
    for the known key and message is not taken."""

    def other(message: bytes, secret: bytes) -> bytes:
        return bytes(64)

    assert _sodium_signer.gil_holding_sign(other) is None
