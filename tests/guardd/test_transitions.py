"""The state tables of docs/records.md through the API: action transitions, checks
and deny reasons (exact ``reason`` fields), outcomes, scars, the agent
lifecycle, exact money and the Idempotency-Key."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.guardd.conftest import Agent, Api, assert_error, number_texts, ok

WEIGHTS = {"minor": 1, "moderate": 3, "severe": 10}


def policy(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "budget": 100,
        "scar_limit": 50,
        "tools": {
            "search": {"cost": 1},
            "send_email": {"cost": 5, "requires_approval": True},
        },
    }
    return base | overrides


def outcome(api: Api, agent: Agent, action_id: str, status: str, **fields: Any) -> Any:
    url = f"{agent.path}/actions/{action_id}/outcome"
    return ok(api.admin.post(url, json={"status": status, **fields}))


def scars(api: Api, agent: Agent) -> list[tuple[str, str | None]]:
    return [(s["severity"], s.get("action_id")) for s in api.status(agent)["scars"]]


def receipt_checked(decision: dict[str, Any]) -> dict[str, Any]:
    """An allowed decision without its receipt, which must be two lines
    (their content is tested in tests/client_sdk/test_receipt.py)."""
    receipt = decision.pop("receipt")
    assert [type(line) for line in receipt] == [str, str]
    return decision


def kinds(api: Api, agent: Agent) -> list[str]:
    return [r["kind"] for r in api.records(agent)]


# -- action transitions ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "charge"),
    [
        pytest.param(None, 1, id="no-cost-pays-the-minimum"),
        pytest.param(0.5, 1, id="lower-cost-pays-the-minimum"),
        pytest.param(3, 3, id="higher-cost-is-charged"),
        pytest.param(1.25, 1.25, id="fractional-cost-is-charged"),
    ],
)
def test_allowed_action_charges_the_larger_of_cost_and_minimum(
    api: Api, requested: float | None, charge: float
) -> None:
    agent = api.create(policy=policy())
    fields = {} if requested is None else {"cost": requested}
    decision = receipt_checked(ok(agent.act("search", **fields)))
    assert decision == {
        "decision": "allowed",
        "action_id": "act-1",
        "cost": charge,
        "remaining": 100 - charge,
    }
    status = api.status(agent)
    assert (status["spent"], status["remaining"], status["actions_allowed"]) == (
        charge,
        100 - charge,
        1,
    )
    assert ok(agent.client.get(f"{agent.path}/actions/act-1"))["cost"] == charge


def test_tool_requiring_approval_is_held_and_nothing_is_charged(api: Api) -> None:
    agent = api.create(policy=policy())
    assert ok(agent.act("send_email", cost=7)) == {
        "decision": "pending_approval",
        "action_id": "act-1",
    }
    status = api.status(agent)
    assert (status["spent"], status["actions_pending"], status["actions_allowed"]) == (0, 1, 0)
    action = ok(agent.client.get(f"{agent.path}/actions/act-1"))
    assert (action["status"], action["cost"], action["outcome"]) == ("pending_approval", 7, None)
    assert kinds(api, agent)[-2:] == ["action_requested", "approval_required"]


def test_approval_charges_and_allows_a_held_action(api: Api) -> None:
    agent = api.create(policy=policy())
    ok(agent.act("send_email"))
    assert receipt_checked(ok(api.approve(agent, "act-1", approver="carol", note="ok"))) == {
        "decision": "allowed",
        "action_id": "act-1",
        "cost": 5,
        "remaining": 95,
    }
    status = api.status(agent)
    assert (status["spent"], status["actions_pending"], status["actions_allowed"]) == (5, 0, 1)
    action = ok(agent.client.get(f"{agent.path}/actions/act-1"))
    assert (action["status"], action["approved_by"], action["note"]) == ("allowed", "carol", "ok")
    # Approved calls count as allowed: an outcome may be reported.
    outcome(api, agent, "act-1", "success")


def test_approval_denies_when_the_budget_no_longer_covers_the_charge(api: Api) -> None:
    agent = api.create(policy=policy(budget=10))
    ok(agent.act("send_email"))
    ok(agent.act("search", cost=6))
    assert ok(api.approve(agent, "act-1")) == {
        "decision": "denied",
        "action_id": "act-1",
        "reason": {"code": "insufficient_budget", "cost": 5, "remaining": 4},
    }
    status = api.status(agent)
    assert (status["spent"], status["actions_denied"], status["scars"]) == (6, 1, [])
    assert ok(agent.client.get(f"{agent.path}/actions/act-1"))["status"] == "denied"


def test_approval_denies_when_the_call_cap_was_reached_meanwhile_with_its_scar(api: Api) -> None:
    tools = {"send_email": {"cost": 1, "requires_approval": True, "max_calls": 1}}
    agent = api.create(policy=policy(tools=tools))
    ok(agent.act("send_email"))
    ok(agent.act("send_email"))
    assert ok(api.approve(agent, "act-1"))["decision"] == "allowed"
    assert ok(api.approve(agent, "act-2"))["reason"] == {
        "code": "tool_call_limit",
        "tool": "send_email",
        "max_calls": 1,
    }
    assert scars(api, agent) == [("minor", "act-2")]


def test_approval_denies_when_the_rate_limit_is_reached_meanwhile(api: Api) -> None:
    rate = {"max_actions": 1, "window_secs": 3600}
    agent = api.create(policy=policy(rate_limit=rate))
    ok(agent.act("send_email"))
    ok(agent.act("search"))
    assert ok(api.approve(agent, "act-1"))["reason"] == {
        "code": "rate_limited",
        "max_actions": 1,
        "window_secs": 3600,
    }
    assert scars(api, agent) == [("minor", "act-1")]


def test_approval_denies_a_tool_the_new_policy_no_longer_allows(api: Api) -> None:
    agent = api.create(policy=policy())
    ok(agent.act("send_email"))
    ok(api.admin.put(f"{agent.path}/policy", json=policy(tools={"search": {"cost": 1}})))
    assert ok(api.approve(agent, "act-1"))["reason"] == {
        "code": "tool_not_allowed",
        "tool": "send_email",
    }
    assert scars(api, agent) == [("moderate", "act-1")]


def test_approval_after_termination_is_denied_terminated(api: Api) -> None:
    agent = api.create(policy=policy())
    ok(agent.act("send_email"))
    ok(agent.act("send_email"))
    ok(api.admin.post(f"{agent.path}/terminate", json={"reason": "stop", "by": "op"}))
    status = api.status(agent)
    assert status["actions_pending"] == 2  # pending actions of a terminated agent stay pending
    assert ok(api.approve(agent, "act-1")) == {
        "decision": "denied",
        "action_id": "act-1",
        "reason": {"code": "terminated", "reason": "stop"},
    }
    assert api.records(agent)[-1]["kind"] == "action_denied"
    # Rejecting one still works.
    rejected = ok(api.reject(agent, "act-2", approver="op", reason="late"))
    assert rejected["reason"] == {"code": "rejected", "by": "op", "reason": "late"}
    status = api.status(agent)
    assert (status["spent"], status["actions_pending"], status["actions_allowed"]) == (0, 0, 0)


def test_reject_denies_with_rejected_and_adds_no_scar_by_default(api: Api) -> None:
    agent = api.create(policy=policy())
    ok(agent.act("send_email"))
    decision = ok(api.reject(agent, "act-1", approver="carol", reason="no"))
    assert decision["reason"] == {"code": "rejected", "by": "carol", "reason": "no"}
    assert api.status(agent)["scar_score"] == 0
    record = api.records(agent)[-1]
    assert (record["kind"], record["action_id"], record["by"]) == (
        "action_rejected",
        "act-1",
        "carol",
    )


@pytest.mark.parametrize("severity", ["minor", "moderate", "severe"])
def test_reject_with_a_scar_adds_that_scar(api: Api, severity: str) -> None:
    agent = api.create(policy=policy())
    ok(agent.act("send_email"))
    ok(api.reject(agent, "act-1", approver="carol", reason="bad idea", scar=severity))
    status = api.status(agent)
    assert status["scar_score"] == WEIGHTS[severity]
    scar = status["scars"][0]
    assert (scar["severity"], scar["reason"], scar["action_id"]) == (severity, "bad idea", "act-1")
    assert status["alive"] is True


def test_reject_with_a_fatal_scar_terminates(api: Api) -> None:
    agent = api.create(policy=policy())
    ok(agent.act("send_email"))
    ok(api.reject(agent, "act-1", approver="carol", reason="dangerous", scar="fatal"))
    status = api.status(agent)
    assert (status["alive"], status["termination_reason"]) == (False, "fatal_scar")
    assert kinds(api, agent)[-3:] == ["action_rejected", "scar", "terminated"]


# -- checks and deny reasons ---------------------------------------------------------------


def test_terminated_agent_is_denied_terminated_without_a_scar(api: Api) -> None:
    agent = api.create(policy=policy())
    ok(api.admin.post(f"{agent.path}/terminate", json={"reason": "retired", "by": "op"}))
    for tool in ("search", "send_email", "not_a_tool"):  # terminated is checked first
        decision = ok(agent.act(tool))
        assert decision["decision"] == "denied"
        assert decision["reason"] == {"code": "terminated", "reason": "retired"}
    status = api.status(agent)
    assert (status["scars"], status["actions_denied"], status["spent"]) == ([], 3, 0)
    assert ok(agent.client.get(f"{agent.path}/actions/act-3"))["status"] == "denied"


def test_unlisted_tool_without_default_is_tool_not_allowed_with_a_moderate_scar(api: Api) -> None:
    agent = api.create(policy=policy())
    decision = ok(agent.act("rm_rf", input={"path": "/"}))
    assert decision == {
        "decision": "denied",
        "action_id": "act-1",
        "reason": {"code": "tool_not_allowed", "tool": "rm_rf"},
    }
    assert scars(api, agent) == [("moderate", "act-1")]
    assert api.status(agent)["scar_score"] == 3
    denied = [r for r in api.records(agent) if r["kind"] == "action_denied"]
    assert denied[0]["reason"] == decision["reason"]


def test_default_rule_allows_unlisted_tools_at_its_cost(api: Api) -> None:
    agent = api.create(policy=policy(default={"cost": 0.5}))
    assert receipt_checked(ok(agent.act("anything"))) == {
        "decision": "allowed",
        "action_id": "act-1",
        "cost": 0.5,
        "remaining": 99.5,
    }


def test_default_rule_call_cap_counts_per_tool_name(api: Api) -> None:
    agent = api.create(policy=policy(default={"max_calls": 1}))
    assert ok(agent.act("a"))["decision"] == "allowed"
    assert ok(agent.act("b"))["decision"] == "allowed"
    assert ok(agent.act("a"))["reason"] == {"code": "tool_call_limit", "tool": "a", "max_calls": 1}


def test_default_rule_requiring_approval_holds_unlisted_tools(api: Api) -> None:
    agent = api.create(policy=policy(default={"requires_approval": True}))
    assert ok(agent.act("anything"))["decision"] == "pending_approval"


def test_call_cap_is_tool_call_limit_with_a_minor_scar(api: Api) -> None:
    agent = api.create(policy=policy(tools={"search": {"cost": 1, "max_calls": 2}}))
    ok(agent.act("search"))
    ok(agent.act("search"))
    assert ok(agent.act("search")) == {
        "decision": "denied",
        "action_id": "act-3",
        "reason": {"code": "tool_call_limit", "tool": "search", "max_calls": 2},
    }
    assert scars(api, agent) == [("minor", "act-3")]


def test_call_cap_counts_only_allowed_calls(api: Api) -> None:
    tools = {"search": {"cost": 1, "max_calls": 1}, "mail": {"requires_approval": True}}
    agent = api.create(policy=policy(budget=1, tools=tools))
    assert ok(agent.act("search", cost=2))["reason"]["code"] == "insufficient_budget"
    assert ok(agent.act("search"))["decision"] == "allowed"  # the denied call did not count


def test_rate_limit_is_rate_limited_with_a_minor_scar(api: Api) -> None:
    rate = {"max_actions": 2, "window_secs": 3600}
    agent = api.create(policy=policy(rate_limit=rate, default={}))
    ok(agent.act("search"))
    ok(agent.act("other"))  # all tools count together
    assert ok(agent.act("search")) == {
        "decision": "denied",
        "action_id": "act-3",
        "reason": {"code": "rate_limited", "max_actions": 2, "window_secs": 3600},
    }
    assert scars(api, agent) == [("minor", "act-3")]


def test_rate_limit_counts_neither_denied_nor_pending_actions(api: Api) -> None:
    rate = {"max_actions": 1, "window_secs": 3600}
    agent = api.create(policy=policy(rate_limit=rate))
    ok(agent.act("not_a_tool"))
    ok(agent.act("send_email"))
    assert ok(agent.act("search"))["decision"] == "allowed"


def test_rate_limit_window_slides(api: Api) -> None:
    rate = {"max_actions": 1, "window_secs": 0.4}
    agent = api.create(policy=policy(rate_limit=rate))
    assert ok(agent.act("search"))["decision"] == "allowed"
    assert ok(agent.act("search"))["reason"]["code"] == "rate_limited"
    time.sleep(0.5)
    assert ok(agent.act("search"))["decision"] == "allowed"


def test_rate_limit_set_by_a_new_policy_counts_actions_allowed_before_it(api: Api) -> None:
    agent = api.create(policy=policy())
    for _ in range(3):
        ok(agent.act("search"))
    limited = policy(rate_limit={"max_actions": 2, "window_secs": 3600})
    ok(api.admin.put(f"{agent.path}/policy", json=limited))
    assert ok(agent.act("search"))["reason"]["code"] == "rate_limited"


def test_rate_limit_with_a_longer_window_counts_actions_the_old_window_had_passed(
    api: Api,
) -> None:
    agent = api.create(policy=policy(rate_limit={"max_actions": 1, "window_secs": 0.2}))
    assert ok(agent.act("search"))["decision"] == "allowed"
    time.sleep(0.3)
    assert ok(agent.act("search"))["decision"] == "allowed"
    longer = policy(rate_limit={"max_actions": 2, "window_secs": 3600})
    ok(api.admin.put(f"{agent.path}/policy", json=longer))
    assert ok(agent.act("search"))["reason"]["code"] == "rate_limited"


def test_pending_entry_cost_is_the_charge_approval_would_make_under_a_new_policy(
    api: Api,
) -> None:
    agent = api.create(policy=policy())
    ok(agent.act("send_email", cost=6))
    ok(agent.act("send_email"))
    dearer = policy(tools={"send_email": {"cost": 8, "requires_approval": True}})
    ok(api.admin.put(f"{agent.path}/policy", json=dearer))
    pending = ok(api.admin.get(f"{agent.path}/actions/pending"))["pending"]
    assert [p["action"]["cost"] for p in pending] == [8, 8]
    assert ok(agent.client.get(f"{agent.path}/actions/act-1"))["cost"] == 8
    assert ok(api.approve(agent, "act-1"))["cost"] == 8


def test_cost_above_remaining_is_insufficient_budget_without_a_scar(api: Api) -> None:
    agent = api.create(policy=policy(budget=3))
    ok(agent.act("search", cost=2.5))
    assert ok(agent.act("search")) == {
        "decision": "denied",
        "action_id": "act-2",
        "reason": {"code": "insufficient_budget", "cost": 1, "remaining": 0.5},
    }
    status = api.status(agent)
    assert (status["scars"], status["spent"], status["alive"]) == ([], 2.5, True)


def test_tool_needing_approval_that_already_fails_a_check_is_denied_not_held(api: Api) -> None:
    agent = api.create(policy=policy(budget=2))
    decision = ok(agent.act("send_email"))
    assert decision["reason"] == {"code": "insufficient_budget", "cost": 5, "remaining": 2}
    assert api.status(agent)["actions_pending"] == 0


@pytest.mark.parametrize(
    ("terminate", "default", "tool", "expected"),
    [
        pytest.param(True, None, "unknown", "terminated", id="terminated-first"),
        pytest.param(False, None, "unknown", "tool_not_allowed", id="not-allowed-before-rest"),
        pytest.param(False, None, "search", "tool_call_limit", id="call-limit-before-rate"),
        pytest.param(False, {}, "other", "rate_limited", id="rate-before-budget"),
    ],
)
def test_checks_run_in_order_and_the_first_failure_wins(
    api: Api, terminate: bool, default: dict[str, Any] | None, tool: str, expected: str
) -> None:
    # After one allowed search, every later check fails at once: the call cap
    # of search, the rate limit, and the budget for a cost of 5.
    agent = api.create(
        policy=policy(
            budget=1.5,
            tools={"search": {"cost": 1, "max_calls": 1}},
            default=default,
            rate_limit={"max_actions": 1, "window_secs": 3600},
        )
    )
    ok(agent.act("search"))
    if terminate:
        ok(api.admin.post(f"{agent.path}/terminate", json={"reason": "x", "by": "op"}))
    assert ok(agent.act(tool, cost=5))["reason"]["code"] == expected


# -- outcomes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "who", "scar"),
    [
        pytest.param("success", "agent", None, id="success-agent"),
        pytest.param("success", "admin", None, id="success-admin"),
        pytest.param("failure", "agent", "minor", id="failure-agent"),
        pytest.param("failure", "admin", "minor", id="failure-admin"),
        pytest.param("harmful", "admin", "severe", id="harmful-admin"),
    ],
)
def test_outcome_sets_the_outcome_and_adds_its_scar(
    api: Api, status: str, who: str, scar: str | None
) -> None:
    agent = api.create(policy=policy())
    ok(agent.act("search"))
    client = agent.client if who == "agent" else api.admin
    body = {"status": status, "detail": "what happened"}
    reply = ok(client.post(f"{agent.path}/actions/act-1/outcome", json=body))
    assert reply == api.status(agent)
    action = ok(agent.client.get(f"{agent.path}/actions/act-1"))
    assert (action["status"], action["outcome"]) == ("completed", status)
    assert scars(api, agent) == ([] if scar is None else [(scar, "act-1")])
    assert reply["scar_score"] == (0 if scar is None else WEIGHTS[scar])
    record = next(r for r in api.records(agent) if r["kind"] == "outcome")
    assert (record["action_id"], record["outcome"], record["detail"]) == (
        "act-1",
        status,
        "what happened",
    )


# -- scars and termination ------------------------------------------------------------------


def test_scar_weights_add_up_to_the_scar_score(api: Api) -> None:
    agent = api.create(policy=policy(scar_limit=100))
    total = 0
    for severity in ("minor", "moderate", "severe", "minor"):
        body = {"severity": severity, "reason": f"{severity} thing"}
        status = ok(api.admin.post(f"{agent.path}/scars", json=body))
        total += WEIGHTS[severity]
        assert status["scar_score"] == total
    assert total == 15
    assert [s["severity"] for s in status["scars"]] == ["minor", "moderate", "severe", "minor"]
    seqs = [s["seq"] for s in status["scars"]]
    records = {r["seq"]: r for r in api.records(agent)}
    assert all(records[seq]["kind"] == "scar" for seq in seqs)


def test_reaching_the_scar_limit_terminates(api: Api) -> None:
    agent = api.create(policy=policy(scar_limit=4))
    ok(agent.act("not_a_tool"))  # moderate: 3
    assert api.status(agent)["alive"] is True
    status = ok(api.admin.post(f"{agent.path}/scars", json={"severity": "minor", "reason": "r"}))
    assert (status["alive"], status["termination_reason"], status["scar_score"]) == (
        False,
        "scar_limit",
        4,
    )
    last = api.records(agent)[-1]
    assert (last["kind"], last["reason"], last["by"]) == ("terminated", "scar_limit", "system")


def test_scar_limit_reached_by_a_denial_terminates(api: Api) -> None:
    agent = api.create(policy=policy(scar_limit=3))
    decision = ok(agent.act("not_a_tool"))
    assert decision["decision"] == "denied"
    status = api.status(agent)
    assert (status["alive"], status["termination_reason"]) == (False, "scar_limit")
    assert kinds(api, agent)[-4:] == ["action_requested", "action_denied", "scar", "terminated"]


def test_failure_outcome_reaching_the_scar_limit_terminates(api: Api) -> None:
    agent = api.create(policy=policy(scar_limit=1))
    ok(agent.act("search"))
    status = outcome(api, agent, "act-1", "failure")
    assert (status["alive"], status["termination_reason"]) == (False, "scar_limit")


def test_fatal_scar_terminates_immediately(api: Api) -> None:
    agent = api.create(policy=policy(scar_limit=1000))
    body = {"severity": "fatal", "reason": "leaked secrets"}
    status = ok(api.admin.post(f"{agent.path}/scars", json=body))
    assert (status["alive"], status["termination_reason"]) == (False, "fatal_scar")
    assert status["scars"][0]["severity"] == "fatal"
    last = api.records(agent)[-1]
    assert (last["kind"], last["reason"], last["by"]) == ("terminated", "fatal_scar", "system")


def test_lowering_the_scar_limit_to_the_score_terminates(api: Api) -> None:
    agent = api.create(policy=policy())
    ok(api.admin.post(f"{agent.path}/scars", json={"severity": "moderate", "reason": "r"}))
    status = ok(api.admin.put(f"{agent.path}/policy", json=policy(scar_limit=3)))
    assert (status["alive"], status["termination_reason"]) == (False, "scar_limit")


def test_lowering_the_budget_below_what_was_spent_leaves_remaining_negative_and_agent_alive(
    api: Api,
) -> None:
    tools = {"search": {"cost": 1}, "free": {"cost": 0}}
    agent = api.create(policy=policy(tools=tools))
    for _ in range(3):
        ok(agent.act("search"))
    status = ok(api.admin.put(f"{agent.path}/policy", json=policy(budget=2, tools=tools)))
    assert (status["alive"], status["budget"], status["spent"], status["remaining"]) == (
        True,
        2,
        3,
        -1,
    )
    denied = ok(agent.act("search"))
    assert denied["reason"] == {"code": "insufficient_budget", "cost": 1, "remaining": -1}
    # Even a free action costs more than a negative remaining.
    free = ok(agent.act("free"))
    assert free["reason"] == {"code": "insufficient_budget", "cost": 0, "remaining": -1}
    assert api.status(agent)["alive"] is True  # raising the budget again lets it act


def test_operator_termination_records_reason_and_actor(api: Api) -> None:
    agent = api.create(policy=policy())
    status = ok(api.admin.post(f"{agent.path}/terminate", json={"reason": "audit", "by": "op"}))
    assert (status["alive"], status["termination_reason"]) == (False, "audit")
    last = api.records(agent)[-1]
    assert (last["kind"], last["reason"], last["by"]) == ("terminated", "audit", "op")


def test_after_termination_everything_is_recorded_and_nothing_allowed(api: Api) -> None:
    agent = api.create(policy=policy())
    ok(agent.act("search"))
    ok(agent.act("send_email"))
    ok(api.admin.post(f"{agent.path}/terminate", json={"reason": "done", "by": "op"}))
    # An outcome of an action allowed before termination is still recorded, with its scar.
    outcome(api, agent, "act-1", "failure")
    # An operator scar is recorded and changes nothing else.
    ok(api.admin.post(f"{agent.path}/scars", json={"severity": "fatal", "reason": "late"}))
    assert ok(agent.act("search"))["reason"]["code"] == "terminated"
    assert ok(api.approve(agent, "act-2"))["reason"]["code"] == "terminated"
    assert_error(
        api.admin.post(f"{agent.path}/terminate", json={"reason": "again", "by": "op"}),
        409,
        "already_terminated",
    )
    status = api.status(agent)
    assert (status["alive"], status["termination_reason"], status["spent"]) == (False, "done", 1)
    assert status["actions_allowed"] == 1
    records = api.records(agent)
    assert [r["kind"] for r in records[-7:]] == [
        "terminated",
        "outcome",
        "scar",
        "scar",
        "action_requested",
        "action_denied",
        "action_denied",
    ]
    assert sum(1 for r in records if r["kind"] == "terminated") == 1


# -- exact money ----------------------------------------------------------------------------


def test_ten_actions_of_0_1_exhaust_a_budget_of_1_exactly(api: Api) -> None:
    agent = api.create(policy=policy(budget=1, tools={"tick": {"cost": 0.1}}))
    remaining = []
    for n in range(1, 11):
        response = agent.act("tick")
        decision = number_texts(response)
        assert (decision["decision"], decision["action_id"], decision["cost"]) == (
            "allowed",
            f"act-{n}",
            "0.1",
        )
        remaining.append(decision["remaining"])
    assert remaining == ["0.9", "0.8", "0.7", "0.6", "0.5", "0.4", "0.3", "0.2", "0.1", "0"]
    status_response = api.admin.get(agent.path)
    status = number_texts(status_response)
    assert (status["budget"], status["spent"], status["remaining"]) == ("1", "1", "0")
    assert '"remaining":0,' in status_response.text
    assert (status["alive"], status["termination_reason"]) == (False, "budget_exhausted")
    last = api.records(agent)[-1]
    assert (last["kind"], last["reason"], last["by"]) == (
        "terminated",
        "budget_exhausted",
        "system",
    )
    assert ok(agent.act("tick"))["reason"] == {"code": "terminated", "reason": "budget_exhausted"}


def test_numbers_are_integral_without_fraction_and_otherwise_shortest(api: Api) -> None:
    raw = (
        b'{"agent_id":"%s","policy":{"budget":5.0,"scar_limit":10.00,"tools":{"t":{"cost":0.10}}}}'
    )
    agent_id = api.new_id("numbers")
    response = api.admin.post("/v1/agents", content=raw % agent_id.encode())
    created = number_texts(response)
    assert (created["agent"]["budget"], created["agent"]["scar_limit"]) == ("5", "10")
    assert '"budget":5,' in response.text
    token = created["token"]
    client = api.client(token)
    path = f"/v1/agents/{agent_id}"
    assert number_texts(client.post(f"{path}/actions", json={"tool": "t"}))["cost"] == "0.1"
    decision = number_texts(client.post(f"{path}/actions", json={"tool": "t", "cost": 0.2}))
    assert (decision["cost"], decision["remaining"]) == ("0.2", "4.7")
    status = number_texts(client.get(path))
    assert (status["spent"], status["remaining"], status["budget"]) == ("0.3", "4.7", "5")
    policy_record = number_texts(api.admin.get(f"{path}/log"))["records"][1]
    assert policy_record["policy"]["budget"] == "5"
    assert policy_record["policy"]["tools"]["t"]["cost"] == "0.1"


def test_money_survives_many_small_charges_exactly(api: Api) -> None:
    agent = api.create(policy=policy(budget=0.3, tools={"t": {"cost": 0.000001}}))
    for _ in range(3):
        ok(agent.act("t", cost=0.1))
    status = number_texts(api.admin.get(agent.path))
    assert (status["spent"], status["remaining"], status["alive"]) == ("0.3", "0", False)


def test_free_action_does_not_terminate_an_agent_at_zero(api: Api) -> None:
    agent = api.create(policy=policy(budget=0, tools={"free": {}}))
    assert receipt_checked(ok(agent.act("free"))) == {
        "decision": "allowed",
        "action_id": "act-1",
        "cost": 0,
        "remaining": 0,
    }
    assert api.status(agent)["alive"] is True
    assert ok(agent.act("free", cost=0.01))["reason"]["code"] == "insufficient_budget"


def test_approval_that_exhausts_the_budget_terminates(api: Api) -> None:
    agent = api.create(policy=policy(budget=5))
    ok(agent.act("send_email"))
    assert ok(api.approve(agent, "act-1"))["remaining"] == 0
    status = api.status(agent)
    assert (status["alive"], status["termination_reason"]) == (False, "budget_exhausted")


# -- Idempotency-Key ------------------------------------------------------------------------


def _keyed(agent: Agent, key: str, **body: Any) -> Any:
    url = f"{agent.path}/actions"
    return ok(agent.client.post(url, json=body, headers={"Idempotency-Key": key}))


@pytest.mark.parametrize("tool", ["search", "send_email", "not_a_tool"])
def test_repeat_with_the_same_key_returns_the_first_decision_and_creates_nothing(
    api: Api, tool: str
) -> None:
    agent = api.create(policy=policy())
    first = _keyed(agent, "req-1", tool=tool, input={"q": 1}, cost=2)
    status, records = api.status(agent), api.records(agent)
    assert _keyed(agent, "req-1", tool=tool, input={"q": 1}, cost=2) == first
    assert api.status(agent) == status
    assert api.records(agent) == records
    requested = [r for r in records if r["kind"] == "action_requested"]
    assert [r["idempotency_key"] for r in requested] == ["req-1"]
    assert _keyed(agent, "req-2", tool=tool, input={"q": 1}, cost=2)["action_id"] == "act-2"


def test_repeat_after_approval_returns_the_first_decision(api: Api) -> None:
    agent = api.create(policy=policy())
    first = _keyed(agent, "k", tool="send_email")
    ok(api.approve(agent, "act-1"))
    assert _keyed(agent, "k", tool="send_email") == first
    assert api.status(agent)["actions_allowed"] == 1


def test_idempotency_keys_belong_to_one_agent(api: Api) -> None:
    one, two = api.create(policy=policy()), api.create(policy=policy())
    _keyed(one, "shared", tool="search")
    assert _keyed(two, "shared", tool="send_email")["decision"] == "pending_approval"
    assert api.status(two)["actions_pending"] == 1
