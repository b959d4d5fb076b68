"""Requests about an action that left memory (``--recent-actions 1``), over
real HTTP: its view and receipt, an outcome and a second one, an approval
too late; each answered as while it was in memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from client_sdk import verify_receipt
from tests.guardd.conftest import assert_error, ok
from tests.support.server import GuardServer

POLICY = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {"search": {"cost": 1}, "send_email": {"cost": 5, "requires_approval": True}},
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[GuardServer]:
    guard = GuardServer(tmp_path / "guard-data", args=["--recent-actions", "1"]).start()
    yield guard
    guard.kill()


def test_an_old_action_answers_as_it_did_in_memory(server: GuardServer) -> None:
    with server.client(server.admin_token) as admin:
        ok(admin.post("/v1/agents", json={"agent_id": "bot", "policy": POLICY}), 201)
        path = "/v1/agents/bot/actions"
        ok(admin.post(path, json={"tool": "search", "input": {"q": "old"}}))
        ok(admin.post(path, json={"tool": "send_email", "input": {"to": "a"}}))
        ok(admin.post(f"{path}/act-2/approve", json={"approver": "alice"}))
        fresh = {n: ok(admin.get(f"{path}/act-{n}")) for n in (1, 2)}
        late = assert_error(
            admin.post(f"{path}/act-2/approve", json={"approver": "bob"}), 409, "invalid_state"
        )
        for _ in range(4):  # act-1 and act-2 leave memory
            ok(admin.post(path, json={"tool": "search"}))
        for n in (1, 2):
            assert ok(admin.get(f"{path}/act-{n}")) == fresh[n]
        receipt = fresh[1]["receipt"]
        assert verify_receipt(
            receipt,
            server.public_key,
            agent_id="bot",
            tool="search",
            input={"q": "old"},
            max_age_secs=3600,
        )
        assert (
            assert_error(
                admin.post(f"{path}/act-2/approve", json={"approver": "bob"}), 409, "invalid_state"
            )
            == late
        )
        ok(admin.post(f"{path}/act-1/outcome", json={"status": "success"}))
        second = admin.post(f"{path}/act-1/outcome", json={"status": "failure"})
        body = assert_error(second, 409, "invalid_state")
        assert body["error"] == "action act-1 already has outcome success"
        view = ok(admin.get(f"{path}/act-1"))
        assert view == dict(fresh[1], status="completed", outcome="success")


def test_a_restart_reads_an_old_outcome_back(server: GuardServer) -> None:
    with server.client(server.admin_token) as admin:
        ok(admin.post("/v1/agents", json={"agent_id": "bot", "policy": POLICY}), 201)
        ok(admin.post("/v1/agents/bot/actions", json={"tool": "search"}))
        ok(admin.post("/v1/agents/bot/actions/act-1/outcome", json={"status": "success"}))
        for _ in range(4):
            ok(admin.post("/v1/agents/bot/actions", json={"tool": "search"}))
    server.stop()
    server.start()
    with server.client(server.admin_token) as admin:
        response = admin.post("/v1/agents/bot/actions/act-1/outcome", json={"status": "failure"})
        assert assert_error(response, 409, "invalid_state")["error"] == (
            "action act-1 already has outcome success"
        )
