"""guard-mcp's life as a process over stdio: how it stops on a signal while
its client still holds stdin open."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from client_sdk import AdminClient
from tests.client_sdk.proxy import Proxy as GuardProxy
from tests.guard_mcp.conftest import GUARD_MCP, UPSTREAM, Upstream, base_env, process_gone
from tests.support.server import GuardServer

#: The longest a stopping guard-mcp may take before the test calls it hung.
EXIT_WITHIN = 15.0


class RawClient:
    """An MCP client written by hand over guard-mcp's stdin and stdout, so the
    test holds the process (its PID, its open stdin) the SDK's client hides."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self._ids = iter(range(1, 1000))

    def send(self, method: str, params: dict[str, Any] | None = None, *, notify: bool = False):
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not notify:
            message["id"] = next(self._ids)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        return message.get("id")

    def answer(self, request_id: int) -> dict[str, Any]:
        """The answer to ``request_id`` (notifications before it are skipped)."""
        assert self.proc.stdout is not None
        while line := self.proc.stdout.readline():
            message = json.loads(line)
            if message.get("id") == request_id:
                return message
        raise AssertionError(f"guard-mcp closed its stdout before answering {request_id}")

    def initialize(self) -> None:
        params = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        }
        assert "result" in self.answer(self.send("initialize", params))
        self.send("notifications/initialized", notify=True)


def start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    with (cwd / "guard-mcp.err").open("w") as err:
        return subprocess.Popen(
            [str(GUARD_MCP), *args],
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )


@pytest.mark.parametrize(
    "signum",
    [pytest.param(s, id=s.name) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)],
)
def test_a_signal_stops_it_while_a_call_waits_and_stdin_stays_open(
    server: GuardServer,
    admin: AdminClient,
    new_agent,
    upstream: Upstream,
    tmp_path: Path,
    signum: signal.Signals,
) -> None:
    agent = new_agent({"echo": {"requires_approval": True}})
    env = base_env(server.url, agent.token, upstream)
    proc = start(["--", sys.executable, str(UPSTREAM)], env, tmp_path)
    try:
        client = RawClient(proc)
        client.initialize()
        client.send("tools/call", {"name": "echo", "arguments": {"text": "held"}})
        while not admin.list_pending(agent.agent_id):
            assert proc.poll() is None
        upstream_pid = upstream.pid
        assert upstream_pid is not None
        proc.send_signal(signum)
        # stdin stays open all along: only the signal can stop it.
        returncode = proc.wait(EXIT_WITHIN)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.stdout is not None
        proc.stdout.close()
    assert returncode == 0
    assert process_gone(upstream_pid)
    action = admin.get_action(agent.agent_id, "act-1")
    assert (action.status, action.reason) == (
        "cancelled",
        {"code": "cancelled", "by": "agent", "reason": f"guard-mcp: stopped on {signum.name}"},
    )
    assert admin.list_pending(agent.agent_id) == []
    assert upstream.calls == []
    err = (tmp_path / "guard-mcp.err").read_text()
    assert f"stopping on {signum.name}" in err
    assert f"act-1 stopped on {signum.name}; withdrawn on guardd" in err
    assert "Traceback" not in err
    assert "HTTP Request" not in err  # the HTTP library's line per request to guardd


def _stop_with_sigterm_while_the_ask_is_out(
    guard_url: str, token: str, upstream: Upstream, tmp_path: Path, arrived
) -> int:
    """Call echo through guard-mcp, SIGTERM it once ``arrived()`` says guardd
    has decided the ask (its answer is held back on the way), and return the
    exit status."""
    env = base_env(guard_url, token, upstream)
    proc = start(["--", sys.executable, str(UPSTREAM)], env, tmp_path)
    try:
        client = RawClient(proc)
        client.initialize()
        client.send("tools/call", {"name": "echo", "arguments": {"text": "lost"}})
        while not arrived():
            assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        return proc.wait(EXIT_WITHIN)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.stdout is not None
        proc.stdout.close()


def test_sigterm_while_the_answer_to_a_held_ask_is_on_its_way_withdraws_that_action(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"requires_approval": True, "cost": 1}})
    with GuardProxy(server.port, plan=["hold"]) as proxy:
        returncode = _stop_with_sigterm_while_the_ask_is_out(
            proxy.url, agent.token, upstream, tmp_path, lambda: admin.list_pending(agent.agent_id)
        )
        asks = [r for r in proxy.requests if r.path.endswith("/actions")]
    assert returncode == 0
    # The ask was repeated under its key: guardd answered with act-1 again.
    assert len(asks) == 2
    assert len({r.headers["idempotency-key"] for r in asks}) == 1
    action = admin.get_action(agent.agent_id, "act-1")
    assert (action.status, action.reason) == (
        "cancelled",
        {"code": "cancelled", "by": "agent", "reason": "guard-mcp: stopped on SIGTERM"},
    )
    assert admin.list_pending(agent.agent_id) == []
    assert [r["kind"] for r in admin.log(agent.agent_id)].count("action_requested") == 1
    assert admin.agent_status(agent.agent_id).spent == 0
    assert upstream.calls == []
    err = (tmp_path / "guard-mcp.err").read_text()
    assert "act-1 stopped on SIGTERM; withdrawn on guardd" in err
    assert "Traceback" not in err


def test_sigterm_while_the_answer_to_an_allowed_ask_is_on_its_way_reports_it_not_run(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"cost": 1}})
    with GuardProxy(server.port, plan=["hold"]) as proxy:
        returncode = _stop_with_sigterm_while_the_ask_is_out(
            proxy.url,
            agent.token,
            upstream,
            tmp_path,
            lambda: admin.agent_status(agent.agent_id).spent == 1,
        )
    assert returncode == 0
    action = admin.get_action(agent.agent_id, "act-1")
    assert (action.status, action.outcome) == ("completed", "failure")
    [outcome] = [r for r in admin.log(agent.agent_id) if r["kind"] == "outcome"]
    assert outcome["detail"] == "stopped on SIGTERM, not run"
    assert [r["kind"] for r in admin.log(agent.agent_id)].count("action_requested") == 1
    assert admin.agent_status(agent.agent_id).spent == 1  # charged once, when decided
    assert upstream.calls == []
    assert "Traceback" not in (tmp_path / "guard-mcp.err").read_text()


def test_sigterm_during_an_upstream_call_exits_in_bounded_time_though_guardd_keeps_silent(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"stall": {}})
    # The ask is answered; the report of the cancelled call's failure never is.
    with GuardProxy(server.port, plan=["forward", "hold"]) as proxy:
        env = base_env(proxy.url, agent.token, upstream)
        proc = start(["--", sys.executable, str(UPSTREAM)], env, tmp_path)
        try:
            client = RawClient(proc)
            client.initialize()
            client.send("tools/call", {"name": "stall", "arguments": {}})
            while not upstream.calls:
                assert proc.poll() is None
            proc.send_signal(signal.SIGTERM)
            # The SDK alone would wait 30 s for the answer, then try again.
            returncode = proc.wait(EXIT_WITHIN)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            assert proc.stdin is not None
            proc.stdin.close()
            assert proc.stdout is not None
            proc.stdout.close()
        reports = [r for r in proxy.requests if r.path.endswith("/outcome")]
    assert returncode == 0
    assert len(reports) == 1
    err = (tmp_path / "guard-mcp.err").read_text()
    assert "could not report failure of act-1 to guardd within 10 s" in err
    assert "Traceback" not in err
