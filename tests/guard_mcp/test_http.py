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
import mcp_types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from client_sdk import AdminClient
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
async def http_client(port: int) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_served_over_http_it_guards_each_call_and_stops_its_upstream_on_sigterm(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"cost": 1}, "pay": {"requires_approval": True}})
    port = free_port()
    args = [str(GUARD_MCP), "--listen", f"127.0.0.1:{port}", "--", sys.executable, str(UPSTREAM)]
    env = base_env(server.url, agent.token, upstream)
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
    env = base_env(server.url, agent.token, upstream)
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
