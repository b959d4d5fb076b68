"""Operator tokens: issued and revoked by an admin, kept in the operators log.

The operators log (``agents_runtime/log/operators.py``) is the only record of
the tokens: this module folds it into a table at start, after verifying it
(a log that fails stops guardd: no identity could be trusted from it), and
writes each issue and revocation there before it takes effect. A token's
secret is never written: its record holds the SHA-256 of the token, which is
what a request's token is looked up by (a lookup by the hash of a random
256-bit secret leaks nothing of the secret through its timing).

Where other nodes write the same log (PostgreSQL), a task reads their
records every ``FOLLOW_INTERVAL`` seconds, so a token revoked on one node is
refused on every node within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import attrs

from agents_runtime.errors import DataDirError, LogReadError, LogWriteError, VerificationError
from agents_runtime.log import canonical
from agents_runtime.log.keys import KeyRing
from agents_runtime.log.operators import (
    NOT_OPERATORS,
    OPERATORS_LOG_ID,
    OperatorKind,
    OperatorsLog,
    check_fields,
    verify_operators,
)
from agents_runtime.log.record import Head, genesis_fields, seal, timestamp
from agents_runtime.log.store import HeadMoved
from agents_runtime.log.verify import ChainVerifier
from guardd.auth import OPERATOR_TOKEN_PREFIX, VIA_OPERATOR_TOKEN, Operator, held
from guardd.errors import ApiError
from guardd.passkeys import PasskeyTable
from guardd.revocation import revocation

log = logging.getLogger("guardd.operators")

MAX_TTL = 365 * 24 * 3600  # seconds: a token lives at most a year
FOLLOW_INTERVAL = 0.5  # seconds between reads of the records other nodes wrote
TRIES = 8  # appends tried when other nodes keep writing first

ACTIVE, REVOKED, EXPIRED = "active", "revoked", "expired"


def secret_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


@attrs.frozen
class OperatorToken:
    """A token as the operators log has it (never its secret)."""

    token_id: str
    name: str
    role: str
    expires_at: str | None
    expires: float | None  # expires_at in seconds since the epoch
    secret_sha256: str
    issued_at: str
    by: str
    by_id: str
    revoked_at: str | None = None

    def status(self, now: float) -> str:
        if self.revoked_at is not None:
            return REVOKED
        if self.expires is not None and now >= self.expires:
            return EXPIRED
        return ACTIVE

    def operator(self) -> Operator:
        return Operator(self.name, f"token:{self.token_id}", held(self.role), VIA_OPERATOR_TOKEN)


class OperatorsLogError(DataDirError):
    """The operators log failed verification: guardd does not start."""


class Operators:
    """The operator tokens of this guardd: ``guardd.auth.OperatorTokens``."""

    def __init__(
        self,
        store_log: OperatorsLog,
        ring: KeyRing,
        *,
        follow: bool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._log = store_log
        self._ring = ring
        self._follow = follow
        self._clock = clock
        self._head = Head.empty()
        self._tokens: dict[str, OperatorToken] = {}  # by token_id, in order of issue
        self._by_hash: dict[str, OperatorToken] = {}
        self.passkeys = PasskeyTable()  # the operators' passkeys (guardd.passkeys)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    # -- loading and following ----------------------------------------------------

    def load(self) -> None:
        """Read and verify the log, then fold it (blocking, at start).
        OperatorsLogError naming the first failure."""
        lines = self._log.read()
        report = verify_operators(lines, public_key=self._ring.public_key)
        if not report.ok:
            failure = report.failure
            assert failure is not None
            raise OperatorsLogError(
                f"the operators log failed verification at line {failure.line}"
                f" (seq {failure.seq}): {failure.reason}; no operator token can be trusted"
                " from it: restore it from a backup"
            )
        for line in lines:
            self._fold(canonical.loads(line))
        if report.head is not None:
            self._head = report.head

    def _fold(self, record: dict[str, Any]) -> None:
        kind = record["kind"]
        if kind == OperatorKind.TOKEN_ISSUED:
            expires_at = record["expires_at"]
            token = OperatorToken(
                token_id=record["token_id"],
                name=record["name"],
                role=record["role"],
                expires_at=expires_at,
                expires=None if expires_at is None else _epoch(expires_at),
                secret_sha256=record["secret_sha256"],
                issued_at=record["ts"],
                by=record["by"],
                by_id=record["by_id"],
            )
            self._tokens[token.token_id] = token
            self._by_hash[token.secret_sha256] = token
        elif kind == OperatorKind.TOKEN_REVOKED:
            found = self._tokens.get(record["token_id"])
            if found is not None and found.revoked_at is None:
                revoked = attrs.evolve(found, revoked_at=record["ts"])
                self._tokens[found.token_id] = revoked
                self._by_hash[found.secret_sha256] = revoked
        else:
            self.passkeys.fold(record)

    async def start(self) -> None:
        if self._follow and self._task is None:
            self._task = asyncio.create_task(self._following(), name="operators-log")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _following(self) -> None:
        while True:
            await asyncio.sleep(FOLLOW_INTERVAL)
            try:
                async with self._lock:
                    await self._catch_up()
            except (LogReadError, OperatorsLogError) as exc:
                log.error("reading what other nodes wrote to the operators log: %s", exc)

    async def _catch_up(self) -> None:
        """Verify and fold what other nodes appended after our head."""
        lines = await self._log.newer(self._head.seq)
        if not lines:
            return
        verifier = ChainVerifier(public_key=self._ring.public_key)
        if self._head.seq >= 0:  # as ChainVerifier.following, with no agent's rules
            verifier.head, verifier.first_seq, verifier.count = self._head, 0, self._head.seq + 1
        for line in lines:
            try:
                record = verifier.feed(line)
            except VerificationError as exc:
                raise OperatorsLogError(
                    f"a record another node wrote to the operators log fails: {exc.failure.reason}"
                ) from None
            if record["seq"] == 0:
                why = None if record.get("log_id") == OPERATORS_LOG_ID else NOT_OPERATORS
            else:
                why = check_fields(record)
            if why is not None:
                raise OperatorsLogError(f"operators log seq {record['seq']}: {why}")
            self._fold(record)
            self._head = Head(record["seq"], record["hash"])

    # -- what authentication asks -------------------------------------------------

    def operator(self, token: str) -> Operator | None:
        found = self._by_hash.get(secret_hash(token))
        if found is None or found.status(self._clock()) != ACTIVE:
            return None
        return found.operator()

    # -- what the routes ask ------------------------------------------------------

    async def tokens(self) -> list[OperatorToken]:
        """Every token, with what other nodes wrote read first."""
        async with self._lock:
            try:
                await self._catch_up()
            except LogReadError as exc:
                raise ApiError(
                    f"the operators log cannot be read now: {exc}", "unavailable"
                ) from None
        return list(self._tokens.values())

    def now(self) -> float:
        return self._clock()

    async def refresh(self) -> None:
        """Read what other nodes wrote to the operators log."""
        await self.tokens()

    async def write(self, fields: dict[str, Any], check: Callable[[], None] | None = None) -> None:
        """Append a record of another concept (guardd.passkeys) to the operators log."""
        await self._write(fields, check)

    async def issue(
        self, name: str, role: str, ttl_secs: Decimal | None, by: Operator
    ) -> tuple[OperatorToken, str]:
        """A new token: its entry and its secret (shown once)."""
        token = OPERATOR_TOKEN_PREFIX + secrets.token_urlsafe(32)
        token_id = "tok-" + secrets.token_hex(8)
        now = self._clock()
        expires_at = None
        if ttl_secs is not None:
            expires_at = timestamp(datetime.fromtimestamp(now + float(ttl_secs), UTC))
        fields = {
            "kind": OperatorKind.TOKEN_ISSUED,
            "token_id": token_id,
            "name": name,
            "role": role,
            "expires_at": expires_at,
            "secret_sha256": secret_hash(token),
            "by": by.name,
            "by_id": by.by_id,
        }
        await self._write(fields)
        return self._tokens[token_id], token

    async def revoke(self, token_id: str, by: Operator) -> OperatorToken:
        fields, check = revocation(
            OperatorKind.TOKEN_REVOKED, "token_id", token_id, by, self._tokens.get, "operator token"
        )
        await self._write(fields, check)
        return self._tokens[token_id]

    async def _write(self, fields: dict[str, Any], check: Callable[[], None] | None = None) -> None:
        """Append ``fields`` (after a genesis on an empty log) once ``check``
        passes on the log as it stands, others' records read first."""
        signer = self._ring.signer
        if signer is None:
            raise ApiError("guardd is read-only: the operators log cannot be written", "read_only")
        async with self._lock:
            for _ in range(TRIES):
                try:
                    await self._catch_up()
                except LogReadError as exc:
                    raise ApiError(
                        f"the operators log cannot be read now: {exc}", "unavailable"
                    ) from None
                if check is not None:
                    check()
                records: list[dict[str, Any]] = []
                if self._head.seq < 0:
                    records.append(genesis_fields(OPERATORS_LOG_ID, self._ring.public_key_hex))
                records.append(fields)
                ts = timestamp(datetime.fromtimestamp(self._clock(), UTC))
                sealed, head = [], self._head
                for record in records:
                    one = seal(record, prev=head, ts=ts, signer=signer)
                    sealed.append(one)
                    head = one.head
                try:
                    await self._log.append([one.line[:-1] for one in sealed], self._head.seq)
                except HeadMoved:
                    continue  # read what the other node wrote, then try again
                except LogWriteError as exc:
                    why = f"the operators log cannot be written now: {exc}"
                    raise ApiError(why, "unavailable") from None
                for one in sealed:
                    self._fold(one.record)
                self._head = head
                return
        raise ApiError(
            "other nodes kept writing to the operators log first: try again", "unavailable"
        )


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
