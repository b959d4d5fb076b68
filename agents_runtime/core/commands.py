"""Commands an agent actor accepts. Frozen, validated by the edge (guardd)
before they are built; the actor trusts their types."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import attrs

from agents_runtime.core.policy import Policy

ADMIN = "admin"
AGENT = "agent"


@attrs.frozen
class RequestAction:
    tool: str
    input: Any = None
    cost: Decimal | None = None
    idempotency_key: str | None = None


@attrs.frozen
class GetStatus:
    pass


@attrs.frozen
class GetPolicy:
    """Reply: the policy in force, defaults filled in, as its ``policy`` record has it."""


@attrs.frozen
class GetAction:
    action_id: str


@attrs.frozen
class WatchAction:
    """Reply: a future that completes when the action leaves pending_approval."""

    action_id: str


@attrs.frozen
class ListPending:
    pass


@attrs.frozen
class Approve:
    action_id: str
    approver: str
    note: str | None = None


@attrs.frozen
class Reject:
    action_id: str
    approver: str
    reason: str
    scar: str | None = None


@attrs.frozen
class Cancel:
    """The asker withdraws a pending action (agent or admin)."""

    action_id: str
    role: str  # ADMIN or AGENT
    reason: str | None = None


@attrs.frozen
class ReportOutcome:
    action_id: str
    outcome: str  # success, failure, harmful
    role: str  # ADMIN or AGENT
    detail: str | None = None


@attrs.frozen
class AddScar:
    severity: str
    reason: str
    action_id: str | None = None
    by: str | None = None  # the operator who adds it; None writes "operator"


@attrs.frozen
class Terminate:
    reason: str
    by: str


@attrs.frozen
class SetPolicy:
    policy: Policy


@attrs.frozen
class IssueGrant:
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


@attrs.frozen
class RevokeGrant:
    grant_id: str
    by: str
    reason: str | None = None


@attrs.frozen
class ListGrants:
    pass


@attrs.frozen
class GetLogView:
    """Reply: what a reader needs to read committed records off disk."""


Command = (
    RequestAction
    | GetStatus
    | GetPolicy
    | GetAction
    | WatchAction
    | ListPending
    | Approve
    | Reject
    | Cancel
    | ReportOutcome
    | AddScar
    | Terminate
    | SetPolicy
    | IssueGrant
    | RevokeGrant
    | ListGrants
    | GetLogView
)
