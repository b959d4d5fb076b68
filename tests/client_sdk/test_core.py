"""The no-I/O core: requests built, answers parsed, inputs checked (no server)."""

from __future__ import annotations

import functools
import json
import re
from decimal import Decimal

import attrs
import pytest

from client_sdk import (
    Action,
    AgentListEntry,
    AgentStatus,
    Decision,
    Head,
    InvalidResponse,
    LogPage,
    PendingAction,
    PendingEntry,
    Retry,
    Scar,
    ToolInputError,
    VerifyFailure,
    VerifyReport,
)
from client_sdk._core import (
    AdminCore,
    AgentCore,
    agent_id_from_token,
    next_log_after,
    parse_action,
    parse_agents,
    parse_decision,
    parse_log_page,
    parse_pending,
    parse_response,
    parse_status,
    parse_verify_report,
)
from client_sdk._guarded import ToolSpec, poll_wait
from client_sdk._json import dumps, loads


def _body(request) -> object:
    return json.loads(request.body)


# ---- agent requests ---------------------------------------------------------


def test_action_request_posts_tool_input_and_cost_with_an_idempotency_key():
    request = AgentCore("mail-bot").request_action(
        "send_email", {"to": "a@example.com"}, cost=Decimal("2.50")
    )
    assert (request.method, request.path) == ("POST", "/v1/agents/mail-bot/actions")
    assert request.body == b'{"tool":"send_email","input":{"to":"a@example.com"},"cost":2.50}'
    assert 1 <= len(request.headers["Idempotency-Key"]) <= 128
    assert request.resendable


def test_each_action_request_gets_its_own_idempotency_key_unless_given():
    core = AgentCore("a")
    keys = {core.request_action("t").headers["Idempotency-Key"] for _ in range(3)}
    assert len(keys) == 3
    assert core.request_action("t", idempotency_key="k-1").headers["Idempotency-Key"] == "k-1"


def test_action_request_without_cost_omits_it_and_sends_null_input():
    assert _body(AgentCore("a").request_action("search")) == {"tool": "search", "input": None}


@pytest.mark.parametrize("cost", [pytest.param("5", id="string"), pytest.param(True, id="bool")])
def test_action_request_refuses_a_cost_that_is_not_a_number(cost):
    with pytest.raises(TypeError, match=r"^cost must be a number"):
        AgentCore("a").request_action("t", cost=cost)


def test_action_request_refuses_input_that_is_not_json_safe():
    with pytest.raises(
        ToolInputError, match=r"^input of tool 'x' is not JSON-safe: input\['s'\] is of type set"
    ):
        AgentCore("a").request_action("x", {"s": {1}})


def test_agent_id_in_paths_is_escaped():
    assert AgentCore("a/b").status().path == "/v1/agents/a%2Fb"


def test_get_action_long_poll_sends_wait_and_extends_the_timeout():
    request = AgentCore("a").get_action("act-3", wait=60)
    assert (request.method, request.path) == ("GET", "/v1/agents/a/actions/act-3")
    assert request.params == {"wait": "60"}
    assert request.wait == 60
    assert AgentCore("a").get_action("act-3").params == {}
    assert AgentCore("a").get_action("act-3", wait=2.25).params == {"wait": "2.25"}
    assert AgentCore("a").get_action("act-3", wait=0.0001).params == {"wait": "0.001"}


@pytest.mark.parametrize("wait", [0, -1, 60.5, 61, True])
def test_get_action_refuses_a_wait_outside_0_to_60(wait):
    with pytest.raises(ValueError, match=r"^wait must be a number of seconds in \(0, 60\]"):
        AgentCore("a").get_action("act-1", wait=wait)


def test_outcome_report_posts_status_and_detail():
    request = AgentCore("a").report_outcome("act-2", "failure", "ValueError: boom")
    assert (request.method, request.path) == ("POST", "/v1/agents/a/actions/act-2/outcome")
    assert _body(request) == {"status": "failure", "detail": "ValueError: boom"}
    assert _body(AgentCore("a").report_outcome("act-2", "success")) == {"status": "success"}


# ---- admin requests ---------------------------------------------------------


def test_admin_requests_use_the_documented_methods_paths_and_bodies():
    core = AdminCore()
    policy = {"budget": Decimal("10.5"), "scar_limit": 3, "tools": {}}
    cases = [
        (
            core.create_agent("bot", policy),
            "POST",
            "/v1/agents",
            {"agent_id": "bot", "policy": {"budget": 10.5, "scar_limit": 3, "tools": {}}},
        ),
        (core.list_agents(), "GET", "/v1/agents", None),
        (core.reissue_token("bot"), "GET", "/v1/agents/bot/token", None),
        (
            core.set_policy("bot", policy),
            "PUT",
            "/v1/agents/bot/policy",
            {"budget": 10.5, "scar_limit": 3, "tools": {}},
        ),
        (core.list_pending("bot"), "GET", "/v1/agents/bot/actions/pending", None),
        (
            core.approve("bot", "act-1", "alice", "ok"),
            "POST",
            "/v1/agents/bot/actions/act-1/approve",
            {"approver": "alice", "note": "ok"},
        ),
        (
            core.reject("bot", "act-1", "alice", "no", "minor"),
            "POST",
            "/v1/agents/bot/actions/act-1/reject",
            {"approver": "alice", "reason": "no", "scar": "minor"},
        ),
        (
            core.add_scar("bot", "severe", "leaked data", "act-1", None),
            "POST",
            "/v1/agents/bot/scars",
            {"severity": "severe", "reason": "leaked data", "action_id": "act-1"},
        ),
        (
            core.terminate("bot", "done", "alice"),
            "POST",
            "/v1/agents/bot/terminate",
            {"reason": "done", "by": "alice"},
        ),
        (core.verify("bot"), "GET", "/v1/agents/bot/verify", None),
        (core.public_key(), "GET", "/v1/public-key", None),
    ]
    for request, method, path, body in cases:
        assert (request.method, request.path) == (method, path)
        assert (None if request.body is None else json.loads(request.body)) == body


def test_requests_that_must_not_be_repeated_are_not_resendable():
    core = AdminCore()
    assert not core.create_agent("bot", {}).resendable
    assert not core.approve("bot", "act-1", "alice").resendable
    assert not core.reject("bot", "act-1", "alice", "no").resendable
    assert not core.add_scar("bot", "minor", "x", None, None).resendable
    assert not core.terminate("bot", "x", "alice").resendable
    assert core.list_agents().resendable
    assert core.agent("bot").report_outcome("act-1", "success").resendable


def test_log_page_sends_after_and_limit_and_checks_them():
    request = AdminCore().log_page("bot", after=41, limit=5000)
    assert (request.path, request.params) == (
        "/v1/agents/bot/log",
        {"after": "41", "limit": "5000"},
    )
    assert AdminCore().log_page("bot").params == {"after": "-1", "limit": "500"}
    with pytest.raises(ValueError, match=r"^limit must be an integer in \[1, 5000\]"):
        AdminCore().log_page("bot", limit=5001)
    with pytest.raises(ValueError, match=r"^after must be an integer >= -1"):
        AdminCore().log_page("bot", after=-2)


def test_log_paging_stops_at_the_head():
    def page(*seqs: int) -> LogPage:
        return parse_log_page({"records": [{"seq": s} for s in seqs], "head": HEAD})

    assert next_log_after(page(0, 1)) == 1
    assert next_log_after(page(5)) is None
    assert next_log_after(page()) is None


# ---- answers ------------------------------------------------------------------


def test_money_is_parsed_as_decimal_even_when_integral():
    status = loads(b'{"budget": 10, "spent": 0.3, "remaining": 9.7, "scar_score": 3}')
    assert status == {
        "budget": Decimal(10),
        "spent": Decimal("0.3"),
        "remaining": Decimal("9.7"),
        "scar_score": 3,
    }
    assert all(type(status[k]) is Decimal for k in ("budget", "spent", "remaining"))
    assert type(status["scar_score"]) is int


def test_tool_input_is_left_exactly_as_parsed():
    action = loads(b'{"cost": 1, "input": {"cost": 3, "ratio": 0.5}}')
    assert action == {"cost": Decimal(1), "input": {"cost": 3, "ratio": Decimal("0.5")}}
    assert type(action["input"]["cost"]) is int


def test_decimal_is_written_as_a_json_number():
    assert dumps({"cost": Decimal("0.10"), "n": 1.5}) == b'{"cost":0.10,"n":1.5}'


def test_decisions_parse_into_their_three_variants():
    allowed = parse_decision(
        loads(b'{"decision":"allowed","action_id":"act-1","cost":1,"remaining":9}')
    )
    assert allowed == Decision("allowed", "act-1", cost=Decimal(1), remaining=Decimal(9))
    assert allowed.allowed
    assert not allowed.denied
    assert not allowed.pending
    denied = parse_decision(
        loads(
            b'{"decision":"denied","action_id":"act-2","reason":{"code":"tool_not_allowed","tool":"x"}}'
        )
    )
    assert denied.denied
    assert denied.reason == {"code": "tool_not_allowed", "tool": "x"}
    assert parse_decision({"decision": "pending_approval", "action_id": "act-3"}).pending


def test_action_parses_with_its_optional_fields():
    action = parse_action(
        loads(
            b'{"action_id":"act-1","tool":"t","input":null,"cost":0.5,"status":"allowed",'
            b'"outcome":null,"approved_by":"alice","note":"fine","extra":1}'
        )
    )
    assert action == Action(
        "act-1", "t", None, Decimal("0.5"), "allowed", approved_by="alice", note="fine"
    )


HEAD = {"seq": 5, "hash": "h"}
STATUS = {
    "agent_id": "bot",
    "alive": True,
    "termination_reason": None,
    "budget": 10,
    "spent": 0.5,
    "remaining": 9.5,
    "scar_score": 1,
    "scar_limit": 2.5,
    "scars": [{"seq": 4, "severity": "minor", "reason": "r", "action_id": "act-1"}],
    "actions_allowed": 1,
    "actions_denied": 0,
    "actions_pending": 0,
    "head": HEAD,
    "public_key": "ab",
}
FAILURE = {"line": 3, "seq": 2, "reason": "hash does not match content"}


def _answer(value: object) -> object:
    return loads(json.dumps(value).encode())


def test_admin_answers_parse_into_typed_values_named_like_the_json():
    status = parse_status(_answer(STATUS))
    assert status == AgentStatus(
        "bot",
        True,
        None,
        Decimal(10),
        Decimal("0.5"),
        Decimal("9.5"),
        1,
        Decimal("2.5"),
        (Scar(4, "minor", "r", "act-1"),),
        1,
        0,
        0,
        Head(5, "h"),
        "ab",
    )
    assert set(attrs.fields_dict(AgentStatus)) == set(STATUS)
    entries = parse_agents(
        _answer(
            {
                "agents": [
                    {"agent_id": "bot", "state": "active", "status": STATUS},
                    {"agent_id": "bad", "state": "quarantined", "error": "e", "failure": FAILURE},
                ]
            }
        )
    )
    assert entries == [
        AgentListEntry("bot", "active", status=status),
        AgentListEntry(
            "bad", "quarantined", error="e", failure=VerifyFailure(3, 2, FAILURE["reason"])
        ),
    ]
    pending = {"requested_at": "2026-01-01T00:00:00.000000Z", "seq": 2}
    action = {"action_id": "act-1", "tool": "t", "input": {"n": 1}, "cost": 5}
    assert parse_pending(_answer({"pending": [pending | {"action": action}]})) == [
        PendingEntry(pending["requested_at"], 2, PendingAction("act-1", "t", {"n": 1}, Decimal(5)))
    ]
    ok = {"ok": True, "records": 6, "public_key": "ab", "head": HEAD}
    assert parse_verify_report(_answer(ok)) == VerifyReport(True, 6, "ab", Head(5, "h"))
    failed = {"ok": False, "records": 2, "failure": FAILURE}
    assert parse_verify_report(_answer(failed)) == VerifyReport(
        False, 2, failure=VerifyFailure(3, 2, FAILURE["reason"])
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"alive": "yes"}, "expected true or false as 'alive'", id="bool"),
        pytest.param({"scar_score": 1.5}, "expected an integer 'scar_score'", id="int"),
        pytest.param({"budget": "10"}, "expected a number 'budget'", id="money"),
        pytest.param({"scars": [1]}, "expected a list of objects under 'scars'", id="list"),
        pytest.param({"head": None}, "expected a JSON object", id="head"),
    ],
)
def test_a_status_of_the_wrong_shape_is_an_invalid_response(change, message):
    request = AdminCore().set_policy("bot", {})
    with pytest.raises(InvalidResponse, match=re.escape(message)):
        parse_response(request, 200, json.dumps(STATUS | change).encode())


def test_success_answer_with_wrong_shape_is_an_invalid_response():
    request = AgentCore("a").request_action("t")
    with pytest.raises(
        InvalidResponse, match=r"^POST /v1/agents/a/actions: unknown decision 'maybe'$"
    ):
        parse_response(request, 200, b'{"decision":"maybe","action_id":"act-1"}')
    with pytest.raises(InvalidResponse, match=r"body is not JSON$"):
        parse_response(request, 200, b"<html>")


def test_agent_id_is_read_from_an_agent_token():
    assert agent_id_from_token("agt_mail-bot_2.AbC-_09") == "mail-bot_2"
    assert agent_id_from_token("not-an-agent-token") is None
    assert agent_id_from_token("agt_.mac") is None


# ---- retry policy ---------------------------------------------------------------


def test_retry_backoff_doubles_is_capped_and_bounded():
    retry = Retry(attempts=3, base_delay=1.0, max_delay=3.0)
    for attempt, full in [(1, 1.0), (2, 2.0), (3, 3.0), (4, 3.0)]:
        delays = [retry.delay(attempt) for _ in range(50)]
        assert all(full / 2 <= d <= full for d in delays)
    assert [retry.may_retry(n) for n in (1, 2, 3)] == [True, True, False]
    with pytest.raises(ValueError, match="attempts"):
        Retry(attempts=0)


# ---- guarded tools: input binding -----------------------------------------------


def send_email(to: str, subject: str = "hello", *cc: str, priority: int = 1, **headers: str):
    return to


def test_tool_input_binds_arguments_to_parameter_names_with_defaults():
    spec = ToolSpec(send_email, name=None, cost=None, approval_timeout=None)
    assert spec.name == "send_email"
    assert spec.bind(("a@example.com",), {}) == {
        "to": "a@example.com",
        "subject": "hello",
        "cc": (),
        "priority": 1,
        "headers": {},
    }
    assert spec.bind(("a@x", "hi", "b@x"), {"priority": 2, "X-Tag": "t"}) == {
        "to": "a@x",
        "subject": "hi",
        "cc": ("b@x",),
        "priority": 2,
        "headers": {"X-Tag": "t"},
    }


def test_tool_call_that_does_not_fit_the_signature_raises_type_error_before_asking():
    spec = ToolSpec(send_email, name=None, cost=None, approval_timeout=None)
    with pytest.raises(TypeError, match="missing a required argument: 'to'"):
        spec.bind((), {})


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param({1, 2}, "to is of type set, which JSON cannot carry", id="set"),
        pytest.param(
            ["a", object()], "to[1] is of type object, which JSON cannot carry", id="nested"
        ),
        pytest.param({"k": float("nan")}, "to['k'] is nan, not a finite number", id="nan"),
        pytest.param(Decimal("Infinity"), "to is Infinity, not a finite number", id="decimal-inf"),
        pytest.param({1: "x"}, "to has a key that is not a string (1)", id="int-key"),
        pytest.param(2**53, "to is an integer beyond 2^53-1 (9007199254740992)", id="big-int"),
        pytest.param("\ud800", "to holds a lone surrogate", id="surrogate"),
        pytest.param(b"raw", "to is of type bytes, which JSON cannot carry", id="bytes"),
    ],
)
def test_tool_argument_that_is_not_json_safe_is_named_in_the_error(value, problem):
    spec = ToolSpec(send_email, name="mail", cost=None, approval_timeout=None)
    with pytest.raises(ToolInputError) as info:
        spec.bind((value,), {})
    assert info.value.argument == "to"
    assert info.value.message == f"argument 'to' of tool 'mail' is not JSON-safe: {problem}"
    assert isinstance(info.value, TypeError)


def test_decimal_float_and_nested_containers_are_json_safe_input():
    spec = ToolSpec(send_email, name=None, cost=None, approval_timeout=None)
    tool_input = spec.bind(({"amount": Decimal("12.34"), "ratio": 0.5, "l": [None, True]},), {})
    assert loads(dumps(tool_input))["to"] == {
        "amount": Decimal("12.34"),
        "ratio": Decimal("0.5"),
        "l": [None, True],
    }


def test_tool_without_a_name_needs_one_given():
    partial = functools.partial(send_email, "a@x")
    with pytest.raises(TypeError, match=r"has no __name__; pass guarded\(\.\.\., name=\.\.\.\)$"):
        ToolSpec(partial, name=None, cost=None, approval_timeout=None)
    assert ToolSpec(partial, name="mail", cost=None, approval_timeout=None).name == "mail"


def test_long_poll_waits_at_most_60_seconds_and_stops_at_the_deadline():
    assert poll_wait(None, now=100.0) == 60
    assert poll_wait(200.0, now=100.0) == 60
    assert poll_wait(102.5, now=100.0) == 2.5
    assert poll_wait(100.0, now=100.0) is None
