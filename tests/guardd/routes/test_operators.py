"""The operator identity seam: a bearer token none of guardd's own is handed
to the pluggable resolver (``Authenticator.resolver``, single sign-on's hook),
whose operator then acts with the roles it holds. The resolver here stands in
for the identity provider module; everything else is guardd's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardd.auth import Operator
from guardd.errors import ApiError, Unauthorized
from guardd.routes import actions, agents, operators
from tests.guardd.routes.support import policy, served

ISSUER = "https://id.example.test"
GOOD = "eyJ.good.jwt"
NOBODY = "eyJ.no-roles.jwt"
DOWN = "eyJ.provider-down.jwt"


async def resolve(token: str) -> Operator:
    if token == GOOD:
        return Operator.from_oidc(ISSUER, "sub-42", "ann@example.test", frozenset({"approver"}))
    if token == NOBODY:
        return Operator.from_oidc(ISSUER, "sub-7", "guest@example.test", frozenset({"guests"}))
    if token == DOWN:
        raise ApiError("the identity provider cannot be reached", "unavailable")
    raise Unauthorized("invalid token: signature does not verify")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_token_only_the_resolver_knows_acts_as_its_operator(tmp_path: Path) -> None:
    async with served(tmp_path, operators.blueprint, actions.blueprint, agents.blueprint) as app:
        app.service.guard.auth.resolver = resolve
        me = await app.client.get("/v1/me", headers=bearer(GOOD))
        assert await me.get_json() == {
            "name": "ann@example.test",
            "id": f"oidc:{ISSUER}#sub-42",
            "roles": ["approver", "viewer"],
            "via": "oidc",
        }
        await app.service.guard.registry.create("a1", policy())
        ok = await app.client.get("/v1/agents/a1", headers=bearer(GOOD))
        assert ok.status_code == 200
        denied = await app.client.post("/v1/agents/a1/terminate", headers=bearer(GOOD), json={})
        assert denied.status_code == 403
        assert (await denied.get_json())["error"] == (
            "this endpoint needs the admin role; ann@example.test holds approver, viewer"
        )


@pytest.mark.parametrize(
    ("token", "status", "code"),
    [
        pytest.param("eyJ.forged.jwt", 401, "unauthorized", id="invalid"),
        pytest.param(DOWN, 503, "unavailable", id="provider-down"),
    ],
)
async def test_what_the_resolver_refuses_is_answered_as_it_says(
    tmp_path: Path, token: str, status: int, code: str
) -> None:
    async with served(tmp_path, operators.blueprint) as app:
        app.service.guard.auth.resolver = resolve
        answer = await app.client.get("/v1/me", headers=bearer(token))
        assert answer.status_code == status
        assert (await answer.get_json())["code"] == code


async def test_groups_that_map_to_no_role_see_themselves_and_nothing_else(tmp_path: Path) -> None:
    async with served(tmp_path, operators.blueprint, agents.blueprint) as app:
        app.service.guard.auth.resolver = resolve
        me = await app.client.get("/v1/me", headers=bearer(NOBODY))
        assert (await me.get_json())["roles"] == []
        listed = await app.client.get("/v1/agents", headers=bearer(NOBODY))
        assert listed.status_code == 403


async def test_without_a_resolver_an_unknown_token_is_401_and_none_is_awaited(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, operators.blueprint) as app:
        assert app.service.guard.auth.resolver is None
        answer = await app.client.get("/v1/me", headers=bearer(GOOD))
        assert answer.status_code == 401
        # guardd's own tokens are known without the resolver (no await on their path)
        assert app.service.guard.auth.known(app.admin["Authorization"]) is not None
        assert app.service.guard.auth.known(app.agent("a1")["Authorization"]) is not None
