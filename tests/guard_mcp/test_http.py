"""guard-mcp served over streamable HTTP (--listen), in front of a stdio upstream
and of a streamable HTTP upstream (--upstream-url)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import httpx
import mcp_types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from client_sdk import AdminClient
from tests.client_sdk.proxy import Proxy as GuardProxy
from tests.guard_mcp.conftest import (
    GUARD_MCP,
    TEST_TIMEOUT,
    UPSTREAM,
    Upstream,
    base_env,
    process_gone,
    wait_for,
)
from tests.support.server import GuardServer, free_port

#: The listener's bearer token (GUARD_MCP_LISTEN_TOKEN) in these tests.
LISTEN_TOKEN = "listen-token-for-tests-0123456789abcdef"


def listen_env(guard_url: str, token: str, upstream: Upstream) -> dict[str, str]:
    return base_env(guard_url, token, upstream) | {"GUARD_MCP_LISTEN_TOKEN": LISTEN_TOKEN}


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args} exited with {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after {within} s")


@contextmanager
def running(
    args: list[str], env: dict[str, str], port: int, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """A process that serves on ``port``; killed on the way out if still running."""
    with log.open("ab") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=out, cwd=log.parent)
    try:
        _wait_for_port(port, proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@asynccontextmanager
async def http_client(port: int, token: str = LISTEN_TOKEN) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def output_is_quiet(log: Path) -> None:
    """No traceback, and no line per HTTP request (guard-mcp's or its libraries')."""
    out = log.read_text()
    assert "Traceback" not in out
    assert "HTTP Request" not in out
    assert "POST /mcp" not in out
    assert "gave up" not in out


def text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_served_over_http_it_guards_each_call_and_stops_its_upstream_on_sigterm(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"cost": 1}, "pay": {"requires_approval": True}})
    port = free_port()
    args = [str(GUARD_MCP), "--listen", f"127.0.0.1:{port}", "--", sys.executable, str(UPSTREAM)]
    env = listen_env(server.url, agent.token, upstream)
    progress: list[str | None] = []

    async def seen(done: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    with running(args, env, port, tmp_path / "guard-mcp.out") as proc:
        with anyio.fail_after(TEST_TIMEOUT):
            async with http_client(port) as client:
                assert {t.name for t in (await client.list_tools()).tools} == {"echo", "pay"}
                allowed = await client.call_tool("echo", {"text": "over http"})
                denied = await client.call_tool("never_allowed", {})
                results: list[types.CallToolResult] = []

                async def call() -> None:
                    results.append(
                        await client.call_tool(
                            "pay", {"to": "ann", "amount": 1}, progress_callback=seen
                        )
                    )

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(call)
                    await wait_for(lambda: progress)
                    admin.approve(agent.agent_id, "act-3", approver="ann")
        pid = upstream.pid
        assert pid is not None
        assert not process_gone(pid, timeout=0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    assert process_gone(pid)
    output_is_quiet(tmp_path / "guard-mcp.out")
    # Neither the agent's token nor the listener's reaches what is guarded.
    assert upstream.guard_variables == ["GUARD_URL"]
    assert text(allowed) == "echo: over http"
    assert text(denied).startswith("denied by guard: tool_not_allowed")
    assert text(results[0]) == "paid 1 to ann"
    assert progress[0] is not None
    assert "pay (act-3) waits for a person's approval" in progress[0]
    assert [c["tool"] for c in upstream.calls] == ["echo", "pay"]


async def test_an_http_upstream_is_guarded_like_a_stdio_one(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {}}, budget=5)
    up_port, port = free_port(), free_port()
    env = listen_env(server.url, agent.token, upstream)
    upstream_args = [sys.executable, str(UPSTREAM), "--http", str(up_port)]
    args = [
        str(GUARD_MCP),
        "--upstream-url",
        f"http://127.0.0.1:{up_port}/mcp",
        "--listen",
        f"127.0.0.1:{port}",
        "--tool-prefix",
        "web.",
    ]
    agent_policy = {"budget": 5, "scar_limit": 100, "tools": {"web.echo": {"cost": 2}}}
    admin.set_policy(agent.agent_id, agent_policy)
    with (
        running(upstream_args, env, up_port, tmp_path / "upstream.out"),
        running(args, env, port, tmp_path / "guard-mcp.out") as proc,
    ):
        with anyio.fail_after(TEST_TIMEOUT):
            async with http_client(port) as client:
                assert [t.name for t in (await client.list_tools()).tools] == ["web.echo"]
                first = await client.call_tool("web.echo", {"text": "a"})
                second = await client.call_tool("web.echo", {"text": "b"})
                third = await client.call_tool("web.echo", {"text": "c"})
                resource = await client.read_resource("data://greeting")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    assert [text(first), text(second)] == ["echo: a", "echo: b"]
    assert text(third).startswith("denied by guard: insufficient_budget (needs 2, 1 left)")
    assert [c["arguments"]["text"] for c in upstream.calls] == ["a", "b"]
    assert isinstance(resource.contents[0], types.TextResourceContents)
    assert resource.contents[0].text == "hello from upstream"
    assert admin.agent_status(agent.agent_id).spent == 4


async def test_the_listener_answers_401_to_a_request_without_its_bearer_token(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {}})
    port = free_port()
    args = [str(GUARD_MCP), "--listen", f"127.0.0.1:{port}", "--", sys.executable, str(UPSTREAM)]
    env = listen_env(server.url, agent.token, upstream)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}}
    wrong = [
        {},
        {"Authorization": "Bearer not-the-token"},
        {"Authorization": f"Bearer {LISTEN_TOKEN}x"},
        {"Authorization": LISTEN_TOKEN},
        {"Authorization": f"Basic {LISTEN_TOKEN}"},
    ]
    with running(args, env, port, tmp_path / "guard-mcp.out") as proc:
        with anyio.fail_after(TEST_TIMEOUT):
            async with httpx.AsyncClient(timeout=10) as raw:
                url = f"http://127.0.0.1:{port}/mcp"
                answers = [await raw.post(url, json=call, headers=headers) for headers in wrong]
            async with http_client(port) as client:
                allowed = await client.call_tool("echo", {"text": "with the token"})
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    for answer in answers:
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == "Bearer"
        assert answer.json() == {
            "error": "missing or wrong bearer token: this guard-mcp listener needs "
            "'Authorization: Bearer <GUARD_MCP_LISTEN_TOKEN>'",
            "code": "unauthorized",
        }
    assert text(allowed) == "echo: with the token"
    assert upstream.calls == [{"tool": "echo", "arguments": {"text": "with the token"}}]
    assert len([r for r in admin.log(agent.agent_id) if r["kind"] == "action_requested"]) == 1


async def test_sigterm_while_a_call_is_held_over_http_withdraws_it_and_exits_cleanly(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"pay": {"requires_approval": True}})
    port = free_port()
    args = [str(GUARD_MCP), "--listen", f"127.0.0.1:{port}", "--", sys.executable, str(UPSTREAM)]
    env = listen_env(server.url, agent.token, upstream)
    ended: list[BaseException | types.CallToolResult] = []

    with running(args, env, port, tmp_path / "guard-mcp.out") as proc:
        with anyio.fail_after(TEST_TIMEOUT):
            async with http_client(port) as client:

                async def call() -> None:
                    try:
                        ended.append(await client.call_tool("pay", {"to": "ann", "amount": 1}))
                    except Exception as exc:  # the server went away: what a client sees
                        ended.append(exc)

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(call)
                    await wait_for(lambda: admin.list_pending(agent.agent_id))
                    pid = upstream.pid
                    assert pid is not None
                    proc.send_signal(signal.SIGTERM)
                    returncode = await anyio.to_thread.run_sync(proc.wait, 15)
                    tasks.cancel_scope.cancel()
    assert returncode == 0
    assert process_gone(pid)
    action = admin.get_action(agent.agent_id, "act-1")
    assert (action.status, action.reason) == (
        "cancelled",
        {"code": "cancelled", "by": "agent", "reason": "guard-mcp: stopped on SIGTERM"},
    )
    assert upstream.calls == []
    output_is_quiet(tmp_path / "guard-mcp.out")
    assert "stopping on SIGTERM" in (tmp_path / "guard-mcp.out").read_text()


def test_an_address_it_cannot_listen_on_is_one_line_and_exit_1(
    server: GuardServer, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [str(GUARD_MCP), "--listen", f"127.0.0.1:{port}", "--", sys.executable, str(UPSTREAM)],
            env=listen_env(server.url, agent.token, upstream),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TEST_TIMEOUT,
            check=False,
        )
    assert done.returncode == 1
    assert done.stderr.endswith(f"guard-mcp: cannot serve at http://127.0.0.1:{port}/mcp\n")
    assert "address already in use" in done.stderr
    assert "Traceback" not in done.stderr


async def test_sigterm_over_http_while_a_held_asks_answer_is_on_its_way_withdraws_it(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"pay": {"requires_approval": True}})
    port = free_port()
    args = [str(GUARD_MCP), "--listen", f"127.0.0.1:{port}", "--", sys.executable, str(UPSTREAM)]
    ended: list[BaseException | types.CallToolResult] = []

    # guardd holds act-1, but its answer never reaches guard-mcp.
    with GuardProxy(server.port, plan=["hold"]) as proxy:
        env = listen_env(proxy.url, agent.token, upstream)
        with running(args, env, port, tmp_path / "guard-mcp.out") as proc:
            with anyio.fail_after(TEST_TIMEOUT):
                async with http_client(port) as client:

                    async def call() -> None:
                        try:
                            ended.append(await client.call_tool("pay", {"to": "ann", "amount": 1}))
                        except Exception as exc:  # the server went away: what a client sees
                            ended.append(exc)

                    async with anyio.create_task_group() as tasks:
                        tasks.start_soon(call)
                        await wait_for(lambda: admin.list_pending(agent.agent_id))
                        proc.send_signal(signal.SIGTERM)
                        returncode = await anyio.to_thread.run_sync(proc.wait, 15)
                        tasks.cancel_scope.cancel()
        asks = [r for r in proxy.requests if r.path.endswith("/actions")]
    assert returncode == 0
    assert len({r.headers["idempotency-key"] for r in asks}) == 1 < len(asks)
    action = admin.get_action(agent.agent_id, "act-1")
    assert (action.status, action.reason) == (
        "cancelled",
        {"code": "cancelled", "by": "agent", "reason": "guard-mcp: stopped on SIGTERM"},
    )
    assert admin.list_pending(agent.agent_id) == []
    assert upstream.calls == []
    output_is_quiet(tmp_path / "guard-mcp.out")
