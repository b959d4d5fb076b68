"""Approvals by several people: a tool rule's ``approvals_required``
(docs/records.md, ``approval_recorded``), over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from audit.cli import main as audit_main
from tests.guardd.conftest import Agent, Api, Session, assert_error, ok

QUORUM: dict[str, Any] = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {
        "deploy": {"cost": 5, "requires_approval": True, "approvals_required": 2},
        "search": {"cost": 1},
    },
}


def operator(api: Api, name: str, role: str = "approver") -> tuple[Session, str]:
    issued = ok(api.admin.post("/v1/operators/tokens", json={"name": name, "role": role}), 201)
    return api.client(issued["token"]), f"token:{issued['token_id']}"


def held(api: Api) -> tuple[Agent, str]:
    agent = api.create(policy=QUORUM)
    decision = ok(agent.act("deploy"))
    assert decision["decision"] == "pending_approval"
    return agent, decision["action_id"]


def test_two_of_n_needs_two_identities_and_names_both(api: Api, tmp_path: Path) -> None:
    agent, action_id = held(api)
    ann, ann_id = operator(api, "ann")
    bob, bob_id = operator(api, "bob")
    first = ok(ann.post(f"{agent.path}/actions/{action_id}/approve", json={"note": "ok by me"}))
    assert first["decision"] == "pending_approval"
    assert first["approvals_required"] == 2
    assert [(a["by"], a["by_id"]) for a in first["approvals"]] == [("ann", ann_id)]
    pending = ok(api.admin.get(f"{agent.path}/actions/pending"))["pending"]
    assert pending[0]["approvals_required"] == 2
    assert [a["by"] for a in pending[0]["approvals"]] == ["ann"]
    assert ok(agent.client.get(f"{agent.path}/actions/{action_id}"))["status"] == (
        "pending_approval"
    )

    second = ok(bob.post(f"{agent.path}/actions/{action_id}/approve", json={}))
    assert second["decision"] == "allowed"
    records = api.records(agent)
    recorded, allowed = records[-2], records[-1]
    assert recorded["kind"] == "approval_recorded"
    assert (recorded["by"], recorded["by_id"], recorded["approvals_required"]) == (
        "ann",
        ann_id,
        2,
    )
    assert recorded["note"] == "ok by me"
    assert allowed["kind"] == "action_allowed"
    assert allowed["approved_by"] == "bob"
    assert allowed["approvers"] == [{"by": "ann", "by_id": ann_id}, {"by": "bob", "by_id": bob_id}]
    view = ok(api.admin.get(f"{agent.path}/actions/{action_id}"))
    assert [a["by_id"] for a in view["approvals"]] == [ann_id, bob_id]
    assert view["decided_by_id"] == bob_id

    # replay re-runs both approvals and writes the same records
    log = tmp_path / "quorum.jsonl"
    log.write_bytes(api.server.data_dir.joinpath("agents", f"{agent.agent_id}.jsonl").read_bytes())
    assert audit_main(["replay", str(log), "--public-key", api.server.public_key]) == 0


def test_the_same_identity_twice_is_409_and_writes_nothing(api: Api) -> None:
    agent, action_id = held(api)
    ann, _ = operator(api, "ann")
    ok(ann.post(f"{agent.path}/actions/{action_id}/approve", json={}))
    before = len(api.records(agent))
    again = ann.post(f"{agent.path}/actions/{action_id}/approve", json={})
    assert assert_error(again, 409, "invalid_state")["error"] == (
        f"action {action_id} is already approved by you"
    )
    assert len(api.records(agent)) == before


def test_the_admin_token_counts_as_one_identity(api: Api) -> None:
    agent, action_id = held(api)
    ok(api.approve(agent, action_id, approver="alice"))
    again = api.approve(agent, action_id, approver="someone else")
    assert_error(again, 409, "invalid_state")


def test_a_rejection_midway_ends_it(api: Api) -> None:
    agent, action_id = held(api)
    ann, _ = operator(api, "ann")
    bob, _ = operator(api, "bob")
    ok(ann.post(f"{agent.path}/actions/{action_id}/approve", json={}))
    denied = ok(bob.post(f"{agent.path}/actions/{action_id}/reject", json={"reason": "no"}))
    assert denied["reason"]["code"] == "rejected"
    late = ann.post(f"{agent.path}/actions/{action_id}/approve", json={})
    assert_error(late, 409, "invalid_state")


def test_the_operator_who_asked_on_the_agents_behalf_may_not_approve(api: Api) -> None:
    agent = api.create(policy=QUORUM)
    boss, _ = operator(api, "boss", "admin")
    action_id = ok(boss.post(f"{agent.path}/actions", json={"tool": "deploy"}))["action_id"]
    mine = boss.post(f"{agent.path}/actions/{action_id}/approve", json={})
    assert assert_error(mine, 403, "forbidden")["error"] == (
        f"boss asked for {action_id} on the agent's behalf: another operator must approve it"
    )
    # the admin token asking is exempt (break-glass)
    action_id = ok(api.admin.post(f"{agent.path}/actions", json={"tool": "deploy"}))["action_id"]
    ok(api.approve(agent, action_id, approver="alice"))


@pytest.mark.parametrize("count", [0, 11, 1.5, True])
def test_approvals_required_is_an_integer_from_1_to_10(api: Api, count: Any) -> None:
    policy = {"budget": 1, "tools": {"t": {"requires_approval": True, "approvals_required": count}}}
    answer = api.admin.post("/v1/agents", json={"agent_id": api.new_id("q"), "policy": policy})
    assert "approvals_required" in assert_error(answer, 400, "bad_request")["error"]


def test_one_approval_keeps_the_policy_and_allowance_as_they_were(api: Api) -> None:
    agent = api.create()
    action_id = ok(agent.act("send_email"))["action_id"]
    ok(api.approve(agent, action_id))
    policy, allowed = api.records(agent)[1], api.records(agent)[-1]
    assert "approvals_required" not in policy["policy"]["tools"]["send_email"]
    assert "approvers" not in allowed


def test_an_approval_survives_kill_9_and_the_second_one_allows(fresh_api: Api) -> None:
    agent, action_id = held(fresh_api)
    ann, ann_id = operator(fresh_api, "ann")
    ok(ann.post(f"{agent.path}/actions/{action_id}/approve", json={}))
    fresh_api.server.kill()
    fresh_api.server.start()
    pending = ok(fresh_api.admin.get(f"{agent.path}/actions/pending"))["pending"]
    assert [a["by_id"] for a in pending[0]["approvals"]] == [ann_id]
    again = ann.post(f"{agent.path}/actions/{action_id}/approve", json={})
    assert_error(again, 409, "invalid_state")
    bob, _ = operator(fresh_api, "bob")
    assert ok(bob.post(f"{agent.path}/actions/{action_id}/approve", json={}))["decision"] == (
        "allowed"
    )


def test_an_expiry_midway_ends_it(api: Api) -> None:
    policy = {**QUORUM, "approval_timeout_secs": 1}
    agent = api.create(policy=policy)
    action_id = ok(agent.act("deploy"))["action_id"]
    ann, _ = operator(api, "ann")
    ok(ann.post(f"{agent.path}/actions/{action_id}/approve", json={}))
    view = ok(agent.client.get(f"{agent.path}/actions/{action_id}", params={"wait": 10}))
    assert view["status"] == "denied"
    assert view["reason"]["code"] == "approval_expired"
    assert [a["by"] for a in view["approvals"]] == ["ann"]
    bob, _ = operator(api, "bob")
    late = bob.post(f"{agent.path}/actions/{action_id}/approve", json={})
    assert_error(late, 409, "invalid_state")


def test_what_if_reruns_a_quorum_under_its_own_and_another_policy(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent, action_id = held(api)
    for name in ("ann", "bob"):
        who, _ = operator(api, name)
        ok(who.post(f"{agent.path}/actions/{action_id}/approve", json={}))
    log = tmp_path / "quorum.jsonl"
    log.write_bytes(api.server.data_dir.joinpath("agents", f"{agent.agent_id}.jsonl").read_bytes())
    key = ["--public-key", api.server.public_key, "--json"]
    capsys.readouterr()
    for tools, changed in ((QUORUM["tools"], 0), ({**QUORUM["tools"], "deploy": {"cost": 5}}, 0)):
        candidate = tmp_path / "candidate.json"
        candidate.write_text(json.dumps({**QUORUM, "tools": tools}))
        assert audit_main(["replay", str(log), "--policy", str(candidate), *key]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["changed"] == changed, result
