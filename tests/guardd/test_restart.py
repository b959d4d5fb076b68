"""Restarts: state rebuilt from the logs is identical; a tampered log
quarantines only its agent; a torn tail is moved aside; without
``keys/audit.key`` the service is read-only (docs/design.md)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from tests.guardd.conftest import Agent, Api, assert_error, ok
from tests.support.server import GuardServer

TOOLS = {
    "search": {"cost": 1},
    "capped": {"cost": 0.1, "max_calls": 1},
    "send_email": {"cost": 5, "requires_approval": True},
}


def _policy(**overrides: Any) -> dict[str, Any]:
    return {"budget": 100, "scar_limit": 30, "tools": TOOLS} | overrides


def snapshot(api: Api, agents: list[Agent]) -> dict[str, Any]:
    """Everything the API says about these agents, as full JSON."""
    state: dict[str, Any] = {"list": ok(api.admin.get("/v1/agents"))}
    for agent in agents:
        records = api.records(agent)
        action_ids = [r["action_id"] for r in records if r["kind"] == "action_requested"]
        state[agent.agent_id] = {
            "status": api.status(agent),
            "own_status": ok(agent.client.get(agent.path)),
            "actions": {a: ok(api.admin.get(f"{agent.path}/actions/{a}")) for a in action_ids},
            "pending": ok(api.admin.get(f"{agent.path}/actions/pending")),
            "records": records,
            "verify": ok(api.admin.get(f"{agent.path}/verify")),
        }
    return state


@attrs.frozen
class Restarted:
    api: Api
    agents: dict[str, Agent]
    before: dict[str, Any]  # the snapshot taken before the restart


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restarted]:
    """A server that served a bit of everything, then was stopped (SIGTERM)
    and started again on the same data directory."""
    server = GuardServer(tmp_path_factory.mktemp("restart") / "guard-data").start()
    api = Api(server)
    try:
        agents = _serve_a_bit_of_everything(api)
        before = snapshot(api, list(agents.values()))
        assert server.stop() == 0
        server.start()
        yield Restarted(api, agents, before)
    finally:
        api.close()
        server.kill()


def _serve_a_bit_of_everything(api: Api) -> dict[str, Agent]:
    busy = api.create("busy", _policy())
    ok(busy.act("search", input={"q": "weather"}))  # act-1 allowed
    ok(busy.act("send_email", input={"to": "bob"}))  # act-2 pending, approved below
    ok(busy.act("send_email", input={"to": "eve"}))  # act-3 pending, rejected below
    ok(busy.act("send_email", input={"to": "al"}, cost=7))  # act-4 stays pending
    ok(busy.act("rm_rf"))  # act-5 denied, moderate scar
    ok(api.approve(busy, "act-2", approver="carol", note="fine"))
    ok(api.reject(busy, "act-3", approver="carol", reason="no", scar="minor"))
    url = f"{busy.path}/actions/act-1/outcome"
    ok(busy.client.post(url, json={"status": "success", "detail": "sunny"}))
    ok(api.admin.post(f"{busy.path}/actions/act-2/outcome", json={"status": "harmful"}))
    ok(api.admin.post(f"{busy.path}/scars", json={"severity": "minor", "reason": "operator"}))
    headers = {"Idempotency-Key": "once"}
    ok(busy.client.post(f"{busy.path}/actions", json={"tool": "capped"}, headers=headers))
    ok(busy.act("capped"))  # denied: tool_call_limit

    limited = api.create("limited", _policy(rate_limit={"max_actions": 2, "window_secs": 3600}))
    ok(limited.act("search"))
    ok(limited.act("search"))
    assert ok(limited.act("search"))["reason"]["code"] == "rate_limited"

    money = api.create("money", _policy(budget=1, tools={"tick": {"cost": 0.1}}))
    for _ in range(3):
        ok(money.act("tick"))

    exhausted = api.create("exhausted", _policy(budget=0.2, tools={"tick": {"cost": 0.1}}))
    ok(exhausted.act("tick"))
    ok(exhausted.act("tick"))

    retired = api.create("retired", _policy())
    ok(retired.act("send_email"))
    ok(api.admin.post(f"{retired.path}/terminate", json={"reason": "retired", "by": "op"}))

    repolicied = api.create("repolicied", _policy())
    ok(api.admin.put(f"{repolicied.path}/policy", json=_policy(budget=3, default={"cost": 0.5})))
    ok(repolicied.act("anything"))

    return {a.agent_id: a for a in (busy, limited, money, exhausted, retired, repolicied)}


def test_restart_rebuilds_every_status_action_pending_entry_and_record(
    restarted: Restarted,
) -> None:
    api, agents = restarted.api, restarted.agents
    after = snapshot(api, list(agents.values()))
    assert after == restarted.before


def test_restart_output_counts_the_agents_loaded(restarted: Restarted) -> None:
    api, agents = restarted.api, restarted.agents
    assert f"agents: {len(agents)} loaded, 0 quarantined" in api.server.read_output()


def test_rate_limited_agent_stays_limited_right_after_restart(
    restarted: Restarted,
) -> None:
    agents = restarted.agents
    decision = ok(agents["limited"].act("search"))
    assert decision["reason"] == {"code": "rate_limited", "max_actions": 2, "window_secs": 3600}


def test_call_cap_survives_restart(restarted: Restarted) -> None:
    agents = restarted.agents
    assert ok(agents["busy"].act("capped"))["reason"]["code"] == "tool_call_limit"


def test_idempotency_key_survives_restart(restarted: Restarted) -> None:
    agents = restarted.agents
    busy = agents["busy"]
    url = f"{busy.path}/actions"
    headers = {"Idempotency-Key": "once"}
    first = restarted.before["busy"]["records"]
    keyed = next(r for r in first if r.get("idempotency_key") == "once")
    decision = ok(busy.client.post(url, json={"tool": "capped"}, headers=headers))
    assert decision["action_id"] == keyed["action_id"]
    assert decision["decision"] == "allowed"
    response = busy.client.post(url, json={"tool": "search"}, headers=headers)
    assert_error(response, 409, "idempotency_conflict")


def test_pending_action_can_be_approved_after_restart(
    restarted: Restarted,
) -> None:
    api, agents = restarted.api, restarted.agents
    busy = agents["busy"]
    assert ok(api.approve(busy, "act-4"))["decision"] == "allowed"
    action_ids = [r["action_id"] for r in api.records(busy) if r["kind"] == "action_requested"]
    assert ok(busy.act("search"))["action_id"] == f"act-{len(action_ids) + 1}"


def test_exact_money_and_termination_survive_restart(
    restarted: Restarted,
) -> None:
    api, agents = restarted.api, restarted.agents
    money = api.admin.get(agents["money"].path)
    assert '"spent":0.3,' in money.text
    assert '"remaining":0.7,' in money.text
    exhausted = api.status(agents["exhausted"])
    assert (exhausted["alive"], exhausted["termination_reason"]) == (False, "budget_exhausted")
    assert ok(agents["retired"].act("search"))["reason"] == {
        "code": "terminated",
        "reason": "retired",
    }


def test_agent_tokens_still_work_after_restart(restarted: Restarted) -> None:
    agents = restarted.agents
    for agent in agents.values():
        assert ok(agent.client.get(agent.path))["agent_id"] == agent.agent_id


# -- quarantine ---------------------------------------------------------------------------


QUARANTINED_REQUESTS = [
    pytest.param("GET", "", None, id="status"),
    pytest.param("GET", "/token", None, id="token"),
    pytest.param("PUT", "/policy", _policy(), id="policy"),
    pytest.param("POST", "/actions", {"tool": "search"}, id="request"),
    pytest.param("GET", "/actions/act-1", None, id="action"),
    pytest.param("GET", "/actions/act-1?wait=5", None, id="action-wait"),
    pytest.param("POST", "/actions/act-1/outcome", {"status": "success"}, id="outcome"),
    pytest.param("GET", "/actions/pending", None, id="pending"),
    pytest.param("POST", "/actions/act-2/approve", {"approver": "a"}, id="approve"),
    pytest.param("POST", "/actions/act-2/reject", {"approver": "a", "reason": "r"}, id="reject"),
    pytest.param("POST", "/scars", {"severity": "minor", "reason": "r"}, id="scar"),
    pytest.param("POST", "/terminate", {"reason": "r", "by": "a"}, id="terminate"),
    pytest.param("GET", "/log", None, id="log"),
    pytest.param("GET", "/verify", None, id="verify"),
]


@pytest.fixture(scope="module")
def quarantine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, Agent, Agent]]:
    """Two agents; one byte of the tampered agent's log changed while stopped."""
    server = GuardServer(tmp_path_factory.mktemp("quarantine") / "guard-data").start()
    api = Api(server)
    try:
        tampered, healthy = api.create("tampered", _policy()), api.create("healthy", _policy())
        for agent in (tampered, healthy):
            ok(agent.act("search"))
            ok(agent.act("send_email"))
        assert server.stop() == 0
        path = server.data_dir / "agents" / "tampered.jsonl"
        data = bytearray(path.read_bytes())
        lines = data.split(b"\n")
        assert b'"kind":"action_requested"' in lines[2]
        at = data.index(b'"tool":"search"') + len(b'"tool":"s')
        data[at] = ord("S")  # one byte: "search" becomes "sSarch"
        path.write_bytes(bytes(data))
        server.start()
        yield api, tampered, healthy
    finally:
        api.close()
        server.kill()


def test_changed_byte_quarantines_only_that_agent_in_the_listing(
    quarantine: tuple[Api, Agent, Agent],
) -> None:
    api, _, healthy = quarantine
    entries = {e["agent_id"]: e for e in ok(api.admin.get("/v1/agents"))["agents"]}
    entry = entries["tampered"]
    assert entry["state"] == "quarantined"
    assert "status" not in entry
    assert entry["error"] == "line 3 (seq 2): hash does not match content"
    assert entries["healthy"]["state"] == "active"
    assert entries["healthy"]["status"] == api.status(healthy)


def test_startup_output_names_the_quarantined_agent(quarantine: tuple[Api, Agent, Agent]) -> None:
    api, _, _ = quarantine
    output = api.server.read_output().split("public key:")[-1]
    assert "agents: 1 loaded, 1 quarantined" in output
    assert "quarantined: tampered: line 3 (seq 2): hash does not match content" in output


@pytest.mark.parametrize(("method", "suffix", "body"), QUARANTINED_REQUESTS)
@pytest.mark.parametrize("who", ["admin", "own-token"])
def test_every_request_under_a_quarantined_agent_is_503_quarantined(
    quarantine: tuple[Api, Agent, Agent], method: str, suffix: str, body: Any, who: str
) -> None:
    api, tampered, _ = quarantine
    client = api.admin if who == "admin" else tampered.client
    response = client.request(method, f"{tampered.path}{suffix}", json=body)
    if who == "own-token" and response.status_code == 403:
        return  # an admin-only endpoint: the agent token is refused first
    error = assert_error(response, 503, "quarantined")
    assert "hash does not match content" in error["error"]


def test_quarantined_agent_id_stays_taken(quarantine: tuple[Api, Agent, Agent]) -> None:
    api, _, _ = quarantine
    response = api.admin.post("/v1/agents", json={"agent_id": "tampered", "policy": _policy()})
    assert_error(response, 409, "agent_exists")


def test_other_agents_work_while_one_is_quarantined(quarantine: tuple[Api, Agent, Agent]) -> None:
    api, _, healthy = quarantine
    assert ok(healthy.act("search"))["decision"] == "allowed"
    assert ok(api.approve(healthy, "act-2"))["decision"] == "allowed"
    assert ok(api.admin.get(f"{healthy.path}/verify"))["ok"] is True
    assert api.create(policy=_policy()).agent_id


# -- torn tail ------------------------------------------------------------------------------


def test_torn_tail_is_moved_aside_and_the_agent_stays_active(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create("torn", _policy())
    ok(agent.act("search"))
    before = snapshot(api, [agent])
    assert api.server.stop() == 0
    path = api.server.data_dir / "agents" / "torn.jsonl"
    intact = path.read_bytes()
    partial = b'{"action_id":"act-2","cost":1,"hash":"ab'
    with path.open("ab") as fh:
        fh.write(partial)
    api.server.start()
    assert path.read_bytes() == intact
    assert (path.parent / "torn.jsonl.torn").read_bytes() == partial
    assert snapshot(api, [agent]) == before
    entry = ok(api.admin.get("/v1/agents"))["agents"][0]
    assert (entry["agent_id"], entry["state"]) == ("torn", "active")
    assert "torn tail moved aside: torn" in api.server.read_output()
    assert ok(agent.act("search"))["action_id"] == "act-2"
    assert ok(api.admin.get(f"{agent.path}/verify"))["ok"] is True


# -- read-only without audit.key ----------------------------------------------------------------


READ_ONLY_WRITES = [
    pytest.param("POST", "/v1/agents", {"agent_id": "new-one", "policy": _policy()}, id="create"),
    pytest.param("PUT", "{path}/policy", _policy(), id="policy"),
    pytest.param("POST", "{path}/actions", {"tool": "search"}, id="request"),
    pytest.param("POST", "{path}/actions/act-1/outcome", {"status": "success"}, id="outcome"),
    pytest.param("POST", "{path}/actions/act-2/approve", {"approver": "a"}, id="approve"),
    pytest.param(
        "POST", "{path}/actions/act-2/reject", {"approver": "a", "reason": "r"}, id="reject"
    ),
    pytest.param("POST", "{path}/scars", {"severity": "minor", "reason": "r"}, id="scar"),
    pytest.param("POST", "{path}/terminate", {"reason": "r", "by": "a"}, id="terminate"),
]


@pytest.fixture(scope="module")
def read_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, Agent]]:
    server = GuardServer(tmp_path_factory.mktemp("read-only") / "guard-data").start()
    api = Api(server)
    try:
        agent = api.create("kept", _policy())
        ok(agent.act("search"))
        ok(agent.act("send_email"))
        public_key = server.public_key
        assert server.stop() == 0
        (server.data_dir / "keys" / "audit.key").unlink()
        server.start()
        assert ok(api.client().get("/v1/public-key"))["public_key"] == public_key
        yield api, agent
    finally:
        api.close()
        server.kill()


def test_without_audit_key_startup_says_read_only(read_only: tuple[Api, Agent]) -> None:
    api, _ = read_only
    output = api.server.read_output().split("agents: 1 loaded")[-1]
    assert "read-only" in output
    assert "keys/audit.key" in output


def test_without_audit_key_reads_work(read_only: tuple[Api, Agent]) -> None:
    api, agent = read_only
    status = api.status(agent)
    assert status["actions_allowed"] == 1
    assert ok(agent.client.get(agent.path)) == status
    assert ok(api.admin.get("/v1/agents"))["agents"][0]["status"] == status
    assert ok(agent.client.get(f"{agent.path}/actions/act-1"))["status"] == "allowed"
    assert ok(agent.client.get(f"{agent.path}/actions/act-2", params={"wait": 0.1}))["status"] == (
        "pending_approval"
    )
    assert len(ok(api.admin.get(f"{agent.path}/actions/pending"))["pending"]) == 1
    assert len(api.records(agent)) == 6
    assert ok(api.admin.get(f"{agent.path}/verify"))["ok"] is True
    assert ok(api.admin.get(f"{agent.path}/token")) == {"token": agent.token}


@pytest.mark.parametrize(("method", "path", "body"), READ_ONLY_WRITES)
def test_without_audit_key_every_write_is_503_read_only(
    read_only: tuple[Api, Agent], method: str, path: str, body: Any
) -> None:
    api, agent = read_only
    before = api.status(agent)
    response = api.admin.request(method, path.format(path=agent.path), json=body)
    assert_error(response, 503, "read_only")
    assert api.status(agent) == before


def test_without_audit_key_a_retried_request_is_answered_from_the_log(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create("retrier", _policy())
    body = {"tool": "search", "input": {"q": "x"}}
    first = ok(
        agent.client.post(f"{agent.path}/actions", json=body, headers={"Idempotency-Key": "k1"})
    )
    assert api.server.stop() == 0
    (api.server.data_dir / "keys" / "audit.key").unlink()
    api.server.start()
    records = len(api.records(agent))
    again = agent.client.post(f"{agent.path}/actions", json=body, headers={"Idempotency-Key": "k1"})
    assert ok(again) == first
    other = {"tool": "search", "input": {"q": "y"}}
    conflict = agent.client.post(
        f"{agent.path}/actions", json=other, headers={"Idempotency-Key": "k1"}
    )
    assert_error(conflict, 409, "idempotency_conflict")
    new_key = agent.client.post(
        f"{agent.path}/actions", json=body, headers={"Idempotency-Key": "k2"}
    )
    assert_error(new_key, 503, "read_only")
    assert len(api.records(agent)) == records


# -- token.key ----------------------------------------------------------------------------------


def test_replacing_token_key_invalidates_every_agent_token(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create("holder", _policy())
    assert api.server.stop() == 0
    key_path = api.server.data_dir / "keys" / "token.key"
    key_path.unlink()
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets.token_bytes(32))
    api.server.start()
    assert_error(agent.client.get(agent.path), 401, "unauthorized")
    token = ok(api.admin.get(f"{agent.path}/token"))["token"]
    assert token != agent.token
    assert ok(api.client(token).get(agent.path))["agent_id"] == "holder"


# -- kill -9 ------------------------------------------------------------------------------------


def test_kill_9_loses_no_acknowledged_record_and_quarantines_nothing(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create("crashed", _policy())
    for _ in range(5):
        ok(agent.act("search"))
    ok(agent.act("send_email"))
    before = snapshot(api, [agent])
    api.server.kill()
    api.server.start()
    assert snapshot(api, [agent]) == before
    assert "agents: 1 loaded, 0 quarantined" in api.server.read_output().split("public key")[-1]


# -- a log that lost its first records ------------------------------------------------


def test_log_cut_before_a_later_policy_record_is_quarantined_not_refilled(
    fresh_api: Api,
) -> None:
    api = fresh_api
    agent = api.create("cut", _policy())
    ok(agent.act("search"))
    ok(api.admin.put(f"{agent.path}/policy", json=_policy()))
    assert api.server.stop() == 0
    path = api.server.data_dir / "agents" / "cut.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    policy_at = max(i for i, line in enumerate(lines) if b'"kind":"policy"' in line)
    path.write_bytes(b"".join(lines[policy_at:]))
    api.server.start()
    entry = ok(api.admin.get("/v1/agents"))["agents"][0]
    assert (entry["agent_id"], entry["state"]) == ("cut", "quarantined")
    assert entry["error"] == f"line 1 (seq {policy_at}): log does not start at seq 0"
    assert_error(agent.act("search"), 503, "quarantined")
