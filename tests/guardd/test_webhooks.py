"""Webhooks with a real local receiver: a threaded HTTP server on 127.0.0.1
that records what it gets and checks each signature with its own
implementation of the Standard Webhooks scheme."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import GuardServer, free_port

KEY = bytes(range(32))
SECRET = "whsec_" + base64.b64encode(KEY).decode()
POLICY = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {"search": {"cost": 1}, "send_email": {"cost": 5, "requires_approval": True}},
}


class Receiver:
    """Records every POST; answers 204 when its signature checks out."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.got: list[dict[str, Any]] = []
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                msg_id = self.headers["webhook-id"]
                stamp = self.headers["webhook-timestamp"]
                signed = f"{msg_id}.{stamp}.".encode() + body
                expected = base64.b64encode(hmac.new(KEY, signed, hashlib.sha256).digest())
                given = [s.split(",", 1)[1] for s in self.headers["webhook-signature"].split()]
                valid = any(hmac.compare_digest(g.encode(), expected) for g in given)
                receiver.got.append({"id": msg_id, "valid": valid, "body": json.loads(body)})
                self.send_response(204 if valid else 400)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def wait_for(self, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.got) < count:
            assert time.monotonic() < deadline, self.got
            time.sleep(0.05)
        return self.got


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hook = Receiver(free_port())
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
    assert all(g["valid"] for g in got)
    types = [(g["body"]["type"], g["body"]["data"].get("decision")) for g in got]
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
        data = g["body"]["data"]
        assert g["id"] == f"evt_bot_{data['seq']}"
        record = log[data["seq"]]  # every event is a record that exists
        assert record["ts"] == data["ts"]
        if g["body"]["type"] in kinds:
            assert record["kind"] == kinds[g["body"]["type"]]
    first = got[0]["body"]["data"]
    assert (first["tool"], first["input"], first["cost"], first["action_id"]) == (
        "send_email",
        {"to": "a"},
        5,
        "act-2",
    )
    assert got[1]["body"]["data"]["approved_by"] == "alice"


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
    assert got[0]["body"]["type"] == "approval.required"
    assert got[0]["valid"]


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
    assert [g["id"] for g in got] == ["evt_bot_3"]
    with admin(server) as client:
        client.post("/v1/agents/bot/actions/act-1/reject", json={"approver": "a", "reason": "no"})
    got = receiver.wait_for(2)
    assert got[1]["body"]["data"]["decision"] == "rejected"
    assert (Path(server.data_dir) / "webhooks").is_dir()


def test_slack_format_names_tool_agent_cost_input_and_links_the_console(
    guardd: Callable[..., GuardServer], receiver: Receiver
) -> None:
    receiver.start()
    server = guardd("--webhook-format", "slack", "--public-url", "https://guard.example")
    with admin(server) as client:
        client.post("/v1/agents", json={"agent_id": "bot", "policy": POLICY})
        client.post("/v1/agents/bot/actions", json={"tool": "send_email", "input": {"to": "x"}})
    text = receiver.wait_for(1)[0]["body"]["text"]
    assert "`bot`" in text
    assert "`send_email`" in text
    assert "cost 5" in text
    assert '{"to": "x"}' in text
    assert "<https://guard.example/#/agents/bot|Open in the console>" in text


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
