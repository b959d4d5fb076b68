"""Ed25519 signing through libsodium's ``crypto_sign_detached``, called with
ctypes, which keeps the GIL for the call.

The reference is PyNaCl's signing (``keys.pynacl_sign``). Its cffi bindings
let the GIL go for every call; while guardd is busy a commit thread takes it
then, and the event loop waits to get it back, which costs the service
throughput under load (docs/benchmarks.md, "Why the fast paths exist"). The
library called is the libsodium PyNaCl carries (its extension module holds or
links it), so the signature is computed by the same code.

It must give the reference's bytes for every key and message:
``tests/agents_runtime/log/test_sodium_signer.py`` compares the two on random
seeds and messages (hypothesis) and on the RFC 8032 vectors. At import, too,
``gil_holding_sign`` checks one known key and message and gives None when
the library cannot be found or does not give the reference's bytes; then
PyNaCl signs.
"""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Callable

import nacl.bindings

Sign = Callable[[bytes, bytes], bytes]  # (message, 64-byte secret key) -> signature


def gil_holding_sign(reference: Sign) -> Sign | None:
    """A signing function that gives ``reference``'s bytes and keeps the
    GIL, or None when libsodium cannot be called so. A call the library
    refuses is left to ``reference``."""
    spec = importlib.util.find_spec("nacl._sodium")  # PyNaCl's compiled module
    if spec is None or spec.origin is None:
        return None
    try:
        function = ctypes.PyDLL(spec.origin).crypto_sign_detached
    except (OSError, AttributeError):
        return None
    function.argtypes = [
        ctypes.c_char_p,  # signature out, 64 bytes
        ctypes.c_void_p,  # its length out: NULL
        ctypes.c_char_p,  # message
        ctypes.c_ulonglong,  # its length
        ctypes.c_char_p,  # secret key, 64 bytes
    ]
    function.restype = ctypes.c_int

    def sign(message: bytes, secret: bytes) -> bytes:
        signature = ctypes.create_string_buffer(64)
        if function(signature, None, message, len(message), secret) != 0:
            return reference(message, secret)
        return signature.raw

    _, secret = nacl.bindings.crypto_sign_seed_keypair(bytes(range(32)))
    probe = b"guard-log/1 signing self-check"
    return sign if sign(probe, secret) == reference(probe, secret) else None
