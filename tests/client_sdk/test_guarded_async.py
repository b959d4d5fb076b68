"""guarded() with the async client on a real guardd: the same flows, awaited."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from decimal import Decimal

import pytest

from client_sdk import (
    ActionDenied,
    ApprovalTimeout,
    AsyncAdminClient,
    AsyncGuardClient,
    CreatedAgent,
    InvalidState,
)
from tests.client_sdk.conftest import FAST_RETRY
from tests.client_sdk.test_guarded import DENIALS
from tests.support.server import GuardServer


@pytest.fixture
async def connect(
    server: GuardServer,
) -> AsyncIterator[Callable[[CreatedAgent], AsyncGuardClient]]:
    """conftest's ``connect``, opening async clients."""
    async with contextlib.AsyncExitStack() as opened:

        def connect(created: CreatedAgent) -> AsyncGuardClient:
            client = AsyncGuardClient(created.token, base_url=server.url, retry=FAST_RETRY)
            opened.push_async_callback(client.aclose)
            return client

        yield connect


async def decide_when_pending(
    admin: AsyncAdminClient, agent_id: str, *, reject: bool = False
) -> None:
    """An operator in another task: waits for the first pending action and decides it."""
    async with asyncio.timeout(10):
        while True:  # polls the service, as an operator's console does
            if pending := await admin.list_pending(agent_id):
                break
            await asyncio.sleep(0.02)
    action_id = pending[0].action.action_id
    if reject:
        await admin.reject(agent_id, action_id, approver="bob", reason="too risky", scar="minor")
    else:
        await admin.approve(agent_id, action_id, approver="bob")


async def test_allowed_async_tool_runs_once_and_reports_success(new_agent, connect, async_admin):
    created = new_agent()
    client = connect(created)
    calls = []

    @client.guarded
    async def search(query: str, limit: int = 10) -> list[str]:
        calls.append(query)
        await asyncio.sleep(0)
        return [query]

    assert await search("q", limit=3) == ["q"]
    assert calls == ["q"]
    action = await client.get_action("act-1")
    assert (action.input, action.status, action.outcome) == (
        {"query": "q", "limit": 3},
        "completed",
        "success",
    )
    assert (await async_admin.agent_status(created.agent_id)).spent == Decimal(1)


async def test_sync_tool_wrapped_by_the_async_client_is_awaited_as_a_call(new_agent, connect):
    client = connect(new_agent())

    def search(query: str) -> str:
        return query.upper()

    assert await client.guarded(search)("q") == "Q"
    assert (await client.get_action("act-1")).outcome == "success"


async def test_async_tool_exception_reports_failure_and_reraises_the_same_object(
    new_agent, connect
):
    client = connect(new_agent())
    boom = ConnectionResetError("smtp went away")

    @client.guarded(name="search")
    async def flaky() -> None:
        raise boom

    with pytest.raises(ConnectionResetError) as info:
        await flaky()
    assert info.value is boom
    action = await client.get_action("act-1")
    assert (action.status, action.outcome) == ("completed", "failure")


@pytest.mark.parametrize(("overrides", "before", "tool", "reason"), DENIALS)
async def test_denied_async_tool_raises_action_denied_with_the_reason(
    new_agent, connect, overrides, before, tool, reason
):
    client = connect(new_agent(**overrides))
    for name in before:
        assert (await client.request_action(name)).allowed

    async def never() -> None:
        pytest.fail("ran")

    with pytest.raises(ActionDenied) as info:
        await client.guarded(never, name=tool)()
    assert (info.value.code, info.value.reason) == (reason["code"], reason)
    assert info.value.action_id == f"act-{len(before) + 1}"


async def test_terminated_agent_raises_action_denied_terminated(new_agent, connect, async_admin):
    created = new_agent()
    client = connect(created)
    await async_admin.terminate(created.agent_id, reason="operator stop", by="bob")
    with pytest.raises(ActionDenied) as info:
        await client.guarded(lambda: None, name="search")()
    assert info.value.reason == {"code": "terminated", "reason": "operator stop"}


async def test_pending_async_tool_waits_until_an_operator_task_approves(
    new_agent, connect, async_admin
):
    created = new_agent()
    client = connect(created)

    @client.guarded
    async def send_email(to: str) -> str:
        return f"sent to {to}"

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(decide_when_pending(async_admin, created.agent_id))
        result = await send_email("ops@example.com")
    assert result == "sent to ops@example.com"
    action = await client.get_action("act-1")
    assert (action.outcome, action.approved_by) == ("success", "bob")


async def test_pending_async_tool_rejected_by_an_operator_task_raises_rejected(
    new_agent, connect, async_admin
):
    created = new_agent()
    client = connect(created)

    async def send_email() -> None:
        pytest.fail("ran")

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(decide_when_pending(async_admin, created.agent_id, reject=True))
        with pytest.raises(ActionDenied) as info:
            await client.guarded(send_email)()
    assert info.value.reason == {"code": "rejected", "by": "bob", "reason": "too risky"}
    status = await async_admin.agent_status(created.agent_id)
    assert [s.severity for s in status.scars] == ["minor"]


async def test_async_approval_timeout_raises_and_withdraws_the_action(
    new_agent, connect, async_admin
):
    created = new_agent()
    client = connect(created)
    started = time.monotonic()
    with pytest.raises(ApprovalTimeout) as info:
        await client.guarded(lambda: None, name="send_email", approval_timeout=0.4)()
    assert 0.4 <= time.monotonic() - started < 5
    assert (info.value.action_id, info.value.withdrawn) == ("act-1", True)
    action = await async_admin.get_action(created.agent_id, "act-1")
    assert action.status == "cancelled"


async def test_async_keep_pending_leaves_the_action_pending(new_agent, connect, async_admin):
    created = new_agent()
    client = connect(created)
    tool = client.guarded(lambda: None, name="send_email", approval_timeout=0.3, keep_pending=True)
    with pytest.raises(ApprovalTimeout):
        await tool()
    action = await async_admin.get_action(created.agent_id, "act-1")
    assert action.status == "pending_approval"


async def test_cancelling_the_waiting_task_withdraws_the_action(new_agent, connect, async_admin):
    created = new_agent()
    client = connect(created)
    ran = []
    task = asyncio.create_task(client.guarded(lambda: ran.append(1), name="send_email")())
    async with asyncio.timeout(10):
        while True:  # polls the service, as an operator's console does
            if await async_admin.list_pending(created.agent_id):
                break
            await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)  # the call is in its long-poll now
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    action = await async_admin.get_action(created.agent_id, "act-1")
    assert (action.status, action.reason["reason"]) == (
        "cancelled",
        "guarded: the waiting call was cancelled",
    )
    # A late approval is refused: nothing is charged for a call that never ran.
    with pytest.raises(InvalidState, match="was cancelled by agent"):
        await async_admin.approve(created.agent_id, "act-1", approver="bob")
    assert ran == []
    assert (await async_admin.agent_status(created.agent_id)).spent == 0
