"""Named (fleet) policies: stored with the logs, followed by many agents
(agents_runtime/runtime/fleet.py)."""

from __future__ import annotations

from quart import Response

from agents_runtime.core.policy import Policy
from agents_runtime.errors import NotFound
from agents_runtime.log.policies import valid_name
from guardd import bodies, replies
from guardd.auth import ADMIN_ROLE, VIEWER, Caller, signed
from guardd.endpoints import OPERATOR, Reply
from guardd.jsonio import json_response
from guardd.routes.common import Service, ServiceBlueprint

blueprint = ServiceBlueprint("policies", __name__, tag="agents")


@blueprint.endpoint(
    "PUT",
    "/v1/policies/<policy_name>",
    "Store a new version of a named policy",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    body=bodies.PolicyBody,
    reply=Reply(replies.NamedPolicy, "The new version and the agents that follow it."),
    writes=True,
    description="The version is signed and stored first; then each agent that follows the "
    "policy gets a `policy` record naming it (`policy_ref`, `version`). Answered once every "
    "follower's record is durable; a crash before that finishes at the next start.",
)
async def put_policy(service: Service, who: Caller, policy_name: str, body: Policy) -> Response:
    name = bodies.policy_name(policy_name)
    by = signed(who, None, "by", required=False)
    return json_response(await service.guard.registry.fleet.put(name, body, by.by, by.by_id))


@blueprint.endpoint(
    "GET",
    "/v1/policies",
    "List the named policies",
    caller=OPERATOR,
    role=VIEWER,
    reply=Reply(replies.NamedPolicyList, "Every named policy, sorted by name."),
)
async def list_policies(service: Service) -> Response:
    return json_response({"policies": await service.guard.registry.fleet.list()})


@blueprint.endpoint(
    "GET",
    "/v1/policies/<policy_name>",
    "A named policy",
    caller=OPERATOR,
    role=VIEWER,
    reply=Reply(replies.NamedPolicy, "Its newest version and the agents that follow it."),
    errors=("not_found",),
)
async def get_policy(service: Service, policy_name: str) -> Response:
    return json_response(await service.guard.registry.fleet.show(_known(policy_name)))


@blueprint.endpoint(
    "DELETE",
    "/v1/policies/<policy_name>",
    "Remove a named policy",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    reply=Reply(replies.Ok, "Removed, every version."),
    writes=True,
    errors=("not_found", "invalid_state"),
    description="409 `invalid_state` while any live agent follows it.",
)
async def delete_policy(service: Service, policy_name: str) -> Response:
    await service.guard.registry.fleet.delete(_known(policy_name))
    return json_response({"ok": True})


def _known(name: str) -> str:
    """A name no policy could have is simply not there."""
    if not valid_name(name):
        raise NotFound(f"no named policy {name}")
    return name
