"""The words of the domain, each list defined once: decisions, action
statuses, outcomes, scar severities, reason codes, termination reasons and
grant statuses. Record kinds are the log's own (``agents_runtime.log.kinds``).

Each is a ``StrEnum``: a member is its string, so it goes into records and
answers as it is (JSON gets the plain value, byte for byte), and compares and
hashes equal to the string read back from a log or a request. The OpenAPI
document takes its ``enum`` lists from here, and
``tests/agents_runtime/core/test_vocabulary.py`` holds every list equal to
what docs/records.md says. On hot paths, compare against a module-level
alias rather than ``Enum.MEMBER`` (an attribute lookup on the class), and key
per-request tables by ``.value`` (see ``agents_runtime.log.kinds``).
"""

from __future__ import annotations

from enum import StrEnum


class Decision(StrEnum):
    """The ``decision`` of an answer to a request or an approval."""

    ALLOWED = "allowed"
    DENIED = "denied"
    PENDING_APPROVAL = "pending_approval"


class ActionStatus(StrEnum):
    """Where an action stands (the ``status`` of an action view)."""

    REQUESTED = "requested"
    PENDING_APPROVAL = "pending_approval"
    ALLOWED = "allowed"
    DENIED = "denied"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class Outcome(StrEnum):
    """The reported outcome of an allowed action."""

    SUCCESS = "success"
    FAILURE = "failure"
    HARMFUL = "harmful"


class Severity(StrEnum):
    """How bad a scar is; mildest first."""

    MINOR = "minor"
    MODERATE = "moderate"
    SEVERE = "severe"
    FATAL = "fatal"


class ReasonCode(StrEnum):
    """The ``code`` of the reason an action was not allowed. The first seven
    are the checks' denials, in the order they run (``checks.decide``)."""

    TERMINATED = "terminated"
    TOOL_NOT_ALLOWED = "tool_not_allowed"
    POLICY_RULE = "policy_rule"
    POLICY_ERROR = "policy_error"
    TOOL_CALL_LIMIT = "tool_call_limit"
    RATE_LIMITED = "rate_limited"
    INSUFFICIENT_BUDGET = "insufficient_budget"
    REJECTED = "rejected"
    APPROVAL_EXPIRED = "approval_expired"
    CANCELLED = "cancelled"


class Effect(StrEnum):
    """What a policy rule whose ``when`` is true does with the call."""

    ALLOW = "allow"
    DENY = "deny"
    REQUIRE_APPROVAL = "require_approval"


class TerminationReason(StrEnum):
    """Why the service itself terminated an agent; an operator's terminate
    gives its own free text instead."""

    SCAR_LIMIT = "scar_limit"
    FATAL_SCAR = "fatal_scar"
    BUDGET_EXHAUSTED = "budget_exhausted"


class GrantStatus(StrEnum):
    """Where a grant stands (the ``status`` of a grant view)."""

    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"
    USED_UP = "used_up"


# Who a record or a command names in ``by`` and ``role``, besides the names
# operators give: plain strings, compared and written as they are.
SYSTEM = "system"  # the service on its own (automatic scars and terminations)
OPERATOR = "operator"  # a scar added with the scar endpoint and no name
ADMIN = "admin"  # the admin token's role
AGENT = "agent"  # an agent token's role
ADMIN_TOKEN_ID = "admin-token"  # noqa: S105  # the admin token's by_id: one identity, exempt as break-glass
