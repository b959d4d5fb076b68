"""A disk that fails: short writes, EIO on write, EIO on fsync.

guardd is started with GUARD_TEST_FAULTS (agents_runtime/log/files/faults.py), which
makes the log writes of one agent fail after one good append. What must
happen (docs/design.md, "Write failures fence the agent"): the request that
hits the failure, and every request after it that would write that agent's
log, is answered 500 ``internal``, never as a success; reads show the
committed state (the state never runs ahead of the file); other agents go on;
after a restart without the fault the state is what the log says.

A short write leaves the first half of a line, without its newline, at the end
of the file. That is exactly what a crash in the middle of a write leaves, it
was never acknowledged (the caller got 500), and nothing was written after it
(the agent was fenced at once). So startup treats it as a torn tail: moved
to ``<id>.jsonl.torn``, a warning, the agent stays active. Quarantine is for
logs that fail verification in any other way, which would need an operator.

The logs of all agents are made durable together: the batches of every
agent waiting at one moment are written, then one flush makes them durable
(agents_runtime/log/files/committer.py). A failed flush fails every agent whose batch
was in it (the last test: 20 agents in one round on a slow disk, the fault
in one agent's flush), each exactly as one agent alone is failed above.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agents_runtime.log.files.faults import EIO_FSYNC, EIO_WRITE, SHORT_WRITE, SLOW_FLUSH_VAR
from tests.reliability.support import (
    assert_status_matches_log,
    ok_json,
    policy,
    read_log,
    verify_file,
)
from tests.support.server import GuardServer

VICTIM = "victim"
BYSTANDER = "bystander"
CONCURRENT = 8
_WORK = {"tool": "work", "input": {"n": 1}}


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[[str], GuardServer]]:
    """Start guardd with GUARD_TEST_FAULTS set to the given value, then create two
    agents with two allowed actions each: three appends of the victim's log
    (its creation counts as one)."""
    servers: list[GuardServer] = []

    def start(faults: str) -> GuardServer:
        server = GuardServer(tmp_path / "guard-data", env={"GUARD_TEST_FAULTS": faults})
        servers.append(server)
        server.start()
        _populate(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.kill()


def _populate(server: GuardServer) -> None:
    with server.client(server.admin_token) as admin:
        for agent_id in (VICTIM, BYSTANDER):
            body = {"agent_id": agent_id, "policy": policy()}
            ok_json(admin.post("/v1/agents", json=body), 201)
            for _ in range(2):
                decision = ok_json(admin.post(f"/v1/agents/{agent_id}/actions", json=_WORK))
                assert decision["decision"] == "allowed"


def _assert_internal(response: Any) -> None:
    assert response.status_code == 500, (response.status_code, response.text)
    assert response.json()["code"] == "internal"


def _restart_without_faults(server: GuardServer) -> None:
    server.extra_env.pop("GUARD_TEST_FAULTS")
    server.restart()


@pytest.mark.parametrize("fault", [SHORT_WRITE, EIO_WRITE, EIO_FSYNC])
def test_failed_log_write_is_500_fences_the_agent_and_restart_recovers(
    start: Callable[[str], GuardServer], fault: str
) -> None:
    server = start(f"{VICTIM}:{fault}:4")
    admin = server.client(server.admin_token)
    victim_url = f"/v1/agents/{VICTIM}"

    # One append still succeeds; its state is the committed state from here on.
    first = ok_json(admin.post(f"{victim_url}/actions", json=_WORK))
    assert len(first.pop("receipt")) == 2
    assert first == {"decision": "allowed", "action_id": "act-3", "cost": 1, "remaining": 999997}
    committed = ok_json(admin.get(victim_url))
    committed_records = read_log(admin, VICTIM)

    # The next group commit fails: every request in it, and every later write, gets 500.
    with ThreadPoolExecutor(CONCURRENT) as pool:
        responses = list(
            pool.map(lambda _: admin.post(f"{victim_url}/actions", json=_WORK), range(CONCURRENT))
        )
    for response in responses:
        _assert_internal(response)
    for method, path, body in [
        ("POST", f"{victim_url}/actions", _WORK),
        ("POST", f"{victim_url}/actions/act-3/outcome", {"status": "success"}),
        ("POST", f"{victim_url}/scars", {"severity": "minor", "reason": "x"}),
        ("POST", f"{victim_url}/terminate", {"reason": "x", "by": "test"}),
        ("PUT", f"{victim_url}/policy", policy()),
    ]:
        _assert_internal(admin.request(method, path, json=body))

    # Reads show the committed state: nothing of the failed writes.
    assert ok_json(admin.get(victim_url)) == committed
    assert read_log(admin, VICTIM) == committed_records
    assert ok_json(admin.get(f"{victim_url}/actions/act-4"), 404)["code"] == "unknown_action"
    assert ok_json(admin.get(f"{victim_url}/actions/act-3"))["status"] == "allowed"
    report = ok_json(admin.get(f"{victim_url}/verify"))
    assert report["ok"] is True
    assert report["head"] == committed["head"]

    # The other agent is served as before.
    decision = ok_json(admin.post(f"/v1/agents/{BYSTANDER}/actions", json=_WORK))
    assert decision["decision"] == "allowed"
    assert ok_json(admin.get(f"/v1/agents/{BYSTANDER}/verify"))["ok"] is True
    listed = {a["agent_id"]: a["state"] for a in ok_json(admin.get("/v1/agents"))["agents"]}
    assert listed == {BYSTANDER: "active", VICTIM: "active"}
    admin.close()
    assert "refusing writes until restart" in server.read_output()

    # Restart without the fault: the state is the log, and writes work again.
    log_path = server.data_dir / "agents" / f"{VICTIM}.jsonl"
    torn_path = log_path.with_name(log_path.name + ".torn")
    _restart_without_faults(server)
    with server.client(server.admin_token) as admin:
        listed = {a["agent_id"]: a["state"] for a in ok_json(admin.get("/v1/agents"))["agents"]}
        assert listed == {BYSTANDER: "active", VICTIM: "active"}
        records = read_log(admin, VICTIM)
        status = ok_json(admin.get(victim_url))
        assert_status_matches_log(status, records)
        assert ok_json(admin.get(f"{victim_url}/verify"))["ok"] is True
        assert verify_file(log_path, server.public_key, VICTIM).ok
        if fault == EIO_FSYNC:
            # The writes reached the page cache before fsync failed, so the
            # unacknowledged records are in the file: the log has them, the state too.
            assert status["head"]["seq"] > committed["head"]["seq"]
            assert status["actions_allowed"] > committed["actions_allowed"]
            assert records[: len(committed_records)] == committed_records
        else:
            # Nothing whole was written; a short write's half line was moved aside.
            assert status == committed
            assert records == committed_records
        assert torn_path.exists() is (fault == SHORT_WRITE)
        if fault == SHORT_WRITE:
            torn = torn_path.read_bytes()
            assert torn.startswith(b'{"action_id":"act-4"')
            assert b"\n" not in torn
            assert f"torn tail moved aside: {VICTIM}" in server.read_output()
        assert log_path.read_bytes().endswith(b"\n")
        decision = ok_json(admin.post(f"{victim_url}/actions", json=_WORK))
        assert decision["decision"] == "allowed"
        assert decision["action_id"] == f"act-{status['actions_allowed'] + 1}"
        assert ok_json(admin.get(f"{victim_url}/verify"))["ok"] is True


def test_fault_strikes_after_the_given_number_of_appends(
    start: Callable[[str], GuardServer],
) -> None:
    server = start(f"{VICTIM}:{EIO_WRITE}:3")
    with server.client(server.admin_token) as admin:
        before = ok_json(admin.get(f"/v1/agents/{VICTIM}"))
        _assert_internal(admin.post(f"/v1/agents/{VICTIM}/actions", json=_WORK))
        assert ok_json(admin.get(f"/v1/agents/{VICTIM}")) == before


def test_bad_fault_spec_stops_guardd_with_a_message(tmp_path: Path) -> None:
    server = GuardServer(tmp_path / "guard-data", env={"GUARD_TEST_FAULTS": "a:melt"})
    try:
        with pytest.raises(RuntimeError, match="guardd exited with 1"):
            server.start()
    finally:
        server.kill()
    assert "fault 'melt' is not one of short_write, eio_write, eio_fsync" in server.read_output()


def test_bad_slow_flush_stops_guardd_with_a_message(tmp_path: Path) -> None:
    server = GuardServer(tmp_path / "guard-data", env={SLOW_FLUSH_VAR: "2.5"})
    try:
        with pytest.raises(RuntimeError, match="guardd exited with 1"):
            server.start()
    finally:
        server.kill()
    assert f"{SLOW_FLUSH_VAR}: '2.5' is not a whole number of milliseconds" in (
        server.read_output()
    )


@pytest.mark.parametrize("fault", [SHORT_WRITE, EIO_WRITE, EIO_FSYNC])
def test_failed_creation_is_500_and_leaves_no_agent_behind(tmp_path: Path, fault: str) -> None:
    server = GuardServer(tmp_path / "guard-data", env={"GUARD_TEST_FAULTS": f"newcomer:{fault}"})
    try:
        server.start()
        with server.client(server.admin_token) as admin:
            body = {"agent_id": "newcomer", "policy": policy()}
            for _ in range(2):  # the fault holds: the second try fails the same way
                _assert_internal(admin.post("/v1/agents", json=body))
                assert ok_json(admin.get("/v1/agents/newcomer"), 404)["code"] == "not_found"
            assert ok_json(admin.get("/v1/agents")) == {"agents": []}
        assert list((server.data_dir / "agents").iterdir()) == []
        _restart_without_faults(server)
        with server.client(server.admin_token) as admin:
            ok_json(admin.post("/v1/agents", json=body), 201)
            assert ok_json(admin.get("/v1/agents/newcomer/verify"))["ok"] is True
    finally:
        server.kill()


ROUND = [f"round-{n:02d}" for n in range(20)]


def test_a_failed_shared_flush_is_500_for_every_agent_of_its_round_and_fences_each(
    tmp_path: Path,
) -> None:
    """The agents are created first; then guardd runs on a slow disk (every
    flush waits 800 ms first), so the 20 requests sent while the gate's
    round is being flushed all gather in the next round, and with a fault
    on one agent's flush, so that round's one flush fails, for all 20."""
    victim = ROUND[7]
    server = GuardServer(tmp_path / "guard-data")
    clients = []
    try:
        server.start()
        with server.client(server.admin_token) as creator:
            for agent_id in ["gate", *ROUND]:
                body = {"agent_id": agent_id, "policy": policy()}
                ok_json(creator.post("/v1/agents", json=body), 201)
        server.extra_env = {"GUARD_TEST_FAULTS": f"{victim}:{EIO_FSYNC}", SLOW_FLUSH_VAR: "800"}
        server.restart()
        admin = server.client(server.admin_token)
        clients.append(admin)
        before = {a: ok_json(admin.get(f"/v1/agents/{a}")) for a in ROUND}
        own = {a: server.client(server.admin_token) for a in ["gate", *ROUND]}
        clients += own.values()
        for agent_id, client in own.items():  # connected before the round
            ok_json(client.get(f"/v1/agents/{agent_id}"))
        gate_log = server.data_dir / "agents" / "gate.jsonl"
        gate_size = gate_log.stat().st_size
        with ThreadPoolExecutor(len(own)) as pool:

            def act(agent_id: str) -> Any:
                return own[agent_id].post(f"/v1/agents/{agent_id}/actions", json=_WORK)

            gate = pool.submit(act, "gate")
            # The gate's batch is written: its round is in its flush now.
            deadline = time.monotonic() + 5.0
            while gate_log.stat().st_size == gate_size:
                assert time.monotonic() < deadline, "the gate's batch was never written"
                time.sleep(0.005)
            responses = dict(zip(ROUND, pool.map(act, ROUND), strict=True))
            assert ok_json(gate.result())["decision"] == "allowed"
        # The victim's round failed as one: the victim and every agent with it.
        output = server.read_output()
        for agent_id, response in responses.items():
            url = f"/v1/agents/{agent_id}"
            _assert_internal(response)
            assert f"agent {agent_id}: append to {agent_id}.jsonl failed" in output
            # fenced: writes refused, reads show the committed state
            _assert_internal(admin.post(f"{url}/actions", json=_WORK))
            assert ok_json(admin.get(url)) == before[agent_id]
        # The gate's round was flushed before: it goes on.
        assert ok_json(admin.post("/v1/agents/gate/actions", json=_WORK))["decision"] == "allowed"

        # A restart without the faults: every log loads, nothing quarantined,
        # each agent's state is its log, and every agent writes again.
        server.extra_env = {}
        server.restart()
        with server.client(server.admin_token) as fresh:
            listed = {a["agent_id"]: a["state"] for a in ok_json(fresh.get("/v1/agents"))["agents"]}
            assert listed == dict.fromkeys(["gate", *ROUND], "active")
            for agent_id in ROUND:
                url = f"/v1/agents/{agent_id}"
                assert_status_matches_log(ok_json(fresh.get(url)), read_log(fresh, agent_id))
                assert ok_json(fresh.post(f"{url}/actions", json=_WORK))["decision"] == "allowed"
                assert ok_json(fresh.get(f"{url}/verify"))["ok"] is True
    finally:
        for client in clients:
            client.close()
        server.kill()
