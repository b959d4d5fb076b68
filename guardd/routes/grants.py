"""Grants: an operator's approval, given ahead, of a bounded stream of calls."""

from __future__ import annotations

from quart import Response

from agents_runtime.core import commands as c
from guardd import bodies
from guardd.jsonio import json_response, read_json
from guardd.routes.common import Service, ServiceBlueprint, agent

blueprint = ServiceBlueprint("grants", __name__)


@blueprint.post("/v1/agents/<agent_id>/grants")
async def issue_grant(service: Service, agent_id: str) -> Response:
    _, ref = agent(service, agent_id, admin_only=True)
    body = bodies.parse_grant_body(await read_json())
    command = c.IssueGrant(
        tool=body.tool,
        by=body.by,
        max_calls=body.max_calls,
        max_cost=body.max_cost,
        ttl_secs=body.ttl_secs,
        expires_at=body.expires_at,
        input_match=body.input_match,
        note=body.note,
    )
    return json_response(await ref.ask(command), 201)


@blueprint.get("/v1/agents/<agent_id>/grants")
async def list_grants(service: Service, agent_id: str) -> Response:
    _, ref = agent(service, agent_id, admin_only=True)
    return json_response(await ref.ask(c.ListGrants()))


@blueprint.post("/v1/agents/<agent_id>/grants/<grant_id>/revoke")
async def revoke_grant(service: Service, agent_id: str, grant_id: str) -> Response:
    _, ref = agent(service, agent_id, admin_only=True)
    body = bodies.parse_body(await read_json(), bodies.RevokeGrantBody)
    return json_response(await ref.ask(c.RevokeGrant(grant_id, body.by, body.reason)))
