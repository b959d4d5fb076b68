"""Agents: create, list, status, token, policy, and the operator's steps on
an agent (scars, termination)."""

from __future__ import annotations

from quart import Response

from agents_runtime.core import commands as c
from agents_runtime.log.keys import agent_token
from agents_runtime.runtime.actor import AgentRef
from guardd import bodies, replies, views
from guardd.auth import ADMIN_ROLE, ADMIN_TOKEN_ID, VIEWER, Caller, signed
from guardd.endpoints import AGENT, OPERATOR, Reply
from guardd.jsonio import json_response
from guardd.routes.common import Service, ServiceBlueprint

blueprint = ServiceBlueprint("agents", __name__, tag="agents")

_AFTER = "The agent's status after the step."


@blueprint.endpoint(
    "POST",
    "/v1/agents",
    "Create an agent with its policy",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    body=bodies.CreateAgent | bodies.CreateFollower,
    reply=Reply(replies.CreatedAgent, "Created: the agent's status and its token.", status=201),
    writes=True,
    errors=("agent_exists", "not_found"),
    description="With `policy_ref`, the agent's first `policy` record names the named "
    "policy's newest version; 404 `not_found` when there is no such named policy.",
)
async def create_agent(service: Service, who: Caller, body: bodies.NewAgent) -> Response:
    by = signed(who, None, "by", required=False)
    registry = service.guard.registry
    if body.policy_ref is not None:
        status = await registry.fleet.create(body.agent_id, body.policy_ref, by.by, by.by_id)
    else:
        assert body.policy is not None  # the parser gives one of the two
        status = await registry.create(body.agent_id, body.policy, by=by.by, by_id=by.by_id)
    token = agent_token(service.guard.ring.token_key, body.agent_id)
    return json_response(views.created_agent(status, token), 201)


@blueprint.endpoint(
    "GET",
    "/v1/agents",
    "List every agent",
    caller=OPERATOR,
    role=VIEWER,
    reply=Reply(replies.AgentList, "Active, quarantined and not yet loaded agents, sorted by ID."),
)
async def list_agents(service: Service) -> Response:
    return json_response(views.listed_agents(await service.guard.registry.list()))


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>",
    "An agent's status",
    caller=AGENT,
    role=VIEWER,
    reply=Reply(replies.AgentStatus, "The status."),
    sends=c.GetStatus,
)
async def agent_status(service: Service, ref: AgentRef) -> Response:
    return json_response(await ref.ask(c.GetStatus()))


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>/token",
    "Re-issue the agent's token",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    reply=Reply(replies.Token, "The token."),
)
async def reissue_token(service: Service, agent_id: str) -> Response:
    return json_response(views.token(agent_token(service.guard.ring.token_key, agent_id)))


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>/policy",
    "The agent's policy in force",
    caller=AGENT,
    role=VIEWER,
    reply=Reply(
        replies.PolicyInForce,
        "The policy with every default filled in, as its last `policy` record has it.",
    ),
    description="Also for a terminated agent.",
    sends=c.GetPolicy,
)
async def get_policy(service: Service, ref: AgentRef) -> Response:
    return json_response(await ref.ask(c.GetPolicy()))


@blueprint.endpoint(
    "PUT",
    "/v1/agents/<agent_id>/policy",
    "Replace a live agent's policy",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    body=bodies.PolicyBody | bodies.PolicyRef,
    reply=Reply(replies.AgentStatus, _AFTER),
    writes=True,
    errors=("invalid_state",),
    description="Writes a `policy` record; a terminated agent is 409 `invalid_state` "
    '(termination is permanent). With `{"policy_ref": name}` the agent follows that '
    "named policy from its newest version on (404 `not_found` when there is none); a "
    "policy of its own ends the following.",
    sends=c.SetPolicy,
)
async def set_policy(
    service: Service, who: Caller, ref: AgentRef, body: bodies.PolicyOrRef
) -> Response:
    by = signed(who, None, "by", required=False)
    if body.policy_ref is not None:
        fleet = service.guard.registry.fleet
        return json_response(await fleet.follow(ref, body.policy_ref, by.by, by.by_id))
    assert body.policy is not None  # the parser gives one of the two
    return json_response(await ref.ask(c.SetPolicy(body.policy, by=by.by, by_id=by.by_id)))


@blueprint.endpoint(
    "POST",
    "/v1/agents/<agent_id>/scars",
    "Add a scar",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    body=bodies.ScarBody,
    reply=Reply(replies.AgentStatus, _AFTER),
    writes=True,
    errors=("unknown_action",),
    description="An `action_id` that does not exist is 404 `unknown_action`.",
    sends=c.AddScar,
)
async def add_scar(service: Service, who: Caller, ref: AgentRef, body: bodies.ScarBody) -> Response:
    by = signed(who, body.by, "by", required=False)
    # The admin token's scar without a name keeps the word it always had ("operator").
    name = by.by if body.by is not None or by.by_id != ADMIN_TOKEN_ID else None
    command = c.AddScar(body.severity, body.reason, body.action_id, name, by.by_id)
    return json_response(await ref.ask(command))


@blueprint.endpoint(
    "POST",
    "/v1/agents/<agent_id>/terminate",
    "Terminate the agent (permanent)",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    body=bodies.TerminateBody,
    reply=Reply(replies.AgentStatus, _AFTER),
    writes=True,
    errors=("already_terminated",),
    sends=c.Terminate,
)
async def terminate(
    service: Service, who: Caller, ref: AgentRef, body: bodies.TerminateBody
) -> Response:
    by = signed(who, body.by, "by", required=True)
    return json_response(await ref.ask(c.Terminate(body.reason, by.by, by.by_id)))
