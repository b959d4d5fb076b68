"""Agents: create, list, status, token, policy, and the operator's steps on
an agent (scars, termination)."""

from __future__ import annotations

from quart import Response

from agents_runtime.core import commands as c
from agents_runtime.log.keys import agent_token
from guardd import bodies
from guardd.auth import require_admin
from guardd.jsonio import json_response, read_json
from guardd.routes.common import Service, ServiceBlueprint, agent, caller

blueprint = ServiceBlueprint("agents", __name__)


@blueprint.post("/v1/agents")
async def create_agent(service: Service) -> Response:
    require_admin(caller(service))
    body = bodies.parse_body(await read_json(), bodies.CreateAgent)
    policy = bodies.parse_policy_body(body.policy, "$.policy")
    status = await service.guard.registry.create(body.agent_id, policy)
    token = agent_token(service.guard.ring.token_key, body.agent_id)
    return json_response({"agent": status, "token": token}, 201)


@blueprint.get("/v1/agents")
async def list_agents(service: Service) -> Response:
    require_admin(caller(service))
    return json_response({"agents": await service.guard.registry.list()})


@blueprint.get("/v1/agents/<agent_id>")
async def agent_status(service: Service, agent_id: str) -> Response:
    _, ref = agent(service, agent_id)
    return json_response(await ref.ask(c.GetStatus()))


@blueprint.get("/v1/agents/<agent_id>/token")
async def reissue_token(service: Service, agent_id: str) -> Response:
    agent(service, agent_id, admin_only=True)
    return json_response({"token": agent_token(service.guard.ring.token_key, agent_id)})


@blueprint.get("/v1/agents/<agent_id>/policy")
async def get_policy(service: Service, agent_id: str) -> Response:
    _, ref = agent(service, agent_id)
    return json_response(await ref.ask(c.GetPolicy()))


@blueprint.put("/v1/agents/<agent_id>/policy")
async def set_policy(service: Service, agent_id: str) -> Response:
    _, ref = agent(service, agent_id, admin_only=True)
    policy = bodies.parse_policy_body(await read_json())
    return json_response(await ref.ask(c.SetPolicy(policy)))


@blueprint.post("/v1/agents/<agent_id>/scars")
async def add_scar(service: Service, agent_id: str) -> Response:
    _, ref = agent(service, agent_id, admin_only=True)
    body = bodies.parse_body(await read_json(), bodies.ScarBody)
    command = c.AddScar(body.severity, body.reason, body.action_id, body.by)
    return json_response(await ref.ask(command))


@blueprint.post("/v1/agents/<agent_id>/terminate")
async def terminate(service: Service, agent_id: str) -> Response:
    _, ref = agent(service, agent_id, admin_only=True)
    body = bodies.parse_body(await read_json(), bodies.TerminateBody)
    return json_response(await ref.ask(c.Terminate(body.reason, body.by)))
