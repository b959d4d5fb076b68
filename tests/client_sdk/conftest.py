"""Clients bound to a real guardd, and agents created on it."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from client_sdk import AdminClient, AsyncAdminClient, CreatedAgent, GuardClient, Retry
from tests.support.server import GuardServer

# Fast retries: the tests exercise them, nobody needs to wait.
FAST_RETRY = Retry(attempts=4, base_delay=0.01, max_delay=0.05)

_agent_numbers = itertools.count(1)


def policy(**overrides: Any) -> dict[str, Any]:
    """A policy with a free ``search``, a ``send_email`` that needs approval, no default."""
    base: dict[str, Any] = {
        "budget": 100,
        "scar_limit": 10,
        "tools": {
            "search": {"cost": 1},
            "send_email": {"cost": 5, "requires_approval": True},
        },
    }
    return base | overrides


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuardServer]:
    """One guardd for a whole test module; every test works on agents of its own.

    Tests that need an empty service or the data directory in their tmp_path
    use ``guard_server`` instead.
    """
    guardd = GuardServer(tmp_path_factory.mktemp("guardd") / "guard-data").start()
    try:
        yield guardd
    finally:
        guardd.kill()


@pytest.fixture
def admin(server: GuardServer) -> Iterator[AdminClient]:
    with AdminClient(server.admin_token, base_url=server.url, retry=FAST_RETRY) as client:
        yield client


@pytest.fixture
async def async_admin(server: GuardServer) -> AsyncIterator[AsyncAdminClient]:
    async with AsyncAdminClient(server.admin_token, base_url=server.url, retry=FAST_RETRY) as c:
        yield c


@pytest.fixture
def new_agent(admin: AdminClient) -> Callable[..., CreatedAgent]:
    """Create an agent with ``policy(**overrides)`` under a fresh ID."""

    def create(**overrides: Any) -> CreatedAgent:
        return admin.create_agent(f"agent-{next(_agent_numbers)}", policy(**overrides))

    return create


@pytest.fixture
def connect(server: GuardServer) -> Iterator[Callable[[CreatedAgent], GuardClient]]:
    """A function that opens an agent client on a created agent; all closed after the test."""
    with contextlib.ExitStack() as opened:
        yield lambda created: opened.enter_context(
            GuardClient(created.token, base_url=server.url, retry=FAST_RETRY)
        )
