"""Operators: who is calling (``GET /v1/me``)."""

from __future__ import annotations

from quart import Response

from guardd import replies, views
from guardd.auth import Caller, require_role
from guardd.endpoints import OPERATOR, Reply
from guardd.jsonio import json_response
from guardd.routes.common import Service, ServiceBlueprint

blueprint = ServiceBlueprint("operators", __name__, tag="operators")


@blueprint.endpoint(
    "GET",
    "/v1/me",
    "The operator calling",
    caller=OPERATOR,
    reply=Reply(replies.Me, "Who you are to guardd, and the roles you hold."),
    description="Any operator, whatever roles they hold (a person signed in whose "
    "groups map to no role sees an empty `roles`); an agent token is 403.",
)
async def me(service: Service, who: Caller) -> Response:
    return json_response(views.me(require_role(who, "")))
