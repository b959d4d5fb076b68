"""Hooks: an agent framework's own hook calls guardd, with no code of ours in
the agent. ``POST /v1/hooks/claude-code`` is Claude Code's HTTP hook.

The agent is the one the token names (Claude Code's settings hold a token,
not a URL per agent). A ``PreToolUse`` input asks for the call, its
``tool_use_id`` as the Idempotency-Key, and is answered ``allow`` or
``deny``; a call held for an operator waits up to ``--hook-wait`` seconds,
then is withdrawn and denied: never ``ask``, which would hand the decision to
whoever sits at the terminal. ``PostToolUse`` and ``PostToolUseFailure``
report the outcome of the action that ``tool_use_id`` asked for and are
answered ``{}`` whatever came of it: a hook that fails would break the
session for what is only a report.
"""

from __future__ import annotations

import asyncio
import logging
from time import time_ns
from typing import Any

from quart import Response, request

from agents_runtime.core import commands as c
from agents_runtime.core.vocabulary import ActionStatus, Decision, Outcome, ReasonCode
from agents_runtime.errors import IdempotencyConflict, InvalidState
from agents_runtime.runtime.actor import AgentRef
from guardd import bodies, replies, views
from guardd.auth import Caller
from guardd.bodies import MAX_TEXT, POST_TOOL_USE_FAILURE, PRE_TOOL_USE
from guardd.endpoints import TOKEN_AGENT, Reply
from guardd.jsonio import json_response
from guardd.routes.common import Service, ServiceBlueprint, watch_action

blueprint = ServiceBlueprint("hooks", __name__, tag="agents")
log = logging.getLogger("guardd.hooks")

_PENDING = Decision.PENDING_APPROVAL
_ALLOWED_STATUSES = (ActionStatus.ALLOWED, ActionStatus.COMPLETED)
_GUARD = "Agent Action Guard"


@blueprint.endpoint(
    "POST",
    "/v1/hooks/claude-code",
    "Claude Code's PreToolUse and PostToolUse hook",
    caller=TOKEN_AGENT,
    body=bodies.ClaudeCodeHook,
    reply=Reply(
        replies.PreToolUseOutput | replies.HookAck,
        "PreToolUse: `allow` or `deny` (a denial is a 200 too). "
        "PostToolUse and PostToolUseFailure: `{}`.",
    ),
    writes=True,
    description="PreToolUse asks for the call as `POST /v1/agents/{agent_id}/actions` "
    "would, with `tool_name` as the tool, `tool_input` as the input and `tool_use_id` "
    "as the Idempotency-Key (the same ID with another tool or input is denied, "
    "not 409). A call held for an operator waits up to `--hook-wait` "
    "seconds (default 50); undecided by then, it is cancelled by the agent and denied. "
    "PostToolUse reports `success` for the action `tool_use_id` asked for, or `failure` "
    "when `tool_response` has `success: false` or `is_error: true`; PostToolUseFailure "
    "reports `failure` with `error` as the detail. An outcome that cannot be recorded "
    "(no such call, or one not allowed) is logged and still answered `{}`. Keys "
    "other than those below are accepted and ignored.",
)
async def claude_code(
    service: Service, who: Caller, ref: AgentRef, body: bodies.ClaudeCodeHook
) -> Response:
    if body.hook_event_name == PRE_TOOL_USE:
        return json_response(await _pre_tool_use(service, who, ref, body))
    await _post_tool_use(service, who, ref, body)
    return json_response(views.HOOK_ACK)


async def _pre_tool_use(
    service: Service, who: Caller, ref: AgentRef, body: bodies.ClaudeCodeHook
) -> dict[str, Any]:
    command = c.RequestAction(body.tool_name, body.tool_input, None, body.tool_use_id)
    tracer = service.tracer
    started = 0 if tracer is None else time_ns()
    try:
        decision = await ref.ask(command)
    except IdempotencyConflict as exc:
        # A 409 would be a hook error, on which Claude Code runs the tool.
        return views.deny_tool_use(f"{_GUARD} denied this call (idempotency_conflict): {exc}")
    if tracer is not None:
        tracer.decision(
            ref.agent_id, body.tool_name, body.tool_input, decision, started, request.headers
        )
    meter = service.meter
    if meter is not None:
        meter.decision(decision)
    if decision["decision"] != _PENDING:
        return _answer(decision["decision"], decision.get("reason"))
    action_id = decision["action_id"]
    wait = service.hook_wait
    try:
        action = await watch_action(service, ref, action_id, wait)
    except asyncio.CancelledError:
        # Claude Code gave up first (its hook timeout) and closed the
        # connection: nobody would hear an approval now, so withdraw the call.
        await asyncio.shield(_withdraw(ref, who, action_id, "Claude Code stopped waiting"))
        raise
    if action["status"] == ActionStatus.PENDING_APPROVAL:
        shown = f"{wait:g}"
        reason = f"Claude Code hook: no operator decided within {shown} seconds"
        action = await _withdraw(ref, who, action_id, reason)
        if action["status"] == ActionStatus.CANCELLED:
            return views.deny_tool_use(
                f"{_GUARD} held this call ({action_id}) for an operator to approve at "
                f"the console, and none decided within {shown} seconds, so it was "
                "withdrawn (cancelled). Ask the operator to approve such calls, then "
                "try again."
            )
    status = action["status"]
    return _answer(
        Decision.ALLOWED if status in _ALLOWED_STATUSES else status, action.get("reason")
    )


async def _withdraw(ref: AgentRef, who: Caller, action_id: str, reason: str) -> dict[str, Any]:
    """Cancel the held action as its agent; the action as it then stands
    (decided meanwhile, it says how)."""
    try:
        await ref.ask(c.Cancel(action_id, who.role, reason))
    except InvalidState:
        pass
    action: dict[str, Any] = await ref.ask(c.GetAction(action_id))
    return action


def _answer(decision: str, reason: dict[str, Any] | None) -> dict[str, Any]:
    if decision == Decision.ALLOWED:
        return views.allow_tool_use()
    return views.deny_tool_use(_reason_text(reason))


def _reason_text(reason: dict[str, Any] | None) -> str:
    """``code: what it means``, for Claude to read."""
    if reason is None:
        return f"{_GUARD} denied this call"
    code = reason.get("code", "")
    say = _SAY.get(code)
    text = say(reason) if say is not None else "denied"
    return f"{_GUARD} denied this call ({code}): {text}"


def _with(reason: dict[str, Any]) -> str:
    given = reason.get("reason")
    return f": {given}" if given else ""


_SAY = {
    ReasonCode.TERMINATED: lambda r: f"the agent is terminated{_with(r)}",
    ReasonCode.TOOL_NOT_ALLOWED: lambda r: (
        f"the agent's policy does not allow the tool {r['tool']}"
    ),
    ReasonCode.TOOL_CALL_LIMIT: lambda r: (
        f"the tool {r['tool']} has had the {r['max_calls']} calls the policy allows"
    ),
    ReasonCode.RATE_LIMITED: lambda r: (
        f"the policy allows {r['max_actions']} actions every {r['window_secs']} seconds"
    ),
    ReasonCode.INSUFFICIENT_BUDGET: lambda r: (
        f"the call costs {r['cost']} and the budget has {r['remaining']} left"
    ),
    ReasonCode.REJECTED: lambda r: f"the operator {r['by']} rejected it: {r['reason']}",
    ReasonCode.APPROVAL_EXPIRED: lambda r: (
        f"no operator approved it within the policy's {r['timeout_secs']} seconds"
    ),
    ReasonCode.CANCELLED: lambda r: f"it was withdrawn by the {r['by']}{_with(r)}",
}


async def _post_tool_use(
    service: Service, who: Caller, ref: AgentRef, body: bodies.ClaudeCodeHook
) -> None:
    action_id = await ref.ask(c.FindAction(body.tool_use_id))
    if action_id is None:
        log.info(
            "claude-code %s: no action was asked for with tool_use_id %r; outcome not recorded",
            body.hook_event_name,
            body.tool_use_id,
        )
        return
    detail: str | None = None
    if body.hook_event_name == POST_TOOL_USE_FAILURE:
        outcome = Outcome.FAILURE
        if isinstance(body.error, str) and body.error:
            detail = body.error[:MAX_TEXT]
    else:
        outcome = Outcome.FAILURE if _failed(body.tool_response) else Outcome.SUCCESS
    tracer = service.tracer
    started = 0 if tracer is None else time_ns()
    try:
        await ref.ask(c.ReportOutcome(action_id, outcome, who.role, detail))
    except InvalidState as exc:
        log.info(
            "claude-code %s on %s: outcome not recorded: %s", body.hook_event_name, action_id, exc
        )
        return
    if tracer is not None:
        tracer.outcome(ref.agent_id, action_id, str(outcome), started, request.headers)


def _failed(response: Any) -> bool:
    """What a tool's response says of itself: some tools answer an object with
    ``success: false``, MCP tools ``is_error: true``."""
    return isinstance(response, dict) and (
        response.get("success") is False or response.get("is_error") is True
    )
