"""Who decided, in the signed log: every record an operator causes carries
``by`` (display name) and ``by_id`` (``token:<token_id>``, ``admin-token``,
``oidc:<iss>#<sub>``); a body's approver or by must be the operator's own
name (docs/api.md, "Who decided")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from audit.cli import main as audit_main
from tests.guardd.conftest import POLICY, Api, Session, assert_error, ok


def operator(api: Api, name: str, role: str) -> tuple[Session, str]:
    body = {"name": name, "role": role}
    issued = ok(api.admin.post("/v1/operators/tokens", json=body), 201)
    return api.client(issued["token"]), f"token:{issued['token_id']}"


def test_every_record_an_operator_token_causes_names_it(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    boss, boss_id = operator(api, "boss", "admin")
    agent_id = api.new_id("signed")
    ok(boss.post("/v1/agents", json={"agent_id": agent_id, "policy": POLICY}), 201)
    path = f"/v1/agents/{agent_id}"
    ok(boss.request("PUT", f"{path}/policy", json=POLICY))
    # who asks on the agent's behalf may not approve it: another operator does
    lead, lead_id = operator(api, "lead", "approver")
    held = ok(boss.post(f"{path}/actions", json={"tool": "send_email"}))["action_id"]
    ok(lead.post(f"{path}/actions/{held}/approve", json={"note": "fine"}))
    held = ok(boss.post(f"{path}/actions", json={"tool": "send_email"}))["action_id"]
    ok(lead.post(f"{path}/actions/{held}/reject", json={"reason": "no", "scar": "minor"}))
    held = ok(boss.post(f"{path}/actions", json={"tool": "send_email"}))["action_id"]
    ok(boss.post(f"{path}/actions/{held}/cancel", json={}))
    grant = ok(
        boss.post(f"{path}/grants", json={"tool": "search", "max_calls": 1, "ttl_secs": 60}), 201
    )
    ok(boss.post(f"{path}/grants/{grant['grant_id']}/revoke", json={}))
    ok(boss.post(f"{path}/scars", json={"severity": "minor", "reason": "r"}))
    ok(boss.post(f"{path}/terminate", json={"reason": "done"}))

    records = ok(api.admin.get(f"{path}/log"))["records"]
    caused = [r for r in records if r.get("by") != "system" and "by_id" in r]
    kinds = [r["kind"] for r in caused]
    assert kinds == [
        "genesis",
        "policy",
        "policy",
        "action_requested",
        "action_allowed",
        "action_requested",
        "action_rejected",
        "scar",
        "action_requested",
        "action_cancelled",
        "grant_issued",
        "grant_revoked",
        "scar",
        "terminated",
    ]
    by_lead = {"action_allowed", "action_rejected"}
    for record in caused:
        expected = ("lead", lead_id) if record["kind"] in by_lead else ("boss", boss_id)
        if record["kind"] == "scar" and record.get("action_id") is not None:
            expected = ("lead", lead_id)  # the rejection's scar
        assert (record["by"], record["by_id"]) == expected, record
    allowed = next(r for r in caused if r["kind"] == "action_allowed")
    assert allowed["approved_by"] == "lead"

    # audit show prints who with how; audit replay re-runs every command the same
    log = tmp_path / "signed.jsonl"
    log.write_bytes(api.server.data_dir.joinpath("agents", f"{agent_id}.jsonl").read_bytes())
    assert audit_main(["show", str(log)]) == 0
    shown = capsys.readouterr().out
    assert f"by=boss by_id={boss_id}" in shown
    key = api.server.public_key
    assert audit_main(["replay", str(log), "--public-key", key]) == 0, capsys.readouterr().out


def test_the_admin_token_records_the_name_given_beside_admin_token(api: Api) -> None:
    agent = api.create()
    held = ok(agent.act("send_email"))["action_id"]
    ok(api.approve(agent, held, approver="alice"))
    allowed = api.records(agent)[-1]
    assert (allowed["approved_by"], allowed["by"], allowed["by_id"]) == (
        "alice",
        "alice",
        "admin-token",
    )


@pytest.mark.parametrize(
    ("step", "body"),
    [
        pytest.param("approve", {}, id="approve"),
        pytest.param("reject", {"reason": "no"}, id="reject"),
    ],
)
def test_the_admin_token_must_still_say_who_approves(
    api: Api, step: str, body: dict[str, Any]
) -> None:
    agent = api.create()
    held = ok(agent.act("send_email"))["action_id"]
    answer = api.admin.post(f"{agent.path}/actions/{held}/{step}", json=body)
    error = assert_error(answer, 400, "bad_request")["error"]
    assert error == "$.approver: required with the admin token (who is it?)"


def test_the_admin_token_must_still_say_who_terminates(api: Api) -> None:
    agent = api.create()
    answer = api.admin.post(f"{agent.path}/terminate", json={"reason": "r"})
    assert assert_error(answer, 400, "bad_request")["error"] == (
        "$.by: required with the admin token (who is it?)"
    )


def test_an_operator_may_not_sign_with_another_name(api: Api) -> None:
    agent = api.create()
    held = ok(agent.act("send_email"))["action_id"]
    lead, _ = operator(api, "lead", "approver")
    answer = lead.post(f"{agent.path}/actions/{held}/approve", json={"approver": "alice"})
    assert assert_error(answer, 403, "forbidden")["error"] == (
        "approver 'alice' is not you: you are signed in as 'lead'"
        " (leave it out, or give your own name)"
    )
    # their own name is fine
    ok(lead.post(f"{agent.path}/actions/{held}/approve", json={"approver": "lead"}))


def test_an_agents_own_request_and_cancel_name_no_operator(api: Api) -> None:
    agent = api.create()
    held = ok(agent.act("send_email"))["action_id"]
    ok(agent.client.post(f"{agent.path}/actions/{held}/cancel", json={}))
    records = api.records(agent)
    assert all(
        "by_id" not in r for r in records if r["kind"] != "genesis" and r["kind"] != "policy"
    )
    assert records[-1]["by"] == "agent"


def test_named_policy_and_shadow_records_name_the_operator_who_caused_them(api: Api) -> None:
    boss, boss_id = operator(api, "boss", "admin")
    fleet = api.new_id("fleet")
    ok(boss.put(f"/v1/policies/{fleet}", json=POLICY))
    created = api.new_id("follower")
    ok(boss.post("/v1/agents", json={"agent_id": created, "policy_ref": fleet}), 201)
    switched = api.new_id("switched")
    ok(boss.post("/v1/agents", json={"agent_id": switched, "policy": POLICY}), 201)
    ok(boss.request("PUT", f"/v1/agents/{switched}/policy", json={"policy_ref": fleet}))
    # A new version reaches each follower's log, under the name of who stored it.
    ok(api.admin.put(f"/v1/policies/{fleet}", json={**POLICY, "budget": 7}))
    ok(boss.request("PUT", f"/v1/agents/{switched}/shadow", json=POLICY))
    ok(boss.request("DELETE", f"/v1/agents/{switched}/shadow"))

    def signed(agent_id: str) -> list[tuple[Any, ...]]:
        records = ok(api.admin.get(f"/v1/agents/{agent_id}/log"))["records"]
        return [
            (r["kind"], r.get("version"), r.get("by"), r.get("by_id"))
            for r in records
            if r["kind"] not in ("genesis",)
        ]

    assert signed(created) == [
        ("policy", 1, "boss", boss_id),
        ("policy", 2, "admin", "admin-token"),
    ]
    assert signed(switched) == [
        ("policy", None, "boss", boss_id),
        ("policy", 1, "boss", boss_id),
        ("policy", 2, "admin", "admin-token"),
        ("shadow_set", None, "boss", boss_id),
        ("shadow_cleared", None, "boss", boss_id),
    ]
