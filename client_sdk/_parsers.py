# Generated from docs/openapi.json by sdk/models.py: do not edit.
# Change the service's shapes (guardd/replies.py) or sdk/models.py, then run: python sdk/models.py

"""Each answer read into the classes of ``_models``, or InvalidResponse
naming the key that is wrong (``_read`` reads each key)."""

from __future__ import annotations

from typing import Any

from client_sdk._models import (
    Action,
    AgentListEntry,
    AgentStatus,
    CreatedAgent,
    Decision,
    DecisionKind,
    Head,
    IssuedOperatorToken,
    LogPage,
    Me,
    OperatorToken,
    PendingAction,
    PendingEntry,
    Policy,
    RateLimit,
    Scar,
    ToolRule,
    VerifyFailure,
    VerifyReport,
)
from client_sdk._read import (
    boolean,
    integer,
    mapping,
    model,
    models,
    number,
    object_of,
    objects,
    opt,
    opt_integer,
    opt_model,
    opt_number,
    opt_objects,
    opt_strings,
    string,
    strings,
    word,
)

_DECISION_KIND = frozenset(DecisionKind)


def parse_decision(body: Any) -> Decision:
    obj = object_of(body)
    return Decision(
        decision=word(obj, "decision", _DECISION_KIND),
        action_id=string(obj, "action_id"),
        cost=opt_number(obj, "cost"),
        remaining=opt_number(obj, "remaining"),
        reason=opt(obj, "reason", dict),
        receipt=opt_strings(obj, "receipt"),
        grant_id=opt(obj, "grant_id", str),
        rule=opt(obj, "rule", str),
        approvals=opt_objects(obj, "approvals"),
        approvals_required=opt_integer(obj, "approvals_required"),
    )


def parse_action(body: Any) -> Action:
    obj = object_of(body)
    return Action(
        action_id=string(obj, "action_id"),
        tool=string(obj, "tool"),
        input=obj.get("input"),
        cost=number(obj, "cost"),
        status=string(obj, "status"),
        outcome=opt(obj, "outcome", str),
        reason=opt(obj, "reason", dict),
        approved_by=opt(obj, "approved_by", str),
        note=opt(obj, "note", str),
        requested_by=opt(obj, "requested_by", str),
        requested_by_id=opt(obj, "requested_by_id", str),
        decided_by_id=opt(obj, "decided_by_id", str),
        approvals=opt_objects(obj, "approvals"),
        approvals_required=opt_integer(obj, "approvals_required"),
        receipt=opt_strings(obj, "receipt"),
        grant_id=opt(obj, "grant_id", str),
    )


def parse_head(body: Any) -> Head:
    obj = object_of(body)
    return Head(
        seq=integer(obj, "seq"),
        hash=string(obj, "hash"),
    )


def parse_scar(body: Any) -> Scar:
    obj = object_of(body)
    return Scar(
        seq=integer(obj, "seq"),
        severity=string(obj, "severity"),
        reason=string(obj, "reason"),
        action_id=opt(obj, "action_id", str),
    )


def parse_status(body: Any) -> AgentStatus:
    obj = object_of(body)
    return AgentStatus(
        agent_id=string(obj, "agent_id"),
        alive=boolean(obj, "alive"),
        termination_reason=opt(obj, "termination_reason", str),
        budget=number(obj, "budget"),
        spent=number(obj, "spent"),
        remaining=number(obj, "remaining"),
        scar_score=integer(obj, "scar_score"),
        scar_limit=number(obj, "scar_limit"),
        scars=models(obj, "scars", parse_scar),
        actions_allowed=integer(obj, "actions_allowed"),
        actions_denied=integer(obj, "actions_denied"),
        actions_pending=integer(obj, "actions_pending"),
        head=model(obj, "head", parse_head),
        public_key=string(obj, "public_key"),
    )


def parse_tool_rule(body: Any) -> ToolRule:
    obj = object_of(body)
    return ToolRule(
        cost=number(obj, "cost"),
        requires_approval=boolean(obj, "requires_approval"),
        max_calls=opt_integer(obj, "max_calls"),
        approval_timeout_secs=opt_number(obj, "approval_timeout_secs"),
        rules=opt_objects(obj, "rules"),
        tags=opt_strings(obj, "tags"),
        cost_from=opt(obj, "cost_from", str),
        approvals_required=opt_integer(obj, "approvals_required"),
        approval_passkey=opt(obj, "approval_passkey", dict),
    )


def parse_rate_limit(body: Any) -> RateLimit:
    obj = object_of(body)
    return RateLimit(
        max_actions=integer(obj, "max_actions"),
        window_secs=number(obj, "window_secs"),
    )


def parse_policy(body: Any) -> Policy:
    obj = object_of(body)
    return Policy(
        budget=number(obj, "budget"),
        scar_limit=number(obj, "scar_limit"),
        tools=mapping(obj, "tools", parse_tool_rule),
        default=opt_model(obj, "default", parse_tool_rule),
        rate_limit=opt_model(obj, "rate_limit", parse_rate_limit),
        approval_timeout_secs=opt_number(obj, "approval_timeout_secs"),
    )


def parse_created(body: Any) -> CreatedAgent:
    obj = object_of(body)
    return CreatedAgent(
        agent=model(obj, "agent", parse_status),
        token=string(obj, "token"),
    )


def parse_failure(body: Any) -> VerifyFailure:
    obj = object_of(body)
    return VerifyFailure(
        line=integer(obj, "line"),
        seq=opt_integer(obj, "seq"),
        reason=string(obj, "reason"),
    )


def parse_agent_entry(body: Any) -> AgentListEntry:
    obj = object_of(body)
    return AgentListEntry(
        agent_id=string(obj, "agent_id"),
        state=string(obj, "state"),
        status=opt_model(obj, "status", parse_status),
        error=opt(obj, "error", str),
        failure=opt_model(obj, "failure", parse_failure),
    )


def parse_pending_action(body: Any) -> PendingAction:
    obj = object_of(body)
    return PendingAction(
        action_id=string(obj, "action_id"),
        tool=string(obj, "tool"),
        input=obj.get("input"),
        cost=number(obj, "cost"),
    )


def parse_pending_entry(body: Any) -> PendingEntry:
    obj = object_of(body)
    return PendingEntry(
        requested_at=string(obj, "requested_at"),
        seq=integer(obj, "seq"),
        action=model(obj, "action", parse_pending_action),
        approvals=opt_objects(obj, "approvals"),
        approvals_required=opt_integer(obj, "approvals_required"),
    )


def parse_log_page(body: Any) -> LogPage:
    obj = object_of(body)
    return LogPage(
        records=tuple(objects(obj, "records")),
        head=model(obj, "head", parse_head),
    )


def parse_verify_report(body: Any) -> VerifyReport:
    obj = object_of(body)
    return VerifyReport(
        ok=boolean(obj, "ok"),
        records=integer(obj, "records"),
        public_key=opt(obj, "public_key", str),
        head=opt_model(obj, "head", parse_head),
        failure=opt_model(obj, "failure", parse_failure),
    )


def parse_me(body: Any) -> Me:
    obj = object_of(body)
    return Me(
        name=string(obj, "name"),
        id=string(obj, "id"),
        roles=strings(obj, "roles"),
        via=string(obj, "via"),
    )


def parse_operator_token(body: Any) -> OperatorToken:
    obj = object_of(body)
    return OperatorToken(
        token_id=string(obj, "token_id"),
        name=string(obj, "name"),
        role=string(obj, "role"),
        expires_at=opt(obj, "expires_at", str),
        status=string(obj, "status"),
        issued_at=string(obj, "issued_at"),
        issued_by=string(obj, "issued_by"),
        revoked_at=opt(obj, "revoked_at", str),
    )


def parse_issued_operator_token(body: Any) -> IssuedOperatorToken:
    obj = object_of(body)
    return IssuedOperatorToken(
        token_id=string(obj, "token_id"),
        name=string(obj, "name"),
        role=string(obj, "role"),
        expires_at=opt(obj, "expires_at", str),
        status=string(obj, "status"),
        issued_at=string(obj, "issued_at"),
        issued_by=string(obj, "issued_by"),
        revoked_at=opt(obj, "revoked_at", str),
        token=string(obj, "token"),
    )


def parse_token(body: Any) -> str:
    return string(object_of(body), "token")


def parse_public_key(body: Any) -> str:
    return string(object_of(body), "public_key")


def parse_agents(body: Any) -> list[AgentListEntry]:
    return [parse_agent_entry(item) for item in objects(object_of(body), "agents")]


def parse_pending(body: Any) -> list[PendingEntry]:
    return [parse_pending_entry(item) for item in objects(object_of(body), "pending")]


def parse_operator_tokens(body: Any) -> list[OperatorToken]:
    return [parse_operator_token(item) for item in objects(object_of(body), "tokens")]
