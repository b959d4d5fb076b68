"""Shadow mode: a candidate policy evaluated on an agent's live requests,
never enforced (agents_runtime/core/shadow.py)."""

from __future__ import annotations

from quart import Response

from agents_runtime.core import commands as c
from agents_runtime.core.policy import parse_policy
from agents_runtime.runtime.actor import AgentRef
from guardd import bodies, replies
from guardd.auth import ADMIN_ROLE, VIEWER, Caller, signed
from guardd.endpoints import OPERATOR, Reply
from guardd.jsonio import json_response
from guardd.routes.common import Service, ServiceBlueprint

blueprint = ServiceBlueprint("shadow", __name__, tag="agents")


@blueprint.endpoint(
    "PUT",
    "/v1/agents/<agent_id>/shadow",
    "Try a candidate policy beside the one in force",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    body=bodies.PolicyBody | bodies.PolicyRef,
    reply=Reply(replies.Shadow, "The shadow, its counts starting at 0."),
    writes=True,
    errors=("invalid_state",),
    description="Writes `shadow_set`; replaces a shadow already set (its counts start again). "
    "Every later request is decided by the candidate too, never enforced: when the two "
    "disagree, the decision record carries `shadow: {decision, reason}`. "
    'With `{"policy_ref": name}` the named policy\'s newest version is taken, once '
    "(404 `not_found` when there is none). 409 `invalid_state` when the agent is terminated.",
    sends=c.SetShadow,
)
async def set_shadow(
    service: Service, who: Caller, ref: AgentRef, body: bodies.PolicyOrRef
) -> Response:
    by = signed(who, None, "by", required=False)
    if body.policy_ref is not None:
        version = await service.guard.registry.fleet.newest(body.policy_ref)
        command = c.SetShadow(
            parse_policy(version.policy, recorded=True),
            version.name,
            version.version,
            by.by,
            by.by_id,
        )
    else:
        assert body.policy is not None  # the parser gives one of the two
        command = c.SetShadow(body.policy, by=by.by, by_id=by.by_id)
    return json_response(await ref.ask(command))


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>/shadow",
    "The shadow policy and how often it agreed",
    caller=OPERATOR,
    role=VIEWER,
    reply=Reply(replies.Shadow, "The shadow and its counts since it was set."),
    description="404 `not_found` when none is set.",
    sends=c.GetShadow,
)
async def get_shadow(service: Service, ref: AgentRef) -> Response:
    return json_response(await ref.ask(c.GetShadow()))


@blueprint.endpoint(
    "DELETE",
    "/v1/agents/<agent_id>/shadow",
    "Stop trying the shadow policy",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    reply=Reply(replies.Ok, "Removed."),
    writes=True,
    description="Writes `shadow_cleared`. 404 `not_found` when none is set.",
    sends=c.ClearShadow,
)
async def clear_shadow(service: Service, who: Caller, ref: AgentRef) -> Response:
    by = signed(who, None, "by", required=False)
    return json_response(await ref.ask(c.ClearShadow(by.by, by.by_id)))
