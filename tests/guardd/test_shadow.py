"""Shadow mode over HTTP: a candidate decided beside the policy in force,
never enforced; disagreements in the decision records, counts folded from
them (so they survive a restart), the metric, and 404 when none is set."""

from __future__ import annotations

from pathlib import Path

from tests.guardd.conftest import POLICY, Api, assert_error, ok

# search stays allowed; send_email is allowed outright instead of held; the
# rest are denied with no default rule either way.
CANDIDATE = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {"search": {"cost": 1}, "send_email": {"cost": 5}, "wipe": {"cost": 1}},
}


def test_no_shadow_is_404_and_clearing_none_is_404(api: Api) -> None:
    agent = api.create()
    assert_error(api.admin.get(f"{agent.path}/shadow"), 404, "not_found")
    assert_error(api.admin.request("DELETE", f"{agent.path}/shadow"), 404, "not_found")
    assert_error(agent.client.get(f"{agent.path}/shadow"), 403, "forbidden")


def test_disagreements_are_recorded_counted_and_never_enforced(api: Api) -> None:
    agent = api.create()
    shadow = ok(api.admin.put(f"{agent.path}/shadow", json=CANDIDATE))
    assert (shadow["agree"], shadow["disagree"], shadow["recent_disagreements"]) == (0, {}, [])
    assert ok(agent.act("search"))["decision"] == "allowed"  # both allow
    held = ok(agent.act("send_email"))
    assert held["decision"] == "pending_approval"  # the live policy is enforced
    assert "shadow" not in held
    denied = ok(agent.act("wipe"))
    assert denied["decision"] == "denied"
    decisions = ("action_allowed", "approval_required", "action_denied")
    records = {r["action_id"]: r for r in api.records(agent) if r["kind"] in decisions}
    assert "shadow" not in records["act-1"]
    assert records["act-2"]["shadow"] == {"decision": "allowed", "reason": None}
    assert records["act-3"]["shadow"] == {"decision": "allowed", "reason": None}
    shown = ok(api.admin.get(f"{agent.path}/shadow"))
    assert shown["agree"] == 1
    assert shown["disagree"] == {"pending_approval->allowed": 1, "denied->allowed": 1}
    assert shown["recent_disagreements"] == ["act-2", "act-3"]
    assert shown["policy"]["tools"]["wipe"]["cost"] == 1
    metrics = api.http.get("/metrics", headers=api.admin.headers).text
    assert 'guard_shadow_disagreements_total{live="denied",shadow="allowed"}' in metrics


def test_a_stricter_shadow_reports_its_denial_reason(api: Api) -> None:
    agent = api.create()
    strict = {"budget": 100, "scar_limit": 10, "tools": {}}
    ok(api.admin.put(f"{agent.path}/shadow", json=strict))
    ok(agent.act("search"))
    (allowed,) = [r for r in api.records(agent) if r["kind"] == "action_allowed"]
    assert allowed["shadow"] == {
        "decision": "denied",
        "reason": {"code": "tool_not_allowed", "tool": "search"},
    }


def test_recent_disagreements_keeps_the_last_twenty_oldest_first(api: Api) -> None:
    agent = api.create(policy={**POLICY, "budget": 1000})
    ok(api.admin.put(f"{agent.path}/shadow", json={**CANDIDATE, "tools": {}}))
    for _ in range(25):
        ok(agent.act("search"))
    shown = ok(api.admin.get(f"{agent.path}/shadow"))
    assert shown["disagree"] == {"allowed->denied": 25}
    assert shown["recent_disagreements"] == [f"act-{n}" for n in range(6, 26)]


def test_clearing_records_it_and_a_new_shadow_counts_from_zero(api: Api) -> None:
    agent = api.create()
    ok(api.admin.put(f"{agent.path}/shadow", json=CANDIDATE))
    ok(agent.act("send_email"))
    assert ok(api.admin.request("DELETE", f"{agent.path}/shadow")) == {"ok": True}
    assert_error(api.admin.get(f"{agent.path}/shadow"), 404, "not_found")
    ok(agent.act("send_email"))
    kinds = [r["kind"] for r in api.records(agent)]
    assert kinds.count("shadow_set") == 1
    assert kinds.count("shadow_cleared") == 1
    assert "shadow" not in api.records(agent)[-1]
    ok(api.admin.put(f"{agent.path}/shadow", json=CANDIDATE))
    assert ok(api.admin.get(f"{agent.path}/shadow"))["disagree"] == {}


def test_a_named_policy_can_be_the_shadow(api: Api) -> None:
    name = api.new_id("candidate")
    ok(api.admin.put(f"/v1/policies/{name}", json=CANDIDATE))
    agent = api.create()
    shown = ok(api.admin.put(f"{agent.path}/shadow", json={"policy_ref": name}))
    assert (shown["policy_ref"], shown["version"]) == (name, 1)
    body = {"policy_ref": "no-such-policy"}
    assert_error(api.admin.put(f"{agent.path}/shadow", json=body), 404, "not_found")


def test_counts_survive_a_restart(fresh_api: Api, tmp_path: Path) -> None:
    api = fresh_api
    agent = api.create()
    ok(api.admin.put(f"{agent.path}/shadow", json=CANDIDATE))
    for tool in ("search", "send_email", "wipe", "search"):
        ok(agent.act(tool))
    before = ok(api.admin.get(f"{agent.path}/shadow"))
    api.server.kill()
    api.server.start()
    assert ok(api.admin.get(f"{agent.path}/shadow")) == before
    assert before["agree"] == 2
