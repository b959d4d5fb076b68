"""Retries through a loopback proxy that loses answers or plays an overloaded gateway."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from client_sdk import (
    AdminClient,
    AsyncGuardClient,
    GuardClient,
    Retry,
    ServiceUnavailable,
    TransportError,
    UnknownAction,
)
from tests.client_sdk.conftest import FAST_RETRY
from tests.client_sdk.proxy import Proxy
from tests.support.server import free_port

ACTIONS = "/v1/agents/{}/actions"


def test_lost_answer_to_an_action_request_is_retried_with_the_same_key_and_charged_once(
    server, new_agent, admin
):
    created = new_agent(tools={"search": {"cost": 3}})
    with (
        Proxy(server.port, plan=["drop"]) as proxy,
        GuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client,
    ):
        decision = client.request_action("search", {"q": "x"})
    assert (decision.decision, decision.action_id, decision.cost, decision.remaining) == (
        "allowed",
        "act-1",
        Decimal(3),
        Decimal(97),
    )
    assert [(r.method, r.path) for r in proxy.requests] == [
        ("POST", ACTIONS.format(created.agent_id))
    ] * 2
    keys = {r.headers["idempotency-key"] for r in proxy.requests}
    assert len(keys) == 1
    assert proxy.requests[0].body == proxy.requests[1].body
    status = admin.agent_status(created.agent_id)
    assert (status.spent, status.actions_allowed) == (Decimal(3), 1)


async def test_async_lost_answer_is_retried_with_the_same_key_and_charged_once(
    server, new_agent, async_admin
):
    created = new_agent(tools={"search": {"cost": 3}})
    with Proxy(server.port, plan=["drop"]) as proxy:
        async with AsyncGuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client:
            decision = await client.request_action("search")
    assert (decision.allowed, decision.remaining) == (True, Decimal(97))
    assert len({r.headers["idempotency-key"] for r in proxy.requests}) == 1
    assert len(proxy.requests) == 2
    assert (await async_admin.agent_status(created.agent_id)).spent == Decimal(3)


def test_guarded_tool_survives_lost_answers_to_its_request_and_its_outcome(
    server, new_agent, admin
):
    created = new_agent(tools={"search": {"cost": 2}})
    calls = []
    # 1: action request, answer lost; 2: its retry; 3: outcome, answer lost; 4: its retry
    # (409 invalid_state, the first copy was recorded); 5: the client reads the action.
    with (
        Proxy(server.port, plan=["drop", "forward", "drop"]) as proxy,
        GuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client,
    ):
        assert client.guarded(lambda: calls.append(1) or "done", name="search")() == "done"
    assert calls == [1]
    assert [r.path.rsplit("/", 1)[-1] for r in proxy.requests][:5] == [
        "actions",
        "actions",
        "outcome",
        "outcome",
        "act-1",
    ]
    status = admin.agent_status(created.agent_id)
    assert (status.spent, status.scars) == (Decimal(2), ())
    action = admin.get_action(created.agent_id, "act-1")
    assert (action.status, action.outcome) == ("completed", "success")


async def test_async_guarded_tool_survives_a_lost_outcome_answer(server, new_agent):
    created = new_agent()
    with Proxy(server.port, plan=["forward", "drop"]) as proxy:
        async with AsyncGuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client:

            @client.guarded
            async def search() -> str:
                return "ok"

            assert await search() == "ok"
            assert (await client.get_action("act-1")).outcome == "success"


def test_503_is_retried_until_the_service_answers(server, new_agent, admin):
    created = new_agent()
    with (
        Proxy(server.port, plan=["unavailable", "unavailable"]) as proxy,
        GuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client,
    ):
        assert client.request_action("search").allowed
    assert len(proxy.requests) == 3
    assert admin.agent_status(created.agent_id).spent == Decimal(1)


def test_503_after_the_last_attempt_is_raised(server, new_agent):
    created = new_agent()
    retry = Retry(attempts=2, base_delay=0.01)
    with (
        Proxy(server.port, plan=["unavailable"] * 5) as proxy,
        GuardClient(created.token, base_url=proxy.url, retry=retry) as client,
        pytest.raises(ServiceUnavailable) as info,
    ):
        client.status()
    assert (info.value.status, info.value.code, info.value.message) == (
        503,
        "overload",
        "gateway is overloaded",
    )
    assert len(proxy.requests) == 2


def test_4xx_is_never_retried(server, new_agent):
    created = new_agent()
    with (
        Proxy(server.port) as proxy,
        GuardClient(created.token, base_url=proxy.url, retry=FAST_RETRY) as client,
        pytest.raises(UnknownAction) as info,
    ):
        client.get_action("act-404")
    assert (info.value.status, info.value.code) == (404, "unknown_action")
    assert len(proxy.requests) == 1


def test_request_that_must_not_repeat_is_not_resent_after_a_lost_answer(server, new_agent):
    created = new_agent()
    with (
        Proxy(server.port, plan=["drop"]) as proxy,
        AdminClient(server.admin_token, base_url=proxy.url, retry=FAST_RETRY) as admin,
    ):
        with pytest.raises(TransportError) as info:
            admin.add_scar(created.agent_id, severity="moderate", reason="spam")
        assert info.value.url == proxy.url
        assert re.fullmatch(
            rf"no answer from guardd at {re.escape(proxy.url)}: .+ "
            r"\(POST /v1/agents/\S+/scars, 1 attempt; the service may have received the request\)",
            info.value.message,
        ), info.value.message
        # The service did act once, and only once.
        assert admin.agent_status(created.agent_id).scar_score == 3
    assert len(proxy.requests) == 2


def test_connection_refused_is_retried_then_raised_naming_the_address_tried():
    retry = Retry(attempts=3, base_delay=0.01)
    url = f"http://127.0.0.1:{free_port()}"
    with (
        GuardClient("agt_a.bWFj", base_url=url, retry=retry) as c,
        pytest.raises(TransportError) as info,
    ):
        c.status()
    assert str(info.value) == (
        f"cannot reach guardd at {url}: connection refused (GET /v1/agents/a, 3 attempts)"
    )
    assert info.value.url == url


async def test_async_connection_refused_names_the_address_tried():
    url = f"http://127.0.0.1:{free_port()}"
    async with AsyncGuardClient("agt_a.bWFj", base_url=url, retry=Retry(attempts=1)) as c:
        with pytest.raises(TransportError) as info:
            await c.status()
    assert str(info.value) == (
        f"cannot reach guardd at {url}: connection refused (GET /v1/agents/a, 1 attempt)"
    )


def test_tool_exception_is_raised_even_when_its_failure_report_cannot_be_delivered(
    server, new_agent, admin, caplog
):
    created = new_agent()
    boom = RuntimeError("disk full")

    def tool() -> None:
        raise boom

    retry = Retry(attempts=2, base_delay=0.01)
    with (
        Proxy(server.port, plan=["forward", "unavailable", "unavailable"]) as proxy,
        GuardClient(created.token, base_url=proxy.url, retry=retry) as client,
        pytest.raises(RuntimeError) as info,
    ):
        client.guarded(tool, name="search")()
    assert info.value is boom
    assert caplog.messages == [
        "could not report the failure of action act-1: 503 overload: gateway is overloaded"
    ]
    assert admin.get_action(created.agent_id, "act-1").status == "allowed"
