"""Grants over HTTP: POST/GET .../grants and .../grants/:id/revoke (admin),
draws on held requests, what is left, and every bad body a 400."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from audit.cli import main as audit
from tests.guardd.conftest import Agent, Api, assert_error, ok

POLICY = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {
        "search": {"cost": 1},
        "send_email": {"cost": 2, "requires_approval": True},
        "pay": {"requires_approval": True},
    },
}


def issue(api: Api, agent: Agent, **fields: Any) -> Any:
    body = {"tool": "send_email", "by": "alice", "ttl_secs": 600} | fields
    return api.admin.post(f"{agent.path}/grants", json=body)


def test_a_grant_lets_held_calls_through_until_spent_and_the_log_says_which(api: Api) -> None:
    agent = api.create(policy=POLICY)
    grant = ok(issue(api, agent, max_calls=2, note="newsletter run"), 201)
    assert (grant["grant_id"], grant["calls_left"], grant["status"]) == ("grt-1", 2, "active")
    for n in (1, 2):
        decision = ok(agent.act("send_email", input={"to": f"u{n}"}))
        assert (decision["decision"], decision["grant_id"]) == ("allowed", "grt-1")
        assert len(decision["receipt"]) == 2
    assert ok(agent.act("send_email"))["decision"] == "pending_approval"
    [listed] = ok(api.admin.get(f"{agent.path}/grants"))["grants"]
    assert (listed["calls_used"], listed["calls_left"], listed["cost_used"]) == (2, 0, 4)
    assert listed["status"] == "used_up"
    records = api.records(agent)
    issued = next(r for r in records if r["kind"] == "grant_issued")
    assert (issued["by"], issued["note"], issued["max_calls"]) == ("alice", "newsletter run", 2)
    draws = [r["grant_id"] for r in records if r["kind"] == "action_allowed"]
    assert draws == ["grt-1", "grt-1"]
    assert ok(agent.client.get(f"{agent.path}/actions/act-1"))["grant_id"] == "grt-1"


def test_a_cost_bound_and_an_input_match(api: Api) -> None:
    agent = api.create(policy=POLICY)
    ok(issue(api, agent, tool="pay", max_cost=10, input_match={"to": "acme"}), 201)
    assert ok(agent.act("pay", input={"to": "acme", "ref": 1}, cost=7))["grant_id"] == "grt-1"
    assert ok(agent.act("pay", input={"to": "evil"}, cost=1))["decision"] == "pending_approval"
    assert ok(agent.act("pay", input={"to": "acme"}, cost=4))["decision"] == "pending_approval"
    assert ok(agent.act("pay", input={"to": "acme"}, cost=3))["grant_id"] == "grt-1"
    [listed] = ok(api.admin.get(f"{agent.path}/grants"))["grants"]
    assert (listed["cost_used"], listed["cost_left"]) == (10, 0)


def test_revoke_stops_draws_and_is_logged(api: Api) -> None:
    agent = api.create(policy=POLICY)
    ok(issue(api, agent, max_calls=5), 201)
    url = f"{agent.path}/grants/grt-1/revoke"
    revoked = ok(api.admin.post(url, json={"by": "bob", "reason": "done"}))
    assert (revoked["status"], revoked["revoked_by"], revoked["revoke_reason"]) == (
        "revoked",
        "bob",
        "done",
    )
    assert ok(agent.act("send_email"))["decision"] == "pending_approval"
    assert api.records(agent)[-3]["kind"] == "grant_revoked"
    assert_error(api.admin.post(url, json={"by": "bob"}), 409, "invalid_state")
    ghost = f"{agent.path}/grants/grt-7/revoke"
    assert_error(api.admin.post(ghost, json={"by": "bob"}), 404, "not_found")


def test_expires_at_is_honoured(api: Api) -> None:
    agent = api.create(policy=POLICY)
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    grant = ok(issue(api, agent, max_calls=1, ttl_secs=None, expires_at=soon), 201)
    assert grant["expires_at"].endswith("Z")
    assert datetime.fromisoformat(grant["expires_at"]) == datetime.fromisoformat(soon)


def test_grants_are_admin_only(api: Api) -> None:
    agent = api.create(policy=POLICY)
    body = {"tool": "send_email", "by": "me", "max_calls": 9, "ttl_secs": 60}
    assert_error(agent.client.post(f"{agent.path}/grants", json=body), 403, "forbidden")
    assert_error(agent.client.get(f"{agent.path}/grants"), 403, "forbidden")
    revoke = f"{agent.path}/grants/grt-1/revoke"
    assert_error(agent.client.post(revoke, json={"by": "me"}), 403, "forbidden")


def test_a_terminated_agent_takes_no_grant(api: Api) -> None:
    agent = api.create(policy=POLICY)
    ok(api.admin.post(f"{agent.path}/terminate", json={"reason": "done", "by": "op"}))
    assert_error(issue(api, agent, max_calls=1), 409, "invalid_state")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param({}, "$: a grant needs a bound: max_calls, max_cost or both", id="no-bound"),
        pytest.param(
            {"max_calls": 1, "ttl_secs": None},
            "$: a grant needs an expiry: ttl_secs or expires_at, not both",
            id="no-expiry",
        ),
        pytest.param(
            {"max_calls": 1, "expires_at": "2099-01-01T00:00:00Z"},
            "$: a grant needs an expiry: ttl_secs or expires_at, not both",
            id="both-expiries",
        ),
        pytest.param(
            {"max_calls": 1, "ttl_secs": None, "expires_at": "2001-01-01T00:00:00Z"},
            "$.expires_at: 2001-01-01T00:00:00.000000Z is not in the future",
            id="past",
        ),
        pytest.param(
            {"max_calls": 1, "ttl_secs": None, "expires_at": "tomorrow"},
            "$.expires_at: must be an ISO 8601 time with its offset, e.g. 2026-01-01T12:00:00Z",
            id="not-a-time",
        ),
        pytest.param(
            {"max_calls": 0}, "$.max_calls: must be a whole number from 1 to", id="zero-calls"
        ),
        pytest.param({"max_cost": -1}, "$.max_cost: must not be negative", id="negative-cost"),
        pytest.param({"max_calls": 1, "ttl_secs": 0}, "$.ttl_secs: must be a number", id="ttl"),
        pytest.param(
            {"max_calls": 1, "input_match": ["to"]},
            "$.input_match: must be an object",
            id="match-not-object",
        ),
        pytest.param(
            {"max_calls": 1, "by": "system"},
            '$.by: "system" is reserved for automatic terminations',
            id="system",
        ),
        pytest.param({"max_calls": 1, "tool": ""}, "$.tool: tool must be 1 to", id="tool"),
        pytest.param({"max_calls": 1, "extra": 1}, "extra", id="unknown-key"),
    ],
)
def test_bad_grant_bodies_are_400_saying_why(
    api: Api, fields: dict[str, Any], message: str
) -> None:
    agent = api.create(policy=POLICY)
    body = assert_error(issue(api, agent, **fields), 400, "bad_request")
    assert message in body["error"], body


def test_audit_replay_checks_every_draw_of_a_log_written_over_http(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = api.create(policy=POLICY)
    ok(issue(api, agent, max_calls=1), 201)
    ok(agent.act("send_email"))
    ok(agent.act("send_email"))
    log = api.server.data_dir / "agents" / f"{agent.agent_id}.jsonl"
    public_key = ok(api.client().get("/v1/public-key"))["public_key"]
    assert audit(["replay", str(log), "--public-key", public_key]) == 0
    assert capsys.readouterr().out.startswith("OK: every record is what")
