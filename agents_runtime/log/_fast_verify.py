"""The fast path of log verification: the common line checked in one pass.

``agents_runtime.log.verify`` is the reference: ``ChainVerifier.feed_strict``
follows docs/log-format.md step by step. Almost every line of a sound log is
the same case, though: a canonical line that extends the chain by one record
(seq 2 on, no checkpoint at it) signed by the key. ``chained_record`` checks
exactly that case with the fewest steps, reading the record's hash input off
the line instead of writing the record again, and parsing it with one call of
the C scanner. For any other line, or any doubt, it returns None, having
changed nothing, and the reference takes the line from the start and names
the first fault in its fixed order; so the order of the checks here does
not matter, only their sum. Why each shortcut pays: see docs/benchmarks.md
("Why the fast paths exist").

It must give the reference's answer on every input:
``tests/agents_runtime/log/test_fast_verify.py`` compares the two, record by
record and report by report, on generated logs (valid, every kind of
tampering, torn and non-canonical lines) and on the tamper samples of
``tests/data/tampered``.
"""

from __future__ import annotations

import hashlib
import json.scanner
from collections.abc import Callable
from typing import Any

import nacl.bindings
import nacl.exceptions
import orjson

from agents_runtime.errors import CanonicalError
from agents_runtime.log import canonical
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import SIGNING_PREFIX, Head

# canonical.TRUSTED_DECODER's C scanner, without decode()'s whitespace
# handling: a canonical line has none. The decoder is trusted only because
# the line is then found byte-identical to the canonical form of what it
# read, which a line with a duplicate key, an integer out of range or a lone
# surrogate never is. (typeshed declares make_scanner's argument wrongly: it
# takes the decoder.)
_DECODER: Any = canonical.TRUSTED_DECODER
_scan: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(_DECODER)
_DUMPS_OPTS = canonical.DUMPS_OPTIONS
_GENESIS = Kind.GENESIS  # a module-level alias: compared on every line


def line_sha(line: bytes, digest: str, sig: str) -> Any:
    """The SHA-256 (a hashlib object) of the record on a canonical line,
    read off the line: the line without its top-level ``"hash"`` and
    ``"sig"`` members is the hash input. With one ``"hash"`` key and one
    ``"sig"`` key on the whole line, those are the top-level members; each is
    its key, the value (``digest`` and ``sig`` as parsed: a digest that
    needed escaping fails any comparison with a hexdigest) and ``",`` since
    ``kind`` sorts after ``hash`` and ``ts`` after ``sig``. None when a key
    is not unique or a member is not where it should be; the caller then
    leaves the line to the reference."""
    if line.count(b'"hash":"') != 1 or line.count(b'"sig":"') != 1:
        return None
    hash_at = line.find(b'"hash":"')
    hash_end = hash_at + 10 + len(digest)
    sig_at = line.find(b'"sig":"', hash_end)
    sig_end = sig_at + 9 + len(sig)
    if sig_at < 0 or line[hash_end - 2 : hash_end] != b'",':
        return None
    if line[sig_end - 2 : sig_end] != b'",':
        return None
    sha = hashlib.sha256(line[:hash_at])
    sha.update(line[hash_end:sig_at])
    sha.update(line[sig_end:])
    return sha


def chained_record(
    line: bytes,
    head: Head | None,
    checkpoint_seq: int | None,
    key: bytes | None,
    resign: Callable[[bytes], bytes] | None,
) -> dict[str, Any] | None:
    """The record on ``line`` (without its newline) if it is canonical,
    extends the chain at ``head`` by one, is neither genesis, seq 1 nor at
    ``checkpoint_seq``, and its signature verifies under ``key`` (not
    checked without a key, as in the reference; the caller passes none for
    a record a signed checkpoint vouches for); None otherwise.

    ``resign`` signs with ``key``'s private key when the caller holds it:
    Ed25519 signing is deterministic, so a signature byte-equal to the one
    the key's holder makes of the message is that signature, valid, and
    making it is cheaper than a verify. Any other signature goes to the
    verify (what ``VerifyKey.verify`` calls, without its layers), which
    alone decides."""
    if head is None or line.count(b"{") + line.count(b"[") > canonical.MAX_DEPTH:
        return None
    try:
        text = line.decode("utf-8")
        record, end = _scan(text, 0)
        if end != len(text) or type(record) is not dict:
            return None
        # canonical.dumps, inlined for its usual case: an ASCII output is
        # the orjson call's own; any other is redone by the reference writer.
        out = orjson.dumps(record, default=canonical.number_fragment, option=_DUMPS_OPTS)
        if out != line and (out.isascii() or canonical.dumps(record) != line):
            return None
        seq = record["seq"]
        digest = record["hash"]
        sig = record["sig"]
        kind = record["kind"]
        # prev equal to the head's verified hash is 64 hex, like it.
        if (
            type(seq) is not int
            or seq != head.seq + 1
            or record["prev"] != head.hash
            or type(kind) is not str
            or type(record["ts"]) is not str
            or type(digest) is not str
            or type(sig) is not str
            or kind == _GENESIS
            or seq == 1
            or seq == checkpoint_seq
        ):
            return None
        sha = line_sha(line, digest, sig)
        # A hexdigest is 64 lowercase hex, so digest is well formed too.
        if sha is None or sha.hexdigest() != digest:
            return None
        signature = bytes.fromhex(sig)
        if len(signature) != 64 or signature.hex() != sig:  # [0-9a-f]{128}
            return None
        if key is not None:
            message = SIGNING_PREFIX + sha.digest()
            if resign is None or resign(message) != signature:
                nacl.bindings.crypto_sign_open(signature + message, key)
    except (
        ValueError,  # not UTF-8 or not JSON (UnicodeDecodeError, JSONDecodeError)
        StopIteration,  # the scanner found no value at 0
        RecursionError,
        KeyError,
        orjson.JSONEncodeError,
        CanonicalError,
        nacl.exceptions.BadSignatureError,
    ):
        return None
    return record
