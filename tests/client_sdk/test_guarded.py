"""guarded() with the sync client on a real guardd: allow, fail, deny, approve, reject, time out."""

from __future__ import annotations

import threading
import time
from decimal import Decimal

import pytest

from client_sdk import (
    ActionDenied,
    AdminClient,
    ApprovalTimeout,
    Forbidden,
    InvalidState,
    ToolInputError,
)


def decide_when_pending(
    admin: AdminClient, agent_id: str, *, reject: bool = False
) -> threading.Thread:
    """An operator in another thread: waits for the first pending action and decides it."""

    def operate() -> None:
        deadline = time.monotonic() + 10
        while not (pending := admin.list_pending(agent_id)):
            assert time.monotonic() < deadline, "no action became pending"
            time.sleep(0.02)
        action_id = pending[0].action.action_id
        if reject:
            admin.reject(agent_id, action_id, approver="alice", reason="not today")
        else:
            admin.approve(agent_id, action_id, approver="alice", note="looks fine")

    thread = threading.Thread(target=operate)
    thread.start()
    return thread


def test_allowed_tool_runs_once_and_reports_success(new_agent, connect, admin):
    created = new_agent()
    client = connect(created)
    calls = []

    @client.guarded
    def search(query: str, limit: int = 10) -> list[str]:
        calls.append(query)
        return [f"{query} result"]

    assert search("guard rails") == ["guard rails result"]
    assert calls == ["guard rails"]
    action = client.get_action("act-1")
    assert (action.tool, action.input, action.status, action.outcome) == (
        "search",
        {"query": "guard rails", "limit": 10},
        "completed",
        "success",
    )
    status = admin.agent_status(created.agent_id)
    assert status.spent == Decimal(1)
    assert type(status.spent) is Decimal
    assert status.scars == ()


def test_tool_exception_reports_failure_and_reraises_the_same_exception_object(
    new_agent, connect, admin
):
    created = new_agent()
    client = connect(created)
    boom = ValueError("the search index is down")

    @client.guarded
    def search(query: str) -> None:
        raise boom

    with pytest.raises(ValueError, match="the search index is down") as info:
        search("x")
    assert info.value is boom
    action = client.get_action("act-1")
    assert (action.status, action.outcome) == ("completed", "failure")
    assert [s.severity for s in admin.agent_status(created.agent_id).scars] == ["minor"]


DENIALS = [
    pytest.param(
        {},
        [],
        "delete_db",
        {"code": "tool_not_allowed", "tool": "delete_db"},
        id="tool_not_allowed",
    ),
    pytest.param(
        {"tools": {"search": {"cost": 1, "max_calls": 1}}},
        ["search"],
        "search",
        {"code": "tool_call_limit", "tool": "search", "max_calls": 1},
        id="tool_call_limit",
    ),
    pytest.param(
        {"rate_limit": {"max_actions": 1, "window_secs": 60}},
        ["search"],
        "search",
        {"code": "rate_limited", "max_actions": 1, "window_secs": 60},
        id="rate_limited",
    ),
    pytest.param(
        {"budget": 3, "tools": {"search": {"cost": 2}}},
        ["search"],
        "search",
        {"code": "insufficient_budget", "cost": Decimal(2), "remaining": Decimal(1)},
        id="insufficient_budget",
    ),
]


@pytest.mark.parametrize(("overrides", "before", "tool", "reason"), DENIALS)
def test_denied_tool_raises_action_denied_with_the_reason_and_never_runs(
    new_agent, connect, overrides, before, tool, reason
):
    client = connect(new_agent(**overrides))
    for name in before:
        assert client.request_action(name).allowed
    ran = []
    with pytest.raises(ActionDenied) as info:
        client.guarded(lambda: ran.append(1), name=tool)()
    assert (info.value.code, info.value.reason) == (reason["code"], reason)
    assert info.value.action_id == f"act-{len(before) + 1}"
    assert ran == []


def test_terminated_agent_raises_action_denied_terminated(new_agent, connect, admin):
    created = new_agent()
    client = connect(created)
    admin.terminate(created.agent_id, reason="operator stop", by="alice")
    with pytest.raises(ActionDenied) as info:
        client.guarded(lambda: None, name="search")()
    assert info.value.reason == {"code": "terminated", "reason": "operator stop"}
    assert info.value.message == "action act-1 denied: terminated (reason='operator stop')"


def test_pending_tool_waits_until_an_operator_approves_it(new_agent, connect, admin):
    created = new_agent()
    client = connect(created)
    sent = []

    @client.guarded
    def send_email(to: str, body: str) -> str:
        sent.append(to)
        return "queued"

    operator = decide_when_pending(admin, created.agent_id)
    assert send_email("ops@example.com", body="hi") == "queued"
    operator.join()
    assert sent == ["ops@example.com"]
    action = client.get_action("act-1")
    assert (action.status, action.outcome, action.approved_by, action.note) == (
        "completed",
        "success",
        "alice",
        "looks fine",
    )
    assert client.status().spent == Decimal(5)


def test_pending_tool_rejected_by_an_operator_raises_rejected(new_agent, connect, admin):
    created = new_agent()
    client = connect(created)
    operator = decide_when_pending(admin, created.agent_id, reject=True)
    with pytest.raises(ActionDenied) as info:
        client.guarded(lambda: pytest.fail("ran"), name="send_email")()
    operator.join()
    assert (info.value.code, info.value.action_id) == ("rejected", "act-1")
    assert info.value.reason == {"code": "rejected", "by": "alice", "reason": "not today"}


def test_approval_after_termination_raises_the_rerun_checks_denial(new_agent, connect, admin):
    created = new_agent()
    client = connect(created)
    approvals = []

    def operate() -> None:
        deadline = time.monotonic() + 10
        while not (pending := admin.list_pending(created.agent_id)):
            assert time.monotonic() < deadline, "no action became pending"
            time.sleep(0.02)
        admin.terminate(created.agent_id, reason="incident", by="alice")
        action_id = pending[0].action.action_id
        approvals.append(admin.approve(created.agent_id, action_id, approver="alice"))

    operator = threading.Thread(target=operate)
    operator.start()
    with pytest.raises(ActionDenied) as info:
        client.guarded(lambda: pytest.fail("ran"), name="send_email")()
    operator.join()
    assert info.value.reason == {"code": "terminated", "reason": "incident"}
    assert approvals[0].denied
    assert approvals[0].reason == info.value.reason


def test_approval_timeout_raises_and_withdraws_the_action(new_agent, connect, admin):
    created = new_agent()
    client = connect(created)
    started = time.monotonic()
    with pytest.raises(ApprovalTimeout) as info:
        client.guarded(lambda: pytest.fail("ran"), name="send_email", approval_timeout=0.5)()
    assert 0.5 <= time.monotonic() - started < 5
    assert (info.value.action_id, info.value.code) == ("act-1", "approval_timeout")
    assert info.value.withdrawn
    assert "cancelled on the service" in info.value.message
    assert not isinstance(info.value, ActionDenied)
    action = admin.get_action(created.agent_id, "act-1")
    assert action.status == "cancelled"
    assert action.reason == {
        "code": "cancelled",
        "by": "agent",
        "reason": "guarded: no decision within approval_timeout",
    }
    assert admin.list_pending(created.agent_id) == []
    # A late approval cannot charge for the call that did not run.
    with pytest.raises(InvalidState, match="was cancelled by agent"):
        admin.approve(created.agent_id, "act-1", approver="alice")
    assert admin.agent_status(created.agent_id).spent == 0


def test_keep_pending_leaves_the_action_pending_after_the_timeout(new_agent, connect, admin):
    created = new_agent()
    client = connect(created)
    tool = client.guarded(
        lambda: pytest.fail("ran"), name="send_email", approval_timeout=0.3, keep_pending=True
    )
    with pytest.raises(ApprovalTimeout) as info:
        tool()
    assert not info.value.withdrawn
    assert info.value.message.endswith("it stays pending on the service")
    assert [p.action.action_id for p in admin.list_pending(created.agent_id)] == ["act-1"]


def test_keyboard_interrupt_while_waiting_withdraws_the_action(
    new_agent, connect, admin, monkeypatch
):
    created = new_agent()
    client = connect(created)
    real_get = client.get_action

    def interrupted(action_id, wait=None):
        real_get(action_id, wait=0.2)
        raise KeyboardInterrupt  # as Ctrl-C during the long-poll

    monkeypatch.setattr(client, "get_action", interrupted)
    with pytest.raises(KeyboardInterrupt):
        client.guarded(lambda: pytest.fail("ran"), name="send_email")()
    action = admin.get_action(created.agent_id, "act-1")
    assert (action.status, action.reason["reason"]) == (
        "cancelled",
        "guarded: the waiting call was interrupted",
    )


def test_an_expired_approval_raises_action_denied_approval_expired(new_agent, connect):
    created = new_agent(approval_timeout_secs=0.5)
    client = connect(created)
    with pytest.raises(ActionDenied) as info:
        client.guarded(lambda: pytest.fail("ran"), name="send_email")()
    assert info.value.reason == {"code": "approval_expired", "timeout_secs": Decimal("0.5")}


def test_name_and_cost_given_to_the_decorator_are_used(new_agent, connect, admin):
    created = new_agent(tools={"web_search": {"cost": 1}})
    client = connect(created)

    @client.guarded(name="web_search", cost=Decimal("2.5"))
    def lookup(query: str) -> str:
        return query

    assert lookup("q") == "q"
    action = client.get_action("act-1")
    assert (action.tool, action.cost) == ("web_search", Decimal("2.5"))
    assert admin.agent_status(created.agent_id).remaining == Decimal("97.5")


def test_decimal_and_float_arguments_are_recorded_as_json_numbers(new_agent, connect):
    client = connect(new_agent())

    @client.guarded
    def search(amount: Decimal, ratio: float) -> None:
        return None

    search(Decimal("12.34"), 0.25)
    assert client.get_action("act-1").input == {
        "amount": Decimal("12.34"),
        "ratio": Decimal("0.25"),
    }


def test_argument_that_is_not_json_safe_fails_before_anything_is_asked(new_agent, connect):
    client = connect(new_agent())

    @client.guarded
    def search(query: str, tags: object = None) -> None:
        pytest.fail("ran")

    with pytest.raises(ToolInputError, match=r"^argument 'tags' of tool 'search' is not JSON-safe"):
        search("q", tags={"a", "b"})
    assert client.status().actions_allowed == 0
    assert client.request_action("search").action_id == "act-1"


def test_sync_client_refuses_an_async_tool(new_agent, connect):
    client = connect(new_agent())

    async def search() -> None:
        return None

    with pytest.raises(TypeError, match=r"^GuardClient.guarded wraps sync functions"):
        client.guarded(search)


def test_agent_reporting_harmful_is_forbidden_and_a_second_outcome_is_invalid_state(
    new_agent, connect, admin
):
    created = new_agent()
    client = connect(created)
    decision = client.request_action("search", {"q": 1})
    assert (decision.decision, decision.cost, decision.remaining) == (
        "allowed",
        Decimal(1),
        Decimal(99),
    )
    with pytest.raises(Forbidden) as info:
        client.report_outcome(decision.action_id, "harmful")
    assert (info.value.status, info.value.code) == (403, "forbidden")
    client.report_outcome(decision.action_id, "success")
    with pytest.raises(InvalidState):
        client.report_outcome(decision.action_id, "failure")


def test_exact_money_ten_tenths_spend_a_budget_of_one(new_agent, connect):
    client = connect(new_agent(budget=1, tools={"search": {"cost": 0}}))
    for _ in range(10):
        assert client.request_action("search", cost=Decimal("0.1")).allowed
    status = client.status()
    assert (status.spent, status.remaining, status.alive) == (
        Decimal(1),
        Decimal(0),
        False,
    )
