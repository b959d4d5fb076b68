"""Actions: ask permission (the decision path), view and long-poll an action,
report its outcome, and the operator's approve, reject and pending list;
cancel by the agent or an operator."""

from __future__ import annotations

import asyncio

from quart import Response, request

from agents_runtime.core import commands as c
from agents_runtime.core.vocabulary import ActionStatus
from guardd import bodies
from guardd.errors import BadRequest
from guardd.jsonio import json_response, read_json
from guardd.routes.common import MAX_IDEMPOTENCY_KEY, Service, ServiceBlueprint, agent, wait_param

blueprint = ServiceBlueprint("actions", __name__)


@blueprint.post("/v1/agents/<agent_id>/actions")
async def request_action(service: Service, agent_id: str) -> Response:
    _, ref = agent(service, agent_id)
    # getlist, unlike get, finds no key without raising and catching an error.
    keys = request.headers.getlist("Idempotency-Key")
    key = idempotency_key(keys) if keys else None
    body = bodies.parse_body(await read_json(), bodies.ActionRequest)
    command = c.RequestAction(body.tool, body.input, body.cost, key)
    reply = await ref.ask(command)
    meter = service.meter
    if meter is not None:
        meter.decision(reply)
    return json_response(reply)


@blueprint.get("/v1/agents/<agent_id>/actions/pending")
async def pending(service: Service, agent_id: str) -> Response:
    _, ref = agent(service, agent_id, admin_only=True)
    return json_response(await ref.ask(c.ListPending()))


@blueprint.get("/v1/agents/<agent_id>/actions/<action_id>")
async def get_action(service: Service, agent_id: str, action_id: str) -> Response:
    _, ref = agent(service, agent_id)
    wait = wait_param(request.args.get("wait"))
    action = await ref.ask(c.GetAction(action_id))
    if not wait or action["status"] != ActionStatus.PENDING_APPROVAL:
        return json_response(action)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    # Another node may decide it and its notification be lost: each
    # GetAction reads the store, so poll as often as the store asks.
    poll = service.guard.registry.store.poll_interval or wait
    while True:
        changed = await ref.ask(c.WatchAction(action_id))
        await asyncio.wait({changed}, timeout=min(poll, deadline - loop.time()))
        woken = changed.done()
        if not woken:
            changed.cancel()
        action = await ref.ask(c.GetAction(action_id))
        if woken or action["status"] != ActionStatus.PENDING_APPROVAL:
            break
        if loop.time() >= deadline:
            break
    return json_response(action)


@blueprint.post("/v1/agents/<agent_id>/actions/<action_id>/outcome")
async def outcome(service: Service, agent_id: str, action_id: str) -> Response:
    who, ref = agent(service, agent_id)
    body = bodies.parse_body(await read_json(), bodies.OutcomeReport)
    command = c.ReportOutcome(action_id, body.status, who.role, body.detail)
    return json_response(await ref.ask(command))


@blueprint.post("/v1/agents/<agent_id>/actions/<action_id>/approve")
async def approve(service: Service, agent_id: str, action_id: str) -> Response:
    _, ref = agent(service, agent_id, admin_only=True)
    body = bodies.parse_body(await read_json(), bodies.ApproveBody)
    reply = await ref.ask(c.Approve(action_id, body.approver, body.note))
    meter = service.meter
    if meter is not None:
        meter.decision(reply)
    return json_response(reply)


@blueprint.post("/v1/agents/<agent_id>/actions/<action_id>/reject")
async def reject(service: Service, agent_id: str, action_id: str) -> Response:
    _, ref = agent(service, agent_id, admin_only=True)
    body = bodies.parse_body(await read_json(), bodies.RejectBody)
    command = c.Reject(action_id, body.approver, body.reason, body.scar)
    reply = await ref.ask(command)
    meter = service.meter
    if meter is not None:
        meter.decision(reply)
    return json_response(reply)


@blueprint.post("/v1/agents/<agent_id>/actions/<action_id>/cancel")
async def cancel(service: Service, agent_id: str, action_id: str) -> Response:
    who, ref = agent(service, agent_id)
    body = bodies.parse_body(await read_json(), bodies.CancelBody)
    return json_response(await ref.ask(c.Cancel(action_id, who.role, body.reason)))


def idempotency_key(keys: list[str]) -> str:
    if len(keys) > 1:
        # Which one would the repeat be matched on? Neither: refuse.
        raise BadRequest("one Idempotency-Key header at most")
    key = keys[0]
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise BadRequest(f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} characters")
    # Header bytes arrive decoded as Latin-1, so a non-ASCII byte is a char above 127.
    if not (key.isascii() and key.isprintable()):
        raise BadRequest("Idempotency-Key must be printable ASCII (no tab, no other bytes)")
    return key
