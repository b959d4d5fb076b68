"""AdminClient / AsyncAdminClient and operators against a real guardd: who the
token is (me), and operator tokens issued, listed, used and revoked."""

from __future__ import annotations

import re

import pytest

from client_sdk import (
    AdminClient,
    AsyncAdminClient,
    BadRequest,
    Forbidden,
    InvalidState,
    IssuedOperatorToken,
    Me,
    NotFound,
    OperatorToken,
    Unauthorized,
)
from tests.client_sdk.conftest import FAST_RETRY
from tests.support.server import GuardServer


def test_me_describes_the_admin_token(admin: AdminClient) -> None:
    assert admin.me() == Me(
        name="admin", id="admin-token", roles=("admin", "approver", "viewer"), via="admin_token"
    )


def test_an_issued_token_authenticates_as_its_name_and_role_until_revoked(
    server: GuardServer, admin: AdminClient
) -> None:
    issued = admin.create_operator_token("release-bot", "approver", ttl_secs=3600)
    assert isinstance(issued, IssuedOperatorToken)
    assert issued.token.startswith("opr_")
    assert re.fullmatch(r"tok-[0-9a-f]{16}", issued.token_id)
    assert (issued.name, issued.role, issued.status, issued.issued_by) == (
        "release-bot",
        "approver",
        "active",
        "admin",
    )
    assert issued.expires_at is not None

    with AdminClient(issued.token, base_url=server.url, retry=FAST_RETRY) as bot:
        assert bot.me() == Me(
            name="release-bot",
            id=f"token:{issued.token_id}",
            roles=("approver", "viewer"),
            via="operator_token",
        )
        with pytest.raises(Forbidden, match=r"needs the admin role"):
            bot.list_operator_tokens()

        listed = {t.token_id: t for t in admin.list_operator_tokens()}
        assert isinstance(listed[issued.token_id], OperatorToken)
        assert listed[issued.token_id].status == "active"
        assert not hasattr(listed[issued.token_id], "token")  # the secret is shown once

        revoked = admin.revoke_operator_token(issued.token_id)
        assert (revoked.token_id, revoked.status) == (issued.token_id, "revoked")
        assert revoked.revoked_at is not None
        with pytest.raises(Unauthorized):
            bot.me()
    with pytest.raises(InvalidState):
        admin.revoke_operator_token(issued.token_id)


def test_a_token_without_ttl_never_expires(admin: AdminClient) -> None:
    issued = admin.create_operator_token("night-watch", "viewer")
    assert (issued.role, issued.expires_at) == ("viewer", None)


def test_bad_token_requests_are_the_services_errors(admin: AdminClient) -> None:
    with pytest.raises(BadRequest):
        admin.create_operator_token("bot", "superuser")
    with pytest.raises(BadRequest):
        admin.create_operator_token("bot", "viewer", ttl_secs=0)
    with pytest.raises(NotFound):
        admin.revoke_operator_token("tok-0000000000000000")


async def test_the_async_client_has_the_same_operator_methods(server: GuardServer) -> None:
    async with AsyncAdminClient(server.admin_token, base_url=server.url) as admin:
        assert (await admin.me()).via == "admin_token"
        issued = await admin.create_operator_token("async-bot", "admin")
        async with AsyncAdminClient(issued.token, base_url=server.url) as bot:
            me = await bot.me()
            assert (me.name, me.roles) == ("async-bot", ("admin", "approver", "viewer"))
            # An admin's operator token may issue and revoke tokens itself.
            assert issued.token_id in [t.token_id for t in await bot.list_operator_tokens()]
        revoked = await admin.revoke_operator_token(issued.token_id)
        assert revoked.status == "revoked"
