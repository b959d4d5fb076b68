"""Replies rendered: each function makes the JSON object of one shape of
``guardd.replies`` from the values it is about. The only place a reply
takes its wire form: the core answers with values of the domain.

Plain functions that build dicts, one per shape: nothing is unstructured by
reflection on a request's path. ``tests/guardd/test_views.py`` checks each
rendering against its declared shape, for agents in every state (``RENDERS``
pairs each shape with its function).

An agent's replies (status, actions, pending, grants, policy, decisions)
are rendered from its state, which only its actor may read: the endpoint
that sends a command names it (``sends``) beside its reply shape,
``in_turn`` pairs each command with its shape's view (``IN_TURN``), guardd
hands the result to the registry (``guardd.app.BY_COMMAND``), and the actor
calls it right after the command, in its turn, so a route receives its
reply ready to send.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agents_runtime.core import commands as c
from agents_runtime.core.answers import Allowed, Decided, Denied, Pending
from agents_runtime.core.grants import Grant
from agents_runtime.core.money import ZERO
from agents_runtime.core.policy import Policy, policy_json
from agents_runtime.core.state import (
    OUTCOMES,
    STATUS_NAMES,
    Action,
    AgentState,
    Lines,
    Scar,
    Shadow,
    approval_deadline,
    left_memory,
    parse_line,
    recalled,
    request_line,
    scars_gone,
    status_code,
)
from agents_runtime.core.vocabulary import ActionStatus, Decision
from agents_runtime.log.record import Head, timestamp_micros
from agents_runtime.log.verify import Failure, Report
from agents_runtime.runtime.actor import Render, Renders
from agents_runtime.runtime.registry import Listed
from agents_runtime.runtime.replay import quarantine_message
from guardd import replies
from guardd.auth import Operator
from guardd.endpoints import Endpoint
from guardd.operators import OperatorToken

Json = dict[str, Any]

OK: Json = {"ok": True}

# Compared per action rendered: aliases spare the lookup on the enum class.
_ALLOWED = Decision.ALLOWED
_DENIED = Decision.DENIED
_PENDING = Decision.PENDING_APPROVAL
_PENDING_STATUS = ActionStatus.PENDING_APPROVAL
_DENIED_STATUS = ActionStatus.DENIED
_REQUESTED_STATUS = ActionStatus.REQUESTED


def _moment(seconds: float) -> str:
    return timestamp_micros(round(seconds * 1_000_000))


def receipt(request: bytes, allowed: bytes) -> list[str]:
    """The receipt of an allowed action: the lines of its action_requested
    and action_allowed records, as they are in the log (docs/receipts.md)."""
    return [request.decode(), allowed.decode()]


# -- the service ---------------------------------------------------------------


def me(operator: Operator) -> Json:
    return {
        "name": operator.name,
        "id": operator.by_id,
        "roles": operator.role_list(),
        "via": operator.via,
    }


def operator_token(token: OperatorToken, now: float) -> Json:
    return {
        "token_id": token.token_id,
        "name": token.name,
        "role": token.role,
        "expires_at": token.expires_at,
        "status": token.status(now),
        "issued_at": token.issued_at,
        "issued_by": token.by,
        "revoked_at": token.revoked_at,
    }


def issued_operator_token(token: OperatorToken, secret: str, now: float) -> Json:
    return {**operator_token(token, now), "token": secret}


def operator_token_list(tokens: list[OperatorToken], now: float) -> Json:
    return {"tokens": [operator_token(token, now) for token in tokens]}


def public_key(key_hex: str) -> Json:
    return {"public_key": key_hex, "algorithm": "ed25519"}


def auth_config(issuer: str, client_id: str, scopes: tuple[str, ...]) -> Json:
    return {"issuer": issuer, "client_id": client_id, "scopes": list(scopes)}


# -- agents ----------------------------------------------------------------------


def head(value: Head) -> Json:
    return {"seq": value.seq, "hash": value.hash}


def scar(value: Scar) -> Json:
    out: Json = {"seq": value.seq, "severity": value.severity, "reason": value.reason}
    if value.action_id is not None:
        out["action_id"] = value.action_id
    return out


def _scar_gone(lines: Lines, seq: int) -> Json:
    """A scar that left memory, from its ``scar`` record (as its fold reads it)."""
    record = parse_line(lines, seq)
    return scar(Scar(seq, record["severity"], record["reason"], record.get("action_id")))


def status(state: AgentState, lines: Lines) -> Json:
    """The agent's status as ``state`` has it now: call it right after the
    command whose answer it is (a later command changes ``state``).
    ``lines`` holds the records of the scars that left memory."""
    policy = state.policy
    scars = [_scar_gone(lines, seq) for seq in scars_gone(state)]
    scars.extend(scar(s) for s in state.scars)
    return {
        "agent_id": state.agent_id,
        "alive": state.alive,
        "termination_reason": state.termination_reason,
        "budget": state.budget,
        "spent": state.spent,
        "remaining": state.remaining,
        "scar_score": state.scar_score,
        "scar_limit": policy.scar_limit if policy is not None else None,
        "scars": scars,
        "actions_allowed": state.actions_allowed,
        "actions_denied": state.actions_denied,
        "actions_pending": len(state.pending),
        "head": head(state.head),
        "public_key": state.public_key,
    }


def created_agent(agent_status: Json, token: str) -> Json:
    return {"agent": agent_status, "token": token}


def token(value: str) -> Json:
    return {"token": value}


def active_agent(agent_id: str, agent_status: Json) -> Json:
    return {"agent_id": agent_id, "state": "active", "status": agent_status}


def quarantined_agent(agent_id: str, message: str, failure: Failure) -> Json:
    return {
        "agent_id": agent_id,
        "state": "quarantined",
        "error": message,
        "failure": verify_failure(failure),
    }


def unloaded_agent(agent_id: str) -> Json:
    return {"agent_id": agent_id, "state": "unloaded"}


def agent_list(entries: list[Json]) -> Json:
    return {"agents": entries}


def listed_agents(listed: list[Listed]) -> Json:
    """The agents as ``Registry.list`` finds them (each status rendered already)."""
    entries = []
    for entry in listed:
        failure = entry.failure
        if entry.unloaded:
            entries.append(unloaded_agent(entry.agent_id))
        elif failure is None:
            entries.append(active_agent(entry.agent_id, entry.status))
        else:
            entries.append(quarantined_agent(entry.agent_id, quarantine_message(failure), failure))
    return agent_list(entries)


# -- the policy in force -----------------------------------------------------------


def policy(value: Policy) -> Json:
    """The policy with every default filled in (``approval_timeout_secs``
    only when set): by definition of the answer, as its ``policy`` record has
    it, so the record's own encoding, which stays with the core."""
    return policy_json(value)


# -- decisions and actions -----------------------------------------------------------


# The decisions: one is rendered for every request, so each takes the
# core's value whole and builds its dict in one call.


def allowed(value: Allowed) -> Json:
    """An allowance, with its receipt (none for an allowance older than receipts)."""
    out: Json = {
        "decision": _ALLOWED,
        "action_id": value.action_id,
        "cost": value.cost,
        "remaining": value.remaining,
    }
    lines = value.receipt_lines
    if lines is not None:
        out["receipt"] = [lines[0].decode(), lines[1].decode()]  # receipt(), inlined
    if value.grant_id is not None:
        out["grant_id"] = value.grant_id
    if value.rule is not None:
        out["rule"] = value.rule
    return out


def denied(value: Denied) -> Json:
    out: Json = {"decision": _DENIED, "action_id": value.action_id, "reason": value.reason}
    if value.rule is not None:
        out["rule"] = value.rule
    return out


def pending_decision(value: Pending) -> Json:
    out: Json = {"decision": _PENDING, "action_id": value.action_id}
    if value.rule is not None:
        out["rule"] = value.rule
    if value.approvals_required is not None:
        # An approval short of its quorum: the approvals so far.
        out["approvals"] = value.approvals
        out["approvals_required"] = value.approvals_required
    return out


def action(state: AgentState, n: int, lines: Lines) -> Json:
    """Action ``n`` as ``state`` has it now: a held action from memory, any
    other from its action_requested record and (once decided) the decision
    right after it, both in ``lines`` (``core.state.action_reads``); one that
    left memory from all its records, in ``lines`` (a ``Recall``)."""
    action_id = f"act-{n}"
    if left_memory(state, n):
        old = recalled(state, n, lines)
        held, seq, code = old.held, old.seq, old.status
    else:
        held = state.held.get(action_id)
        seq = -1 if held is not None else state.action_seqs[n - state.first_action]
        code = status_code(state, n)
    status_now = STATUS_NAMES[code]
    outcome = OUTCOMES[code]
    out: Json
    if held is not None:
        out = {
            "action_id": action_id,
            "tool": held.tool,
            "input": held.input,
            "cost": held.cost,
            "status": status_now,
            "outcome": outcome,
            "requested_at": held.requested_at,
        }
        if held.reason is not None:
            out["reason"] = held.reason
        if held.approved_by is not None:
            out["approved_by"] = held.approved_by
        if held.note is not None:
            out["note"] = held.note
        request = held.request
        if "by_id" in request:
            out["requested_by"] = request["by"]
            out["requested_by_id"] = request["by_id"]
        if held.decided_by_id is not None:
            out["decided_by_id"] = held.decided_by_id
        required = _approvals_required(state, held)
        if required > 1 or held.approvals:
            out["approvals"] = held.approvals
            out["approvals_required"] = required
        if held.decided_at is not None:
            out["decided_at"] = held.decided_at
            if held.receipt_seq is not None:
                out["receipt"] = receipt(request_line(held.request), lines[held.receipt_seq])
        elif status_now == _PENDING_STATUS:
            deadline = approval_deadline(state, held)
            if deadline is not None:
                out["expires_at"] = _moment(deadline)
        return out
    requested = parse_line(lines, seq)
    out = {
        "action_id": action_id,
        "tool": requested["tool"],
        "input": requested["input"],
        "cost": requested["cost"],
        "status": status_now,
        "outcome": outcome,
        "requested_at": requested["ts"],
    }
    if status_now == _DENIED_STATUS:
        out["reason"] = parse_line(lines, seq + 1)["reason"]
    elif status_now != _REQUESTED_STATUS:
        # Allowed (and perhaps completed since): the decision follows the request.
        decision = parse_line(lines, seq + 1)
        if "grant_id" in decision:
            out["grant_id"] = decision["grant_id"]
        if "request_hash" in decision:
            out["receipt"] = receipt(lines[seq], lines[seq + 1])
    return out


def pending_entry(held: Action, state: AgentState | None = None) -> Json:
    """A held action waiting for an operator; with ``state``, ``expires_at``
    when a timeout applies."""
    out: Json = {
        "requested_at": held.requested_at,
        "seq": held.seq,
        "action": {
            "action_id": held.action_id,
            "tool": held.tool,
            "input": held.input,
            "cost": held.cost,
        },
    }
    if state is not None:
        deadline = approval_deadline(state, held)
        if deadline is not None:
            out["expires_at"] = _moment(deadline)
        required = _approvals_required(state, held)
        if required > 1 or held.approvals:
            out["approvals"] = held.approvals
            out["approvals_required"] = required
    return out


def _approvals_required(state: AgentState, held: Action) -> int:
    policy = state.policy
    return 1 if policy is None else policy.approvals_required(held.tool)


def pending_list(state: AgentState) -> Json:
    return {"pending": [pending_entry(a, state) for a in state.pending.values()]}


# -- grants ---------------------------------------------------------------------------


def grant(value: Grant, now: float) -> Json:
    """A grant as it stands at ``now``, with what is left."""
    out: Json = {
        "grant_id": value.grant_id,
        "tool": value.tool,
        "by": value.by,
        "issued_at": value.issued_at,
        "expires_at": value.expires_at,
        "max_calls": value.max_calls,
        "max_cost": value.max_cost,
        "input_match": value.input_match,
        "calls_used": value.calls,
        "cost_used": value.spent,
        "calls_left": None if value.max_calls is None else max(value.max_calls - value.calls, 0),
        "cost_left": None if value.max_cost is None else max(value.max_cost - value.spent, ZERO),
        "status": value.status(now),
    }
    if value.note is not None:
        out["note"] = value.note
    if value.revoked_by is not None:
        out["revoked_by"] = value.revoked_by
        out["revoked_at"] = value.revoked_at
        if value.revoke_reason is not None:
            out["revoke_reason"] = value.revoke_reason
    return out


def grant_list(state: AgentState, now: float) -> Json:
    return {"grants": [grant(g, now) for g in state.grants.values()]}


# -- the log ----------------------------------------------------------------------------


def log_page(records: list[Json], at: Head) -> Json:
    return {"records": records, "head": head(at)}


def verify_failure(failure: Failure) -> Json:
    return {"line": failure.line, "seq": failure.seq, "reason": failure.reason}


def verify_report(report: Report) -> Json:
    if report.ok:
        assert report.head is not None
        return {
            "ok": True,
            "records": report.records,
            "public_key": report.public_key,
            "head": head(report.head),
        }
    assert report.failure is not None
    return {"ok": False, "records": report.records, "failure": verify_failure(report.failure)}


# -- Claude Code's hook output ----------------------------------------------------

HOOK_ACK: Json = {}  # a PostToolUse answer: Claude Code goes on as it would


def allow_tool_use() -> Json:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}


def deny_tool_use(reason: str) -> Json:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


def hook_ack() -> Json:
    return HOOK_ACK


# Each shape of guardd.replies with the function that renders it (the test
# of this module renders each and checks it against its shape).
RENDERS: dict[Any, Any] = {
    replies.Ok: OK,
    replies.PublicKey: public_key,
    replies.Head: head,
    replies.Scar: scar,
    replies.AgentStatus: status,
    replies.CreatedAgent: created_agent,
    replies.Token: token,
    replies.ActiveAgent: active_agent,
    replies.QuarantinedAgent: quarantined_agent,
    replies.AgentList: agent_list,
    replies.PolicyInForce: policy,
    replies.AllowedDecision: allowed,
    replies.DeniedDecision: denied,
    replies.PendingDecision: pending_decision,
    replies.Action: action,
    replies.PendingEntry: pending_entry,
    replies.PendingList: pending_list,
    replies.Grant: grant,
    replies.GrantList: grant_list,
    replies.LogPage: log_page,
    replies.VerifyFailure: verify_failure,
    replies.VerifyReport: verify_report,
    replies.PreToolUseOutput: deny_tool_use,
    replies.HookAck: hook_ack,
}


# -- each command's reply, rendered in the actor's turn --------------------------------
# (state, the core's value, the batch's now, the lines the command read):
# agents_runtime.runtime.actor.Render.


def _status(state: AgentState, reply: AgentState, now: float, lines: Lines) -> Json:
    return status(state, lines)


def _decision(state: AgentState, reply: Decided, now: float, lines: Lines) -> Json:
    if type(reply) is Allowed:  # the common case first
        return allowed(reply)
    if type(reply) is Denied:
        return denied(reply)
    assert type(reply) is Pending
    return pending_decision(reply)


def _action(state: AgentState, n: int, now: float, lines: Lines) -> Json:
    return action(state, n, lines)


def _pending(state: AgentState, reply: dict[str, Action], now: float, lines: Lines) -> Json:
    return pending_list(state)


def _policy(state: AgentState, reply: Policy, now: float, lines: Lines) -> Json:
    return policy(reply)


def _grant(state: AgentState, reply: Grant, now: float, lines: Lines) -> Json:
    return grant(reply, now)


def _grants(state: AgentState, reply: dict[str, Grant], now: float, lines: Lines) -> Json:
    return grant_list(state, now)


def shadow(value: Shadow) -> Json:
    """A shadow policy and its tallies since it was set."""
    return {
        "policy": policy_json(value.policy),
        "policy_ref": value.policy_ref,
        "version": value.version,
        "since": value.since,
        "agree": value.agree,
        "disagree": dict(value.disagree),
        "recent_disagreements": list(value.recent),
    }


def _shadow(state: AgentState, reply: Shadow, now: float, lines: Lines) -> Json:
    return shadow(reply)


def _ok(state: AgentState, reply: None, now: float, lines: Lines) -> Json:
    return OK


# The view that renders, in the actor's turn, a command's reply of each shape.
# A route names the command it sends (``sends``) beside its reply shape, and
# ``in_turn`` pairs the command with the shape's view here.
IN_TURN: dict[Any, Render] = {
    replies.Decision: _decision,
    replies.AllowedDecision | replies.DeniedDecision | replies.PendingDecision: _decision,
    replies.DeniedDecision: _decision,
    replies.Action: _action,
    replies.PendingList: _pending,
    replies.AgentStatus: _status,
    replies.PolicyInForce: _policy,
    replies.Grant: _grant,
    replies.GrantList: _grants,
    replies.Shadow: _shadow,
    replies.Ok: _ok,
}


def in_turn(endpoints: Iterable[Endpoint]) -> Renders:
    """Each command's view, from the endpoints that send it: what the actor
    renders its reply with (agents_runtime.runtime.actor). A shape with no
    view here, or a command two endpoints would render differently, fails
    at import."""
    renders: dict[type, Render] = {}
    for endpoint in endpoints:
        if endpoint.sends is None:
            continue
        render = IN_TURN.get(endpoint.reply.shape)
        if render is None:
            raise TypeError(f"{endpoint.rule}: no view renders {endpoint.reply.shape} in turn")
        if renders.setdefault(endpoint.sends, render) is not render:
            raise TypeError(f"{endpoint.sends.__name__}: endpoints render it differently")
    return renders  # a plain dict: the actor looks a command up in it on every ask


# The commands whose reply a route uses as it is: an action's ID or None
# (FindAction), a future (WatchAction), the log's handle (GetLogView), what a
# passkey signs to decide an action (ApprovalSubject: guardd.passkeys reads it).
AS_IS = frozenset({c.FindAction, c.WatchAction, c.GetLogView, c.ApprovalSubject})
