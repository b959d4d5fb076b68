"""Long-polling an action: ``GET .../actions/:id?wait=N`` (docs/api.md,
"Parameters")."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from tests.guardd.conftest import Agent, Api, ok

POLICY = {"budget": 100, "scar_limit": 10, "tools": {"send_email": {"requires_approval": True}}}


class Waiter(threading.Thread):
    """Long-polls one action from its own connection, as an agent process would."""

    def __init__(self, api: Api, agent: Agent, action_id: str, wait: float) -> None:
        super().__init__(daemon=True)
        self.url = f"{api.server.url}{agent.path}/actions/{action_id}"
        self.token = agent.token
        self.wait = wait
        self.started = threading.Event()
        self.result: dict[str, Any] | None = None
        self.elapsed = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        try:
            with httpx.Client(headers=headers, timeout=self.wait + 15) as client:
                client.get(self.url)  # connected and authorised before the clock starts
                self.started.set()
                begin = time.monotonic()
                response = client.get(self.url, params={"wait": self.wait})
                self.elapsed = time.monotonic() - begin
                self.result = ok(response)
        except BaseException as exc:  # reported to the test thread
            self.error = exc
            self.started.set()

    def outcome(self) -> dict[str, Any]:
        self.join(self.wait + 20)
        assert not self.is_alive(), "the long-poll did not return"
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


@pytest.fixture
def held(api: Api) -> Agent:
    agent = api.create(policy=POLICY)
    assert ok(agent.act("send_email", input={"to": "bob"}))["decision"] == "pending_approval"
    return agent


def _wait_until_watching(waiter: Waiter) -> None:
    assert waiter.started.wait(10)
    time.sleep(0.2)  # let the long-poll reach the server before the decision


def test_approval_from_another_client_wakes_the_long_poll(api: Api, held: Agent) -> None:
    waiter = Waiter(api, held, "act-1", wait=30)
    waiter.start()
    _wait_until_watching(waiter)
    ok(api.approve(held, "act-1"))
    action = waiter.outcome()
    assert action["status"] == "allowed"
    assert action["action_id"] == "act-1"
    assert waiter.elapsed < 30  # woken by the decision, not by its timeout


def test_rejection_wakes_the_long_poll_with_denied(api: Api, held: Agent) -> None:
    waiter = Waiter(api, held, "act-1", wait=30)
    waiter.start()
    _wait_until_watching(waiter)
    ok(api.reject(held, "act-1"))
    action = waiter.outcome()
    assert action["status"] == "denied"
    assert action["reason"]["code"] == "rejected"
    assert waiter.elapsed < 30


def test_every_waiter_of_an_action_is_woken(api: Api, held: Agent) -> None:
    waiters = [Waiter(api, held, "act-1", wait=30) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        _wait_until_watching(waiter)
    ok(api.approve(held, "act-1"))
    assert [w.outcome()["status"] for w in waiters] == ["allowed"] * 3


def test_long_poll_of_an_unchanged_action_returns_it_after_the_wait(api: Api, held: Agent) -> None:
    begin = time.monotonic()
    response = held.client.get(f"{held.path}/actions/act-1", params={"wait": 0.5})
    assert time.monotonic() - begin >= 0.45
    action = ok(response)
    assert (action["status"], action["input"]) == ("pending_approval", {"to": "bob"})


def test_long_poll_of_a_decided_action_returns_at_once(api: Api, held: Agent) -> None:
    ok(api.approve(held, "act-1"))
    begin = time.monotonic()
    action = ok(held.client.get(f"{held.path}/actions/act-1", params={"wait": 60}))
    assert action["status"] == "allowed"
    assert time.monotonic() - begin < 30


def test_wait_0_returns_at_once(api: Api, held: Agent) -> None:
    action = ok(held.client.get(f"{held.path}/actions/act-1", params={"wait": 0}))
    assert action["status"] == "pending_approval"


def test_agent_polls_its_pending_action_without_wait(api: Api, held: Agent) -> None:
    action = ok(held.client.get(f"{held.path}/actions/act-1"))
    assert action["status"] == "pending_approval"
    ok(api.approve(held, "act-1"))
    assert ok(held.client.get(f"{held.path}/actions/act-1"))["status"] == "allowed"
