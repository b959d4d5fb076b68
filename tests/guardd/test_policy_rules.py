"""Policy rules on a real guardd: each effect, where the rules stand among
the other checks, an approval that re-runs them, fail-closed evaluation
(policy_error), history (also rebuilt by the fold after a restart),
``cost_from`` charged exactly, and ``rule`` on each decision and record."""

from __future__ import annotations

from typing import Any

import pytest

from tests.guardd.conftest import Agent, Api, assert_error, number_texts, ok

SEND_RULES = [
    {"name": "internal", "when": "input.to.endsWith('@example.com')", "effect": "allow"},
    {
        "name": "after-private",
        "when": "'private_data' in history.tags_used",
        "effect": "deny",
        "message": "no outside email after reading private data",
        "scar": "moderate",
    },
    {"name": "outside", "when": "true", "effect": "require_approval"},
]
ISSUE_POLICY: dict[str, Any] = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {
        "read_inbox": {"cost": 0.1, "tags": ["private_data"]},
        "send_email": {
            "cost": 1,
            "tags": ["external_comm"],
            "requires_approval": False,
            "rules": SEND_RULES,
        },
        "pay": {
            "cost_from": "amount",
            "rules": [
                {
                    "name": "big",
                    "when": "double(input.amount) > 100.0",
                    "effect": "require_approval",
                }
            ],
        },
    },
}


def _policy(tool_rule: dict[str, Any], **policy: Any) -> dict[str, Any]:
    return {"budget": 100, "scar_limit": 10, "tools": {"t": tool_rule}, **policy}


def _rule(name: str, when: str, effect: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "when": when, "effect": effect, **more}


DECISION_KINDS = ("approval_required", "action_allowed", "action_denied")


def _decision_record(api: Api, agent: Agent, action_id: str) -> dict[str, Any]:
    decided = [
        r
        for r in api.records(agent)
        if r.get("action_id") == action_id and r["kind"] in DECISION_KINDS
    ]
    return decided[-1]


# -- the effects --------------------------------------------------------------------


def test_allow_rule_allows_and_names_itself_in_answer_and_record(api: Api) -> None:
    agent = api.create(policy=ISSUE_POLICY)
    answer = ok(agent.act("send_email", input={"to": "bob@example.com"}))
    assert answer["decision"] == "allowed"
    assert answer["rule"] == "internal"
    record = _decision_record(api, agent, answer["action_id"])
    assert record["kind"] == "action_allowed"
    assert record["rule"] == "internal"


def test_require_approval_rule_holds_the_call(api: Api) -> None:
    agent = api.create(policy=ISSUE_POLICY)
    answer = ok(agent.act("send_email", input={"to": "eve@elsewhere.org"}))
    assert answer == {"decision": "pending_approval", "action_id": "act-1", "rule": "outside"}
    record = _decision_record(api, agent, "act-1")
    assert record["kind"] == "approval_required"
    assert record["rule"] == "outside"


def test_deny_rule_denies_policy_rule_with_its_message_and_scar(api: Api) -> None:
    agent = api.create(policy=ISSUE_POLICY)
    ok(agent.act("read_inbox"))
    answer = ok(agent.act("send_email", input={"to": "eve@elsewhere.org"}))
    assert answer["decision"] == "denied"
    assert answer["rule"] == "after-private"
    assert answer["reason"] == {
        "code": "policy_rule",
        "rule": "after-private",
        "message": "no outside email after reading private data",
        "scar": "moderate",
    }
    record = _decision_record(api, agent, "act-2")
    assert record["rule"] == "after-private"
    assert record["reason"] == answer["reason"]
    assert api.status(agent)["scars"][0]["severity"] == "moderate"
    assert api.status(agent)["scar_score"] == 3


def test_a_deny_rule_without_message_or_scar_says_its_name_and_scars_nothing(api: Api) -> None:
    agent = api.create(policy=_policy({"rules": [_rule("never", "true", "deny")]}))
    answer = ok(agent.act("t"))
    assert answer["reason"] == {
        "code": "policy_rule",
        "rule": "never",
        "message": "denied by rule never",
    }
    assert api.status(agent)["scar_score"] == 0


def test_rules_stop_at_the_first_true_one(api: Api) -> None:
    agent = api.create(policy=ISSUE_POLICY)
    ok(agent.act("read_inbox"))
    # after-private would deny, but internal comes first.
    answer = ok(agent.act("send_email", input={"to": "bob@example.com"}))
    assert (answer["decision"], answer["rule"]) == ("allowed", "internal")


def test_allow_rule_allows_even_when_the_tool_requires_approval(api: Api) -> None:
    rules = [_rule("small", "double(input.n) < 10.0", "allow")]
    agent = api.create(policy=_policy({"requires_approval": True, "rules": rules}))
    assert ok(agent.act("t", input={"n": 3}))["decision"] == "allowed"
    held = ok(agent.act("t", input={"n": 30}))
    assert held == {"decision": "pending_approval", "action_id": "act-2"}  # no rule decided


def test_no_rule_true_leaves_the_decision_to_requires_approval(api: Api) -> None:
    agent = api.create(policy=_policy({"rules": [_rule("r", "tool == 'other'", "deny")]}))
    answer = ok(agent.act("t"))
    assert answer["decision"] == "allowed"
    assert "rule" not in answer
    assert "rule" not in _decision_record(api, agent, answer["action_id"])


def test_rules_read_agent_tool_and_now(api: Api) -> None:
    rules = [
        _rule("rich", "agent.remaining >= 100.0 && agent.actions_allowed == 0", "allow"),
        _rule("named", "tool == 't' && now > timestamp('2020-01-01T00:00:00Z')", "deny"),
    ]
    agent = api.create(policy=_policy({"cost": 1, "rules": rules}))
    assert ok(agent.act("t"))["rule"] == "rich"
    assert ok(agent.act("t"))["rule"] == "named"


# -- the order of the checks --------------------------------------------------------


def test_terminated_and_tool_not_allowed_come_before_the_rules(api: Api) -> None:
    agent = api.create(policy=_policy({"rules": [_rule("no", "true", "deny")]}))
    assert ok(agent.act("unknown"))["reason"]["code"] == "tool_not_allowed"
    ok(api.admin.post(f"{agent.path}/terminate", json={"reason": "done", "by": "ops"}))
    assert ok(agent.act("t"))["reason"]["code"] == "terminated"


def test_a_deny_rule_comes_before_call_limit_rate_and_budget(api: Api) -> None:
    tool = {"cost": 500, "max_calls": 1, "rules": [_rule("no", "tool == 't'", "deny")]}
    agent = api.create(policy=_policy(tool, rate_limit={"max_actions": 1, "window_secs": 60}))
    assert ok(agent.act("t"))["reason"]["code"] == "policy_rule"


def test_an_allow_rule_does_not_lift_the_other_checks(api: Api) -> None:
    tool = {"cost": 60, "max_calls": 5, "rules": [_rule("yes", "true", "allow")]}
    agent = api.create(policy=_policy(tool))
    assert ok(agent.act("t"))["decision"] == "allowed"
    answer = ok(agent.act("t"))
    assert answer["reason"]["code"] == "insufficient_budget"
    assert "rule" not in answer  # the budget decided it, not the rule


# -- approval re-runs the rules -----------------------------------------------------


def test_an_approval_satisfies_a_require_approval_rule(api: Api) -> None:
    agent = api.create(policy=ISSUE_POLICY)
    ok(agent.act("send_email", input={"to": "eve@elsewhere.org"}))
    approved = ok(api.approve(agent, "act-1"))
    assert (approved["decision"], approved["rule"]) == ("allowed", "outside")
    assert _decision_record(api, agent, "act-1")["approved_by"] == "alice"


def test_an_approval_is_denied_when_a_rule_now_says_deny(api: Api) -> None:
    agent = api.create(policy=ISSUE_POLICY)
    ok(agent.act("send_email", input={"to": "eve@elsewhere.org"}))  # held: outside
    ok(agent.act("read_inbox"))  # now private data was read
    denied = ok(api.approve(agent, "act-1"))
    assert denied["decision"] == "denied"
    assert denied["reason"]["code"] == "policy_rule"
    assert denied["rule"] == "after-private"
    record = _decision_record(api, agent, "act-1")
    assert (record["kind"], record["by"], record["rule"]) == (
        "action_denied",
        "alice",
        "after-private",
    )


def test_an_idempotent_repeat_answers_with_the_rule_too(api: Api) -> None:
    agent = api.create(policy=ISSUE_POLICY)
    key = {"Idempotency-Key": "k-1"}
    first = ok(
        agent.client.post(
            f"{agent.path}/actions",
            json={"tool": "send_email", "input": {"to": "a@example.com"}},
            headers=key,
        )
    )
    again = ok(
        agent.client.post(
            f"{agent.path}/actions",
            json={"tool": "send_email", "input": {"to": "a@example.com"}},
            headers=key,
        )
    )
    assert again == first
    assert again["rule"] == "internal"
    key = {"Idempotency-Key": "k-2"}
    held = ok(
        agent.client.post(
            f"{agent.path}/actions",
            json={"tool": "send_email", "input": {"to": "x@y.org"}},
            headers=key,
        )
    )
    assert (
        ok(
            agent.client.post(
                f"{agent.path}/actions",
                json={"tool": "send_email", "input": {"to": "x@y.org"}},
                headers=key,
            )
        )
        == held
    )


# -- fail closed: policy_error ------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "tool_input", "message"),
    [
        pytest.param(
            "input.to.endsWith('@x.org')",
            {"cc": "a"},
            'Key not found in map : "to"',
            id="missing-key",
        ),
        pytest.param(
            "input.to.endsWith('@x.org')",
            None,
            "Applying SELECT to non-message type",
            id="null-input",
        ),
        pytest.param("input.flag", {"flag": 3}, "gave int, not a boolean", id="not-boolean"),
        pytest.param("input.n > 1", {"n": "many"}, "No matching overloads", id="wrong-type"),
    ],
)
def test_a_when_that_cannot_be_evaluated_denies_policy_error_without_scar(
    api: Api, when: str, tool_input: Any, message: str
) -> None:
    rules = [_rule("check", when, "allow"), _rule("later", "true", "deny")]
    agent = api.create(policy=_policy({"rules": rules}))
    answer = ok(agent.act("t", input=tool_input))
    assert answer["decision"] == "denied"
    assert answer["rule"] == "check"
    reason = answer["reason"]
    assert (reason["code"], reason["rule"]) == ("policy_error", "check")
    assert message in reason["message"], reason
    assert api.status(agent)["scar_score"] == 0


def test_has_lets_a_rule_avoid_a_missing_key(api: Api) -> None:
    rules = [_rule("to", "has(input.to) && input.to == 'a'", "deny")]
    agent = api.create(policy=_policy({"rules": rules}))
    assert ok(agent.act("t", input={"cc": "a"}))["decision"] == "allowed"


def test_a_whole_number_written_with_a_fraction_reads_as_the_log_keeps_it(
    fresh_api: Api,
) -> None:
    # The log writes 2.0 as 2 (RFC 8785): a rule must see the int it reads
    # back, or an approval after a restart (and a replay) decides otherwise.
    api = fresh_api
    rules = [_rule("whole", "type(input.n) == int", "require_approval")]
    agent = api.create(policy=_policy({"rules": rules}))
    held = ok(agent.act("t", input={"n": 2.0}))
    assert (held["decision"], held["rule"]) == ("pending_approval", "whole")
    assert api.server.stop() == 0
    api.server.start()
    approved = ok(api.approve(agent, held["action_id"]))
    assert (approved["decision"], approved["rule"]) == ("allowed", "whole")


# -- history ------------------------------------------------------------------------


def test_tags_are_those_of_the_policy_in_force_when_the_call_was_allowed(api: Api) -> None:
    untagged = {**ISSUE_POLICY, "tools": {**ISSUE_POLICY["tools"], "read_inbox": {"cost": 0.1}}}
    agent = api.create(policy=untagged)
    ok(agent.act("read_inbox"))  # allowed with no tags
    ok(api.admin.put(f"{agent.path}/policy", json=ISSUE_POLICY))
    answer = ok(agent.act("send_email", input={"to": "eve@elsewhere.org"}))
    assert answer["rule"] == "outside"  # not after-private: that read had no tag


def test_history_counts_calls_and_times_tags(api: Api) -> None:
    rules = [
        _rule("third", "history.calls['t'] >= 2", "deny"),
        _rule(
            "soon",
            "'x' in history.tag_last_used && now - history.tag_last_used['x'] < duration('1h')",
            "require_approval",
        ),
    ]
    agent = api.create(policy=_policy({"tags": ["x"], "rules": rules}))
    # history.calls has no key 't' before the first call: fail closed.
    assert ok(agent.act("t"))["reason"]["code"] == "policy_error"
    agent = api.create(
        policy=_policy(
            {
                "tags": ["x"],
                "rules": [
                    _rule("third", "'t' in history.calls && history.calls['t'] >= 2", "deny"),
                    rules[1],
                ],
            }
        )
    )
    assert ok(agent.act("t"))["decision"] == "allowed"
    assert ok(agent.act("t"))["rule"] == "soon"
    ok(api.approve(agent, "act-2"))
    assert ok(agent.act("t"))["rule"] == "third"


def test_history_is_rebuilt_by_the_fold_after_a_restart(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create(policy=ISSUE_POLICY)
    ok(agent.act("read_inbox"))
    assert api.server.stop() == 0
    api.server.start()
    answer = ok(agent.act("send_email", input={"to": "eve@elsewhere.org"}))
    assert answer["rule"] == "after-private"


# -- cost_from ----------------------------------------------------------------------


def test_cost_from_charges_the_input_amount_exactly(api: Api) -> None:
    policy = {"budget": 0.4, "scar_limit": 10, "tools": {"pay": {"cost_from": "order.amount"}}}
    agent = api.create(policy=policy)
    first = number_texts(agent.act("pay", input={"order": {"amount": 0.1}}))
    assert (first["cost"], first["remaining"]) == ("0.1", "0.3")
    second = number_texts(agent.act("pay", input={"order": {"amount": 0.2}}))
    assert (second["cost"], second["remaining"]) == ("0.2", "0.1")  # not 0.09999999999999998
    over = ok(agent.act("pay", input={"order": {"amount": 0.100001}}))
    assert over["reason"]["code"] == "insufficient_budget"
    assert number_texts(agent.act("pay", input={"order": {"amount": 0.1}}))["remaining"] == "0"


def test_the_charge_is_the_largest_of_request_rule_and_amount(api: Api) -> None:
    agent = api.create(policy=_policy({"cost": 2, "cost_from": "amount"}))
    assert ok(agent.act("t", input={"amount": 1}, cost=1.5))["cost"] == 2
    assert ok(agent.act("t", input={"amount": 1}, cost=3))["cost"] == 3
    assert ok(agent.act("t", input={"amount": 4.25}, cost=3))["cost"] == 4.25


@pytest.mark.parametrize(
    ("tool_input", "message"),
    [
        pytest.param({}, "input.amount is missing", id="missing"),
        pytest.param(None, "input.amount is missing", id="no-input"),
        pytest.param({"amount": "5"}, "input.amount must be a number", id="string"),
        pytest.param({"amount": True}, "input.amount must be a number", id="bool"),
        pytest.param({"amount": -1}, "input.amount must not be negative", id="negative"),
    ],
)
def test_a_cost_from_amount_that_cannot_be_read_denies_policy_error(
    api: Api, tool_input: Any, message: str
) -> None:
    agent = api.create(policy=_policy({"cost_from": "amount"}))
    answer = ok(agent.act("t", input=tool_input))
    assert answer["reason"] == {"code": "policy_error", "cost_from": "amount", "message": message}
    assert "rule" not in answer
    assert api.status(agent)["scar_score"] == 0


def test_the_issue_policy_holds_a_big_payment(api: Api) -> None:
    agent = api.create(policy={**ISSUE_POLICY, "budget": 1000})
    assert ok(agent.act("pay", input={"amount": 5}))["decision"] == "allowed"
    held = ok(agent.act("pay", input={"amount": 150}))
    assert held["rule"] == "big"
    pending = ok(api.admin.get(f"{agent.path}/actions/pending"))["pending"]
    assert pending[0]["action"]["cost"] == 150


def test_a_grant_covers_a_call_a_rule_would_hold_and_the_rule_is_named(api: Api) -> None:
    agent = api.create(policy=ISSUE_POLICY)
    body = {"tool": "send_email", "by": "alice", "ttl_secs": 600, "max_calls": 1}
    ok(api.admin.post(f"{agent.path}/grants", json=body), 201)
    answer = ok(agent.act("send_email", input={"to": "eve@elsewhere.org"}))
    assert (answer["decision"], answer["grant_id"], answer["rule"]) == (
        "allowed",
        "grt-1",
        "outside",
    )


def test_a_new_policy_reprices_a_held_call_from_its_input(api: Api) -> None:
    agent = api.create(policy=_policy({"requires_approval": True}))
    ok(agent.act("t", input={"amount": 7}))
    ok(
        api.admin.put(
            f"{agent.path}/policy", json=_policy({"requires_approval": True, "cost_from": "amount"})
        )
    )
    pending = ok(api.admin.get(f"{agent.path}/actions/pending"))["pending"]
    assert pending[0]["action"]["cost"] == 7
    assert ok(api.approve(agent, "act-1"))["cost"] == 7


# -- the cost of a decision is bounded ----------------------------------------------


@pytest.mark.parametrize(
    ("when", "where"),
    [
        pytest.param(
            "input.to.exists(x, input.body + x == 'a')",
            "line 1 column 20: + on strings, lists or bytes inside exists builds a new value",
            id="input-joined-in-exists",
        ),
        pytest.param(
            "input.to.map(x, x + 'a').size() > 0",
            "line 1 column 10: map copies its growing result at each element",
            id="map-over-input",
        ),
    ],
)
def test_a_rule_whose_cost_grows_faster_than_the_input_is_refused_400_with_position(
    api: Api, when: str, where: str
) -> None:
    agent = api.create(policy=_policy({}))
    policy = _policy({"rules": [_rule("ok", "true", "allow"), _rule("costly", when, "deny")]})
    error = assert_error(api.admin.put(f"{agent.path}/policy", json=policy), 400, "bad_request")
    assert error["error"].startswith(f"$.tools.t.rules[1].when: {where}"), error
    created = api.admin.post("/v1/agents", json={"agent_id": api.new_id(), "policy": policy})
    error = assert_error(created, 400, "bad_request")
    assert error["error"].startswith(f"$.policy.tools.t.rules[1].when: {where}"), error


def test_a_large_input_is_decided_by_an_exists_rule_over_it(api: Api) -> None:
    # 5,000 recipients, about 260 KB: a body that reads only its element
    # visits each once.
    recipients = [f"person{i:05d}@example.com" for i in range(5_000)]
    rules = [
        _rule("outside", "input.to.exists(r, !r.endsWith('@example.com'))", "require_approval"),
        _rule("inside", "input.to.all(r, r.endsWith('@example.com'))", "allow"),
    ]
    agent = api.create(policy=_policy({"requires_approval": True, "rules": rules}))
    inside = ok(agent.act("t", input={"to": recipients, "body": "x" * 100_000}))
    assert (inside["decision"], inside["rule"]) == ("allowed", "inside")
    outside = ok(agent.act("t", input={"to": [*recipients, "someone@elsewhere.org"]}))
    assert (outside["decision"], outside["rule"]) == ("pending_approval", "outside")


def test_a_macro_over_more_elements_than_the_evaluation_budget_fails_closed(api: Api) -> None:
    rules = [_rule("inside", "input.to.all(r, r.endsWith('@example.com'))", "allow")]
    agent = api.create(policy=_policy({"rules": rules}))
    answer = ok(agent.act("t", input={"to": ["a@example.com"] * 10_001}))
    assert answer["decision"] == "denied"
    reason = answer["reason"]
    assert (reason["code"], reason["rule"]) == ("policy_error", "inside")
    assert reason["message"] == "Iteration budget exceeded"
    assert api.status(agent)["scar_score"] == 0


def test_the_default_rules_decide_a_tool_the_policy_does_not_list(api: Api) -> None:
    rules = [
        _rule("no-delete", "tool.startsWith('delete')", "deny", message="not here"),
        _rule("big", "has(input.n) && input.n > 10", "require_approval"),
    ]
    policy = {**_policy({"cost": 1}), "default": {"cost": 1, "rules": rules}}
    agent = api.create(policy=policy)
    denied = ok(agent.act("delete_file", input={"path": "/x"}))
    assert (denied["decision"], denied["rule"]) == ("denied", "no-delete")
    assert denied["reason"] == {"code": "policy_rule", "rule": "no-delete", "message": "not here"}
    held = ok(agent.act("search", input={"n": 11}))
    assert (held["decision"], held["rule"]) == ("pending_approval", "big")
    allowed = ok(agent.act("search", input={"n": 1}))
    assert allowed["decision"] == "allowed"
    assert "rule" not in allowed
    # A listed tool has its own rule, without the default's rules.
    assert ok(agent.act("t", input={"n": 11}))["decision"] == "allowed"
