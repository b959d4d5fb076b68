"""Single sign-on end to end: a real guardd trusting the real test provider."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.oidc_plugin import start_or_skip
from tests.support.oidc_provider import CLIENT_ID, ROLES, OidcProvider
from tests.support.server import GuardServer, free_port

POLICY = {"budget": 10, "scar_limit": 3, "tools": {"search": {"cost": 1}}}
HELD = {"budget": 10, "scar_limit": 3, "tools": {"search": {"cost": 1, "requires_approval": True}}}


def oidc_env(issuer: str) -> dict[str, str]:
    return {
        "GUARD_OIDC_ISSUER": issuer,
        "GUARD_OIDC_CLIENT_ID": CLIENT_ID,
        "GUARD_OIDC_ROLES": ROLES,
    }


@pytest.fixture
def signed(tmp_path: Path, oidc_provider: OidcProvider) -> Iterator[GuardServer]:
    server = GuardServer(tmp_path / "guard-data", env=oidc_env(oidc_provider.issuer)).start()
    try:
        yield server
    finally:
        server.kill()


def test_auth_config_tells_the_console_where_to_sign_in_without_a_token(
    signed: GuardServer, oidc_provider: OidcProvider
) -> None:
    response = httpx.get(f"{signed.url}/v1/auth/config")
    assert response.status_code == 200
    assert response.json() == {
        "issuer": oidc_provider.issuer,
        "client_id": CLIENT_ID,
        "scopes": ["openid", "email", "profile"],
    }


def test_the_start_up_lines_name_the_issuer_and_the_role_mapping(
    signed: GuardServer, oidc_provider: OidcProvider
) -> None:
    assert (
        f"single sign-on: {oidc_provider.issuer} (client {CLIENT_ID}; roles from groups: "
        "admin=guard-admins, approver=guard-approvers, viewer=guard-viewers)"
    ) in signed.read_output().splitlines()


def test_auth_config_is_not_found_without_an_issuer(guard_server: GuardServer) -> None:
    response = httpx.get(f"{guard_server.url}/v1/auth/config")
    assert response.status_code == 404
    assert response.json() == {
        "error": "single sign-on is not configured (guardd runs without --oidc-issuer)",
        "code": "not_found",
    }


def test_a_signed_in_admin_acts_as_the_admin(
    signed: GuardServer, oidc_provider: OidcProvider
) -> None:
    with signed.client(oidc_provider.id_token("alice")) as alice:
        created = alice.post("/v1/agents", json={"agent_id": "a1", "policy": POLICY})
        assert created.status_code == 201, created.text
        assert alice.get("/v1/agents").json()["agents"][0]["agent_id"] == "a1"
        log = alice.get("/v1/agents/a1/log").json()["records"]
    # The records of the agent she created name her, as the issuer knows her.
    by_id = f"oidc:{oidc_provider.issuer}#alice"
    assert [(r["kind"], r["by"], r["by_id"]) for r in log] == [
        ("genesis", "alice@example.test", by_id),
        ("policy", "alice@example.test", by_id),
    ]


def test_a_signed_in_person_without_the_admin_role_is_forbidden_naming_it(
    signed: GuardServer, oidc_provider: OidcProvider
) -> None:
    with signed.client(oidc_provider.id_token("bob")) as bob:
        response = bob.post("/v1/agents", json={"agent_id": "a1", "policy": POLICY})
    assert response.status_code == 403
    assert response.json() == {
        "error": "this endpoint needs the admin role; bob@example.test holds approver, viewer",
        "code": "forbidden",
    }


@pytest.mark.parametrize(
    ("user", "name", "roles"),
    [
        ("alice", "alice@example.test", ["admin", "approver", "viewer"]),
        ("bob", "bob@example.test", ["approver", "viewer"]),
        ("carol", "carol@example.test", ["viewer"]),
        ("dave", "Dave Nogroup", []),  # no e-mail: shown by name
    ],
)
def test_me_of_a_signed_in_person_is_their_issuer_and_subject_and_their_roles(
    signed: GuardServer, oidc_provider: OidcProvider, user: str, name: str, roles: list[str]
) -> None:
    with signed.client(oidc_provider.id_token(user)) as person:
        response = person.get("/v1/me")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "name": name,
        "id": f"oidc:{oidc_provider.issuer}#{user}",
        "roles": roles,
        "via": "oidc",
    }


def test_an_expired_token_of_the_issuer_is_unauthorized(
    signed: GuardServer, oidc_provider: OidcProvider
) -> None:
    now = int(time.time())
    token = oidc_provider.sign(
        {"iss": oidc_provider.issuer, "aud": CLIENT_ID, "sub": "alice", "exp": now - 120}
    )
    with signed.client(token) as client:
        response = client.get("/v1/agents")
    assert response.status_code == 401
    assert response.json() == {"error": "OIDC token has expired", "code": "unauthorized"}
    assert response.headers["WWW-Authenticate"] == "Bearer"


def test_a_token_of_another_kind_is_still_invalid(signed: GuardServer) -> None:
    with signed.client("not-a-token-of-any-kind") as client:
        response = client.get("/v1/agents")
    assert response.status_code == 401
    assert response.json() == {"error": "invalid token", "code": "unauthorized"}


def test_an_issuer_down_at_start_is_unavailable_until_back_and_other_tokens_work(
    tmp_path: Path,
) -> None:
    provider = OidcProvider(free_port())
    server = GuardServer(tmp_path / "guard-data", env=oidc_env(provider.issuer)).start()
    try:
        with server.client(server.admin_token) as admin:
            created = admin.post("/v1/agents", json={"agent_id": "a1", "policy": POLICY})
            assert created.status_code == 201
        agent_token = created.json()["token"]
        with server.client(agent_token) as agent:
            decided = agent.post("/v1/agents/a1/actions", json={"tool": "search"})
            assert decided.json()["decision"] == "allowed"
        start_or_skip(provider)
        token = provider.id_token("alice")
        provider.stop()
        with server.client(token) as alice:
            response = alice.get("/v1/agents")
            assert response.status_code == 503
            assert response.json()["code"] == "unavailable"
            assert response.json()["error"].startswith(
                f"the OIDC issuer {provider.issuer} is unreachable"
            )
        start_or_skip(provider)  # back, with new keys: sign in again
        with server.client(provider.id_token("alice")) as alice:
            # guardd tries the issuer again at most once a second: poll, bounded.
            for _ in range(50):
                response = alice.get("/v1/agents")
                if response.status_code != 503:
                    break
                time.sleep(0.1)
            assert response.status_code == 200, response.text
    finally:
        provider.stop()
        server.kill()


def test_the_console_may_fetch_from_the_issuer_and_nowhere_else(
    signed: GuardServer, oidc_provider: OidcProvider
) -> None:
    csp = httpx.get(f"{signed.url}/").headers["Content-Security-Policy"]
    # The issuer serves its token endpoint itself: one origin beside 'self'.
    assert f"connect-src 'self' {oidc_provider.issuer};" in csp


def _shaped(header: dict[str, Any], claims: bytes) -> str:
    """A JWT-shaped token, never signed: its parts are what is tested."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return f"{b64(json.dumps(header).encode())}.{b64(claims)}.c2ln"


@pytest.mark.parametrize(
    ("header", "more_claims", "message"),
    [
        pytest.param(
            {"alg": "RS256", "kid": ["k"]},
            b"",
            "OIDC token's kid must be a string",
            id="kid-a-list",
        ),
        pytest.param(
            {"alg": "RS256", "kid": {"k": 1}},
            b"",
            "OIDC token's kid must be a string",
            id="kid-an-object",
        ),
        pytest.param(
            # joserfc itself raised TypeError on a crit that lists no names.
            {"alg": "RS256", "kid": "<the issuer's>", "crit": [1]},
            b"",
            "OIDC token signature does not verify",
            id="crit-not-names",
        ),
        pytest.param(
            {"alg": "RS256"},
            b', "x": ' + b"[" * 3000 + b"]" * 3000,
            "invalid token",
            id="claims-nested-too-deep",
        ),
    ],
)
def test_a_malformed_token_naming_the_issuer_is_unauthorized_never_a_500(
    signed: GuardServer,
    oidc_provider: OidcProvider,
    header: dict[str, Any],
    more_claims: bytes,
    message: str,
) -> None:
    if header.get("kid") == "<the issuer's>":
        header = header | {"kid": oidc_provider.jwks()["keys"][0]["kid"]}
    claims = json.dumps({"iss": oidc_provider.issuer}).encode()[:-1] + more_claims + b"}"
    with signed.client(_shaped(header, claims)) as client:
        response = client.get("/v1/agents")
    assert response.status_code == 401, response.text
    assert response.json() == {"error": message, "code": "unauthorized"}


# What each role may do on an agent, lowest first: a role holds those below it.
ROLE_TRIES: list[tuple[str, str, str, dict[str, Any] | None]] = [
    ("viewer", "GET", "/v1/agents/a1", None),
    ("viewer", "GET", "/v1/agents/a1/actions/pending", None),
    ("viewer", "GET", "/v1/agents/a1/grants", None),
    ("viewer", "GET", "/v1/agents/a1/log", None),
    (
        "approver",
        "POST",
        "/v1/agents/a1/grants",
        {"tool": "search", "max_calls": 1, "ttl_secs": 600},
    ),
    ("approver", "POST", "/v1/agents/a1/actions/act-1/approve", {}),
    ("admin", "GET", "/v1/agents/a1/token", None),
    ("admin", "PUT", "/v1/agents/a1/policy", HELD),
    ("admin", "POST", "/v1/agents/a1/actions", {"tool": "search"}),
    ("admin", "POST", "/v1/agents/a1/scars", {"severity": "minor", "reason": "r"}),
]


@pytest.mark.parametrize(
    ("user", "held"),
    [
        ("alice", {"viewer", "approver", "admin"}),
        ("bob", {"viewer", "approver"}),
        ("carol", {"viewer"}),
        ("dave", set()),
    ],
)
def test_each_signed_in_role_does_exactly_what_its_role_allows(
    signed: GuardServer, oidc_provider: OidcProvider, user: str, held: set[str]
) -> None:
    with signed.client(signed.admin_token) as admin:
        assert admin.post("/v1/agents", json={"agent_id": "a1", "policy": HELD}).is_success
        token = admin.get("/v1/agents/a1/token").json()["token"]
    with signed.client(token) as agent:
        assert agent.post("/v1/agents/a1/actions", json={"tool": "search"}).json()["decision"] == (
            "pending_approval"
        )
    with signed.client(oidc_provider.id_token(user)) as person:
        answered = [
            (role, person.request(method, path, json=body))
            for role, method, path, body in ROLE_TRIES
        ]
    for role, response in answered:
        if role in held:
            assert response.is_success, (role, response.request.url, response.text)
        else:
            assert response.status_code == 403, (role, response.request.url, response.text)
            assert response.json()["error"].startswith(f"this endpoint needs the {role} role; ")
