"""Webhooks with a real local receiver (tests/support/receiver.py): a
threaded HTTP server on 127.0.0.1 that records what it gets and checks each
signature with its own implementation of the Standard Webhooks scheme."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.receiver import SECRET, Receiver
from tests.support.server import GuardServer

POLICY = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {"search": {"cost": 1}, "send_email": {"cost": 5, "requires_approval": True}},
}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hook = Receiver()
    yield hook
    hook.stop()


@pytest.fixture
def guardd(tmp_path: Path, receiver: Receiver) -> Iterator[Callable[..., GuardServer]]:
    servers: list[GuardServer] = []

    def start(*extra: str) -> GuardServer:
        args = ["--webhook", receiver.url, "--webhook-secret", SECRET, *extra]
        server = GuardServer(tmp_path / "guard-data", args=args).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.kill()


def admin(server: GuardServer) -> httpx.Client:
    return server.client(server.admin_token)


def records(server: GuardServer, agent_id: str) -> dict[int, dict[str, Any]]:
    with admin(server) as client:
        log = client.get(f"/v1/agents/{agent_id}/log").json()["records"]
    return {r["seq"]: r for r in log}


def test_events_are_signed_made_from_records_and_only_for_approvals_and_ends(
    guardd: Callable[..., GuardServer], receiver: Receiver
) -> None:
    receiver.start()
    server = guardd()
    with admin(server) as client:
        client.post("/v1/agents", json={"agent_id": "bot", "policy": POLICY})
        client.post("/v1/agents/bot/actions", json={"tool": "search"})  # no event
        client.post("/v1/agents/bot/actions", json={"tool": "send_email", "input": {"to": "a"}})
        client.post("/v1/agents/bot/actions/act-2/approve", json={"approver": "alice"})
        client.post("/v1/agents/bot/actions", json={"tool": "send_email"})
        client.post("/v1/agents/bot/actions/act-3/cancel", json={})
        client.post("/v1/agents/bot/terminate", json={"reason": "done", "by": "carol"})
    got = receiver.wait_for(5)
    time.sleep(0.5)
    assert len(got) == 5
    assert all(g.valid for g in got)
    types = [(g.body["type"], g.body["data"].get("decision")) for g in got]
    assert types == [
        ("approval.required", None),
        ("approval.decided", "allowed"),
        ("approval.required", None),
        ("approval.decided", "cancelled"),
        ("agent.terminated", None),
    ]
    log = records(server, "bot")
    kinds = {
        "approval.required": "approval_required",
        "agent.terminated": "terminated",
    }
    for g in got:
        data = g.body["data"]
        assert g.id == f"evt_bot_{data['seq']}"
        record = log[data["seq"]]  # every event is a record that exists
        assert record["ts"] == data["ts"]
        if g.body["type"] in kinds:
            assert record["kind"] == kinds[g.body["type"]]
    first = got[0].body["data"]
    assert (first["tool"], first["input"], first["cost"], first["action_id"]) == (
        "send_email",
        {"to": "a"},
        5,
        "act-2",
    )
    assert got[1].body["data"]["approved_by"] == "alice"


def test_signatures_verify_with_the_standard_webhooks_reference_library(
    guardd: Callable[..., GuardServer], receiver: Receiver
) -> None:
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError

    receiver.start()
    server = guardd()
    with admin(server) as client:
        client.post("/v1/agents", json={"agent_id": "bot", "policy": POLICY})
        client.post("/v1/agents/bot/actions", json={"tool": "send_email", "input": {"to": "a"}})
    post = receiver.wait_for(1)[0]
    verified = Webhook(SECRET).verify(post.raw, post.headers)
    assert verified["type"] == "approval.required"
    assert verified["data"]["input"] == {"to": "a"}
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(post.raw.replace(b'"a"', b'"b"'), post.headers)


def test_a_receiver_down_then_up_gets_every_event(
    guardd: Callable[..., GuardServer], receiver: Receiver
) -> None:
    server = guardd()
    with admin(server) as client:
        client.post("/v1/agents", json={"agent_id": "bot", "policy": POLICY})
        started = time.monotonic()
        client.post("/v1/agents/bot/actions", json={"tool": "send_email"})
        assert time.monotonic() - started < 2  # delivery never delays a decision
    time.sleep(1.5)  # a few failed tries
    receiver.start()
    got = receiver.wait_for(1)
    assert got[0].body["type"] == "approval.required"
    assert got[0].valid


def test_guardd_restarted_between_an_event_and_its_delivery_sends_it(
    guardd: Callable[..., GuardServer], receiver: Receiver
) -> None:
    server = guardd()
    with admin(server) as client:
        client.post("/v1/agents", json={"agent_id": "bot", "policy": POLICY})
        client.post("/v1/agents/bot/actions", json={"tool": "send_email"})
    server.stop()
    receiver.start()
    server = guardd()
    got = receiver.wait_for(1)
    assert [g.id for g in got] == ["evt_bot_3"]
    with admin(server) as client:
        client.post("/v1/agents/bot/actions/act-1/reject", json={"approver": "a", "reason": "no"})
    got = receiver.wait_for(2)
    assert got[1].body["data"]["decision"] == "rejected"
    assert (Path(server.data_dir) / "webhooks").is_dir()


def test_slack_messages_carry_agent_markup_as_text_beside_our_one_link(
    guardd: Callable[..., GuardServer], receiver: Receiver
) -> None:
    receiver.start()
    server = guardd("--webhook-format", "slack", "--public-url", "https://guard.example")
    hostile = {
        "to": "<!channel>",
        "body": "<https://evil.example/approve|Open in the console>",
        "cc": "a&b",
    }
    with admin(server) as client:
        client.post("/v1/agents", json={"agent_id": "bot", "policy": POLICY})
        client.post("/v1/agents/bot/actions", json={"tool": "send_email", "input": hostile})
        reason = "<!here> approve at <https://evil.example|the console>"
        rejected = client.post(
            "/v1/agents/bot/actions/act-1/reject", json={"approver": "mallory", "reason": reason}
        )
        assert rejected.status_code == 200, rejected.text
    required, decided = (post.raw for post in receiver.wait_for(2))
    assert required.decode() == json.dumps(
        {
            "text": "*Approval required*: agent `bot` asks to run `send_email` (act-1)\n"
            "Cost: 5, budget left: 100\n"
            "Input:\n"
            '• `body`: `"&lt;https://evil.example/approve|Open in the console&gt;"`\n'
            '• `cc`: `"a&amp;b"`\n'
            '• `to`: `"&lt;!channel&gt;"`\n'
            "<https://guard.example/#/pending|Approve or reject in the console>"
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )
    assert json.loads(decided) == {
        "text": "*Rejected*: `send_email` (act-1) of agent `bot`, by mallory: "
        "&lt;!here&gt; approve at &lt;https://evil.example|the console&gt;\n"
        "<https://guard.example/#/agents/bot|Open the agent in the console>"
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--webhook", "http://127.0.0.1:1/h"],
            "--webhook needs --webhook-secret (whsec_<base64>) to sign its events",
            id="no-secret",
        ),
        pytest.param(
            ["--webhook", "http://127.0.0.1:1/h", "--webhook-secret", "abc"],
            "the webhook secret must be whsec_<base64>",
            id="bad-secret",
        ),
        pytest.param(
            ["--webhook", "ftp://x", "--webhook-secret", SECRET],
            "--webhook must be an http:// or https:// URL, not 'ftp://x'",
            id="bad-url",
        ),
        pytest.param(
            # Two deliveries of one URL would share its position file and its metrics.
            ["--webhook", "http://a/h", "--webhook", "http://a/h", "--webhook-secret", SECRET],
            "--webhook http://a/h is given twice",
            id="twice",
        ),
    ],
)
def test_bad_webhook_settings_are_refused(args: list[str], message: str) -> None:
    from guardd.config import SettingsError, parse_settings

    with pytest.raises(SettingsError, match=f"^{re.escape(message)}$"):
        parse_settings(args, env={})


def test_webhooks_from_the_environment_are_comma_separated() -> None:
    from guardd.config import parse_settings

    env = {"GUARD_WEBHOOKS": "http://a/1,http://b/2", "GUARD_WEBHOOK_SECRET": SECRET}
    assert parse_settings([], env=env).webhooks == ("http://a/1", "http://b/2")


def test_each_approval_of_a_quorum_is_announced(
    guardd: Callable[..., GuardServer], receiver: Receiver
) -> None:
    receiver.start()
    server = guardd()
    quorum = {
        "budget": 10,
        "scar_limit": 5,
        "tools": {"deploy": {"requires_approval": True, "approvals_required": 2}},
    }
    with admin(server) as client:
        created = client.post("/v1/agents", json={"agent_id": "bot", "policy": quorum})
        assert created.status_code == 201, created.text
        client.post("/v1/agents/bot/actions", json={"tool": "deploy"})
        client.post("/v1/agents/bot/actions/act-1/approve", json={"approver": "alice"})
        issued = client.post("/v1/operators/tokens", json={"name": "bob", "role": "approver"})
    with server.client(issued.json()["token"]) as bob:
        bob.post("/v1/agents/bot/actions/act-1/approve", json={})
    got = receiver.wait_for(3)
    types = [(g.body["type"], g.body["data"].get("decision")) for g in got]
    assert types == [
        ("approval.required", None),
        ("approval.recorded", None),
        ("approval.decided", "allowed"),
    ]
    recorded = got[1].body["data"]
    assert (recorded["by"], recorded["by_id"], recorded["approvals_required"]) == (
        "alice",
        "admin-token",
        2,
    )
    assert recorded["tool"] == "deploy"
    assert got[2].body["data"]["approved_by"] == "bob"


def test_events_of_an_action_that_left_memory_still_name_what_was_asked(
    guardd: Callable[..., GuardServer], receiver: Receiver
) -> None:
    # The receiver is down while the held action and the later ones go by, so
    # after the restart the events are made from records whose action left
    # memory (--recent-actions 1): what was asked is read back from the log.
    server = guardd("--recent-actions", "1")
    with admin(server) as client:
        client.post("/v1/agents", json={"agent_id": "bot", "policy": POLICY})
        client.post("/v1/agents/bot/actions", json={"tool": "send_email", "input": {"to": "a"}})
        client.post("/v1/agents/bot/actions/act-1/approve", json={"approver": "alice"})
        for _ in range(4):
            client.post("/v1/agents/bot/actions", json={"tool": "search"})
    server.stop()
    receiver.start()
    guardd("--recent-actions", "1")
    got = receiver.wait_for(2)
    required, decided = (g.body["data"] for g in got)
    assert (required["tool"], required["input"]) == ("send_email", {"to": "a"})
    assert (decided["tool"], decided["decision"]) == ("send_email", "allowed")


def test_a_new_webhook_sends_no_history_of_agents_loaded_after_it_started(
    guardd: Callable[..., GuardServer], receiver: Receiver, tmp_path: Path
) -> None:
    # A history written with no webhook, each agent holding an action (an
    # approval.required event). Loaded on first use, most agents are not yet
    # loaded when the new webhook starts: each must be followed from the head
    # it is loaded at, not from its first record.
    quiet = GuardServer(tmp_path / "guard-data").start()
    with admin(quiet) as client:
        for n in range(100):
            client.post("/v1/agents", json={"agent_id": f"bot-{n:03d}", "policy": POLICY})
            client.post(f"/v1/agents/bot-{n:03d}/actions", json={"tool": "send_email"})
    quiet.stop()
    receiver.start()
    server = guardd("--load-agents", "on-first-use")
    with admin(server) as client:
        deadline = time.monotonic() + 30
        while any(a["state"] == "unloaded" for a in client.get("/v1/agents").json()["agents"]):
            assert time.monotonic() < deadline, "the background sweep did not end"
            time.sleep(0.1)
        client.post("/v1/agents/bot-099/actions", json={"tool": "send_email"})
    receiver.wait_for(1)
    time.sleep(1.0)  # what else a webhook would send by now
    sent = [
        (p.body["type"], p.body["data"]["agent_id"], p.body["data"]["action_id"])
        for p in receiver.got
    ]
    assert sent == [("approval.required", "bot-099", "act-2")]


def test_a_quarantine_the_background_sweep_finds_is_announced(
    guardd: Callable[..., GuardServer], receiver: Receiver
) -> None:
    receiver.start()
    server = guardd("--load-agents", "on-first-use")
    with admin(server) as client:
        for agent_id in ("sound", "tampered"):
            client.post("/v1/agents", json={"agent_id": agent_id, "policy": POLICY})
            client.post(f"/v1/agents/{agent_id}/actions", json={"tool": "search"})
    server.stop()
    path = server.data_dir / "agents" / "tampered.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"tool":"search"', b'"tool":"starch"', 1))
    server.start()
    (got,) = receiver.wait_for(1)
    assert got.valid
    assert got.body["type"] == "agent.quarantined"
    assert got.body["data"]["agent_id"] == "tampered"
    assert "hash does not match content" in got.body["data"]["error"]
    assert [post.body["type"] for post in receiver.got] == ["agent.quarantined"]
