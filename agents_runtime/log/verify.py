"""Verification of a log: canonical form, hash chain, signatures, genesis,
checkpoint. Verify-or-raise: ``ChainVerifier.feed`` returns the parsed record
or raises VerificationError carrying the first Failure.

``ChainVerifier.feed_strict`` is the reference: the algorithm of
docs/log-format.md ("Verification algorithm"), step by step, in its order.
``feed`` first offers the line to the fast path of ``_fast_verify``, which
takes the common line (a canonical record that extends the chain, signed by
the key) in one pass and must give the reference's answer on every input
(its docstring names the test that holds it to that); any other line goes
to the reference.

Failure reasons are short fixed phrases (docs/log-format.md lists them all).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import nacl.exceptions
import nacl.signing

from agents_runtime.errors import CanonicalError, VerificationError

# Failure is defined beside the error that carries it; it is named here too,
# as the verdict of this module's verifier.
from agents_runtime.errors import Failure as Failure
from agents_runtime.log import _fast_verify, _vouched, canonical
from agents_runtime.log.keys import Signer
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import (
    FORMAT,
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
CHECKPOINT_UNSIGNED = "checkpoint signature does not verify"
CHECKPOINT_ORIGIN = "checkpoint is for another log"

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX128 = re.compile(r"[0-9a-f]{128}")


@attrs.frozen
class Checkpoint:
    """A head recorded earlier: the log must reach it unchanged. ``signed``:
    its signed note verified under the log's key (agents_runtime/log/
    checkpoint.py), so it commits to every record up to ``seq`` through the
    hash chain, and their Ed25519 signatures need not be checked again."""

    seq: int
    hash: str
    signed: bool = False

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
        fast path check a signature by making it again (see _fast_verify)."""
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
        # Lines were taken by their bytes alone (feed_folded): the verdict
        # holds only once the checkpoint is reached; a failure is to be
        # named by verifying the log again without them.
        self.provisional = False
        # Records up to this seq are vouched for by a signed checkpoint: their
        # hashes and links are checked, their signatures are not.
        self._vouched = checkpoint.seq if checkpoint is not None and checkpoint.signed else -1
        self._verify_key = nacl.signing.VerifyKey(public_key) if public_key else None
        self._key_bytes = bytes(self._verify_key) if self._verify_key is not None else None
        self._key_hex = public_key.hex() if public_key else None

    @classmethod
    def following(
        cls,
        head: Head,
        *,
        public_key: bytes,
        log_id: str,
        signer: Signer | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> ChainVerifier:
        """A verifier of the lines that follow ``head`` in a log verified up
        to it: what another writer appended to a shared store. A failure
        names the line as it stands in the whole log. ``checkpoint``: a
        head the lines must reach unchanged (signed: they need no signature
        check up to it)."""
        verifier = cls(public_key=public_key, log_id=log_id, signer=signer, checkpoint=checkpoint)
        verifier.head = head
        verifier.log_id = log_id
        verifier.first_seq = 0
        verifier.count = head.seq + 1
        return verifier

    @property
    def public_key_hex(self) -> str | None:
        return self._key_hex

    def _fail(self, reason: str, seq: int | None) -> VerificationError:
        return VerificationError(Failure(self.count + 1, seq, reason))

    def feed(self, line: bytes) -> dict[str, Any]:
        """Verify the next line (without its newline); return the record.
        The same verdict as ``feed_strict``, faster for the common line."""
        checkpoint = self.checkpoint
        head = self.head
        vouched = head is not None and head.seq < self._vouched
        record = _fast_verify.chained_record(
            line,
            head,
            checkpoint.seq if checkpoint is not None else None,
            None if vouched else self._key_bytes,
            None if vouched else self._resign,
        )
        if record is None:
            return self.feed_strict(line)
        self.head = Head(record["seq"], record["hash"])
        self.count += 1
        return record

    def feed_folded(self, lines: Sequence[bytes], stop: int) -> None:
        """Verify ``lines[self.count:stop]`` of a whole log, this verifier
        having verified the lines before them (none at first), when their
        records need not be returned: a state snapshot holds their fold.
        The lines a signed checkpoint vouches for (seq 2 up to the one
        before the checkpoint's) are checked from their bytes alone where
        they have the usual shape (agents_runtime/log/_vouched.py), which
        sets ``provisional``: such a line is sound only once the log reaches
        the checkpoint, so on any failure after it the caller verifies the
        log again without this method to name the first fault. Every other
        line goes to ``feed``."""
        feed = self.feed
        stop = min(stop, len(lines))  # a log may end before the snapshot
        # Index equals seq in a whole log; the checkpoint's own line is
        # checked by the reference (its hash against the checkpoint's).
        vouched = min(stop, self._vouched) if self.expected_log_id is not None else 0
        index = self.count
        while index < stop:
            head = self.head
            if 2 <= index < vouched and head is not None and self.first_seq == 0:
                taken, digest = _vouched.vouched_lines(
                    lines, index, vouched, head.hash.encode("ascii")
                )
                if taken > index:
                    self.head = Head(head.seq + taken - index, digest.decode("ascii"))
                    self.count += taken - index
                    self.provisional = True
                    index = taken
                    if index == stop:
                        break
            feed(lines[index])
            index += 1

    def feed_strict(self, line: bytes) -> dict[str, Any]:
        """Verify the next line by the reference algorithm: every check of
        docs/log-format.md in its order (the step numbers below are its);
        the first fault raises."""
        try:
            record = canonical.loads(line)  # 1
        except CanonicalError:
            raise self._fail(NOT_JSON, None) from None
        if not isinstance(record, dict):  # 2
            raise self._fail(MALFORMED, None)
        seq = record.get("seq")
        if type(seq) is not int or seq < 0:
            raise self._fail(MALFORMED, None)
        prev, digest, sig = record.get("prev"), record.get("hash"), record.get("sig")
        if not (  # 3
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
        try:  # 4
            if canonical.dumps(record) != line:
                raise self._fail(NOT_CANONICAL, seq)
        except CanonicalError:
            raise self._fail(NOT_CANONICAL, seq) from None
        if content_hash(record) != digest:  # 5
            raise self._fail(HASH_MISMATCH, seq)
        head = self.head
        if head is None:  # 6
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
        if seq == 0:  # 7
            self._genesis(record)
        elif record["kind"] == Kind.GENESIS:
            raise self._fail(BAD_GENESIS, seq)
        elif seq == 1 and self.expected_log_id is not None and record["kind"] != Kind.POLICY:
            raise self._fail(NO_POLICY, seq)
        if self._verify_key is not None and seq > self._vouched:  # 8
            try:
                self._verify_key.verify(signing_message(digest), bytes.fromhex(sig))
            except (nacl.exceptions.BadSignatureError, ValueError):
                raise self._fail(BAD_SIGNATURE, seq) from None
        if self.checkpoint is not None and seq == self.checkpoint.seq:  # 9
            if digest != self.checkpoint.hash:
                raise self._fail(CHECKPOINT_MISMATCH, seq)
            self.checkpoint_seen = True
        self.head = Head(seq, digest)  # 10
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

    def feed_all(self, lines: Iterable[bytes]) -> Report:
        """Feed every line (without its newline), then ``finish``: the
        report, with the first failure if there is one."""
        try:
            for line in lines:
                self.feed(line)
            self.finish()
        except VerificationError as exc:
            return self.report(exc.failure)
        return self.report(None)

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
    return verifier.feed_all(lines)
