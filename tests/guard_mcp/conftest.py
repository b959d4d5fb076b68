"""A real guardd, a real upstream MCP server (upstream_server.py) and guard-mcp
between them as a subprocess, driven by the MCP SDK's own ClientSession."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from client_sdk import AdminClient, CreatedAgent
from tests.support.server import GuardServer

UPSTREAM = Path(__file__).with_name("upstream_server.py")
GUARD_MCP = Path(sys.executable).with_name("guard-mcp")
#: Every test is bounded by this, subprocesses included.
TEST_TIMEOUT = 60

_ids = itertools.count(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuardServer]:
    guardd = GuardServer(tmp_path_factory.mktemp("guardd") / "guard-data").start()
    try:
        yield guardd
    finally:
        guardd.kill()


@pytest.fixture
def admin(server: GuardServer) -> Iterator[AdminClient]:
    with AdminClient(server.admin_token, base_url=server.url) as client:
        yield client


@pytest.fixture
def new_agent(admin: AdminClient) -> Callable[..., CreatedAgent]:
    def create(tools: dict[str, Any], **policy: Any) -> CreatedAgent:
        body = {"budget": 10, "scar_limit": 100, "tools": tools} | policy
        return admin.create_agent(f"mcp-{next(_ids)}", body)

    return create


def process_gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether ``pid`` has exited (or is a zombie nobody needs) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().split(") ", 1)[-1].startswith("Z"):
            return True
        time.sleep(0.05)
    return False


class Upstream:
    """What the upstream server leaves behind: the calls it received and its PID."""

    def __init__(self, directory: Path) -> None:
        self.calls_file = directory / "upstream-calls.jsonl"
        self.pid_file = directory / "upstream.pid"
        self.calls_file.touch()
        self.names: str | None = None  # UPSTREAM_NAMES: None, "loose" or "twins"

    @property
    def env(self) -> dict[str, str]:
        env = {"UPSTREAM_CALLS": str(self.calls_file), "UPSTREAM_PID": str(self.pid_file)}
        return env | ({"UPSTREAM_NAMES": self.names} if self.names else {})

    @property
    def calls(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.calls_file.read_text().splitlines()]

    @property
    def guard_variables(self) -> list[str]:
        """The names of the GUARD_* variables the upstream process was given."""
        return json.loads(self.pid_file.with_name("upstream-env.json").read_text())

    @property
    def pid(self) -> int | None:
        text = self.pid_file.read_text() if self.pid_file.exists() else ""
        return int(text) if text else None


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[Upstream]:
    state = Upstream(tmp_path)
    yield state
    pid = state.pid
    if pid is not None:
        gone = process_gone(pid)
        if not gone:
            os.kill(pid, 9)
        assert gone, f"upstream process {pid} was left running"


def base_env(guard_url: str, token: str, upstream: Upstream) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARD_")}
    return env | upstream.env | {"GUARD_URL": guard_url, "GUARD_AGENT_TOKEN": token}


@asynccontextmanager
async def guard_mcp_stdio(
    tmp_path: Path,
    upstream: Upstream,
    token: str,
    guard_url: str,
    *args: str,
    command_option: bool = False,
) -> AsyncIterator[ClientSession]:
    """guard-mcp over stdio in front of the upstream over stdio, as a desktop client runs it.

    The upstream command goes after ``--``, or with ``command_option`` in
    ``--upstream-command`` as one string.
    """
    command = [sys.executable, str(UPSTREAM)]
    given = ["--upstream-command", shlex.join(command)] if command_option else ["--", *command]
    params = StdioServerParameters(
        command=str(GUARD_MCP),
        args=[*args, *given],
        env=base_env(guard_url, token, upstream),
        cwd=tmp_path,  # no .env of the repository is read
    )
    with (tmp_path / "guard-mcp.err").open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def stderr_of_guard_mcp(tmp_path: Path) -> str:
    return (tmp_path / "guard-mcp.err").read_text()


async def wait_for(predicate: Callable[[], Any], within: float = 20.0) -> Any:
    """Poll ``predicate`` (it asks guardd or reads a file: nothing to wait on) until true."""
    with anyio.fail_after(within):
        while not (value := predicate()):  # noqa: ASYNC110  # polls another process
            await anyio.sleep(0.05)
    return value
