"""Every route of guardd/app.py x every kind of caller gives exactly the status
docs/api.md ("Authentication") says:

- missing, garbage, or minted with another token.key: 401 ``unauthorized``;
- an agent token on an admin-only endpoint, or on another agent's path
  (a well-formed token of an agent that does not exist included): 403 ``forbidden``;
- a token of an agent that does not exist, on that agent's own path: 404 ``not_found``
  (on an admin-only endpoint: 403, an agent token never reaches those);
- the admin, and an agent on its own agent-or-admin endpoints: success;
- an endpoint that acts on the token's own agent (the Claude Code hook): any
  valid agent token succeeds, the admin token is 403 ``forbidden``, a token
  of an agent that does not exist 404 ``not_found``;
- the unauthenticated endpoints answer whatever the Authorization header says.

One server for the module; each case that may succeed gets a fresh agent, so
no case depends on what another did.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from agents_runtime.log.keys import agent_token
from guardd.__main__ import build
from guardd.app import create_app
from guardd.config import parse_settings
from tests.reliability.support import ok_json, policy
from tests.support.server import GuardServer

PUBLIC, ADMIN_ONLY, AGENT_OR_ADMIN = "public", "admin-only", "agent-or-admin"
TOKEN_AGENT = "the token's agent"  # no agent in the path; agent tokens only
GHOST = "ghost-agent"  # never created
BYSTANDER = "bystander"
SHARED = "owner-shared"  # the agent of every case that must fail
FLEET = "fleet"  # the named policy the matrix stores first

NO_TOKEN = "none"
GARBAGE = "garbage"
ADMIN = "admin"
OWN = "own agent"
OTHER = "other agent"
NONEXISTENT = "non-existent agent"
FOREIGN_KEY = "other token.key"
CALLERS = [NO_TOKEN, GARBAGE, ADMIN, OWN, OTHER, NONEXISTENT, FOREIGN_KEY]


@attrs.frozen
class Route:
    method: str
    rule: str  # as written in guardd/app.py
    access: str
    body: Any = None
    success: int = 200

    def path(self, agent_id: str) -> str:
        pending_only = self.rule.endswith(("approve", "reject", "cancel"))
        return (
            self.rule.replace("<agent_id>", agent_id)
            .replace("<action_id>", "act-2" if pending_only else "act-1")
            .replace("<name>", "app.js")
            .replace("<grant_id>", "grt-1")
            .replace("<token_id>", "tok-never-issued")
            .replace("<credential_id>", "never-registered")
            .replace("<policy_name>", FLEET)
        )


ROUTES = [
    Route("GET", "/healthz", PUBLIC),
    Route("GET", "/readyz", PUBLIC),
    Route("GET", "/v1/public-key", PUBLIC),
    Route("GET", "/v1/openapi.json", PUBLIC),
    Route("GET", "/v1/auth/config", PUBLIC, success=404),  # no single sign-on configured
    Route("GET", "/", PUBLIC),
    Route("GET", "/console/<name>", PUBLIC),
    Route("GET", "/metrics", ADMIN_ONLY),
    Route("POST", "/v1/agents", ADMIN_ONLY, {"policy": policy()}, 201),
    Route("GET", "/v1/agents", ADMIN_ONLY),
    Route("GET", "/v1/agents/<agent_id>", AGENT_OR_ADMIN),
    Route("GET", "/v1/agents/<agent_id>/token", ADMIN_ONLY),
    Route("GET", "/v1/agents/<agent_id>/policy", AGENT_OR_ADMIN),
    Route("PUT", "/v1/agents/<agent_id>/policy", ADMIN_ONLY, policy()),
    Route("POST", "/v1/agents/<agent_id>/actions", AGENT_OR_ADMIN, {"tool": "work"}),
    Route("GET", "/v1/agents/<agent_id>/actions/pending", ADMIN_ONLY),
    Route("GET", "/v1/agents/<agent_id>/actions/<action_id>", AGENT_OR_ADMIN),
    Route(
        "POST",
        "/v1/agents/<agent_id>/actions/<action_id>/outcome",
        AGENT_OR_ADMIN,
        {"status": "success"},
    ),
    Route(
        "POST",
        "/v1/agents/<agent_id>/actions/<action_id>/approve",
        ADMIN_ONLY,
        {"approver": "op"},
    ),
    Route(
        "POST",
        "/v1/agents/<agent_id>/actions/<action_id>/reject",
        ADMIN_ONLY,
        {"approver": "op", "reason": "no"},
    ),
    Route("POST", "/v1/agents/<agent_id>/actions/<action_id>/cancel", AGENT_OR_ADMIN, {}),
    Route(
        "POST",
        "/v1/agents/<agent_id>/grants",
        ADMIN_ONLY,
        {"tool": "send", "by": "op", "max_calls": 1, "ttl_secs": 60},
        201,
    ),
    Route("GET", "/v1/agents/<agent_id>/grants", ADMIN_ONLY),
    Route("POST", "/v1/agents/<agent_id>/grants/<grant_id>/revoke", ADMIN_ONLY, {"by": "op"}),
    Route("POST", "/v1/agents/<agent_id>/scars", ADMIN_ONLY, {"severity": "minor", "reason": "r"}),
    Route("POST", "/v1/agents/<agent_id>/terminate", ADMIN_ONLY, {"reason": "r", "by": "op"}),
    # The matrix's agents have no shadow policy: reading or clearing one is 404.
    Route("PUT", "/v1/agents/<agent_id>/shadow", ADMIN_ONLY, policy()),
    Route("GET", "/v1/agents/<agent_id>/shadow", ADMIN_ONLY, success=404),
    Route("DELETE", "/v1/agents/<agent_id>/shadow", ADMIN_ONLY, success=404),
    # In this order: the admin's DELETE removes the policy the others read.
    Route("GET", "/v1/policies", ADMIN_ONLY),
    Route("PUT", "/v1/policies/<policy_name>", ADMIN_ONLY, policy()),
    Route("GET", "/v1/policies/<policy_name>", ADMIN_ONLY),
    Route("DELETE", "/v1/policies/<policy_name>", ADMIN_ONLY),
    Route("GET", "/v1/agents/<agent_id>/log", ADMIN_ONLY),
    Route("GET", "/v1/agents/<agent_id>/verify", ADMIN_ONLY),
    Route("GET", "/v1/me", ADMIN_ONLY),
    Route("POST", "/v1/operators/tokens", ADMIN_ONLY, {"name": "bot", "role": "viewer"}, 201),
    Route("GET", "/v1/operators/tokens", ADMIN_ONLY),
    Route("POST", "/v1/operators/tokens/<token_id>/revoke", ADMIN_ONLY, success=404),
    # The admin token is no person: it registers no passkey and signs nothing.
    Route("POST", "/v1/operators/passkeys/options", ADMIN_ONLY, success=403),
    Route(
        "POST",
        "/v1/operators/passkeys",
        ADMIN_ONLY,
        {"id": "x", "rawId": "x", "type": "public-key", "response": {}},
        success=403,
    ),
    Route("GET", "/v1/operators/passkeys", ADMIN_ONLY),
    Route("POST", "/v1/operators/passkeys/<credential_id>/revoke", ADMIN_ONLY, success=404),
    Route(
        "GET",
        "/v1/agents/<agent_id>/actions/<action_id>/approval-options",
        ADMIN_ONLY,
        success=403,
    ),
    Route(
        "POST",
        "/v1/hooks/claude-code",
        TOKEN_AGENT,
        {"hook_event_name": "PreToolUse", "tool_name": "work", "tool_use_id": "toolu_auth"},
    ),
]


def expected_on_existing_agent(route: Route, caller: str) -> int:
    """The status for ``caller`` on ``route`` of an agent that exists."""
    if route.access == PUBLIC:
        return route.success
    if caller in (NO_TOKEN, GARBAGE, FOREIGN_KEY):
        return 401
    if route.access == TOKEN_AGENT:
        return {ADMIN: 403, NONEXISTENT: 404}.get(caller, route.success)
    if caller == ADMIN:
        return route.success
    if route.access == AGENT_OR_ADMIN and caller == OWN and "<agent_id>" in route.rule:
        return route.success
    return 403


def expected_on_missing_agent(route: Route, caller: str) -> int:
    """The status on the path of an agent that does not exist; ``NONEXISTENT``
    is that agent's own token here."""
    if caller in (NO_TOKEN, GARBAGE, FOREIGN_KEY):
        return 401
    if caller == ADMIN or (caller == NONEXISTENT and route.access == AGENT_OR_ADMIN):
        return 404
    return 403


CODES = {401: "unauthorized", 403: "forbidden", 404: "not_found"}

EXISTING = [
    pytest.param(
        route,
        caller,
        expected_on_existing_agent(route, caller),
        id=f"{route.method} {route.rule} [{caller}]",
    )
    for route, caller in itertools.product(ROUTES, CALLERS)
]
MISSING = [
    pytest.param(
        route,
        caller,
        expected_on_missing_agent(route, caller),
        id=f"{route.method} {route.rule} [{caller}]",
    )
    for route, caller in itertools.product(ROUTES, CALLERS)
    # There, the agent's own token is the non-existent agent's token.
    if "<agent_id>" in route.rule and caller != OWN
]


class Matrix:
    def __init__(self, server: GuardServer) -> None:
        self.server = server
        self.admin = server.client(server.admin_token)
        self.token_key = (server.data_dir / "keys" / "token.key").read_bytes()
        self.foreign_key = os.urandom(32)
        self.bystander_token = self.create(BYSTANDER)
        self.create(SHARED)
        self.count = 0

    def create(self, agent_id: str) -> str:
        """A fresh agent with act-1 allowed, act-2 pending and grant grt-1; its token."""
        body = {"agent_id": agent_id, "policy": policy()}
        token: str = ok_json(self.admin.post("/v1/agents", json=body), 201)["token"]
        for tool, decision in (("work", "allowed"), ("send", "pending_approval")):
            answer = ok_json(self.admin.post(f"/v1/agents/{agent_id}/actions", json={"tool": tool}))
            assert answer["decision"] == decision
        grant = {"tool": "send", "by": "op", "max_calls": 1, "ttl_secs": 600}
        ok_json(self.admin.post(f"/v1/agents/{agent_id}/grants", json=grant), 201)
        return token

    def fresh_id(self) -> str:
        self.count += 1
        return f"owner-{self.count}"

    def header(self, caller: str, own: str) -> dict[str, str]:
        token = {
            NO_TOKEN: None,
            GARBAGE: "not-a-token",
            ADMIN: self.server.admin_token,
            OWN: agent_token(self.token_key, own),
            OTHER: self.bystander_token,
            NONEXISTENT: agent_token(self.token_key, GHOST),
            FOREIGN_KEY: agent_token(self.foreign_key, own),
        }[caller]
        return {} if token is None else {"Authorization": f"Bearer {token}"}

    def call(self, route: Route, caller: str, path_agent: str, own: str) -> httpx.Response:
        body = route.body
        if (route.method, route.rule) == ("POST", "/v1/agents"):
            body = dict(body, agent_id=self.fresh_id())
        return httpx.request(
            route.method,
            self.server.url + route.path(path_agent),
            json=body,
            headers=self.header(caller, own),
            timeout=30.0,
        )


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    server = GuardServer(tmp_path_factory.mktemp("auth") / "guard-data").start()
    try:
        matrix = Matrix(server)
        yield matrix
        matrix.admin.close()
    finally:
        server.kill()


def _assert_status(answer: httpx.Response, expected: int) -> None:
    assert answer.status_code == expected, answer.text
    if expected in CODES:
        assert answer.json()["code"] == CODES[expected]
    if expected == 401:
        assert answer.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(("route", "caller", "expected"), EXISTING)
def test_caller_on_an_existing_agent(
    matrix: Matrix, route: Route, caller: str, expected: int
) -> None:
    # A case that may change the agent gets its own; the others share one.
    agent = SHARED
    if expected < 300 and "<agent_id>" in route.rule:
        agent = matrix.fresh_id()
        matrix.create(agent)
    _assert_status(matrix.call(route, caller, agent, own=agent), expected)


@pytest.mark.parametrize(("route", "caller", "expected"), MISSING)
def test_caller_on_an_agent_that_does_not_exist(
    matrix: Matrix, route: Route, caller: str, expected: int
) -> None:
    _assert_status(matrix.call(route, caller, GHOST, own=GHOST), expected)


def test_the_matrix_covers_every_route_of_the_app(tmp_path: Path) -> None:
    settings = parse_settings(
        ["--data-dir", str(tmp_path / "guard-data")], env={"GUARD_ADMIN_TOKEN": "t" * 32}
    )
    guard, _, _ = build(settings)
    app = create_app(guard)
    served = {
        (method, rule.rule)
        for rule in app.url_map.iter_rules()
        for method in rule.methods or ()
        if method not in ("HEAD", "OPTIONS")
    }
    assert served == {(route.method, route.rule) for route in ROUTES}
