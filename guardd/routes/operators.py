"""Operators: who is calling (``GET /v1/me``), and the operator tokens
(issued, listed and revoked by an admin; kept in the operators log)."""

from __future__ import annotations

from quart import Response

from guardd import bodies, replies, views
from guardd.auth import ADMIN_ROLE, Caller, require_role
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


@blueprint.endpoint(
    "POST",
    "/v1/operators/tokens",
    "Issue an operator token",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    body=bodies.OperatorTokenBody,
    reply=Reply(replies.IssuedOperatorToken, "The token, with its secret (shown once).", 201),
    writes=True,
    description="Writes `operator_token_issued` to the operators log (a hash of the "
    "secret, never the secret). The token authenticates as an operator holding `role` "
    "(and the roles below it) until it expires or is revoked.",
)
async def issue_token(service: Service, who: Caller, body: bodies.OperatorTokenBody) -> Response:
    operators = service.guard.operators
    issued, secret = await operators.issue(
        body.name, body.role.value, body.ttl_secs, require_role(who, ADMIN_ROLE)
    )
    return json_response(views.issued_operator_token(issued, secret, operators.now()), 201)


@blueprint.endpoint(
    "GET",
    "/v1/operators/tokens",
    "List operator tokens",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    reply=Reply(replies.OperatorTokenList, "Every token, without secrets."),
    errors=("unavailable",),
    description="Other nodes' tokens are read first, so the list is current.",
)
async def list_tokens(service: Service) -> Response:
    operators = service.guard.operators
    return json_response(views.operator_token_list(await operators.tokens(), operators.now()))


@blueprint.endpoint(
    "POST",
    "/v1/operators/tokens/<token_id>/revoke",
    "Revoke an operator token",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    reply=Reply(replies.OperatorToken, "The token, now `revoked`."),
    writes=True,
    errors=("not_found", "invalid_state"),
    description="Writes `operator_token_revoked`; from then on the token is 401 on "
    "every node (others within a second). 404 `not_found` for a token never issued; "
    "409 `invalid_state` when revoked already.",
)
async def revoke_token(service: Service, who: Caller, token_id: str) -> Response:
    operators = service.guard.operators
    revoked = await operators.revoke(token_id, require_role(who, ADMIN_ROLE))
    return json_response(views.operator_token(revoked, operators.now()))
