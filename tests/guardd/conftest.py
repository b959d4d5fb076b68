"""Fixtures for the guardd acceptance tests: a real guardd subprocess, spoken to over HTTP.

Most modules share one server (``api``, module scope) and keep out of each
other's way by giving every agent its own ID. Tests that stop, tamper with or
break a server start their own.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from tests.support.server import GuardServer

POLICY: dict[str, Any] = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {
        "search": {"cost": 1},
        "send_email": {"cost": 5, "requires_approval": True},
    },
}

_ids = itertools.count(1)


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The response is the error ``code`` with HTTP ``status`` and the ``{error, code}`` body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error", "code"}, body
    assert body["code"] == code, body
    assert isinstance(body["error"], str)
    assert body["error"]
    assert "Traceback" not in body["error"]
    return body


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()


def number_texts(response: httpx.Response) -> Any:
    """The JSON body with every number kept as the text the server wrote."""
    return json.loads(response.text, parse_int=str, parse_float=str)


class Session:
    """Requests with one caller's credentials over a shared ``httpx.Client``
    (building a client per caller would set up TLS, which we never use, for
    every caller)."""

    def __init__(
        self, http: httpx.Client, token: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        self.http = http
        self.headers = dict(headers or {})
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {**self.headers, **kwargs.pop("headers", {})}
        return self.http.request(method, path, headers=headers, **kwargs)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", path, **kwargs)


@attrs.define
class Agent:
    agent_id: str
    token: str
    client: Session  # authenticated with the agent's own token

    @property
    def path(self) -> str:
        return f"/v1/agents/{self.agent_id}"

    def act(self, tool: str, **fields: Any) -> httpx.Response:
        return self.client.post(f"{self.path}/actions", json={"tool": tool, **fields})


class Api:
    """A running guardd, an admin client, and helpers that create agents."""

    def __init__(self, server: GuardServer) -> None:
        self.server = server
        self.http = httpx.Client(base_url=server.url, timeout=30.0)
        self.admin = self.client(server.admin_token)

    def client(self, token: str | None = None, headers: dict[str, str] | None = None) -> Session:
        return Session(self.http, token, headers)

    def new_id(self, prefix: str = "agent") -> str:
        return f"{prefix}-{next(_ids)}"

    def create(self, agent_id: str | None = None, policy: dict[str, Any] | None = None) -> Agent:
        agent_id = agent_id or self.new_id()
        body = {"agent_id": agent_id, "policy": POLICY if policy is None else policy}
        created = ok(self.admin.post("/v1/agents", json=body), 201)
        token = created["token"]
        return Agent(agent_id, token, self.client(token))

    def approve(self, agent: Agent, action_id: str, **fields: Any) -> httpx.Response:
        body = {"approver": "alice", **fields}
        return self.admin.post(f"{agent.path}/actions/{action_id}/approve", json=body)

    def reject(self, agent: Agent, action_id: str, **fields: Any) -> httpx.Response:
        body = {"approver": "alice", "reason": "not now", **fields}
        return self.admin.post(f"{agent.path}/actions/{action_id}/reject", json=body)

    def status(self, agent: Agent) -> dict[str, Any]:
        return ok(self.admin.get(agent.path))  # type: ignore[no-any-return]

    def records(self, agent: Agent) -> list[dict[str, Any]]:
        return ok(self.admin.get(f"{agent.path}/log"))["records"]  # type: ignore[no-any-return]

    def log_lines(self, agent: Agent) -> list[str]:
        """The agent's log file, one string per line (newline left out)."""
        path = self.server.data_dir / "agents" / f"{agent.agent_id}.jsonl"
        return path.read_bytes().decode().splitlines()

    def close(self) -> None:
        self.http.close()


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuardServer]:
    """One guardd for the whole module, on its own data directory."""
    server = GuardServer(tmp_path_factory.mktemp("guardd") / "guard-data").start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def api(module_server: GuardServer) -> Iterator[Api]:
    api = Api(module_server)
    try:
        yield api
    finally:
        api.close()


@contextlib.contextmanager
def serving(data_dir: Path, **options: Any) -> Iterator[Api]:
    """A guardd started on ``data_dir`` (``GuardServer``'s options) and its
    Api, both ended on leaving."""
    server = GuardServer(data_dir, **options).start()
    api = Api(server)
    try:
        yield api
    finally:
        api.close()
        server.kill()


@pytest.fixture
def fresh_api(tmp_path: Path) -> Iterator[Api]:
    """A guardd of this test's own, for tests that stop, restart or break it."""
    with serving(tmp_path / "guard-data") as api:
        yield api
