"""Actions: ask permission (the decision path), view and long-poll an action,
report its outcome, and the operator's approve, reject and pending list;
cancel by the agent or an operator."""

from __future__ import annotations

from time import time_ns

from quart import Response, request

from agents_runtime.core import commands as c
from agents_runtime.runtime.actor import AgentRef
from guardd import bodies, replies
from guardd.auth import ADMIN_ROLE, APPROVER, VIEWER, Caller, signed
from guardd.endpoints import AGENT, IDEMPOTENCY_KEY, OPERATOR, WAIT, Reply
from guardd.jsonio import json_response
from guardd.routes.common import Service, ServiceBlueprint, decision_response, watch_action
from guardd.routes.passkeys import proof

blueprint = ServiceBlueprint("actions", __name__, tag="agents")

_PENDING_ONLY = "409 `invalid_state` unless the action is pending."


@blueprint.endpoint(
    "POST",
    "/v1/agents/<agent_id>/actions",
    "Ask permission for a tool action",
    caller=AGENT,
    role=ADMIN_ROLE,
    headers=(IDEMPOTENCY_KEY,),
    body=bodies.ActionRequest,
    reply=Reply(replies.Decision, "The decision; a denial is a 200 too."),
    writes=True,
    errors=("idempotency_conflict",),
    description="The charge is the larger of `cost` and the tool's minimum. "
    "A 400 uses no action ID and writes nothing.",
    sends=c.RequestAction,
)
async def request_action(
    service: Service,
    who: Caller,
    ref: AgentRef,
    idempotency_key: str | None,
    body: bodies.ActionRequest,
) -> Response:
    if who.operator is None:  # the agent itself: the decision path
        command = c.RequestAction(body.tool, body.input, body.cost, idempotency_key)
    else:  # an operator on the agent's behalf: the request names them
        by = signed(who, None, "by", required=False)
        command = c.RequestAction(
            body.tool, body.input, body.cost, idempotency_key, by.by, by.by_id
        )
    tracer = service.tracer
    if tracer is None:
        return decision_response(service, await ref.ask(command))
    started = time_ns()
    reply = await ref.ask(command)
    tracer.decision(ref.agent_id, body.tool, body.input, reply, started, request.headers)
    return decision_response(service, reply)


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>/actions/pending",
    "Actions waiting for an operator",
    caller=OPERATOR,
    role=VIEWER,
    reply=Reply(replies.PendingList, "Oldest first."),
    sends=c.ListPending,
)
async def pending(service: Service, ref: AgentRef) -> Response:
    return json_response(await ref.ask(c.ListPending()))


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>/actions/<action_id>",
    "An action (poll while pending)",
    caller=AGENT,
    role=VIEWER,
    query=(WAIT,),
    reply=Reply(replies.Action, "The action."),
    sends=c.GetAction,
)
async def get_action(service: Service, ref: AgentRef, action_id: str, wait: float) -> Response:
    return json_response(await watch_action(service, ref, action_id, wait))


@blueprint.endpoint(
    "POST",
    "/v1/agents/<agent_id>/actions/<action_id>/outcome",
    "Report the outcome of an allowed action",
    caller=AGENT,
    role=ADMIN_ROLE,
    body=bodies.OutcomeReport,
    reply=Reply(replies.AgentStatus, "The agent's status after the step."),
    writes=True,
    errors=("invalid_state",),
    description="`harmful` is admin only (403). Exactly one outcome per allowed action; "
    "otherwise 409 `invalid_state`.",
    sends=c.ReportOutcome,
)
async def outcome(
    service: Service, who: Caller, ref: AgentRef, action_id: str, body: bodies.OutcomeReport
) -> Response:
    command = c.ReportOutcome(action_id, body.status, who.role, body.detail)
    tracer = service.tracer
    if tracer is None:
        return json_response(await ref.ask(command))
    started = time_ns()
    reply = await ref.ask(command)
    tracer.outcome(ref.agent_id, action_id, str(body.status), started, request.headers)
    return json_response(reply)


@blueprint.endpoint(
    "POST",
    "/v1/agents/<agent_id>/actions/<action_id>/approve",
    "Approve a pending action (re-runs every check)",
    caller=OPERATOR,
    role=APPROVER,
    body=bodies.ApproveBody,
    reply=Reply(
        replies.AllowedDecision | replies.DeniedDecision | replies.PendingDecision,
        "`allowed`, or `denied` if a check now fails; `pending_approval` with the "
        "approvals so far while the tool's rule requires more.",
    ),
    writes=True,
    errors=("invalid_state",),
    description=_PENDING_ONLY + " The same operator twice is 409 (`already approved by "
    "you`); the operator who asked for the action on its agent's behalf is 403 (not the "
    "admin token). Where the rule says `approval_passkey`, the body's `passkey` must be "
    "an assertion made with the action's approval-options: 403 naming what failed "
    "otherwise, and nothing is written.",
    sends=c.Approve,
)
async def approve(
    service: Service, who: Caller, ref: AgentRef, action_id: str, body: bodies.ApproveBody
) -> Response:
    by = signed(who, body.approver, "approver", required=True)
    passkey = None
    if body.passkey is not None:
        passkey = await proof(service, who, ref, action_id, "approve", body.passkey)
    command = c.Approve(action_id, by.by, body.note, by.by_id, passkey)
    tracer = service.tracer
    if tracer is None:
        return decision_response(service, await ref.ask(command))
    started = time_ns()
    reply = await ref.ask(command)
    tracer.approval("approve", ref.agent_id, action_id, reply, started, request.headers, by=by.by)
    return decision_response(service, reply)


@blueprint.endpoint(
    "POST",
    "/v1/agents/<agent_id>/actions/<action_id>/reject",
    "Reject a pending action",
    caller=OPERATOR,
    role=APPROVER,
    body=bodies.RejectBody,
    reply=Reply(replies.DeniedDecision, "Denied with reason code `rejected`."),
    writes=True,
    errors=("invalid_state",),
    description=_PENDING_ONLY,
    sends=c.Reject,
)
async def reject(
    service: Service, who: Caller, ref: AgentRef, action_id: str, body: bodies.RejectBody
) -> Response:
    by = signed(who, body.approver, "approver", required=True)
    passkey = None
    if body.passkey is not None:
        passkey = await proof(service, who, ref, action_id, "reject", body.passkey)
    command = c.Reject(action_id, by.by, body.reason, body.scar, by.by_id, passkey)
    tracer = service.tracer
    if tracer is None:
        return decision_response(service, await ref.ask(command))
    started = time_ns()
    reply = await ref.ask(command)
    tracer.approval("reject", ref.agent_id, action_id, reply, started, request.headers, by=by.by)
    return decision_response(service, reply)


@blueprint.endpoint(
    "POST",
    "/v1/agents/<agent_id>/actions/<action_id>/cancel",
    "Withdraw a pending action",
    caller=AGENT,
    role=APPROVER,
    body=bodies.CancelBody,
    reply=Reply(replies.Action, "The action, now `cancelled`."),
    writes=True,
    errors=("invalid_state",),
    description="Writes `action_cancelled`: never charged, no scar, long-polls answer at "
    "once. 409 `invalid_state` unless the action is pending; an approve or reject "
    "afterwards is 409 too, saying when it was cancelled.",
    sends=c.Cancel,
)
async def cancel(
    service: Service, who: Caller, ref: AgentRef, action_id: str, body: bodies.CancelBody
) -> Response:
    if who.operator is None:
        command = c.Cancel(action_id, who.role, body.reason)
    else:
        by = signed(who, None, "by", required=False)
        command = c.Cancel(action_id, who.role, body.reason, by.by, by.by_id)
    tracer = service.tracer
    if tracer is None:
        return json_response(await ref.ask(command))
    started = time_ns()
    reply = await ref.ask(command)
    # Who withdrew it, as approve and reject name their operator: the agent
    # itself, or the operator (the role when the operator gave no name).
    name = command.by or command.role
    tracer.approval("cancel", ref.agent_id, action_id, reply, started, request.headers, by=name)
    return json_response(reply)
