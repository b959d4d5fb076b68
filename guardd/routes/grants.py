"""Grants: an operator's approval, given ahead, of a bounded stream of calls."""

from __future__ import annotations

from quart import Response

from agents_runtime.core import commands as c
from agents_runtime.runtime.actor import AgentRef
from guardd import bodies, replies
from guardd.auth import APPROVER, VIEWER, Caller, signed
from guardd.endpoints import OPERATOR, Reply
from guardd.jsonio import json_response
from guardd.routes.common import Service, ServiceBlueprint

blueprint = ServiceBlueprint("grants", __name__, tag="agents")


@blueprint.endpoint(
    "POST",
    "/v1/agents/<agent_id>/grants",
    "Grant approval for a bounded stream of calls",
    caller=OPERATOR,
    role=APPROVER,
    body=bodies.GrantBody,
    reply=Reply(replies.Grant, "The grant.", status=201),
    writes=True,
    errors=("invalid_state",),
    description="Writes `grant_issued`. A request the policy would hold for approval "
    "that matches an unexpired grant with room left is allowed at once, its "
    "`action_allowed` naming the grant. 409 `invalid_state` when the agent is terminated.",
    sends=c.IssueGrant,
)
async def issue_grant(
    service: Service, who: Caller, ref: AgentRef, body: bodies.GrantBody
) -> Response:
    by = signed(who, body.by, "by", required=True)
    command = c.IssueGrant(
        tool=body.tool,
        by=by.by,
        by_id=by.by_id,
        max_calls=body.max_calls,
        max_cost=body.max_cost,
        ttl_secs=body.ttl_secs,
        expires_at=body.expires_at,
        input_match=body.input_match,
        note=body.note,
    )
    return json_response(await ref.ask(command), 201)


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>/grants",
    "List the agent's grants",
    caller=OPERATOR,
    role=VIEWER,
    reply=Reply(replies.GrantList, "Every grant, with what is left."),
    sends=c.ListGrants,
)
async def list_grants(service: Service, ref: AgentRef) -> Response:
    return json_response(await ref.ask(c.ListGrants()))


@blueprint.endpoint(
    "POST",
    "/v1/agents/<agent_id>/grants/<grant_id>/revoke",
    "Revoke a grant",
    caller=OPERATOR,
    role=APPROVER,
    body=bodies.RevokeGrantBody,
    reply=Reply(replies.Grant, "The grant, now `revoked`."),
    writes=True,
    errors=("invalid_state",),
    description="Writes `grant_revoked`. 404 `not_found` for a grant the agent does "
    "not have; 409 `invalid_state` when revoked already.",
    sends=c.RevokeGrant,
)
async def revoke_grant(
    service: Service, who: Caller, ref: AgentRef, grant_id: str, body: bodies.RevokeGrantBody
) -> Response:
    by = signed(who, body.by, "by", required=True)
    return json_response(await ref.ask(c.RevokeGrant(grant_id, by.by, body.reason, by.by_id)))
