"""Withdrawing a pending action: ``POST .../actions/:id/cancel`` (own agent or
admin) writes ``action_cancelled``; the action is never charged, adds no scar,
wakes long-polls, and a late approve or reject says it was cancelled."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.guardd.conftest import Agent, Api, assert_error, ok


def held(api: Api) -> tuple[Agent, str]:
    agent = api.create()
    decision = ok(agent.act("send_email", input={"to": "ops"}))
    assert decision["decision"] == "pending_approval"
    return agent, decision["action_id"]


def cancel(who: Any, agent: Agent, action_id: str, **body: Any) -> Any:
    return who.post(f"{agent.path}/actions/{action_id}/cancel", json=body)


def test_agent_cancels_its_pending_action_and_nothing_else_changes(api: Api) -> None:
    agent, action_id = held(api)
    before = api.status(agent)
    action = ok(cancel(agent.client, agent, action_id, reason="the user gave up"))
    assert action["status"] == "cancelled"
    assert action["reason"] == {"code": "cancelled", "by": "agent", "reason": "the user gave up"}
    assert action["cost"] == 5
    after = api.status(agent)
    assert after["actions_pending"] == before["actions_pending"] - 1 == 0
    for key in ("spent", "remaining", "scars", "scar_score", "actions_allowed", "actions_denied"):
        assert after[key] == before[key], key
    record = api.records(agent)[-1]
    assert {k: record[k] for k in ("kind", "action_id", "by", "reason")} == {
        "kind": "action_cancelled",
        "action_id": action_id,
        "by": "agent",
        "reason": "the user gave up",
    }
    assert ok(api.admin.get(f"{agent.path}/actions/pending"))["pending"] == []


def test_admin_cancel_without_a_reason_is_logged_by_admin(api: Api) -> None:
    agent, action_id = held(api)
    action = ok(cancel(api.admin, agent, action_id))
    assert action["reason"] == {"code": "cancelled", "by": "admin"}
    record = api.records(agent)[-1]
    assert record["kind"] == "action_cancelled"
    assert record["by"] == "admin"
    assert "reason" not in record
    assert ok(agent.client.get(f"{agent.path}/actions/{action_id}"))["status"] == "cancelled"


@pytest.mark.parametrize("step", ["approve", "reject"])
def test_a_decision_after_cancel_is_409_saying_it_was_cancelled_and_when(
    api: Api, step: str
) -> None:
    agent, action_id = held(api)
    ok(cancel(agent.client, agent, action_id, reason="gone"))
    ts = api.records(agent)[-1]["ts"]
    answer = api.approve(agent, action_id) if step == "approve" else api.reject(agent, action_id)
    body = assert_error(answer, 409, "invalid_state")
    assert body["error"] == (
        f"action {action_id} was cancelled by agent at {ts}: gone; it is no longer pending"
    )
    status = api.status(agent)
    assert status["spent"] == 0
    assert status["actions_allowed"] == status["actions_denied"] == 0


def test_approval_collision_says_who_decided_what(api: Api) -> None:
    agent, action_id = held(api)
    ok(api.reject(agent, action_id, approver="bob", reason="too risky"))
    ts = api.records(agent)[-1]["ts"]
    body = assert_error(api.approve(agent, action_id), 409, "invalid_state")
    assert body["error"] == (
        f"action {action_id} was rejected by bob at {ts}: too risky; it is no longer pending"
    )


def test_cancel_of_an_action_that_is_not_pending_is_409(api: Api) -> None:
    agent = api.create()
    allowed = ok(agent.act("search"))["action_id"]
    assert_error(cancel(agent.client, agent, allowed), 409, "invalid_state")
    agent2, action_id = held(api)
    ok(api.approve(agent2, action_id))
    body = assert_error(cancel(agent2.client, agent2, action_id), 409, "invalid_state")
    assert "was approved by alice" in body["error"]
    ok(cancel(agent2.client, agent2, ok(agent2.act("send_email"))["action_id"]))
    assert_error(cancel(agent2.client, agent2, "act-2"), 409, "invalid_state")
    assert_error(cancel(agent2.client, agent2, "act-9"), 404, "unknown_action")


def test_cancel_refuses_another_agents_token_and_a_bad_body(api: Api) -> None:
    agent, action_id = held(api)
    other = api.create()
    assert_error(cancel(other.client, agent, action_id), 403, "forbidden")
    assert_error(cancel(agent.client, agent, action_id, reason=""), 400, "bad_request")
    assert_error(cancel(agent.client, agent, action_id, why="x"), 400, "bad_request")
    assert ok(api.admin.get(agent.path))["actions_pending"] == 1


def test_cancel_wakes_a_long_poll_at_once(api: Api) -> None:
    agent, action_id = held(api)
    seen: dict[str, Any] = {}

    def poll() -> None:
        started = time.monotonic()
        seen["action"] = ok(agent.client.get(f"{agent.path}/actions/{action_id}?wait=30"))
        seen["took"] = time.monotonic() - started

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.3)
    ok(cancel(api.admin, agent, action_id))
    thread.join(10)
    assert seen["action"]["status"] == "cancelled"
    assert seen["took"] < 5
