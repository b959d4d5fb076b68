"""Bounded grants: an operator's approval given once for a bounded stream of
near-identical calls.

A grant names a tool, an expiry, and at least one bound: a number of calls
(``max_calls``) or an amount of budget (``max_cost``); optionally the exact
values the call's ``input`` must hold at some keys (``input_match``). A
request the policy would hold for approval that matches an unexpired grant
with room left for its charge is allowed at once, and its ``action_allowed``
record names the grant (``grant_id``): the log spends a grant down exactly.
A grant only stands in for a person's approval; every check runs first, so
it never turns a denial into an allowance.

``grant_issued`` and ``grant_revoked`` records make and end grants; folding
``action_allowed`` records that carry ``grant_id`` spends them (state.py).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import attrs

from agents_runtime.core.money import ZERO
from agents_runtime.core.vocabulary import GrantStatus
from agents_runtime.errors import CanonicalError
from agents_runtime.log import canonical


@attrs.define(slots=True)
class Grant:
    grant_id: str
    seq: int  # of its grant_issued record
    issued_at: str
    tool: str
    by: str
    note: str | None
    max_calls: int | None
    max_cost: Decimal | None
    expires_at: str
    expires: float  # expires_at in seconds since the epoch
    input_match: dict[str, Any] | None
    # (key, canonical bytes of the value): what a call's input must hold
    match: tuple[tuple[str, bytes], ...] = ()
    calls: int = 0  # calls drawn
    spent: Decimal = ZERO  # charges drawn
    revoked_by: str | None = None
    revoked_at: str | None = None
    revoke_reason: str | None = None

    def has_room(self, charge: Decimal, now: float) -> bool:
        """Whether a call charging ``charge`` at ``now`` may draw on it."""
        if self.revoked_by is not None or now >= self.expires:
            return False
        if self.max_calls is not None and self.calls >= self.max_calls:
            return False
        return self.max_cost is None or self.spent + charge <= self.max_cost

    def matches(self, tool: str, tool_input: Any) -> bool:
        if tool != self.tool:
            return False
        if not self.match:
            return True
        if not isinstance(tool_input, dict):
            return False
        for key, value in self.match:
            if key not in tool_input:
                return False
            try:
                if canonical.dumps(tool_input[key]) != value:
                    return False
            except CanonicalError:
                return False
        return True

    def status(self, now: float) -> GrantStatus:
        if self.revoked_by is not None:
            return GrantStatus.REVOKED
        if now >= self.expires:
            return GrantStatus.EXPIRED
        calls_done = self.max_calls is not None and self.calls >= self.max_calls
        if calls_done or (self.max_cost is not None and self.spent >= self.max_cost > ZERO):
            return GrantStatus.USED_UP
        return GrantStatus.ACTIVE


def match_of(input_match: dict[str, Any] | None) -> tuple[tuple[str, bytes], ...]:
    if not input_match:
        return ()
    return tuple((key, canonical.dumps(value)) for key, value in input_match.items())


def drawable(
    grants: dict[str, Grant], tool: str, tool_input: Any, charge: Decimal, now: float
) -> Grant | None:
    """The grant a held call draws on: of those that match with room left, the
    one that expires first (the earliest issued among equals); None if none."""
    best: Grant | None = None
    for grant in grants.values():
        if grant.matches(tool, tool_input) and grant.has_room(charge, now):
            if best is None or grant.expires < best.expires:
                best = grant
    return best


def grant_json(grant: Grant, now: float) -> dict[str, Any]:
    """A grant as ``GET .../grants`` shows it, with what is left."""
    out: dict[str, Any] = {
        "grant_id": grant.grant_id,
        "tool": grant.tool,
        "by": grant.by,
        "issued_at": grant.issued_at,
        "expires_at": grant.expires_at,
        "max_calls": grant.max_calls,
        "max_cost": grant.max_cost,
        "input_match": grant.input_match,
        "calls_used": grant.calls,
        "cost_used": grant.spent,
        "calls_left": None if grant.max_calls is None else max(grant.max_calls - grant.calls, 0),
        "cost_left": None if grant.max_cost is None else max(grant.max_cost - grant.spent, ZERO),
        "status": grant.status(now),
    }
    if grant.note is not None:
        out["note"] = grant.note
    if grant.revoked_by is not None:
        out["revoked_by"] = grant.revoked_by
        out["revoked_at"] = grant.revoked_at
        if grant.revoke_reason is not None:
            out["revoke_reason"] = grant.revoke_reason
    return out
