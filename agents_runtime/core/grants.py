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

``grant_issued`` and ``grant_revoked`` records make and end grants
(``IssueGrant``, ``RevokeGrant``); folding ``action_allowed`` records that
carry ``grant_id`` spends them (``decisions``).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import attrs

from agents_runtime.core.entries import (
    Command,
    CommandEntry,
    KindEntry,
    Record,
    Steps,
    announces_nothing,
    never_continues,
    nothing_follows,
    replayed,
    settles_nothing,
    signed_by,
)
from agents_runtime.core.money import ZERO
from agents_runtime.core.state import NO_GRANTS, AgentState, Lines, parse_ts
from agents_runtime.core.vocabulary import GrantStatus
from agents_runtime.errors import CanonicalError, InvalidState, NotFound
from agents_runtime.log import canonical
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import timestamp_micros


@attrs.frozen
class IssueGrant(Command):
    """An operator approves ``tool`` once for a bounded stream of calls: at
    least one of ``max_calls`` and ``max_cost``, and exactly one of
    ``ttl_secs`` and ``expires_at`` (a record ``ts``)."""

    tool: str
    by: str
    max_calls: int | None = None
    max_cost: Decimal | None = None
    ttl_secs: Decimal | None = None
    expires_at: str | None = None
    input_match: dict[str, Any] | None = None
    note: str | None = None
    by_id: str | None = None  # the operator's identity (entries.signed_by)


@attrs.frozen
class RevokeGrant(Command):
    grant_id: str
    by: str
    reason: str | None = None
    by_id: str | None = None


@attrs.frozen
class ListGrants(Command):
    pass


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


def issue_grant(state: AgentState, cmd: IssueGrant, now: float, lines: Lines) -> Steps:
    if not state.alive:
        raise InvalidState(f"agent {state.agent_id} is terminated; it takes no grants")
    if cmd.expires_at is not None:
        expires_at = cmd.expires_at
        expires = parse_ts(expires_at)
    else:
        assert cmd.ttl_secs is not None  # the edge requires one of the two
        expires = now + float(cmd.ttl_secs)
        expires_at = timestamp_micros(round(expires * 1_000_000))
    if expires <= now:
        raise InvalidState(f"expires_at {expires_at} is not after now")
    grant_id = f"grt-{len(state.grants) + 1}"
    fields: dict[str, Any] = {
        "kind": Kind.GRANT_ISSUED,
        "grant_id": grant_id,
        "tool": cmd.tool,
        "by": cmd.by,
        "max_calls": cmd.max_calls,
        "max_cost": cmd.max_cost,
        "expires_at": expires_at,
        "input_match": cmd.input_match,
    }
    if cmd.note is not None:
        fields["note"] = cmd.note
    yield signed_by(fields, cmd.by, cmd.by_id)
    return state.grants[grant_id]


def _grant(state: AgentState, grant_id: str) -> Grant:
    grant = state.grants.get(grant_id)
    if grant is None:
        raise NotFound(f"no grant {grant_id} for agent {state.agent_id}")
    return grant


def revoke_grant(state: AgentState, cmd: RevokeGrant, now: float, lines: Lines) -> Steps:
    grant = _grant(state, cmd.grant_id)
    if grant.revoked_by is not None:
        raise InvalidState(
            f"grant {grant.grant_id} was revoked by {grant.revoked_by} at {grant.revoked_at}"
        )
    fields: dict[str, Any] = {"kind": Kind.GRANT_REVOKED, "grant_id": grant.grant_id, "by": cmd.by}
    if cmd.reason is not None:
        fields["reason"] = cmd.reason
    yield signed_by(fields, cmd.by, cmd.by_id)
    return grant


def list_grants(state: AgentState, cmd: ListGrants, now: float, lines: Lines) -> dict[str, Grant]:
    """Reply: the agent's grants by ID, in issue order."""
    return state.grants


def _fold_issued(state: AgentState, r: Record) -> None:
    grant_id = r["grant_id"]
    if grant_id != f"grt-{len(state.grants) + 1}":
        raise ValueError(f"{grant_id} issued where grt-{len(state.grants) + 1} comes next")
    max_cost = r["max_cost"]
    if state.grants is NO_GRANTS:
        state.grants = {}
    state.grants[grant_id] = Grant(
        grant_id=grant_id,
        seq=r["seq"],
        issued_at=r["ts"],
        tool=r["tool"],
        by=r["by"],
        note=r.get("note"),
        max_calls=r["max_calls"],
        max_cost=None if max_cost is None else Decimal(max_cost),
        expires_at=r["expires_at"],
        expires=datetime.fromisoformat(r["expires_at"]).timestamp(),
        input_match=r["input_match"],
        match=match_of(r["input_match"]),
    )


def _fold_revoked(state: AgentState, r: Record) -> None:
    grant = state.grants[r["grant_id"]]
    if grant.revoked_by is not None:
        raise ValueError(f"{r['grant_id']} is revoked already")
    grant.revoked_by = r["by"]
    grant.revoked_at = r["ts"]
    grant.revoke_reason = r.get("reason")


def _issue_of(record: Record) -> IssueGrant:
    max_cost = record["max_cost"]
    return IssueGrant(
        tool=record["tool"],
        by=record["by"],
        max_calls=record["max_calls"],
        max_cost=None if max_cost is None else Decimal(max_cost),
        expires_at=record["expires_at"],
        input_match=record["input_match"],
        note=record.get("note"),
        by_id=record.get("by_id"),
    )


def _revoke_of(record: Record) -> RevokeGrant:
    return RevokeGrant(record["grant_id"], record["by"], record.get("reason"), record.get("by_id"))


def _describe(record: Record) -> str:
    return f"{record.get('grant_id')}, by {record.get('by')}"


KIND_ENTRIES = (
    KindEntry(
        kind=Kind.GRANT_ISSUED,
        fold=_fold_issued,
        finish=nothing_follows,
        continues=never_continues,
        describe=_describe,
        starts=_issue_of,
        announces=announces_nothing,
        settles=settles_nothing,
        under_candidate=replayed,
    ),
    KindEntry(
        kind=Kind.GRANT_REVOKED,
        fold=_fold_revoked,
        finish=nothing_follows,
        continues=never_continues,
        describe=_describe,
        starts=_revoke_of,
        announces=announces_nothing,
        settles=settles_nothing,
        under_candidate=replayed,
    ),
)

COMMAND_ENTRIES = (
    CommandEntry(command=IssueGrant, writes=issue_grant, view=None, reads=None),
    CommandEntry(command=RevokeGrant, writes=revoke_grant, view=None, reads=None),
    CommandEntry(command=ListGrants, writes=None, view=list_grants, reads=None),
)
