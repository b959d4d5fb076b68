"""Approval expiry through a real guardd: the policy key, the timer that
expires a held action with nobody asking, long-polls woken by it, and an
action that fell due while guardd was down, expired before any request."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest

from tests.guardd.conftest import POLICY, Api, assert_error, ok


def timed(secs: Any, **rule: Any) -> dict[str, Any]:
    tools = {
        "search": {"cost": 1},
        "send_email": {"cost": 5, "requires_approval": True, **rule},
    }
    return {**POLICY, "tools": tools, "approval_timeout_secs": secs}


def seconds(ts: str) -> float:
    return datetime.fromisoformat(ts).timestamp()


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        pytest.param(
            {**POLICY, "approval_timeout_secs": 0},
            "$.policy.approval_timeout_secs: must be greater than 0",
            id="zero",
        ),
        pytest.param(
            {**POLICY, "approval_timeout_secs": "60"},
            "$.policy.approval_timeout_secs: must be a number",
            id="string",
        ),
        pytest.param(
            {**POLICY, "tools": {"a": {"approval_timeout_secs": -1}}},
            "$.policy.tools.a.approval_timeout_secs: must not be negative",
            id="rule-negative",
        ),
    ],
)
def test_a_bad_approval_timeout_is_400_naming_the_key(
    api: Api, policy: dict[str, Any], message: str
) -> None:
    body = {"agent_id": api.new_id(), "policy": policy}
    assert assert_error(api.admin.post("/v1/agents", json=body), 400, "bad_request")["error"] == (
        message
    )


def test_the_timer_expires_a_held_action_and_wakes_its_long_poll(api: Api) -> None:
    agent = api.create(policy=timed(1))
    held = ok(agent.act("send_email", input={"to": "ops"}))["action_id"]
    pending = ok(api.admin.get(f"{agent.path}/actions/pending"))["pending"]
    required = api.records(agent)[-1]
    assert required["kind"] == "approval_required"
    expires = seconds(pending[0]["expires_at"])
    assert expires == pytest.approx(seconds(required["ts"]) + 1, abs=1e-6)
    started = time.monotonic()
    action = ok(agent.client.get(f"{agent.path}/actions/{held}?wait=20"))
    assert time.monotonic() - started < 5
    assert action["status"] == "denied"
    assert action["reason"] == {"code": "approval_expired", "timeout_secs": 1}
    record = api.records(agent)[-1]
    assert (record["kind"], record["action_id"], record["timeout_secs"]) == (
        "approval_expired",
        held,
        1,
    )
    assert seconds(record["ts"]) >= expires
    status = api.status(agent)
    assert (status["actions_denied"], status["actions_pending"], status["spent"]) == (1, 0, 0)
    assert status["scars"] == []
    body = assert_error(api.approve(agent, held), 409, "invalid_state")
    assert body["error"].startswith(f"action {held} expired at {record['ts']}")


def test_an_action_that_fell_due_while_guardd_was_down_expires_before_any_request(
    fresh_api: Api,
) -> None:
    api = fresh_api
    agent = api.create(policy=timed(600, approval_timeout_secs=1))
    held = ok(agent.act("send_email"))["action_id"]
    api.server.stop()
    time.sleep(1.2)
    api.server.start()
    # The first request of all is an approval: too late, the log already says so.
    body = assert_error(api.approve(agent, held), 409, "invalid_state")
    assert f"action {held} expired at " in body["error"]
    records = api.records(agent)
    assert [r["kind"] for r in records[-2:]] == ["approval_required", "approval_expired"]
    assert records[-1]["timeout_secs"] == 1
    assert seconds(records[-1]["ts"]) >= seconds(records[-2]["ts"]) + 1
    assert ok(api.admin.get(f"{agent.path}/actions/{held}"))["status"] == "denied"
