"""Fixtures for the console tests: a headless Chromium and helpers around a real guardd."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright

from tests.support.server import GuardServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
]
WAIT_MS = 10_000  # one refresh is 2 s; every wait in these tests is bounded by this or less
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"

APPROVAL_POLICY: dict[str, Any] = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {
        "send_email": {"cost": 5, "requires_approval": True},
        "web_search": {"cost": 1},
    },
    "default": None,
}

expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"the console tests need Chromium at {CHROMIUM} (make test installs it)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (own sessionStorage) at desktop width.

    Uncaught JavaScript errors of the console fail the test.
    """
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    try:
        yield page
    finally:
        context.close()
    assert errors == [], f"JavaScript errors in the console: {errors}"


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., GuardServer]]:
    """Start guardd with extra environment; every server is killed afterwards."""
    servers: list[GuardServer] = []

    def make(name: str = "guard-data", env: dict[str, str] | None = None) -> GuardServer:
        server = GuardServer(tmp_path / name, env=env)
        servers.append(server)
        return server.start()

    yield make
    for server in servers:
        server.kill()


def admin(server: GuardServer) -> httpx.Client:
    return server.client(server.admin_token)


def create_agent(server: GuardServer, agent_id: str, policy: dict[str, Any] | None = None) -> str:
    """Create an agent; returns its agent token."""
    with admin(server) as client:
        response = client.post(
            "/v1/agents", json={"agent_id": agent_id, "policy": policy or APPROVAL_POLICY}
        )
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


def request_action(
    server: GuardServer,
    agent_id: str,
    token: str,
    tool: str,
    tool_input: Any = None,
    cost: Any = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"tool": tool, "input": tool_input}
    if cost is not None:
        body["cost"] = cost
    with server.client(token) as client:
        response = client.post(f"/v1/agents/{agent_id}/actions", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def agent_status(server: GuardServer, agent_id: str) -> dict[str, Any]:
    with admin(server) as client:
        response = client.get(f"/v1/agents/{agent_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def log_records(server: GuardServer, agent_id: str) -> list[dict[str, Any]]:
    with admin(server) as client:
        response = client.get(f"/v1/agents/{agent_id}/log")
    assert response.status_code == 200, response.text
    return list(response.json()["records"])


class WaitingAgent(threading.Thread):
    """An agent that asks for an approval-required tool, then long-polls its action."""

    def __init__(
        self, server: GuardServer, agent_id: str, token: str, tool: str, tool_input: Any = None
    ) -> None:
        super().__init__(daemon=True)
        self.server, self.agent_id, self.token = server, agent_id, token
        self.tool, self.tool_input = tool, tool_input
        self.requested = threading.Event()
        self.decision: dict[str, Any] | None = None
        self.action: dict[str, Any] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.server.client(self.token) as client:
                response = client.post(
                    f"/v1/agents/{self.agent_id}/actions",
                    json={"tool": self.tool, "input": self.tool_input},
                )
                self.decision = response.json()
                self.requested.set()
                action_id = self.decision["action_id"]
                for _ in range(2):  # each poll returns within 30 s
                    response = client.get(
                        f"/v1/agents/{self.agent_id}/actions/{action_id}", params={"wait": 30}
                    )
                    self.action = response.json()
                    if self.action.get("status") != "pending_approval":
                        break
        except BaseException as err:  # reported by the test, not lost in the thread
            self.error = err
            self.requested.set()

    def result(self, timeout: float = 30.0) -> dict[str, Any]:
        self.join(timeout)
        assert not self.is_alive(), "the waiting agent did not finish"
        if self.error is not None:
            raise self.error
        assert self.action is not None
        return self.action


class Console:
    """The operator page, driven through its data-testid attributes."""

    def __init__(self, page: Page, server: GuardServer) -> None:
        self.page = page
        self.server = server

    def testid(self, name: str) -> Locator:
        return self.page.get_by_test_id(name)

    def open(self) -> Console:
        self.page.goto(f"{self.server.url}/")
        return self

    def sign_in(self, token: str | None = None) -> Console:
        self.testid("token-input").fill(token or self.server.admin_token)
        self.testid("token-submit").click()
        return self

    def open_signed_in(self, operator: str | None = "alice") -> Console:
        self.open().sign_in()
        expect(self.testid("agents-view")).to_be_visible()
        if operator is not None:
            self.testid("operator-name").fill(operator)
        return self

    def agent(self, agent_id: str) -> Locator:
        return self.page.locator(f'[data-testid="agent"][data-agent-id="{agent_id}"]')

    def pending(self, agent_id: str, action_id: str) -> Locator:
        return self.page.locator(
            f'[data-testid="pending-item"][data-agent-id="{agent_id}"]'
            f'[data-action-id="{action_id}"]'
        )

    def show_pending(self) -> None:
        self.testid("nav-pending").click()
        expect(self.testid("pending-view")).to_be_visible()

    def show_agents(self) -> None:
        self.testid("nav-agents").click()
        expect(self.testid("agents-view")).to_be_visible()


@pytest.fixture
def console(page: Page, guard_server: GuardServer) -> Console:
    return Console(page, guard_server)
