"""Agents: create, list, status, token, policy, and the operator's steps on
an agent (scars, termination)."""

from __future__ import annotations

from quart import Response

from agents_runtime.core import commands as c
from agents_runtime.log.keys import agent_token
from agents_runtime.runtime.actor import AgentRef
from guardd import bodies, replies, views
from guardd.endpoints import ADMIN, AGENT, Reply
from guardd.jsonio import json_response
from guardd.routes.common import Service, ServiceBlueprint

blueprint = ServiceBlueprint("agents", __name__, tag="agents")

_AFTER = "The agent's status after the step."


@blueprint.endpoint(
    "POST",
    "/v1/agents",
    "Create an agent with its policy",
    caller=ADMIN,
    body=bodies.CreateAgent | bodies.CreateFollower,
    reply=Reply(replies.CreatedAgent, "Created: the agent's status and its token.", status=201),
    writes=True,
    errors=("agent_exists", "not_found"),
    description="With `policy_ref`, the agent's first `policy` record names the named "
    "policy's newest version; 404 `not_found` when there is no such named policy.",
)
async def create_agent(service: Service, body: bodies.NewAgent) -> Response:
    registry = service.guard.registry
    if body.policy_ref is not None:
        status = await registry.fleet.create(body.agent_id, body.policy_ref)
    else:
        assert body.policy is not None  # the parser gives one of the two
        status = await registry.create(body.agent_id, body.policy)
    token = agent_token(service.guard.ring.token_key, body.agent_id)
    return json_response(views.created_agent(status, token), 201)


@blueprint.endpoint(
    "GET",
    "/v1/agents",
    "List every agent",
    caller=ADMIN,
    reply=Reply(replies.AgentList, "Active and quarantined agents, sorted by ID."),
)
async def list_agents(service: Service) -> Response:
    return json_response(views.listed_agents(await service.guard.registry.list()))


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>",
    "An agent's status",
    caller=AGENT,
    reply=Reply(replies.AgentStatus, "The status."),
)
async def agent_status(service: Service, ref: AgentRef) -> Response:
    return json_response(await ref.ask(c.GetStatus()))


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>/token",
    "Re-issue the agent's token",
    caller=ADMIN,
    reply=Reply(replies.Token, "The token."),
)
async def reissue_token(service: Service, agent_id: str) -> Response:
    return json_response(views.token(agent_token(service.guard.ring.token_key, agent_id)))


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>/policy",
    "The agent's policy in force",
    caller=AGENT,
    reply=Reply(
        replies.PolicyInForce,
        "The policy with every default filled in, as its last `policy` record has it.",
    ),
    description="Also for a terminated agent.",
)
async def get_policy(service: Service, ref: AgentRef) -> Response:
    return json_response(await ref.ask(c.GetPolicy()))


@blueprint.endpoint(
    "PUT",
    "/v1/agents/<agent_id>/policy",
    "Replace a live agent's policy",
    caller=ADMIN,
    body=bodies.PolicyBody | bodies.PolicyRef,
    reply=Reply(replies.AgentStatus, _AFTER),
    writes=True,
    errors=("invalid_state",),
    description="Writes a `policy` record; a terminated agent is 409 `invalid_state` "
    '(termination is permanent). With `{"policy_ref": name}` the agent follows that '
    "named policy from its newest version on (404 `not_found` when there is none); a "
    "policy of its own ends the following.",
)
async def set_policy(service: Service, ref: AgentRef, body: bodies.PolicyOrRef) -> Response:
    if body.policy_ref is not None:
        return json_response(await service.guard.registry.fleet.follow(ref, body.policy_ref))
    assert body.policy is not None  # the parser gives one of the two
    return json_response(await ref.ask(c.SetPolicy(body.policy)))


@blueprint.endpoint(
    "POST",
    "/v1/agents/<agent_id>/scars",
    "Add a scar",
    caller=ADMIN,
    body=bodies.ScarBody,
    reply=Reply(replies.AgentStatus, _AFTER),
    writes=True,
    errors=("unknown_action",),
    description="An `action_id` that does not exist is 404 `unknown_action`.",
)
async def add_scar(service: Service, ref: AgentRef, body: bodies.ScarBody) -> Response:
    command = c.AddScar(body.severity, body.reason, body.action_id, body.by)
    return json_response(await ref.ask(command))


@blueprint.endpoint(
    "POST",
    "/v1/agents/<agent_id>/terminate",
    "Terminate the agent (permanent)",
    caller=ADMIN,
    body=bodies.TerminateBody,
    reply=Reply(replies.AgentStatus, _AFTER),
    writes=True,
    errors=("already_terminated",),
)
async def terminate(service: Service, ref: AgentRef, body: bodies.TerminateBody) -> Response:
    return json_response(await ref.ask(c.Terminate(body.reason, body.by)))
