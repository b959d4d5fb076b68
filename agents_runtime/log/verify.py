"""Verification of a log: canonical form, hash chain, signatures, genesis,
checkpoint. Verify-or-raise: ``ChainVerifier.feed`` returns the parsed record
or raises VerificationError carrying the first Failure.

Failure reasons are short fixed phrases (docs/log-format.md lists them all).
"""

from __future__ import annotations

import hashlib
import json
import json.scanner
import re
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import nacl.bindings
import nacl.exceptions
import nacl.signing
import orjson

from agents_runtime.errors import CanonicalError, VerificationError
from agents_runtime.log import canonical
from agents_runtime.log.keys import Signer
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import (
    FORMAT,
    SIGNING_PREFIX,
    ZERO_HASH,
    Head,
    content_hash,
    signing_message,
)

NOT_JSON = "not valid JSON"
MALFORMED = "record is malformed"
NOT_CANONICAL = "not canonical JSON"
HASH_MISMATCH = "hash does not match content"
SEQ_ORDER = "seq out of order"
PREV_MISMATCH = "prev does not match previous hash"
BAD_SIGNATURE = "bad signature"
BAD_GENESIS = "genesis is malformed"
LOG_ID_MISMATCH = "log_id does not match"
KEY_MISMATCH = "public key does not match"
TRUNCATED = "truncated before checkpoint"
CHECKPOINT_MISMATCH = "checkpoint hash mismatch"
CHECKPOINT_OUTSIDE = "checkpoint is before the first record"
NOT_WHOLE = "log does not start at seq 0"
NO_POLICY = "seq 1 is not a policy record"
NO_POLICY_RECORD = "log has no policy record"
CHECKPOINT_UNREADABLE = "checkpoint file is unreadable"
AFTER_HEAD = "bytes after the committed head"

_kind_genesis = Kind.GENESIS  # compared per record on the fast path
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX128 = re.compile(r"[0-9a-f]{128}")


# canonical.TRUSTED_DECODER, used only for lines then found byte-identical to
# their canonical form, which a line with a duplicate key, an integer out of
# range or a lone surrogate never is.
_FAST_DECODER = canonical.TRUSTED_DECODER
# The C scanner without decode()'s whitespace handling: a canonical line has none.
# (typeshed declares make_scanner's argument wrongly: it takes the decoder)
_scan: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(_FAST_DECODER)  # type: ignore[arg-type]
_DUMPS_OPTS = canonical.DUMPS_OPTIONS


def _canonical_record(line: bytes) -> dict[str, Any] | None:
    """The record of a line that is already canonical JSON, parsed the fast
    way; None for any other line, whose fault the strict path then names."""
    if line.count(b"{") + line.count(b"[") > canonical.MAX_DEPTH:
        return None
    try:
        record = _FAST_DECODER.decode(line.decode("utf-8"))
        if type(record) is dict and canonical.dumps(record) == line:
            return record
    except (ValueError, RecursionError, CanonicalError):
        pass
    return None


def _line_sha(line: bytes, digest: str, sig: str) -> Any:
    """The SHA-256 (a hashlib object) of the record on a canonical line,
    read off the line: the line without its top-level ``"hash"`` and
    ``"sig"`` members is the hash input. With one ``"hash"`` key and one
    ``"sig"`` key on the whole line, those are the top-level members; each is
    its key, the value (``digest`` and ``sig`` as parsed: a digest that
    needed escaping fails any comparison with a hexdigest) and ``",`` since
    ``kind`` sorts after ``hash`` and ``ts`` after ``sig``. None when a key
    is not unique or a member is not where it should be; the caller then
    hashes the record (or takes the strict path)."""
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


def _line_hash(line: bytes, digest: str, sig: str) -> str | None:
    """content_hash of the record on a canonical line (see _line_sha)."""
    sha = _line_sha(line, digest, sig)
    return None if sha is None else str(sha.hexdigest())


@attrs.frozen
class Failure:
    line: int  # 1-based line of the file or slice
    seq: int | None  # seq of the bad record, when it could be read
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "seq": self.seq, "reason": self.reason}


@attrs.frozen
class Checkpoint:
    seq: int
    hash: str

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        seq_text, sep, hash_hex = text.partition(":")
        if not sep or not seq_text.isdigit() or not _HEX64.fullmatch(hash_hex):
            raise ValueError(f"checkpoint must be <seq>:<64 hex characters>, not {text!r}")
        return cls(int(seq_text), hash_hex)


@attrs.frozen
class Report:
    ok: bool
    records: int  # records that verified before the first failure
    log_id: str | None
    public_key: str | None  # hex key the signatures were checked against
    key_trusted: bool  # the caller supplied that key and every signature matched it
    head: Head | None
    first_seq: int | None
    failure: Failure | None
    signatures_checked: bool
    checkpoint_checked: bool

    @property
    def is_slice(self) -> bool:
        return self.first_seq not in (None, 0)


class ChainVerifier:
    """Checks records one line at a time, keeping the chain's head."""

    def __init__(
        self,
        *,
        public_key: bytes | None = None,
        log_id: str | None = None,
        checkpoint: Checkpoint | None = None,
        signer: Signer | None = None,
    ) -> None:
        """``signer``, the holder of ``public_key``'s private key, lets the
        common path check a signature by making it again (see _feed_chained)."""
        self.trusted_key = public_key
        self._resign = (
            signer.sign if signer is not None and signer.public_key == public_key else None
        )
        self.expected_log_id = log_id
        self.checkpoint = checkpoint
        self.log_id: str | None = None
        self.head: Head | None = None
        self.first_seq: int | None = None
        self.count = 0
        self.checkpoint_seen = False
        self._verify_key = nacl.signing.VerifyKey(public_key) if public_key else None
        self._key_bytes = bytes(self._verify_key) if self._verify_key is not None else None
        self._key_hex = public_key.hex() if public_key else None

    @property
    def public_key_hex(self) -> str | None:
        return self._key_hex

    def _fail(self, reason: str, seq: int | None) -> VerificationError:
        return VerificationError(Failure(self.count + 1, seq, reason))

    def feed(self, line: bytes) -> dict[str, Any]:
        """Verify the next line (without its newline); return the record."""
        record = self._feed_chained(line)
        if record is not None:
            return record
        return self._feed_checked(line)

    def _feed_chained(self, line: bytes) -> dict[str, Any] | None:
        """The common case, checked with the fewest steps: an ASCII canonical
        line that extends the chain (seq 2 on, no checkpoint at it) and is
        signed by the key. It passes every check of ``_feed_checked`` or this
        returns None, having changed nothing, and ``_feed_checked`` takes the
        line from the start and names the first fault in its fixed order; so
        the order of the checks here does not matter, only their sum."""
        head = self.head
        if head is None or line.count(b"{") + line.count(b"[") > canonical.MAX_DEPTH:
            return None
        try:
            text = line.decode("ascii")
            record, end = _scan(text, 0)
            if end != len(text) or type(record) is not dict:
                return None
            # canonical.dumps, which for ASCII output is exactly this call
            if orjson.dumps(record, default=canonical.number_fragment, option=_DUMPS_OPTS) != line:
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
                or kind == _kind_genesis
                or seq == 1
            ):
                return None
            sha = _line_sha(line, digest, sig)
            # A hexdigest is 64 lowercase hex, so digest is well formed too.
            if sha is None or sha.hexdigest() != digest:
                return None
            signature = bytes.fromhex(sig)
            if len(signature) != 64 or signature.hex() != sig:  # [0-9a-f]{128}
                return None
            checkpoint = self.checkpoint
            if checkpoint is not None and seq == checkpoint.seq:
                return None
            key = self._key_bytes
            if key is not None:
                message = SIGNING_PREFIX + sha.digest()
                # Ed25519 signing is deterministic: a signature byte-equal to
                # the one the key's holder makes of this message is that
                # signature, valid, at a third of a verify's cost. Any other
                # goes to the verify (what VerifyKey.verify calls, without
                # its layers), which alone decides.
                resign = self._resign
                if resign is None or resign(message) != signature:
                    nacl.bindings.crypto_sign_open(signature + message, key)
        except (
            ValueError,  # not ASCII or not JSON (UnicodeDecodeError, JSONDecodeError)
            StopIteration,  # the scanner found no value at 0
            RecursionError,
            KeyError,
            orjson.JSONEncodeError,
            nacl.exceptions.BadSignatureError,
        ):
            return None
        self.head = Head(seq, digest)
        self.count += 1
        return record

    def _feed_checked(self, line: bytes) -> dict[str, Any]:
        """Every check in its fixed order; the first fault raises."""
        record = _canonical_record(line)
        is_canonical = record is not None
        if record is None:
            try:
                record = canonical.loads(line)
            except CanonicalError:
                raise self._fail(NOT_JSON, None) from None
        if not isinstance(record, dict):
            raise self._fail(MALFORMED, None)
        seq = record.get("seq")
        if type(seq) is not int or seq < 0:
            raise self._fail(MALFORMED, None)
        prev, digest, sig = record.get("prev"), record.get("hash"), record.get("sig")
        if not (
            isinstance(record.get("kind"), str)
            and isinstance(record.get("ts"), str)
            and isinstance(prev, str)
            and _HEX64.fullmatch(prev)
            and isinstance(digest, str)
            and _HEX64.fullmatch(digest)
            and isinstance(sig, str)
            and _HEX128.fullmatch(sig)
        ):
            raise self._fail(MALFORMED, seq)
        if not is_canonical:
            try:
                if canonical.dumps(record) != line:
                    raise self._fail(NOT_CANONICAL, seq)
            except CanonicalError:
                raise self._fail(NOT_CANONICAL, seq) from None
        computed = _line_hash(line, digest, sig) if is_canonical else None
        if (computed or content_hash(record)) != digest:
            raise self._fail(HASH_MISMATCH, seq)
        head = self.head
        if head is None:
            # An agent's own log (one whose log_id is expected) must be whole:
            # a file with its first lines cut off would otherwise pass as a slice.
            if seq != 0 and self.expected_log_id is not None:
                raise self._fail(NOT_WHOLE, seq)
            if seq == 0 and prev != ZERO_HASH:
                raise self._fail(PREV_MISMATCH, seq)
            self.first_seq = seq
        else:
            if seq != head.seq + 1:
                raise self._fail(SEQ_ORDER, seq)
            if prev != head.hash:
                raise self._fail(PREV_MISMATCH, seq)
        if seq == 0:
            self._genesis(record)
        elif record["kind"] == Kind.GENESIS:
            raise self._fail(BAD_GENESIS, seq)
        elif seq == 1 and self.expected_log_id is not None and record["kind"] != Kind.POLICY:
            raise self._fail(NO_POLICY, seq)
        if self._verify_key is not None:
            try:
                self._verify_key.verify(signing_message(digest), bytes.fromhex(sig))
            except (nacl.exceptions.BadSignatureError, ValueError):
                raise self._fail(BAD_SIGNATURE, seq) from None
        if self.checkpoint is not None and seq == self.checkpoint.seq:
            if digest != self.checkpoint.hash:
                raise self._fail(CHECKPOINT_MISMATCH, seq)
            self.checkpoint_seen = True
        self.head = Head(seq, digest)
        self.count += 1
        return record

    def _genesis(self, record: dict[str, Any]) -> None:
        log_id, key_hex = record.get("log_id"), record.get("public_key")
        if not (
            record["kind"] == Kind.GENESIS
            and record.get("format") == FORMAT
            and isinstance(log_id, str)
            and isinstance(key_hex, str)
            and _HEX64.fullmatch(key_hex)
        ):
            raise self._fail(BAD_GENESIS, 0)
        if self.expected_log_id is not None and log_id != self.expected_log_id:
            raise self._fail(LOG_ID_MISMATCH, 0)
        if self.trusted_key is not None:
            if key_hex != self.trusted_key.hex():
                raise self._fail(KEY_MISMATCH, 0)
        else:
            self._verify_key = nacl.signing.VerifyKey(bytes.fromhex(key_hex))
            self._key_bytes = bytes(self._verify_key)
            self._key_hex = key_hex
        self.log_id = log_id

    def finish(self) -> None:
        """Checks that need the whole log: the checkpoint must have been
        reached, and an agent's own log must hold its policy record."""
        if self.checkpoint is not None and not self.checkpoint_seen:
            first = self.first_seq
            if first is not None and self.checkpoint.seq < first:
                raise VerificationError(Failure(1, first, CHECKPOINT_OUTSIDE))
            raise VerificationError(Failure(self.count + 1, self.checkpoint.seq, TRUNCATED))
        if self.expected_log_id is not None and self.first_seq == 0 and self.count == 1:
            # A log is created holding genesis and policy in one step, so a
            # genesis alone was cut short; served, the agent would have no
            # policy and write records this verifier then rejects.
            raise VerificationError(Failure(2, 1, NO_POLICY_RECORD))

    def report(self, failure: Failure | None) -> Report:
        signatures = self._verify_key is not None
        return Report(
            ok=failure is None,
            records=self.count,
            log_id=self.log_id if self.log_id is not None else self.expected_log_id,
            public_key=self._key_hex,
            key_trusted=failure is None and self.trusted_key is not None,
            head=self.head,
            first_seq=self.first_seq,
            failure=failure,
            signatures_checked=signatures,
            checkpoint_checked=self.checkpoint is not None and failure is None,
        )


def verify_lines(
    lines: Iterable[bytes],
    *,
    public_key: bytes | None = None,
    log_id: str | None = None,
    checkpoint: Checkpoint | None = None,
) -> Report:
    """Verify whole lines (without newlines) and report the first failure."""
    verifier = ChainVerifier(public_key=public_key, log_id=log_id, checkpoint=checkpoint)
    try:
        for line in lines:
            verifier.feed(line)
        verifier.finish()
    except VerificationError as exc:
        return verifier.report(exc.failure)
    return verifier.report(None)
