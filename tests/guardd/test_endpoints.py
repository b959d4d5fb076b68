"""Every row of the endpoint table of docs/api.md, over real HTTP."""

from __future__ import annotations

import re

import pytest

from tests.guardd import independent_verifier as iv
from tests.guardd.conftest import POLICY, Api, assert_error, ok

HEX64 = re.compile(r"[0-9a-f]{64}")
STATUS_KEYS = {
    "agent_id",
    "alive",
    "termination_reason",
    "budget",
    "spent",
    "remaining",
    "scar_score",
    "scar_limit",
    "scars",
    "actions_allowed",
    "actions_denied",
    "actions_pending",
    "head",
    "public_key",
}


def test_healthz_needs_no_token(api: Api) -> None:
    assert ok(api.client().get("/healthz")) == {"ok": True}


def test_public_key_needs_no_token_and_is_the_signing_key(api: Api) -> None:
    body = ok(api.client().get("/v1/public-key"))
    assert body == {"public_key": api.server.public_key, "algorithm": "ed25519"}
    assert HEX64.fullmatch(body["public_key"])


def test_console_is_served_at_root_without_a_token(api: Api) -> None:
    response = api.client().get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "<html" in response.text.lower()


def test_create_agent_answers_201_with_status_and_token(api: Api) -> None:
    agent_id = api.new_id("create")
    response = api.admin.post("/v1/agents", json={"agent_id": agent_id, "policy": POLICY})
    body = ok(response, 201)
    assert set(body) == {"agent", "token"}
    status = body["agent"]
    assert set(status) == STATUS_KEYS
    assert status == {
        "agent_id": agent_id,
        "alive": True,
        "termination_reason": None,
        "budget": 100,
        "spent": 0,
        "remaining": 100,
        "scar_score": 0,
        "scar_limit": 10,
        "scars": [],
        "actions_allowed": 0,
        "actions_denied": 0,
        "actions_pending": 0,
        "head": {"seq": 1, "hash": status["head"]["hash"]},
        "public_key": api.server.public_key,
    }
    assert HEX64.fullmatch(status["head"]["hash"])
    assert body["token"].startswith(f"agt_{agent_id}.")


def test_list_agents_has_an_active_entry_with_status_for_each_agent(api: Api) -> None:
    agent = api.create()
    entries = ok(api.admin.get("/v1/agents"))["agents"]
    mine = [e for e in entries if e["agent_id"] == agent.agent_id]
    assert mine == [{"agent_id": agent.agent_id, "state": "active", "status": api.status(agent)}]
    assert all(e["state"] == "active" and "status" in e for e in entries)


def test_token_reissue_returns_the_same_working_token(api: Api) -> None:
    agent = api.create()
    body = ok(api.admin.get(f"{agent.path}/token"))
    assert body == {"token": agent.token}
    assert ok(api.client(body["token"]).get(agent.path))["agent_id"] == agent.agent_id


def test_status_for_own_agent_and_admin(api: Api) -> None:
    agent = api.create()
    own = ok(agent.client.get(agent.path))
    assert set(own) == STATUS_KEYS
    assert own == api.status(agent)


def test_put_policy_replaces_the_policy_and_writes_a_policy_record(api: Api) -> None:
    agent = api.create()
    new_policy = {"budget": 7, "scar_limit": 4, "tools": {"calc": {"cost": 0.5}}}
    status = ok(api.admin.put(f"{agent.path}/policy", json=new_policy))
    assert (status["budget"], status["scar_limit"], status["remaining"]) == (7, 4, 7)
    assert status["alive"] is True
    last = api.records(agent)[-1]
    assert last["kind"] == "policy"
    assert last["policy"] == {
        "budget": 7,
        "scar_limit": 4,
        "tools": {"calc": {"cost": 0.5, "requires_approval": False, "max_calls": None}},
        "default": None,
        "rate_limit": None,
    }
    assert ok(agent.act("calc"))["decision"] == "allowed"
    denied = ok(agent.act("search"))
    assert denied["reason"] == {"code": "tool_not_allowed", "tool": "search"}


def test_get_policy_answers_the_policy_in_force_to_its_agent_and_admin(api: Api) -> None:
    agent = api.create()
    filled = {
        "budget": 100,
        "scar_limit": 10,
        "tools": {
            "search": {"cost": 1, "requires_approval": False, "max_calls": None},
            "send_email": {"cost": 5, "requires_approval": True, "max_calls": None},
        },
        "default": None,
        "rate_limit": None,
    }
    assert ok(agent.client.get(f"{agent.path}/policy")) == filled
    new_policy = {"budget": 7, "scar_limit": 4, "tools": {}, "default": {"cost": 0.5}}
    ok(api.admin.put(f"{agent.path}/policy", json=new_policy))
    assert ok(api.admin.get(f"{agent.path}/policy")) == {
        "budget": 7,
        "scar_limit": 4,
        "tools": {},
        "default": {"cost": 0.5, "requires_approval": False, "max_calls": None},
        "rate_limit": None,
    }
    other = api.create()
    assert_error(agent.client.get(f"{other.path}/policy"), 403, "forbidden")
    assert_error(api.admin.get("/v1/agents/ghost/policy"), 404, "not_found")


def test_put_policy_never_revives_a_terminated_agent(api: Api) -> None:
    agent = api.create()
    ok(api.admin.post(f"{agent.path}/terminate", json={"reason": "done", "by": "alice"}))
    response = api.admin.put(f"{agent.path}/policy", json=POLICY)
    assert_error(response, 409, "invalid_state")
    status = api.status(agent)
    assert (status["alive"], status["termination_reason"]) == (False, "done")


def test_request_action_returns_a_decision(api: Api) -> None:
    agent = api.create()
    lines = api.log_lines(agent)
    assert ok(agent.act("search", input={"q": "x"})) == {
        "decision": "allowed",
        "action_id": "act-1",
        "cost": 1,
        "remaining": 99,
        "receipt": api.log_lines(agent)[len(lines) :],
    }
    assert ok(agent.act("send_email")) == {"decision": "pending_approval", "action_id": "act-2"}
    assert ok(agent.act("delete_all")) == {
        "decision": "denied",
        "action_id": "act-3",
        "reason": {"code": "tool_not_allowed", "tool": "delete_all"},
    }


def test_admin_may_request_actions_for_an_agent(api: Api) -> None:
    agent = api.create()
    assert ok(api.admin.post(f"{agent.path}/actions", json={"tool": "search"}))["decision"] == (
        "allowed"
    )


def test_get_action_returns_input_status_and_outcome(api: Api) -> None:
    agent = api.create()
    ok(agent.act("search", input={"q": ["a", 1, None, True]}, cost=2.5))
    action = ok(agent.client.get(f"{agent.path}/actions/act-1"))
    assert action["action_id"] == "act-1"
    assert action["tool"] == "search"
    assert action["input"] == {"q": ["a", 1, None, True]}
    assert action["cost"] == 2.5
    assert action["status"] == "allowed"
    assert action["outcome"] is None
    assert ok(api.admin.get(f"{agent.path}/actions/act-1")) == action


def test_action_input_defaults_to_null(api: Api) -> None:
    agent = api.create()
    ok(agent.act("search"))
    assert ok(agent.client.get(f"{agent.path}/actions/act-1"))["input"] is None


def test_outcome_returns_agent_status_and_completes_the_action(api: Api) -> None:
    agent = api.create()
    ok(agent.act("search"))
    body = {"status": "success", "detail": "found it"}
    status = ok(agent.client.post(f"{agent.path}/actions/act-1/outcome", json=body))
    assert status == api.status(agent)
    action = ok(agent.client.get(f"{agent.path}/actions/act-1"))
    assert (action["status"], action["outcome"]) == ("completed", "success")
    last = api.records(agent)[-1]
    assert last["kind"] == "outcome"
    assert (last["action_id"], last["outcome"], last["detail"]) == ("act-1", "success", "found it")


def test_pending_lists_held_actions_with_charge_and_request_seq(api: Api) -> None:
    agent = api.create()
    ok(agent.act("search"))
    ok(agent.act("send_email", input={"to": "bob"}, cost=2))
    ok(agent.act("send_email", cost=9))
    pending = ok(api.admin.get(f"{agent.path}/actions/pending"))["pending"]
    records = api.records(agent)
    requested = {r["action_id"]: r for r in records if r["kind"] == "action_requested"}
    assert pending == [
        {
            "requested_at": requested["act-2"]["ts"],
            "seq": requested["act-2"]["seq"],
            "action": {
                "action_id": "act-2",
                "tool": "send_email",
                "input": {"to": "bob"},
                "cost": 5,
            },
        },
        {
            "requested_at": requested["act-3"]["ts"],
            "seq": requested["act-3"]["seq"],
            "action": {"action_id": "act-3", "tool": "send_email", "input": None, "cost": 9},
        },
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", pending[0]["requested_at"])


def test_approve_returns_allowed_and_signs_approver_and_note(api: Api) -> None:
    agent = api.create()
    ok(agent.act("send_email"))
    decision = ok(api.approve(agent, "act-1", approver="carol", note="looks fine"))
    lines = api.log_lines(agent)
    assert decision == {
        "decision": "allowed",
        "action_id": "act-1",
        "cost": 5,
        "remaining": 95,
        "receipt": [lines[2], lines[4]],  # the request, then the approval
    }
    allowed = api.records(agent)[-1]
    assert allowed["kind"] == "action_allowed"
    assert (allowed["approved_by"], allowed["note"]) == ("carol", "looks fine")
    action = ok(agent.client.get(f"{agent.path}/actions/act-1"))
    assert action["status"] == "allowed"
    assert ok(api.admin.get(f"{agent.path}/actions/pending")) == {"pending": []}


def test_approve_without_note_records_the_approver_only(api: Api) -> None:
    agent = api.create()
    ok(agent.act("send_email"))
    ok(api.approve(agent, "act-1", approver="dave"))
    allowed = api.records(agent)[-1]
    assert allowed["approved_by"] == "dave"
    assert "note" not in allowed


def test_reject_returns_a_denied_decision_with_reason_rejected(api: Api) -> None:
    agent = api.create()
    ok(agent.act("send_email"))
    decision = ok(api.reject(agent, "act-1", approver="carol", reason="too risky"))
    assert decision == {
        "decision": "denied",
        "action_id": "act-1",
        "reason": {"code": "rejected", "by": "carol", "reason": "too risky"},
    }
    action = ok(agent.client.get(f"{agent.path}/actions/act-1"))
    assert action["status"] == "denied"
    status = api.status(agent)
    assert (status["actions_denied"], status["actions_pending"], status["scars"]) == (1, 0, [])
    kinds = [r["kind"] for r in api.records(agent)]
    assert kinds[-1] == "action_rejected"


def test_scar_endpoint_adds_a_scar_and_returns_status(api: Api) -> None:
    agent = api.create()
    ok(agent.act("search"))
    status = ok(
        api.admin.post(
            f"{agent.path}/scars",
            json={"severity": "moderate", "reason": "sloppy", "action_id": "act-1"},
        )
    )
    scar_seq = api.records(agent)[-1]["seq"]
    assert status["scar_score"] == 3
    assert status["scars"] == [
        {"seq": scar_seq, "severity": "moderate", "reason": "sloppy", "action_id": "act-1"}
    ]
    status = ok(api.admin.post(f"{agent.path}/scars", json={"severity": "minor", "reason": "meh"}))
    assert status["scar_score"] == 4
    assert status["scars"][1] == {"seq": scar_seq + 1, "severity": "minor", "reason": "meh"}


def test_scar_by_names_the_operator_in_the_signed_scar_record(api: Api) -> None:
    agent = api.create()
    ok(agent.act("search"))
    scar = {"severity": "minor", "reason": "sloppy", "action_id": "act-1"}
    ok(api.admin.post(f"{agent.path}/scars", json=scar | {"by": "carol"}))
    ok(api.admin.post(f"{agent.path}/scars", json={"severity": "minor", "reason": "meh"}))
    records = api.records(agent)
    named, unnamed = records[-2], records[-1]
    # the name is part of what is signed: the chain verifies with it in place
    iv.verify_records(records, public_key_hex=api.server.public_key, log_id=agent.agent_id)
    assert {k: named[k] for k in ("kind", "by", "severity", "action_id")} == {
        "kind": "scar",
        "by": "carol",
        "severity": "minor",
        "action_id": "act-1",
    }
    # without a name the record says "operator" as it always did, beside the admin token's ID
    assert unnamed["by"] == "operator"
    assert unnamed["by_id"] == "admin-token"
    assert set(unnamed) == {
        *("seq", "ts", "prev", "hash", "sig", "kind", "severity", "reason", "by", "by_id")
    }


def test_scar_by_system_is_refused(api: Api) -> None:
    agent = api.create()
    body = {"severity": "minor", "reason": "r", "by": "system"}
    error = assert_error(api.admin.post(f"{agent.path}/scars", json=body), 400, "bad_request")
    assert error["error"].startswith("$.by")
    assert api.status(agent)["scars"] == []


def test_terminate_returns_status_with_the_operator_reason(api: Api) -> None:
    agent = api.create()
    status = ok(
        api.admin.post(f"{agent.path}/terminate", json={"reason": "misbehaved", "by": "eve"})
    )
    assert (status["alive"], status["termination_reason"]) == (False, "misbehaved")
    last = api.records(agent)[-1]
    assert (last["kind"], last["reason"], last["by"]) == ("terminated", "misbehaved", "eve")


def test_log_returns_records_after_seq_with_the_head(api: Api) -> None:
    agent = api.create()
    for _ in range(3):
        ok(agent.act("search"))
    body = ok(api.admin.get(f"{agent.path}/log"))
    records, head = body["records"], body["head"]
    assert [r["seq"] for r in records] == list(range(8))
    assert head == {"seq": 7, "hash": records[-1]["hash"]}
    assert head == api.status(agent)["head"]
    assert [r["kind"] for r in records[:2]] == ["genesis", "policy"]
    for record in records:
        assert {"seq", "kind", "ts", "prev", "hash", "sig"} <= set(record)
    after = ok(api.admin.get(f"{agent.path}/log", params={"after": 3, "limit": 2}))
    assert after == {"records": records[4:6], "head": head}
    assert ok(api.admin.get(f"{agent.path}/log", params={"after": 7}))["records"] == []
    assert ok(api.admin.get(f"{agent.path}/log", params={"after": -1}))["records"] == records


def test_log_limit_above_the_maximum_is_treated_as_the_maximum(api: Api) -> None:
    agent = api.create()
    body = ok(api.admin.get(f"{agent.path}/log", params={"limit": 1_000_000}))
    assert len(body["records"]) == 2


def test_verify_reports_ok_with_records_key_and_head(api: Api) -> None:
    agent = api.create()
    ok(agent.act("search"))
    report = ok(api.admin.get(f"{agent.path}/verify"))
    assert report == {
        "ok": True,
        "records": 4,
        "public_key": api.server.public_key,
        "head": api.status(agent)["head"],
    }


def test_verify_reports_the_first_bad_record_of_a_tampered_log(api: Api) -> None:
    agent = api.create()
    ok(agent.act("search"))
    ok(agent.act("search"))
    path = api.server.data_dir / "agents" / f"{agent.agent_id}.jsonl"
    lines = path.read_bytes().split(b"\n")
    assert b'"kind":"action_requested"' in lines[2]
    lines[2] = lines[2].replace(b'"tool":"search"', b'"tool":"seArch"')
    path.write_bytes(b"\n".join(lines))
    report = ok(api.admin.get(f"{agent.path}/verify"))
    assert report == {
        "ok": False,
        "records": 2,
        "failure": {"line": 3, "seq": 2, "reason": "hash does not match content"},
    }


@pytest.mark.slow
def test_log_limit_is_at_most_5000_on_a_long_log(fresh_api: Api) -> None:
    # A long log written from the format description, signed with the
    # service's key while it is stopped: the service loads it as its own.
    api = fresh_api
    assert api.server.stop() == 0
    keys = api.server.data_dir / "keys"
    seed = bytes.fromhex((keys / "audit.key").read_text().strip())
    policy = {"kind": "policy", "policy": POLICY}
    data = iv.write_log("long", [policy] * 5000, seed=seed, ts="2026-01-01T00:00:00.000000Z")
    (api.server.data_dir / "agents" / "long.jsonl").write_bytes(data)
    api.server.start()
    path = "/v1/agents/long/log"
    assert len(ok(api.admin.get(path))["records"]) == 500
    capped = ok(api.admin.get(path, params={"limit": 5001}))["records"]
    assert [r["seq"] for r in capped] == list(range(5000))
    rest = ok(api.admin.get(path, params={"after": 4999, "limit": 5000}))
    assert rest == {"records": rest["records"][:1], "head": rest["head"]}
    assert (rest["records"][0]["seq"], rest["head"]["seq"]) == (5000, 5000)
    assert ok(api.admin.get("/v1/agents/long/verify"))["records"] == 5001
