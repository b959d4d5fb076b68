"""What every adapter's tests share: an agent on a real guardd whose policy
allows ``search``, holds ``send_email`` for an operator, charges ``transfer``
what its ``amount`` says, and knows no other tool; its async client; and a
client whose guard is down."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import anyio
import attrs
import pytest

from client_sdk import AsyncAdminClient, AsyncGuardClient, PendingEntry, Retry
from tests.client_sdk.conftest import FAST_RETRY
from tests.support.server import GuardServer, free_port

POLICY: dict[str, Any] = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {
        "search": {"cost": 1},
        "send_email": {"cost": 5, "requires_approval": True},
        "transfer": {"cost": 0},
        "flaky": {"cost": 0},
    },
}
OPERATOR = "ops@example.com"

_numbers = itertools.count(1)


@attrs.frozen
class GuardedAgent:
    """One agent on guardd: its client, and the admin to decide and read its log."""

    agent_id: str
    client: AsyncGuardClient
    admin: AsyncAdminClient

    async def records(self, kind: str) -> list[dict[str, Any]]:
        return [r async for r in self.admin.log(self.agent_id) if r["kind"] == kind]

    async def outcomes(self) -> dict[str, str]:
        """Tool name to reported outcome, for every action that has one."""
        tools = {r["action_id"]: r["tool"] for r in await self.records("action_requested")}
        return {tools[r["action_id"]]: r["outcome"] for r in await self.records("outcome")}

    async def next_pending(self, count: int = 1) -> list[PendingEntry]:
        """Wait (long-polling nothing: the list is re-read) until ``count`` actions are held."""
        while True:
            pending = await self.admin.list_pending(self.agent_id)
            if len(pending) >= count:
                return pending
            await anyio.sleep(0.02)

    async def approve_all(self, count: int = 1) -> list[str]:
        ids = [p.action.action_id for p in await self.next_pending(count)]
        for action_id in ids:
            await self.admin.approve(self.agent_id, action_id, approver=OPERATOR)
        return ids

    async def reject_all(self, count: int = 1) -> list[str]:
        ids = [p.action.action_id for p in await self.next_pending(count)]
        for action_id in ids:
            await self.admin.reject(
                self.agent_id, action_id, approver=OPERATOR, reason="not to that address"
            )
        return ids


@pytest.fixture
async def guarded_agent(
    server: GuardServer, async_admin: AsyncAdminClient
) -> AsyncIterator[GuardedAgent]:
    created = await async_admin.create_agent(f"framework-{next(_numbers)}", POLICY)
    async with AsyncGuardClient(created.token, base_url=server.url, retry=FAST_RETRY) as client:
        yield GuardedAgent(created.agent_id, client, async_admin)


@pytest.fixture
async def guard_down() -> AsyncIterator[AsyncGuardClient]:
    """A client whose guard does not answer: nothing listens on its port."""
    url = f"http://127.0.0.1:{free_port()}"
    retry = Retry(attempts=2, base_delay=0.01, max_delay=0.01)
    async with AsyncGuardClient("agt_down.mac", base_url=url, retry=retry) as client:
        yield client
