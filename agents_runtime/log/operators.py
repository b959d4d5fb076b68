"""The operators log: who may act as an operator, in a signed log.

It has the format of an agent's log (docs/log-format.md): a genesis record
whose ``log_id`` is ``operators``, then records chained by hash and signed
with the same key. Its own record kinds are ``operator_token_issued``,
``operator_token_revoked``, ``passkey_registered`` and ``passkey_revoked``;
it has no policy record. The store keeps it
(``OperatorsLog``, below): ``<data-dir>/operators.jsonl`` on the file store,
rows of ``guard_operators`` on PostgreSQL. guardd verifies it at start (a
failure stops guardd: no identity can be trusted from it) and ``audit
verify`` verifies it beside the agents' logs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any, Protocol

from agents_runtime.errors import Failure, VerificationError
from agents_runtime.log.verify import ChainVerifier, Report

# The genesis log_id. An agent may be named so too: its log is kept apart
# (agents/, guard_logs) and, read as this one, fails at its policy record.
OPERATORS_LOG_ID = "operators"
UNKNOWN_KIND = "record kind is not one of the operators log"
BAD_FIELDS = "record fields are malformed"
NOT_OPERATORS = "log_id is not operators"


class OperatorKind(StrEnum):
    """The kinds of the operators log, besides its genesis."""

    TOKEN_ISSUED = "operator_token_issued"  # noqa: S105  # a kind, no secret
    TOKEN_REVOKED = "operator_token_revoked"  # noqa: S105
    PASSKEY_REGISTERED = "passkey_registered"
    PASSKEY_REVOKED = "passkey_revoked"


# Each kind's fields: name -> the JSON types it may hold.
_STR, _NULLABLE_STR, _INT = (str,), (str, type(None)), (int,)
FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    OperatorKind.TOKEN_ISSUED.value: {
        "token_id": _STR,
        "name": _STR,
        "role": _STR,
        "expires_at": _NULLABLE_STR,
        "secret_sha256": _STR,
        "by": _STR,
        "by_id": _STR,
    },
    OperatorKind.TOKEN_REVOKED.value: {"token_id": _STR, "by": _STR, "by_id": _STR},
    # by and by_id: the operator who registered it, whose passkey it is.
    OperatorKind.PASSKEY_REGISTERED.value: {
        "credential_id": _STR,
        "public_key": _STR,
        "alg": _INT,
        "rp_id": _STR,
        "origin": _STR,
        "sign_count": _INT,
        "by": _STR,
        "by_id": _STR,
    },
    # by and by_id: the admin who revoked it.
    OperatorKind.PASSKEY_REVOKED.value: {"credential_id": _STR, "by": _STR, "by_id": _STR},
}


def check_fields(record: dict[str, Any]) -> str | None:
    """Why ``record`` (not a genesis) is no record of the operators log, or None."""
    fields = FIELDS.get(record["kind"])
    if fields is None:
        return UNKNOWN_KIND
    for name, types in fields.items():
        if type(record.get(name)) not in types:
            return BAD_FIELDS
    return None


def verify_operators(lines: Iterable[bytes], *, public_key: bytes | None) -> Report:
    """Verify the operators log's lines (without newlines): the chain and the
    signatures as for any log, a genesis naming ``operators``, and each
    record one of its kinds with its fields. An empty log is valid."""
    verifier = ChainVerifier(public_key=public_key)
    try:
        for line in lines:
            record = verifier.feed(line)
            seq = record["seq"]
            if verifier.first_seq != 0:
                raise VerificationError(Failure(1, seq, "log does not start at seq 0"))
            if seq == 0:
                if record["log_id"] != OPERATORS_LOG_ID:
                    raise VerificationError(Failure(1, 0, NOT_OPERATORS))
                continue
            why = check_fields(record)
            if why is not None:
                raise VerificationError(Failure(verifier.count, seq, why))
    except VerificationError as exc:
        return verifier.report(exc.failure)
    return verifier.report(None)


class OperatorsLog(Protocol):
    """Where the store keeps the operators log."""

    def read(self) -> list[bytes]:
        """Every committed line, without newlines (blocking: at start, by ``audit``)."""

    async def append(self, lines: Sequence[bytes], after_seq: int) -> None:
        """Append ``lines`` (canonical records, without newlines) after the
        record ``after_seq`` (-1: the log is empty), durably. HeadMoved when
        another writer appended first: nothing was written."""

    async def newer(self, after_seq: int) -> list[bytes]:
        """The lines after ``after_seq`` that others wrote (none on a store
        with one writer)."""
