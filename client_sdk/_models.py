# Generated from docs/openapi.json by sdk/models.py: do not edit.
# Change the service's shapes (guardd/replies.py) or sdk/models.py, then run: python sdk/models.py

"""What the service answers, as plain frozen classes (parsed in ``_parsers``).

Attribute names are the JSON keys of the answer, so the HTTP API's
documentation reads for these classes too. Money is always ``Decimal``.
Log records stay JSON objects (``dict``): each kind has its own fields, and
they are the signed data itself, best read as the log format describes them.
"""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum
from typing import Any

import attrs

from client_sdk._members import CreatedAgentMembers, PolicyMembers


class DecisionKind(StrEnum):
    """The words ``Decision.decision`` can be, as the service documents them."""

    ALLOWED = "allowed"
    DENIED = "denied"
    PENDING_APPROVAL = "pending_approval"


@attrs.frozen
class Decision:
    """The answer to an action request, an approval or a rejection.

    ``decision`` is ``allowed``, ``denied`` or ``pending_approval``. ``cost`` and
    ``remaining`` are set when allowed; ``reason`` (``{code, ...}``) when denied.
    ``receipt``, when allowed, is the two signed log lines that prove it, for
    the tool's executor to check with ``verify_receipt`` (docs/receipts.md);
    ``grant_id`` the operator's grant it drew on instead of an approval.
    """

    decision: str
    action_id: str
    cost: Decimal | None = None
    remaining: Decimal | None = None
    reason: dict[str, Any] | None = None
    receipt: tuple[str, ...] | None = None
    grant_id: str | None = None
    rule: str | None = None
    approvals: tuple[dict[str, Any], ...] | None = None
    approvals_required: int | None = None

    @property
    def allowed(self) -> bool:
        return self.decision == DecisionKind.ALLOWED

    @property
    def denied(self) -> bool:
        return self.decision == DecisionKind.DENIED

    @property
    def pending(self) -> bool:
        return self.decision == DecisionKind.PENDING_APPROVAL


@attrs.frozen
class Action:
    """One action as the service holds it.

    ``status`` is ``pending_approval``, ``allowed``, ``denied``, ``completed``
    or ``cancelled``; ``outcome`` is None until reported. ``reason`` is set when
    denied (code ``approval_expired`` when nobody decided in time) or cancelled;
    ``approved_by`` and ``note`` when an operator approved it; ``receipt`` once
    it was allowed (see ``Decision``).
    """

    action_id: str
    tool: str
    input: Any
    cost: Decimal
    status: str
    outcome: str | None = None
    reason: dict[str, Any] | None = None
    approved_by: str | None = None
    note: str | None = None
    requested_by: str | None = None
    requested_by_id: str | None = None
    decided_by_id: str | None = None
    approvals: tuple[dict[str, Any], ...] | None = None
    approvals_required: int | None = None
    receipt: tuple[str, ...] | None = None
    grant_id: str | None = None


@attrs.frozen
class Head:
    """The last record of a log: its ``seq`` (-1 for an empty log) and ``hash``."""

    seq: int
    hash: str


@attrs.frozen
class Scar:
    """One scar of an agent: ``seq`` of its record, ``severity`` (``minor``,
    ``moderate``, ``severe``, ``fatal``), ``reason`` and the action it is about."""

    seq: int
    severity: str
    reason: str
    action_id: str | None = None


@attrs.frozen
class AgentStatus:
    """An agent's state, as the service rebuilds it from the agent's log.

    ``remaining`` is ``budget - spent`` (negative only when a new policy set a
    budget below what was spent). ``termination_reason`` is None while alive.
    """

    agent_id: str
    alive: bool
    termination_reason: str | None
    budget: Decimal
    spent: Decimal
    remaining: Decimal
    scar_score: int
    scar_limit: Decimal
    scars: tuple[Scar, ...]
    actions_allowed: int
    actions_denied: int
    actions_pending: int
    head: Head
    public_key: str


@attrs.frozen
class ToolRule:
    """What a policy says about one tool: its minimum charge, whether every
    call is held for an operator, its lifetime cap (None: no cap), and how long
    a held call may wait (None: the policy's own ``approval_timeout_secs``)."""

    cost: Decimal
    requires_approval: bool
    max_calls: int | None = None
    approval_timeout_secs: Decimal | None = None
    rules: tuple[dict[str, Any], ...] | None = None
    tags: tuple[str, ...] | None = None
    cost_from: str | None = None
    approvals_required: int | None = None
    approval_passkey: dict[str, Any] | None = None


@attrs.frozen
class RateLimit:
    """At most ``max_actions`` allowed actions within the trailing ``window_secs``."""

    max_actions: int
    window_secs: Decimal


@attrs.frozen
class Policy(PolicyMembers):
    """An agent's policy in force, every default filled in.

    ``default`` is the rule of any tool not in ``tools``; None means such
    tools are always denied (``tool_not_allowed``). ``approval_timeout_secs``
    None: held actions wait for ever.
    """

    budget: Decimal
    scar_limit: Decimal
    tools: dict[str, ToolRule]
    default: ToolRule | None = None
    rate_limit: RateLimit | None = None
    approval_timeout_secs: Decimal | None = None


@attrs.frozen
class CreatedAgent(CreatedAgentMembers):
    """A new agent: its status and its token (``agt_<agent_id>.<mac>``)."""

    agent: AgentStatus
    token: str


@attrs.frozen
class VerifyFailure:
    """The first bad record of a log: its 1-based ``line``, its ``seq`` when
    readable, and the ``reason`` (e.g. ``hash does not match content``)."""

    line: int
    seq: int | None
    reason: str


@attrs.frozen
class AgentListEntry:
    """One agent of ``list_agents``: ``state`` is ``active`` (with ``status``) or
    ``quarantined`` (its log failed verification: ``error`` says why, for people,
    and ``failure`` where)."""

    agent_id: str
    state: str
    status: AgentStatus | None = None
    error: str | None = None
    failure: VerifyFailure | None = None


@attrs.frozen
class PendingAction:
    """What an operator decides on: the action, and the ``cost`` approval would charge."""

    action_id: str
    tool: str
    input: Any
    cost: Decimal


@attrs.frozen
class PendingEntry:
    """An action waiting for approval: when it was requested (ISO 8601 UTC), the
    ``seq`` of its ``action_requested`` record, and the action."""

    requested_at: str
    seq: int
    action: PendingAction
    approvals: tuple[dict[str, Any], ...] | None = None
    approvals_required: int | None = None


@attrs.frozen
class LogPage:
    """Records with ``seq`` after the page's ``after``, and the log's ``head`` when read."""

    records: tuple[dict[str, Any], ...]
    head: Head


@attrs.frozen
class VerifyReport:
    """The service's verification of an agent's log. When ``ok``, ``public_key``
    and ``head`` are set; otherwise ``failure`` names the first bad record.
    ``records`` counts the records that verified."""

    ok: bool
    records: int
    public_key: str | None = None
    head: Head | None = None
    failure: VerifyFailure | None = None


@attrs.frozen
class Me:
    """The operator calling: ``name`` (what records carry as ``by``), ``id`` (what
    they carry as ``by_id``: ``oidc:<issuer>#<sub>``, ``token:<token_id>`` or
    ``admin-token``), every role held, highest first, and ``via``: how they
    authenticated (``oidc``, ``operator_token`` or ``admin_token``)."""

    name: str
    id: str
    roles: tuple[str, ...]
    via: str


@attrs.frozen
class OperatorToken:
    """An operator token, without its secret: its ``role``, ``status`` (``active``,
    ``expired`` or ``revoked``) and times (ISO 8601 UTC; ``expires_at`` None:
    never)."""

    token_id: str
    name: str
    role: str
    expires_at: str | None
    status: str
    issued_at: str
    issued_by: str
    revoked_at: str | None = None


@attrs.frozen
class IssuedOperatorToken:
    """A token just issued, with its secret ``token`` (``opr_...``): the only
    time the service shows it."""

    token_id: str
    name: str
    role: str
    expires_at: str | None
    status: str
    issued_at: str
    issued_by: str
    revoked_at: str | None
    token: str
