"""The pure decision core: each check, its reason object, and the order in
which checks run (the first failure wins)."""

from __future__ import annotations

from array import array
from decimal import Decimal
from typing import Any

import pytest

from agents_runtime.core.checks import DENY_SCARS, Verdict, decide
from agents_runtime.core.state import AgentState
from tests.agents_runtime.support import T0, D, policy

NOW = T0 + 1000


def state_with(
    *,
    alive: bool = True,
    spent: str = "0",
    calls: dict[str, int] | None = None,
    recent: list[float] | None = None,
    **policy_keys: Any,
) -> AgentState:
    state = AgentState("a", policy=policy(**policy_keys))
    state.remaining = state.budget - D(spent)  # as the fold keeps it
    state.tool_calls = dict(calls or {})
    state.allowed_times = array("d", sorted(recent or []))
    if not alive:
        state.alive = False
        state.termination_reason = "operator said so"
    return state


# Every check fails at once for tool "t": terminated, unknown tool, call cap,
# rate limit and budget. Removing failures one at a time from the front walks
# the order documented in agents_runtime/core/checks.py.
TOOLS_CAPPED = {"t": {"cost": 5, "max_calls": 1}}
RATE = {"max_actions": 1, "window_secs": 60}


def test_all_checks_failing_gives_terminated() -> None:
    state = state_with(
        alive=False, budget=1, tools={}, calls={"t": 1}, recent=[NOW - 1], rate_limit=RATE
    )
    verdict = decide(state, "t", D(5), NOW)
    assert verdict.reason == {"code": "terminated", "reason": "operator said so"}


def test_terminated_beats_tool_not_allowed() -> None:
    state = state_with(alive=False, tools={})
    assert decide(state, "unknown", None, NOW).reason == {
        "code": "terminated",
        "reason": "operator said so",
    }


def test_tool_not_allowed_beats_rate_limit_and_budget() -> None:
    state = state_with(budget=1, tools={}, recent=[NOW - 1], rate_limit=RATE)
    assert decide(state, "t", D(5), NOW).reason == {"code": "tool_not_allowed", "tool": "t"}


def test_tool_call_limit_beats_rate_limit_and_budget() -> None:
    state = state_with(
        budget=1, tools=TOOLS_CAPPED, calls={"t": 1}, recent=[NOW - 1], rate_limit=RATE
    )
    assert decide(state, "t", None, NOW).reason == {
        "code": "tool_call_limit",
        "tool": "t",
        "max_calls": 1,
    }


def test_rate_limited_beats_insufficient_budget() -> None:
    state = state_with(budget=1, tools=TOOLS_CAPPED, recent=[NOW - 1], rate_limit=RATE)
    assert decide(state, "t", None, NOW).reason == {
        "code": "rate_limited",
        "max_actions": 1,
        "window_secs": Decimal(60),
    }


def test_insufficient_budget_is_the_last_check() -> None:
    state = state_with(budget=1, tools=TOOLS_CAPPED, rate_limit=RATE)
    assert decide(state, "t", None, NOW).reason == {
        "code": "insufficient_budget",
        "cost": Decimal(5),
        "remaining": Decimal(1),
    }


def test_a_tool_needing_approval_that_fails_a_check_is_denied_not_held() -> None:
    state = state_with(budget=1, tools={"send": {"cost": 5, "requires_approval": True}})
    assert decide(state, "send", None, NOW).decision == "denied"


def test_a_tool_needing_approval_that_passes_is_held() -> None:
    state = state_with(tools={"send": {"cost": 5, "requires_approval": True}})
    assert decide(state, "send", None, NOW) == Verdict("pending_approval", Decimal(5))


def test_approving_re_runs_the_checks_and_allows() -> None:
    state = state_with(tools={"send": {"cost": 5, "requires_approval": True}})
    assert decide(state, "send", None, NOW, approving=True) == Verdict("allowed", Decimal(5))


def test_approving_on_a_terminated_agent_is_denied_terminated() -> None:
    state = state_with(alive=False, tools={"send": {"requires_approval": True}})
    assert decide(state, "send", None, NOW, approving=True).reason == {
        "code": "terminated",
        "reason": "operator said so",
    }


def test_cost_equal_to_remaining_is_allowed() -> None:
    state = state_with(budget=10, spent="7.5", tools={"t": {}})
    assert decide(state, "t", D("2.5"), NOW) == Verdict("allowed", D("2.5"))


def test_cost_just_above_remaining_is_denied() -> None:
    state = state_with(budget=10, spent="7.5", tools={"t": {}})
    assert decide(state, "t", D("2.500001"), NOW).reason == {
        "code": "insufficient_budget",
        "cost": D("2.500001"),
        "remaining": D("2.5"),
    }


def test_a_free_action_at_remaining_0_is_allowed() -> None:
    state = state_with(budget=0, tools={"t": {}})
    assert decide(state, "t", None, NOW) == Verdict("allowed", Decimal(0))


def test_an_unlisted_tool_falls_back_to_the_default_rule() -> None:
    state = state_with(tools={}, default={"cost": 2})
    assert decide(state, "anything", None, NOW) == Verdict("allowed", Decimal(2))


def test_default_max_calls_counts_per_tool_name() -> None:
    state = state_with(tools={}, default={"max_calls": 1}, calls={"a": 1})
    assert decide(state, "a", None, NOW).reason == {
        "code": "tool_call_limit",
        "tool": "a",
        "max_calls": 1,
    }
    assert decide(state, "b", None, NOW).decision == "allowed"


@pytest.mark.parametrize(
    ("age", "limited"),
    [
        pytest.param(59.999999, True, id="inside-window"),
        pytest.param(60, False, id="exactly-window-secs-ago-has-left"),
        pytest.param(61, False, id="outside-window"),
    ],
)
def test_rate_window_is_trailing_window_secs(age: float, limited: bool) -> None:
    state = state_with(tools={"t": {}}, recent=[NOW - age], rate_limit=RATE)
    assert (decide(state, "t", None, NOW).decision == "denied") is limited


def test_rate_limit_counts_all_tools_together() -> None:
    state = state_with(
        tools={"a": {}, "b": {}},
        recent=[NOW - 2, NOW - 1],
        rate_limit={"max_actions": 2, "window_secs": 60},
    )
    assert decide(state, "b", None, NOW).reason["code"] == "rate_limited"  # type: ignore[index]


def test_charge_is_reported_even_when_denied() -> None:
    state = state_with(budget=1, tools={"t": {"cost": 3}})
    assert decide(state, "t", D(4), NOW).charge == Decimal(4)


@pytest.mark.parametrize(
    ("code", "scar"),
    [
        pytest.param("terminated", None, id="terminated-none"),
        pytest.param("tool_not_allowed", "moderate", id="tool_not_allowed-moderate"),
        pytest.param("tool_call_limit", "minor", id="tool_call_limit-minor"),
        pytest.param("rate_limited", "minor", id="rate_limited-minor"),
        pytest.param("insufficient_budget", None, id="insufficient_budget-none"),
        pytest.param("rejected", None, id="rejected-operator-chooses"),
    ],
)
def test_each_deny_reason_carries_the_scar_of_the_table(code: str, scar: str | None) -> None:
    assert DENY_SCARS[code] == scar


def test_decide_does_not_change_the_state() -> None:
    state = state_with(tools={"t": {}}, rate_limit=RATE)
    before = (state.spent, dict(state.tool_calls), list(state.allowed_times), state.alive)
    decide(state, "t", D(1), NOW)
    assert (state.spent, dict(state.tool_calls), list(state.allowed_times), state.alive) == before
