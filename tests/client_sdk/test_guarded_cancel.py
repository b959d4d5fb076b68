"""An async ``guarded`` call cancelled by asyncio itself (``Task.cancel``,
``asyncio.wait_for`` running out), as agent frameworks cancel their tool calls:
the held action is withdrawn on the real guardd all the same, whether the call
was waiting for an operator or its request was still in flight, and however
often the task is cancelled meanwhile. And the sync client's counterpart: a
real Ctrl-C (SIGINT) in either place."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from decimal import Decimal

import anyio
import pytest

from client_sdk import (
    AdminClient,
    AsyncAdminClient,
    AsyncGuardClient,
    CreatedAgent,
    GuardClient,
    _guarded,
)
from tests.client_sdk.conftest import FAST_RETRY
from tests.client_sdk.proxy import Proxy
from tests.support.server import GuardServer

SAFETY = 60  # seconds: a hang fails the test instead of stalling the suite
CANCELLED = "guarded: the waiting call was cancelled"
INTERRUPTED = "guarded: the waiting call was interrupted"


async def cancel_once(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.wait({task})


async def cancel_again_and_again(task: asyncio.Task[None]) -> None:
    """As some frameworks do: cancel, and cancel again while the task winds down."""
    while not task.done():
        task.cancel()
        await asyncio.sleep(0)


CANCELS = pytest.mark.parametrize(
    "cancel", [cancel_once, cancel_again_and_again], ids=["once", "again_and_again"]
)


async def held_in_long_poll(admin: AsyncAdminClient, agent_id: str) -> None:
    """Until the call's action is held; its long-poll is then on its way."""
    while True:  # polls the service, as an operator's console does
        if await admin.list_pending(agent_id):
            return
        await asyncio.sleep(0.02)


async def withdrawn(admin: AsyncAdminClient, agent_id: str, action_id: str) -> str:
    action = await admin.get_action(agent_id, action_id)
    return f"{action.status}: {(action.reason or {}).get('reason')}"


def send_email(ran: list[int]) -> Callable[[], None]:
    return lambda: ran.append(1)


@CANCELS
async def test_a_call_cancelled_while_it_waits_for_approval_withdraws_its_action(
    server: GuardServer,
    new_agent: Callable[..., CreatedAgent],
    async_admin: AsyncAdminClient,
    cancel: Callable[[asyncio.Task[None]], Awaitable[None]],
) -> None:
    created = new_agent()
    ran: list[int] = []
    async with AsyncGuardClient(created.token, base_url=server.url, retry=FAST_RETRY) as client:
        tool = client.guarded(send_email(ran), name="send_email")
        with anyio.fail_after(SAFETY):
            task = asyncio.create_task(tool())
            await held_in_long_poll(async_admin, created.agent_id)
            await cancel(task)
        with pytest.raises(asyncio.CancelledError):
            task.result()
    assert await withdrawn(async_admin, created.agent_id, "act-1") == f"cancelled: {CANCELLED}"
    assert ran == []
    assert (await async_admin.agent_status(created.agent_id)).spent == 0


@CANCELS
async def test_a_call_cancelled_while_its_request_is_in_flight_withdraws_the_held_action(
    server: GuardServer,
    new_agent: Callable[..., CreatedAgent],
    async_admin: AsyncAdminClient,
    cancel: Callable[[asyncio.Task[None]], Awaitable[None]],
) -> None:
    # guardd holds the action, but its answer is kept from the client until
    # the call is cancelled: guarded asks again under the same key, learns
    # the action's ID, and withdraws it.
    created = new_agent()
    ran: list[int] = []
    with Proxy(server.port, plan=["hold"]) as proxy:
        async with AsyncGuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client:
            tool = client.guarded(send_email(ran), name="send_email")
            with anyio.fail_after(SAFETY):
                task = asyncio.create_task(tool())
                await anyio.to_thread.run_sync(proxy.holding.wait)
                await cancel(task)
            with pytest.raises(asyncio.CancelledError):
                task.result()
        asks = [r for r in proxy.requests if r.path.endswith("/actions")]
    assert len(asks) == 2
    assert asks[0].headers["idempotency-key"] == asks[1].headers["idempotency-key"]
    assert await withdrawn(async_admin, created.agent_id, "act-1") == f"cancelled: {CANCELLED}"
    status = await async_admin.agent_status(created.agent_id)
    assert (status.actions_pending, status.spent) == (0, Decimal(0))
    assert ran == []


async def test_a_call_that_wait_for_gives_up_on_withdraws_its_action(
    server: GuardServer, new_agent: Callable[..., CreatedAgent], async_admin: AsyncAdminClient
) -> None:
    created = new_agent()
    ran: list[int] = []
    async with AsyncGuardClient(created.token, base_url=server.url, retry=FAST_RETRY) as client:
        tool = client.guarded(send_email(ran), name="send_email")
        with anyio.fail_after(SAFETY), pytest.raises(TimeoutError):
            await asyncio.wait_for(tool(), timeout=0.5)
    assert await withdrawn(async_admin, created.agent_id, "act-1") == f"cancelled: {CANCELLED}"
    assert ran == []


async def test_a_call_whose_request_is_in_flight_when_wait_for_gives_up_withdraws_it(
    server: GuardServer, new_agent: Callable[..., CreatedAgent], async_admin: AsyncAdminClient
) -> None:
    created = new_agent()
    with Proxy(server.port, plan=["hold"]) as proxy:
        async with AsyncGuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client:
            tool = client.guarded(lambda: None, name="send_email")
            with anyio.fail_after(SAFETY), pytest.raises(TimeoutError):
                await asyncio.wait_for(tool(), timeout=0.5)
    assert await withdrawn(async_admin, created.agent_id, "act-1") == f"cancelled: {CANCELLED}"


async def test_an_allowed_call_cancelled_in_flight_is_not_run_and_its_action_stays_allowed(
    server: GuardServer, new_agent: Callable[..., CreatedAgent], async_admin: AsyncAdminClient
) -> None:
    # Allowed and charged when guardd decided; only a pending action can be
    # withdrawn, so it stays allowed, with no outcome (a failure would scar).
    created = new_agent()
    ran: list[int] = []
    with Proxy(server.port, plan=["hold"]) as proxy:
        async with AsyncGuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client:
            tool = client.guarded(lambda: ran.append(1), name="search")
            with anyio.fail_after(SAFETY):
                task = asyncio.create_task(tool())
                await anyio.to_thread.run_sync(proxy.holding.wait)
                await cancel_once(task)
            with pytest.raises(asyncio.CancelledError):
                task.result()
    action = await async_admin.get_action(created.agent_id, "act-1")
    assert (action.status, action.outcome, ran) == ("allowed", None, [])
    assert (await async_admin.agent_status(created.agent_id)).actions_allowed == 1


@CANCELS
async def test_keep_pending_leaves_the_action_of_a_call_cancelled_while_waiting_pending(
    server: GuardServer,
    new_agent: Callable[..., CreatedAgent],
    async_admin: AsyncAdminClient,
    cancel: Callable[[asyncio.Task[None]], Awaitable[None]],
) -> None:
    created = new_agent()
    async with AsyncGuardClient(created.token, base_url=server.url, retry=FAST_RETRY) as client:
        tool = client.guarded(lambda: None, name="send_email", keep_pending=True)
        with anyio.fail_after(SAFETY):
            task = asyncio.create_task(tool())
            await held_in_long_poll(async_admin, created.agent_id)
            await cancel(task)
        with pytest.raises(asyncio.CancelledError):
            task.result()
    assert await withdrawn(async_admin, created.agent_id, "act-1") == "pending_approval: None"


async def test_keep_pending_leaves_the_action_of_a_call_cancelled_in_flight_pending(
    server: GuardServer, new_agent: Callable[..., CreatedAgent], async_admin: AsyncAdminClient
) -> None:
    created = new_agent()
    with Proxy(server.port, plan=["hold"]) as proxy:
        async with AsyncGuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client:
            tool = client.guarded(lambda: None, name="send_email", keep_pending=True)
            with anyio.fail_after(SAFETY):
                task = asyncio.create_task(tool())
                await anyio.to_thread.run_sync(proxy.holding.wait)
                await cancel_once(task)
            with pytest.raises(asyncio.CancelledError):
                task.result()
    pending = await async_admin.list_pending(created.agent_id)
    assert [p.action.action_id for p in pending] == ["act-1"]


@contextlib.contextmanager
def ctrl_c_once(when: Callable[[], bool]) -> Iterator[None]:
    """SIGINT to this (the main) thread, as Ctrl-C sends it, once ``when()``
    holds; the thread that sends it is gone when the block ends."""
    main = threading.main_thread().ident
    assert main == threading.get_ident()
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.01):
            if when():
                assert main is not None
                signal.pthread_kill(main, signal.SIGINT)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(SAFETY)


def test_ctrl_c_while_a_sync_call_waits_for_approval_withdraws_its_action(
    server: GuardServer, new_agent: Callable[..., CreatedAgent], admin: AdminClient
) -> None:
    created = new_agent()
    with (
        Proxy(server.port) as proxy,  # it sees the long-poll go out
        GuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client,
    ):
        tool = client.guarded(lambda: pytest.fail("ran"), name="send_email")
        polling = lambda: any(r.method == "GET" for r in proxy.requests)  # noqa: E731
        with ctrl_c_once(polling), pytest.raises(KeyboardInterrupt):
            tool()
    action = admin.get_action(created.agent_id, "act-1")
    assert (action.status, action.reason) == (
        "cancelled",
        {"code": "cancelled", "by": "agent", "reason": INTERRUPTED},
    )


def test_ctrl_c_while_a_sync_calls_request_is_in_flight_withdraws_the_held_action(
    server: GuardServer, new_agent: Callable[..., CreatedAgent], admin: AdminClient
) -> None:
    created = new_agent()
    with (
        Proxy(server.port, plan=["hold"]) as proxy,
        GuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client,
    ):
        tool = client.guarded(lambda: pytest.fail("ran"), name="send_email")
        with ctrl_c_once(proxy.holding.is_set), pytest.raises(KeyboardInterrupt):
            tool()
        asks = [r for r in proxy.requests if r.path.endswith("/actions")]
    assert len({r.headers["idempotency-key"] for r in asks}) == 1 < len(asks)
    action = admin.get_action(created.agent_id, "act-1")
    assert (action.status, (action.reason or {}).get("reason")) == ("cancelled", INTERRUPTED)
    assert admin.agent_status(created.agent_id).actions_pending == 0


async def test_a_withdrawal_guardd_does_not_answer_is_given_up_with_a_warning(
    server: GuardServer,
    new_agent: Callable[..., CreatedAgent],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The ask's answer and then the withdrawal's are held back: the cancelled
    # call gives up after the bound (shortened here) and says so.
    monkeypatch.setattr(_guarded, "WITHDRAW_WITHIN", 0.5)
    created = new_agent()
    with Proxy(server.port, plan=["hold", "forward", "hold"]) as proxy:
        async with AsyncGuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client:
            tool = client.guarded(lambda: None, name="send_email")
            with anyio.fail_after(SAFETY):
                task = asyncio.create_task(tool())
                await anyio.to_thread.run_sync(proxy.holding.wait)
                await cancel_once(task)
            with pytest.raises(asyncio.CancelledError):
                task.result()
        assert [r.method for r in proxy.requests] == ["POST", "POST", "POST"]
    assert caplog.messages == [
        "could not withdraw the cut-short request for send_email: no answer within 0.5 "
        "seconds; it may stay pending"
    ]


async def test_a_call_cancelled_by_an_anyio_cancel_scope_while_it_waits_withdraws_its_action(
    server: GuardServer, new_agent: Callable[..., CreatedAgent], async_admin: AsyncAdminClient
) -> None:
    created = new_agent()
    async with AsyncGuardClient(created.token, base_url=server.url, retry=FAST_RETRY) as client:
        tool = client.guarded(lambda: None, name="send_email")
        with anyio.fail_after(SAFETY):
            async with anyio.create_task_group() as group:
                group.start_soon(tool)
                await held_in_long_poll(async_admin, created.agent_id)
                group.cancel_scope.cancel()
    assert await withdrawn(async_admin, created.agent_id, "act-1") == f"cancelled: {CANCELLED}"
