"""What every adapter shares (``client_sdk.integrations._common``), on its own:
the cost read from an argument, the refusal's wording, and a call cancelled
while its request is in flight."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import anyio
import pytest

from client_sdk import AsyncGuardClient
from client_sdk.integrations._common import ToolGuard, refusal_text
from tests.client_sdk.conftest import FAST_RETRY
from tests.client_sdk.integrations.conftest import GuardedAgent
from tests.client_sdk.proxy import Proxy
from tests.support.server import GuardServer

SAFETY = 60  # seconds: a hang fails the test instead of stalling the suite
EMAIL = {"to": "a@example.com", "body": "hi"}


@pytest.mark.parametrize(
    ("args", "cost"),
    [
        ({"amount": 30}, 30),
        ({"amount": 12.5}, 12.5),
        ({"amount": "12.50"}, Decimal("12.50")),
        ({"to": "bob"}, None),  # no such argument: the policy prices the call
    ],
)
def test_the_cost_is_the_named_argument_when_it_is_there(
    guard_down: AsyncGuardClient, args: dict[str, Any], cost: Any
) -> None:
    guard = ToolGuard(guard_down, cost_from={"transfer": "amount"})
    assert guard.cost("transfer", args) == cost
    assert guard.cost("search", args) is None  # no cost_from for that tool


@pytest.mark.parametrize("amount", [True, "thirty", "NaN", float("inf"), None, [30]])
def test_a_cost_argument_that_is_not_a_finite_number_is_an_error(
    guard_down: AsyncGuardClient, amount: Any
) -> None:
    guard = ToolGuard(guard_down, cost_from={"transfer": "amount"})
    with pytest.raises(ValueError, match="'amount' is the cost"):
        guard.cost("transfer", {"amount": amount})


def test_a_refusal_names_the_code_first_and_says_the_tool_did_not_run() -> None:
    text = refusal_text("rejected", "action act-1 denied: rejected (by='ops')")
    assert text == (
        "The action guard refused this tool call (rejected): "
        "action act-1 denied: rejected (by='ops'). The tool did not run."
    )


def test_the_adapters_take_only_an_async_client_and_a_sane_timeout(
    guard_down: AsyncGuardClient,
) -> None:
    with pytest.raises(TypeError, match="AsyncGuardClient"):
        ToolGuard(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="approval_timeout"):
        ToolGuard(guard_down, approval_timeout=-1)


async def test_a_call_cancelled_while_its_request_is_in_flight_withdraws_the_held_action(
    server: GuardServer, guarded_agent: GuardedAgent
) -> None:
    # guardd holds the action, but its answer never reaches the client before
    # the call is cancelled: the adapter asks again under the same key, learns
    # the action's ID, and withdraws it.
    token = await guarded_agent.admin.reissue_token(guarded_agent.agent_id)
    with Proxy(server.port, plan=["hold"]) as proxy:
        async with AsyncGuardClient(token, base_url=proxy.url, retry=FAST_RETRY) as client:
            guard = ToolGuard(client)
            with anyio.fail_after(SAFETY):
                async with anyio.create_task_group() as group:
                    group.start_soon(guard.decide, "send_email", EMAIL)
                    await anyio.to_thread.run_sync(proxy.holding.wait)
                    group.cancel_scope.cancel()
    assert await guarded_agent.admin.list_pending(guarded_agent.agent_id) == []
    assert len(await guarded_agent.records("action_requested")) == 1
    assert len(await guarded_agent.records("action_cancelled")) == 1
