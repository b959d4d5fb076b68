"""Every error code of docs/api.md "Errors", each
with the ``{error, code}`` body. (401 and 403 are walked in test_auth.py,
503 quarantined and read_only in test_restart.py.)"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.guardd.conftest import POLICY, Agent, Api, assert_error, ok

MiB = 1024 * 1024


@pytest.fixture
def agent(api: Api) -> Agent:
    return api.create()


# -- 400 bad_request -----------------------------------------------------------


def _create(agent_id: Any, policy: Any = POLICY) -> dict[str, Any]:
    return {"agent_id": agent_id, "policy": policy}


BAD_CREATE = [
    pytest.param(_create(""), "$.agent_id: agent_id must be 1 to 64", id="id-empty"),
    pytest.param(_create("a" * 65), "$.agent_id: agent_id must be 1 to 64", id="id-65-chars"),
    pytest.param(_create("a b"), "$.agent_id: agent_id must be 1 to 64", id="id-space"),
    pytest.param(_create("a/b"), "$.agent_id: agent_id must be 1 to 64", id="id-slash"),
    pytest.param(_create("a.b"), "$.agent_id: agent_id must be 1 to 64", id="id-dot"),
    pytest.param(_create("é"), "$.agent_id: agent_id must be 1 to 64", id="id-non-ascii"),
    pytest.param(_create(7), "$.agent_id: agent_id must be 1 to 64", id="id-number"),
    pytest.param({"policy": POLICY}, "$.agent_id: required key missing", id="id-missing"),
    pytest.param({"agent_id": "x"}, "$.policy: required key missing", id="policy-missing"),
    pytest.param({**_create("x"), "extra": 1}, "$.extra: unknown key", id="unknown-key"),
    pytest.param(
        _create("x", {**POLICY, "tools": {"s": {"requires_aproval": True}}}),
        "$.policy.tools.s.requires_aproval: unknown key",
        id="policy-typo",
    ),
    pytest.param(
        _create("x", {**POLICY, "budget": -1}), "$.policy.budget: must not be negative", id="neg"
    ),
    pytest.param(
        _create("x", {**POLICY, "budget": "5"}), "$.policy.budget: must be a number", id="str"
    ),
    pytest.param(
        _create("x", {**POLICY, "budget": 1e9}), "$.policy.budget: must be below", id="budget-big"
    ),
    pytest.param(
        _create("x", {**POLICY, "budget": 0.0000001}),
        "$.policy.budget: must have at most 6 decimal places",
        id="budget-fine",
    ),
    pytest.param(
        _create("x", {**POLICY, "scar_limit": 0}),
        "$.policy.scar_limit: must be greater than 0",
        id="scar-limit-0",
    ),
    pytest.param(
        _create("x", {**POLICY, "tools": {"": {}}}), "$.policy.tools", id="tool-name-empty"
    ),
    pytest.param(
        _create("x", {**POLICY, "tools": {"s": {"max_calls": 0}}}),
        "$.policy.tools.s.max_calls: must be at least 1",
        id="max-calls-0",
    ),
    pytest.param(
        _create("x", {**POLICY, "rate_limit": {"max_actions": 1}}),
        "$.policy.rate_limit.window_secs: required key missing",
        id="rate-limit-incomplete",
    ),
    pytest.param(_create("x", []), "$.policy", id="policy-array"),
    pytest.param(
        _create("x", {**POLICY, "tools": {"s": {"rules": [{"name": "r", "when": "x > 1"}]}}}),
        "$.policy.tools.s.rules[0].when: line 1 column 1: undeclared reference to 'x'",
        id="rule-unknown-variable",
    ),
    pytest.param(
        _create("x", {**POLICY, "tools": {"s": {"cost_from": ""}}}),
        "$.policy.tools.s.cost_from: must be a string of 1 to 256 characters",
        id="cost-from-empty",
    ),
]


@pytest.mark.parametrize(("body", "message"), BAD_CREATE)
def test_create_with_bad_body_is_bad_request(api: Api, body: Any, message: str) -> None:
    error = assert_error(api.admin.post("/v1/agents", json=body), 400, "bad_request")
    assert error["error"].startswith(message), error


def test_a_policy_rule_that_does_not_compile_is_refused_naming_its_path_and_position(
    api: Api, agent: Agent
) -> None:
    rules = [
        {"name": "internal", "when": "input.to.endsWith('@example.com')", "effect": "allow"},
        {"name": "after", "when": "input.a && zz", "effect": "deny"},
    ]
    policy = {**POLICY, "tools": {"send_email": {"rules": rules}}}
    error = assert_error(api.admin.put(f"{agent.path}/policy", json=policy), 400, "bad_request")
    assert error["error"] == (
        "$.tools.send_email.rules[1].when: line 1 column 12: undeclared reference to 'zz'"
    )


def test_agent_id_of_64_allowed_characters_is_accepted(api: Api) -> None:
    agent_id = ("Az09_-" * 11)[:64]
    assert ok(api.admin.post("/v1/agents", json=_create(agent_id)), 201)["agent"]["agent_id"] == (
        agent_id
    )


BAD_ACTION = [
    pytest.param({"tool": ""}, "$.tool: tool must be 1 to 128 characters", id="tool-empty"),
    pytest.param({"tool": "t" * 129}, "$.tool: tool must be 1 to 128 characters", id="tool-129"),
    pytest.param({"tool": 5}, "$.tool: must be a string", id="tool-number"),
    pytest.param({}, "$.tool: required key missing", id="tool-missing"),
    pytest.param({"tool": "search", "cost": -1}, "$.cost: must not be negative", id="cost-neg"),
    pytest.param({"tool": "search", "cost": "1"}, "$.cost: must be a number", id="cost-str"),
    pytest.param({"tool": "search", "cost": True}, "$.cost: must be a number", id="cost-bool"),
    pytest.param(
        {"tool": "search", "cost": 0.0000001},
        "$.cost: must have at most 6 decimal places",
        id="cost-fine",
    ),
    pytest.param({"tool": "search", "other": 1}, "$.other: unknown key", id="unknown-key"),
]


@pytest.mark.parametrize(("body", "message"), BAD_ACTION)
def test_action_request_with_bad_body_is_bad_request(
    api: Api, agent: Agent, body: Any, message: str
) -> None:
    error = assert_error(agent.client.post(f"{agent.path}/actions", json=body), 400, "bad_request")
    assert error["error"] == message


def test_tool_of_128_characters_is_accepted(api: Api, agent: Agent) -> None:
    assert ok(agent.act("t" * 128))["reason"] == {"code": "tool_not_allowed", "tool": "t" * 128}


RAW_BODIES = [
    pytest.param(b"", id="empty"),
    pytest.param(b"{", id="not-json"),
    pytest.param(b"[]", id="array"),
    pytest.param(b'"tool"', id="string"),
    pytest.param(b"null", id="null"),
    pytest.param(b'{"tool":"search","tool":"search"}', id="duplicate-key"),
    pytest.param(b'{"tool":"search","input":9007199254740992}', id="int-beyond-2^53"),
    pytest.param(b'{"tool":"search","input":NaN}', id="nan"),
    pytest.param(b'{"tool":"search","input":Infinity}', id="infinity"),
    pytest.param(b'{"tool":"search","input":"\\ud800"}', id="lone-surrogate"),
    pytest.param(b'{"tool":"search","input":"\xff"}', id="not-utf8"),
    pytest.param(b'{"tool":"search","input":' + b"[" * 100 + b"]" * 100 + b"}", id="too-deep"),
]


@pytest.mark.parametrize("raw", RAW_BODIES)
def test_unacceptable_json_is_bad_request_and_writes_nothing(
    api: Api, agent: Agent, raw: bytes
) -> None:
    before = api.status(agent)
    response = agent.client.post(
        f"{agent.path}/actions", content=raw, headers={"Content-Type": "application/json"}
    )
    assert_error(response, 400, "bad_request")
    assert api.status(agent) == before
    assert ok(agent.act("search"))["action_id"] == "act-1"


def test_integer_at_2_53_minus_1_is_accepted(api: Api, agent: Agent) -> None:
    raw = b'{"tool":"search","input":9007199254740991}'
    assert ok(agent.client.post(f"{agent.path}/actions", content=raw))["decision"] == "allowed"
    assert ok(agent.client.get(f"{agent.path}/actions/act-1"))["input"] == 2**53 - 1


def test_a_rejected_request_uses_no_action_id_and_writes_nothing(api: Api, agent: Agent) -> None:
    head = api.status(agent)["head"]
    assert_error(agent.act(""), 400, "bad_request")
    assert_error(agent.act("search", cost=-1), 400, "bad_request")
    assert api.status(agent)["head"] == head
    assert ok(agent.act("search"))["action_id"] == "act-1"


OTHER_BAD_BODIES = [
    pytest.param("actions/act-1/outcome", {"status": "fine"}, "$.status", id="outcome-status"),
    pytest.param("actions/act-1/outcome", {}, "$.status", id="outcome-missing"),
    pytest.param(
        "actions/act-1/outcome", {"status": "success", "x": 1}, "$.x: unknown key", id="outcome-x"
    ),
    pytest.param("actions/act-2/approve", {}, "$.approver", id="approve-no-approver"),
    pytest.param("actions/act-2/approve", {"approver": ""}, "$.approver", id="approve-empty"),
    pytest.param("actions/act-2/reject", {"approver": "a"}, "$.reason", id="reject-no-reason"),
    pytest.param(
        "actions/act-2/reject",
        {"approver": "a", "reason": "r", "scar": "huge"},
        "$.scar",
        id="reject-bad-scar",
    ),
    pytest.param("scars", {"severity": "awful", "reason": "r"}, "$.severity", id="scar-severity"),
    pytest.param("scars", {"severity": "minor"}, "$.reason", id="scar-no-reason"),
    pytest.param("terminate", {"reason": "r"}, "$.by", id="terminate-no-by"),
    pytest.param(
        "terminate", {"reason": "r", "by": "system"}, "$.by", id="terminate-by-reserved-system"
    ),
]


@pytest.mark.parametrize(("suffix", "body", "prefix"), OTHER_BAD_BODIES)
def test_bad_bodies_of_other_endpoints_are_bad_requests_naming_the_key(
    api: Api, agent: Agent, suffix: str, body: Any, prefix: str
) -> None:
    ok(agent.act("search"))
    ok(agent.act("send_email"))
    before = api.status(agent)
    error = assert_error(api.admin.post(f"{agent.path}/{suffix}", json=body), 400, "bad_request")
    assert error["error"].startswith(prefix), error
    assert api.status(agent) == before


def test_put_policy_with_bad_policy_is_bad_request_naming_the_key(api: Api, agent: Agent) -> None:
    body = {**POLICY, "rate_limit": {"max_actions": 1, "window_secs": 1, "burst": 2}}
    error = assert_error(api.admin.put(f"{agent.path}/policy", json=body), 400, "bad_request")
    assert error["error"] == "$.rate_limit.burst: unknown key"


@pytest.mark.parametrize("value", ["-1", "61", "60.01", "abc", "nan", "inf", ""])
def test_wait_outside_0_to_60_or_not_a_number_is_bad_request(
    api: Api, agent: Agent, value: str
) -> None:
    ok(agent.act("search"))
    response = agent.client.get(f"{agent.path}/actions/act-1", params={"wait": value})
    assert_error(response, 400, "bad_request")


@pytest.mark.parametrize("value", ["0", "60", "0.5", "1e1"])
def test_wait_from_0_to_60_is_accepted(api: Api, agent: Agent, value: str) -> None:
    ok(agent.act("search"))
    response = agent.client.get(f"{agent.path}/actions/act-1", params={"wait": value})
    assert ok(response)["status"] == "allowed"


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"limit": "0"}, id="limit-0"),
        pytest.param({"limit": "-3"}, id="limit-negative"),
        pytest.param({"limit": "1.5"}, id="limit-fraction"),
        pytest.param({"limit": "ten"}, id="limit-word"),
        pytest.param({"after": "x"}, id="after-word"),
        pytest.param({"after": "-2"}, id="after-below-minus-1"),
    ],
)
def test_bad_log_parameters_are_bad_requests(
    api: Api, agent: Agent, params: dict[str, str]
) -> None:
    assert_error(api.admin.get(f"{agent.path}/log", params=params), 400, "bad_request")


@pytest.mark.parametrize("key", ["", "k" * 129])
def test_idempotency_key_outside_1_to_128_characters_is_bad_request(
    api: Api, agent: Agent, key: str
) -> None:
    response = agent.client.post(
        f"{agent.path}/actions", json={"tool": "search"}, headers={"Idempotency-Key": key}
    )
    assert_error(response, 400, "bad_request")
    assert api.status(agent)["actions_allowed"] == 0


# -- 403 forbidden (beyond the token matrix) -------------------------------------


def test_agent_reporting_harmful_is_forbidden(api: Api, agent: Agent) -> None:
    ok(agent.act("search"))
    body = {"status": "harmful"}
    response = agent.client.post(f"{agent.path}/actions/act-1/outcome", json=body)
    assert_error(response, 403, "forbidden")
    assert ok(agent.client.get(f"{agent.path}/actions/act-1"))["outcome"] is None


# -- 404 ---------------------------------------------------------------------------


def test_unknown_agent_is_not_found(api: Api) -> None:
    assert_error(api.admin.get("/v1/agents/nobody-here"), 404, "not_found")


@pytest.mark.parametrize(
    "path", ["/nope", "/v1", "/v1/", "/v1/agents/", "/v1/agents/x/nope", "/v2/agents", "/console/x"]
)
def test_unknown_path_is_not_found(api: Api, path: str) -> None:
    assert_error(api.admin.get(path), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        pytest.param("GET", "actions/act-9", None, id="get"),
        pytest.param("GET", "actions/act-9?wait=1", None, id="get-wait"),
        pytest.param("POST", "actions/act-9/outcome", {"status": "success"}, id="outcome"),
        pytest.param("POST", "actions/act-9/approve", {"approver": "a"}, id="approve"),
        pytest.param("POST", "actions/act-9/reject", {"approver": "a", "reason": "r"}, id="reject"),
        pytest.param(
            "POST",
            "scars",
            {"severity": "minor", "reason": "r", "action_id": "act-9"},
            id="scar",
        ),
    ],
)
def test_unknown_action_is_unknown_action(
    api: Api, agent: Agent, method: str, suffix: str, body: Any
) -> None:
    ok(agent.act("search"))
    before = api.status(agent)
    response = api.admin.request(method, f"{agent.path}/{suffix}", json=body)
    assert_error(response, 404, "unknown_action")
    assert api.status(agent) == before


# -- 405 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        pytest.param("DELETE", "/v1/agents", {"GET", "POST"}, id="delete-agents"),
        pytest.param("PUT", "/v1/agents", {"GET", "POST"}, id="put-agents"),
        pytest.param("POST", "/healthz", {"GET"}, id="post-healthz"),
        pytest.param("DELETE", "/v1/agents/{id}", {"GET"}, id="delete-agent"),
        pytest.param("GET", "/v1/agents/{id}/terminate", {"POST"}, id="get-terminate"),
        pytest.param("POST", "/v1/agents/{id}/policy", {"GET", "PUT"}, id="post-policy"),
        pytest.param("GET", "/v1/agents/{id}/actions", {"POST"}, id="get-actions"),
        pytest.param("PATCH", "/v1/agents/{id}/actions/act-1", {"GET"}, id="patch-action"),
        pytest.param("POST", "/v1/public-key", {"GET"}, id="post-public-key"),
    ],
)
def test_wrong_method_is_method_not_allowed(
    api: Api, agent: Agent, method: str, path: str, allowed: set[str]
) -> None:
    response = api.admin.request(method, path.format(id=agent.agent_id))
    assert_error(response, 405, "method_not_allowed")
    assert set(response.headers["allow"].split(", ")) - {"HEAD", "OPTIONS"} == allowed


# -- 409 -------------------------------------------------------------------------------


def test_taken_agent_id_is_agent_exists(api: Api, agent: Agent) -> None:
    other = {"budget": 1, "scar_limit": 1, "tools": {}}
    response = api.admin.post("/v1/agents", json=_create(agent.agent_id, other))
    assert_error(response, 409, "agent_exists")
    assert api.status(agent)["budget"] == 100


def test_outcome_on_a_denied_action_is_invalid_state(api: Api, agent: Agent) -> None:
    ok(agent.act("unknown_tool"))
    response = agent.client.post(f"{agent.path}/actions/act-1/outcome", json={"status": "success"})
    assert_error(response, 409, "invalid_state")


def test_outcome_on_a_pending_action_is_invalid_state(api: Api, agent: Agent) -> None:
    ok(agent.act("send_email"))
    response = agent.client.post(f"{agent.path}/actions/act-1/outcome", json={"status": "failure"})
    assert_error(response, 409, "invalid_state")
    assert api.status(agent)["scars"] == []


@pytest.mark.parametrize("second", ["success", "failure", "harmful"])
def test_second_outcome_is_invalid_state(api: Api, agent: Agent, second: str) -> None:
    ok(agent.act("search"))
    ok(api.admin.post(f"{agent.path}/actions/act-1/outcome", json={"status": "success"}))
    before = api.status(agent)
    response = api.admin.post(f"{agent.path}/actions/act-1/outcome", json={"status": second})
    assert_error(response, 409, "invalid_state")
    assert api.status(agent) == before
    assert ok(agent.client.get(f"{agent.path}/actions/act-1"))["outcome"] == "success"


@pytest.mark.parametrize("step", ["approve", "reject"])
def test_approve_or_reject_of_a_non_pending_action_is_invalid_state(
    api: Api, agent: Agent, step: str
) -> None:
    ok(agent.act("search"))
    ok(agent.act("send_email"))
    ok(api.approve(agent, "act-2"))
    for action_id in ("act-1", "act-2"):
        response = (api.approve if step == "approve" else api.reject)(agent, action_id)
        assert_error(response, 409, "invalid_state")


def test_terminating_twice_is_already_terminated(api: Api, agent: Agent) -> None:
    ok(api.admin.post(f"{agent.path}/terminate", json={"reason": "first", "by": "a"}))
    response = api.admin.post(f"{agent.path}/terminate", json={"reason": "second", "by": "b"})
    assert_error(response, 409, "already_terminated")
    assert api.status(agent)["termination_reason"] == "first"


def test_idempotency_key_with_a_different_body_is_idempotency_conflict(
    api: Api, agent: Agent
) -> None:
    headers = {"Idempotency-Key": "k-1"}
    url = f"{agent.path}/actions"
    ok(agent.client.post(url, json={"tool": "search", "input": 1}, headers=headers))
    for body in ({"tool": "search", "input": 2}, {"tool": "send_email"}, {"tool": "search"}):
        assert_error(
            agent.client.post(url, json=body, headers=headers), 409, "idempotency_conflict"
        )
    assert api.status(agent)["actions_allowed"] == 1


# -- 413 ------------------------------------------------------------------------------------


def _padded_action(size: int) -> bytes:
    head, tail = b'{"tool":"search","input":"', b'"}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def test_body_over_1_mib_is_too_large(api: Api, agent: Agent) -> None:
    response = agent.client.post(f"{agent.path}/actions", content=_padded_action(MiB + 1))
    assert_error(response, 413, "too_large")
    assert response.headers["connection"] == "close"
    assert api.status(agent)["actions_allowed"] == 0


def test_chunked_body_over_1_mib_is_too_large(api: Api, agent: Agent) -> None:
    def chunks() -> Any:
        yield from (b"x" * 65536 for _ in range(17))

    response = agent.client.post(f"{agent.path}/actions", content=chunks())
    assert_error(response, 413, "too_large")


def test_body_of_exactly_1_mib_is_accepted(api: Api, agent: Agent) -> None:
    response = agent.client.post(f"{agent.path}/actions", content=_padded_action(MiB))
    assert ok(response)["decision"] == "allowed"


def test_oversized_body_without_a_token_is_refused_with_an_error_body(api: Api) -> None:
    response = api.client().post("/v1/agents", content=b"x" * (MiB + 1))
    assert response.status_code in (401, 413)
    assert set(response.json()) == {"error", "code"}
    assert response.headers["connection"] == "close"


# -- connections survive early errors ---------------------------------------------------


def test_keep_alive_connection_serves_the_next_request_after_an_early_error(api: Api) -> None:
    anonymous = api.client()
    for _ in range(25):
        response = anonymous.post("/v1/agents/x/actions", json={"tool": "search", "input": "y"})
        assert_error(response, 401, "unauthorized")
        assert ok(api.admin.get("/healthz")) == {"ok": True}
        response = api.admin.post("/v1/agents/nobody/actions", json={"tool": "search"})
        assert_error(response, 404, "not_found")
        assert ok(api.admin.get("/healthz")) == {"ok": True}


# -- 500 internal ------------------------------------------------------------------------


def test_failed_log_write_is_internal_without_details(fresh_api: Api) -> None:
    api = fresh_api
    agents_dir = api.server.data_dir / "agents"
    agents_dir.rename(agents_dir.with_name("agents-away"))
    agents_dir.write_text("not a directory")  # creating a log now fails in the kernel
    try:
        response = api.admin.post("/v1/agents", json=_create("doomed"))
        error = assert_error(response, 500, "internal")
        assert re.fullmatch(r"internal error \(request id [0-9a-f]{12}\)", error["error"])
        assert "agents" not in error["error"]
    finally:
        agents_dir.unlink()
        agents_dir.with_name("agents-away").rename(agents_dir)
    assert_error(api.admin.get("/v1/agents/doomed"), 404, "not_found")
    assert ok(api.admin.post("/v1/agents", json=_create("doomed")), 201)


def test_policy_integer_beyond_what_the_log_can_hold_is_bad_request(api: Api) -> None:
    policy = {**POLICY, "tools": {"t": {"max_calls": 1e21}}}
    response = api.admin.post("/v1/agents", json={"agent_id": "big-cap", "policy": policy})
    error = assert_error(response, 400, "bad_request")
    assert error["error"] == "$.policy.tools.t.max_calls: must be at most 9007199254740991"
