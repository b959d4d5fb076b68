"""Revoking what the operators log holds (an operator token, a passkey): the
record that revokes it, and the check the log must pass just before it is
written. Both kinds answer the same way: 404 when there is no such thing,
409 ``invalid_state`` when it was revoked already (a revocation is written
once, so the log says when it happened, not the last time someone asked)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from guardd.auth import Operator
from guardd.errors import ApiError, ApiNotFound


class Revocable(Protocol):
    @property
    def revoked_at(self) -> str | None: ...


def revocation(
    kind: str,
    key: str,
    ident: str,
    by: Operator,
    find: Callable[[str], Revocable | None],
    noun: str,
) -> tuple[dict[str, Any], Callable[[], None]]:
    """The record revoking the ``noun`` named ``ident`` (under ``key``), and
    its check against what ``find`` holds once the log is read up to now."""

    def check() -> None:
        found = find(ident)
        if found is None:
            raise ApiNotFound(f"no {noun} {ident}")
        if found.revoked_at is not None:
            raise ApiError(f"{noun} {ident} was revoked at {found.revoked_at}", "invalid_state")

    return {"kind": kind, key: ident, "by": by.name, "by_id": by.by_id}, check
