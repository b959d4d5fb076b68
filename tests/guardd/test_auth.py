"""The authentication matrix of docs/api.md, "Authentication"."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import httpx
import pytest

from tests.guardd.conftest import POLICY, Agent, Api, Session, assert_error, ok


@attrs.frozen
class Endpoint:
    method: str
    path: str  # "{id}" is the agent ID
    body: Callable[[Api], Any] | None = None
    admin_only: bool = True
    ok_status: int = 200

    @property
    def per_agent(self) -> bool:
        return "{id}" in self.path

    def call(self, api: Api, client: Session, agent_id: str) -> httpx.Response:
        body = self.body(api) if self.body is not None else None
        path = self.path.format(id=agent_id)
        return client.request(self.method, path, json=body)


def _create_body(api: Api) -> Any:
    return {"agent_id": api.new_id("made"), "policy": POLICY}


ENDPOINTS = [
    pytest.param(Endpoint("POST", "/v1/agents", _create_body, ok_status=201), id="create"),
    pytest.param(Endpoint("GET", "/v1/agents"), id="list"),
    pytest.param(Endpoint("GET", "/v1/agents/{id}/token"), id="token"),
    pytest.param(Endpoint("GET", "/v1/agents/{id}", admin_only=False), id="status"),
    pytest.param(Endpoint("PUT", "/v1/agents/{id}/policy", lambda _: POLICY), id="policy"),
    pytest.param(
        Endpoint("POST", "/v1/agents/{id}/actions", lambda _: {"tool": "search"}, False),
        id="request",
    ),
    pytest.param(Endpoint("GET", "/v1/agents/{id}/actions/act-2", admin_only=False), id="action"),
    pytest.param(
        Endpoint(
            "POST",
            "/v1/agents/{id}/actions/act-2/outcome",
            lambda _: {"status": "success"},
            admin_only=False,
        ),
        id="outcome",
    ),
    pytest.param(Endpoint("GET", "/v1/agents/{id}/actions/pending"), id="pending"),
    pytest.param(
        Endpoint("POST", "/v1/agents/{id}/actions/act-1/approve", lambda _: {"approver": "a"}),
        id="approve",
    ),
    pytest.param(
        Endpoint(
            "POST",
            "/v1/agents/{id}/actions/act-1/reject",
            lambda _: {"approver": "a", "reason": "no"},
        ),
        id="reject",
    ),
    pytest.param(
        Endpoint("POST", "/v1/agents/{id}/scars", lambda _: {"severity": "minor", "reason": "r"}),
        id="scar",
    ),
    pytest.param(
        Endpoint("POST", "/v1/agents/{id}/terminate", lambda _: {"reason": "r", "by": "a"}),
        id="terminate",
    ),
    pytest.param(Endpoint("GET", "/v1/agents/{id}/log"), id="log"),
    pytest.param(Endpoint("GET", "/v1/agents/{id}/verify"), id="verify"),
]
ADMIN_ENDPOINTS = [p for p in ENDPOINTS if p.values[0].admin_only]  # type: ignore[union-attr]
AGENT_ENDPOINTS = [p for p in ENDPOINTS if not p.values[0].admin_only]  # type: ignore[union-attr]
PER_AGENT = [p for p in ENDPOINTS if p.values[0].per_agent]  # type: ignore[union-attr]


def mint(token_key: bytes, agent_id: str) -> str:
    """An agent token minted independently, the way agents_runtime/log/keys.py mints one."""
    mac = hmac.new(token_key, b"agent-token/v1:" + agent_id.encode(), hashlib.sha256).digest()
    return f"agt_{agent_id}." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def _target(api: Api) -> Agent:
    """An agent with a pending action (act-1) and an allowed one (act-2)."""
    agent = api.create()
    assert ok(agent.act("send_email"))["decision"] == "pending_approval"
    assert ok(agent.act("search"))["decision"] == "allowed"
    return agent


@pytest.fixture(scope="module")
def target(api: Api) -> Agent:
    """Shared by the tests whose calls are refused (and so change nothing)."""
    return _target(api)


@pytest.fixture
def fresh_target(api: Api) -> Agent:
    """One per test, for the calls that succeed."""
    return _target(api)


@pytest.fixture(autouse=True)
def _refusals_change_nothing(request: pytest.FixtureRequest, api: Api) -> Iterator[None]:
    if "target" not in request.fixturenames:
        yield
        return
    target: Agent = request.getfixturevalue("target")
    before = api.status(target)
    yield
    assert api.status(target) == before


@pytest.fixture
def token_key(api: Api) -> bytes:
    return (api.server.data_dir / "keys" / "token.key").read_bytes()


def test_tokens_are_derived_from_token_key_as_documented(
    api: Api, target: Agent, token_key: bytes
) -> None:
    assert target.token == mint(token_key, target.agent_id)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_no_token_is_unauthorized(api: Api, target: Agent, endpoint: Endpoint) -> None:
    response = endpoint.call(api, api.client(), target.agent_id)
    assert_error(response, 401, "unauthorized")
    assert response.headers["www-authenticate"] == "Bearer"


GARBAGE = [
    {"Authorization": "Bearer garbage"},
    {"Authorization": "Bearer"},
    {"Authorization": "garbage"},
    {"Authorization": "Basic YWRtaW46YWRtaW4="},
    {"Authorization": "Bearer agt_x.AAAA"},  # agent-shaped, bad mac
    {"Authorization": "Bearer agt_.AAAA"},  # agent-shaped, no agent ID
]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_garbage_token_is_unauthorized(api: Api, target: Agent, endpoint: Endpoint) -> None:
    for headers in GARBAGE:
        response = endpoint.call(api, api.client(headers=headers), target.agent_id)
        assert response.status_code == 401, headers
        assert_error(response, 401, "unauthorized")


def test_admin_token_with_a_changed_character_is_unauthorized(api: Api) -> None:
    token = api.server.admin_token
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    assert_error(api.client(wrong).get("/v1/agents"), 401, "unauthorized")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_admin_token_may_call_every_endpoint(
    api: Api, fresh_target: Agent, endpoint: Endpoint
) -> None:
    ok(endpoint.call(api, api.admin, fresh_target.agent_id), endpoint.ok_status)


@pytest.mark.parametrize("endpoint", AGENT_ENDPOINTS)
def test_own_agent_token_is_ok_where_allowed(
    api: Api, fresh_target: Agent, endpoint: Endpoint
) -> None:
    ok(endpoint.call(api, fresh_target.client, fresh_target.agent_id), endpoint.ok_status)


@pytest.mark.parametrize("endpoint", ADMIN_ENDPOINTS)
def test_agent_token_on_admin_endpoints_is_forbidden(
    api: Api, target: Agent, endpoint: Endpoint
) -> None:
    assert_error(endpoint.call(api, target.client, target.agent_id), 403, "forbidden")


@pytest.mark.parametrize("endpoint", PER_AGENT)
def test_other_agents_token_is_forbidden(api: Api, target: Agent, endpoint: Endpoint) -> None:
    other = api.create()
    assert_error(endpoint.call(api, other.client, target.agent_id), 403, "forbidden")


@pytest.mark.parametrize("endpoint", AGENT_ENDPOINTS)
def test_token_of_a_nonexistent_agent_on_its_own_path_is_not_found(
    api: Api, token_key: bytes, endpoint: Endpoint
) -> None:
    ghost = api.new_id("ghost")
    client = api.client(mint(token_key, ghost))
    assert_error(endpoint.call(api, client, ghost), 404, "not_found")


@pytest.mark.parametrize("endpoint", PER_AGENT)
def test_token_of_a_nonexistent_agent_on_another_path_is_forbidden(
    api: Api, target: Agent, token_key: bytes, endpoint: Endpoint
) -> None:
    client = api.client(mint(token_key, api.new_id("ghost")))
    assert_error(endpoint.call(api, client, target.agent_id), 403, "forbidden")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_token_minted_with_a_different_token_key_is_unauthorized(
    api: Api, target: Agent, endpoint: Endpoint
) -> None:
    forged = mint(secrets.token_bytes(32), target.agent_id)
    response = endpoint.call(api, api.client(forged), target.agent_id)
    assert_error(response, 401, "unauthorized")


def test_admin_on_a_nonexistent_agent_is_not_found(api: Api) -> None:
    ghost = api.new_id("ghost")
    for endpoint in (p.values[0] for p in PER_AGENT):  # type: ignore[union-attr]
        assert_error(endpoint.call(api, api.admin, ghost), 404, "not_found")


def test_bearer_scheme_is_case_insensitive(api: Api, fresh_target: Agent) -> None:
    target = fresh_target
    client = api.client(headers={"Authorization": f"bearer {target.token}"})
    assert ok(client.get(target.path))["agent_id"] == target.agent_id
