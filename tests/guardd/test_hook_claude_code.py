"""POST /v1/hooks/claude-code against a real guardd, with the input shapes
Claude Code's hooks reference documents (PreToolUse, PostToolUse,
PostToolUseFailure), extra keys included."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.guardd.conftest import Agent, Api, assert_error, ok, serving
from tests.support.server import GuardServer

HOOK = "/v1/hooks/claude-code"
_ids = iter(range(1, 1_000_000))


def pre(tool: str, tool_input: Any = None, **more: Any) -> dict[str, Any]:
    """A PreToolUse input as Claude Code sends it."""
    return {
        "session_id": "abc123",
        "transcript_path": "~/.claude/projects/p/abc123.jsonl",
        "cwd": "~/p",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {"query": "weather"} if tool_input is None else tool_input,
        "tool_use_id": f"toolu_{next(_ids):04d}",
        **more,
    }


def post(asked: dict[str, Any], response: Any, event: str = "PostToolUse") -> dict[str, Any]:
    """The PostToolUse (or PostToolUseFailure) input of the call ``asked`` asked for."""
    body = {**asked, "hook_event_name": event}
    if event == "PostToolUse":
        body["tool_response"] = response
    else:
        body["error"] = response
    return body


def decision_of(answer: httpx.Response) -> dict[str, Any]:
    said: dict[str, Any] = ok(answer)
    assert list(said) == ["hookSpecificOutput"]
    output: dict[str, Any] = said["hookSpecificOutput"]
    assert output["hookEventName"] == "PreToolUse"
    return output


def actions(api: Api, agent: Agent) -> list[dict[str, Any]]:
    return [r for r in api.records(agent) if r["kind"] == "action_requested"]


def test_an_allowed_call_is_answered_allow_and_logged_with_its_exact_input(api: Api) -> None:
    agent = api.create()
    tool_input = {"query": "weather", "limit": 3, "nested": {"a": [1, "b", None]}}
    asked = pre("search", tool_input)
    output = decision_of(agent.client.post(HOOK, json=asked))
    assert output == {"hookEventName": "PreToolUse", "permissionDecision": "allow"}
    (requested,) = actions(api, agent)
    assert requested["tool"] == "search"
    assert requested["input"] == tool_input
    assert requested["idempotency_key"] == asked["tool_use_id"]


def test_a_denied_call_is_answered_deny_with_the_code_and_its_meaning(api: Api) -> None:
    agent = api.create()
    output = decision_of(agent.client.post(HOOK, json=pre("delete_repo")))
    assert output["permissionDecision"] == "deny"
    reason = output["permissionDecisionReason"]
    assert "tool_not_allowed" in reason
    assert "policy does not allow the tool delete_repo" in reason


def _hook_in_background(
    api: Api, agent: Agent, body: dict[str, Any]
) -> tuple[threading.Thread, list[httpx.Response]]:
    """The hook's call from a thread, on a connection of its own (the test's
    client goes on approving meanwhile)."""
    answers: list[httpx.Response] = []

    def call() -> None:
        with api.server.client(agent.token) as own:
            answers.append(own.post(HOOK, json=body))

    thread = threading.Thread(target=call)
    thread.start()
    return thread, answers


def _pending_id(api: Api, agent: Agent) -> str:
    """The held action's ID, once the hook's request has written it."""
    for _ in range(200):
        pending = ok(api.admin.get(f"{agent.path}/actions/pending"))["pending"]
        if pending:
            return str(pending[0]["action"]["action_id"])
        time.sleep(0.05)
    raise AssertionError("the call was never held")


def test_a_held_call_waits_and_is_allowed_when_an_operator_approves(api: Api) -> None:
    agent = api.create()
    thread, answers = _hook_in_background(api, agent, pre("send_email"))
    action_id = _pending_id(api, agent)
    ok(api.approve(agent, action_id))
    thread.join()
    assert decision_of(answers[0])["permissionDecision"] == "allow"


def test_a_held_call_rejected_by_an_operator_is_denied_with_the_reason(api: Api) -> None:
    agent = api.create()
    thread, answers = _hook_in_background(api, agent, pre("send_email"))
    action_id = _pending_id(api, agent)
    ok(api.reject(agent, action_id, reason="not to customers"))
    thread.join()
    output = decision_of(answers[0])
    assert output["permissionDecision"] == "deny"
    assert "rejected" in output["permissionDecisionReason"]
    assert "not to customers" in output["permissionDecisionReason"]


@pytest.fixture(scope="module")
def short_wait_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """A guardd whose hooks wait one second for an operator."""
    data = tmp_path_factory.mktemp("hook-wait") / "guard-data"
    with serving(data, args=["--hook-wait", "1"]) as api:
        yield api


def test_a_held_call_nobody_decides_in_time_is_cancelled_and_denied(short_wait_api: Api) -> None:
    api = short_wait_api
    agent = api.create()
    output = decision_of(agent.client.post(HOOK, json=pre("send_email")))
    assert output["permissionDecision"] == "deny"
    reason = output["permissionDecisionReason"]
    assert "for an operator to approve at the console" in reason
    (requested,) = actions(api, agent)
    action = ok(agent.client.get(f"{agent.path}/actions/{requested['action_id']}"))
    assert action["status"] == "cancelled"
    assert action["reason"]["by"] == "agent"
    assert ok(api.admin.get(f"{agent.path}/actions/pending"))["pending"] == []


def test_a_held_call_is_withdrawn_when_claude_code_stops_waiting(api: Api) -> None:
    agent = api.create()
    # A client that gives up long before --hook-wait, as Claude Code does when
    # its hook's timeout is the shorter.
    gives_up = httpx.Timeout(30.0, read=0.5)
    with api.server.client(agent.token) as hasty, pytest.raises(httpx.ReadTimeout):
        hasty.post(HOOK, json=pre("send_email"), timeout=gives_up)
    for _ in range(200):
        action = ok(agent.client.get(f"{agent.path}/actions/act-1"))
        if action["status"] != "pending_approval":
            break
        time.sleep(0.05)
    assert action["status"] == "cancelled"
    assert action["reason"] == {
        "code": "cancelled",
        "by": "agent",
        "reason": "Claude Code stopped waiting",
    }


def test_a_hook_wait_out_of_range_stops_guardd_at_startup(tmp_path: Path) -> None:
    server = GuardServer(tmp_path / "guard-data", env={"GUARD_HOOK_WAIT": "0"})
    with pytest.raises(RuntimeError):
        server.start()
    assert "--hook-wait must be 1 to 600 seconds" in server.read_output()


def test_the_same_tool_use_id_twice_is_one_action(api: Api) -> None:
    agent = api.create()
    asked = pre("search")
    first = decision_of(agent.client.post(HOOK, json=asked))
    again = decision_of(agent.client.post(HOOK, json=asked))
    assert first == again == {"hookEventName": "PreToolUse", "permissionDecision": "allow"}
    assert len(actions(api, agent)) == 1


def test_the_same_tool_use_id_with_another_input_is_denied_not_an_error(api: Api) -> None:
    agent = api.create()
    asked = pre("search", {"query": "a"})
    decision_of(agent.client.post(HOOK, json=asked))
    output = decision_of(agent.client.post(HOOK, json={**asked, "tool_input": {"query": "b"}}))
    assert output["permissionDecision"] == "deny"
    assert "idempotency_conflict" in output["permissionDecisionReason"]
    assert len(actions(api, agent)) == 1


def test_post_tool_use_records_success(api: Api) -> None:
    agent = api.create()
    asked = pre("search")
    decision_of(agent.client.post(HOOK, json=asked))
    assert ok(agent.client.post(HOOK, json=post(asked, {"results": ["sunny"]}))) == {}
    action = ok(agent.client.get(f"{agent.path}/actions/act-1"))
    assert (action["status"], action["outcome"]) == ("completed", "success")


@pytest.mark.parametrize(
    ("event", "response"),
    [
        ("PostToolUse", {"success": False, "error": "disk full"}),
        ("PostToolUse", {"is_error": True, "content": "boom"}),
        ("PostToolUseFailure", "Command exited with non-zero status code 1"),
    ],
)
def test_a_failed_tool_records_failure(api: Api, event: str, response: Any) -> None:
    agent = api.create()
    asked = pre("search")
    decision_of(agent.client.post(HOOK, json=asked))
    assert ok(agent.client.post(HOOK, json=post(asked, response, event))) == {}
    action = ok(agent.client.get(f"{agent.path}/actions/act-1"))
    assert (action["status"], action["outcome"]) == ("completed", "failure")
    (outcome,) = [r for r in api.records(agent) if r["kind"] == "outcome"]
    if event == "PostToolUseFailure":
        assert outcome["detail"] == response


def test_an_outcome_that_cannot_be_recorded_is_still_answered_empty(api: Api) -> None:
    agent = api.create()
    denied = pre("delete_repo")
    decision_of(agent.client.post(HOOK, json=denied))
    assert ok(agent.client.post(HOOK, json=post(denied, {"success": True}))) == {}
    never_asked = pre("search")
    assert ok(agent.client.post(HOOK, json=post(never_asked, {"ok": 1}))) == {}
    assert [r["kind"] for r in api.records(agent)].count("outcome") == 0
    assert len(actions(api, agent)) == 1  # a report never asks for an action


def test_the_admin_token_is_forbidden(api: Api) -> None:
    assert_error(api.admin.post(HOOK, json=pre("search")), 403, "forbidden")


def test_an_event_it_does_not_serve_is_400_naming_it(api: Api) -> None:
    agent = api.create()
    body = {"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "hi"}
    error = assert_error(agent.client.post(HOOK, json=body), 400, "bad_request")
    assert "UserPromptSubmit" in error["error"]
    assert actions(api, agent) == []


def test_unknown_keys_are_accepted(api: Api) -> None:
    agent = api.create()
    asked = pre("search", future_field={"x": 1}, agent_id="sub-1", agent_type="Explore")
    assert decision_of(agent.client.post(HOOK, json=asked))["permissionDecision"] == "allow"


@pytest.mark.parametrize("tool_use_id", ["", "x" * 129, "tab\there", "caf\u00e9", 42, None])
def test_a_tool_use_id_unusable_as_an_idempotency_key_is_400(api: Api, tool_use_id: Any) -> None:
    agent = api.create()
    error = assert_error(
        agent.client.post(HOOK, json=pre("search", tool_use_id=tool_use_id)), 400, "bad_request"
    )
    assert "tool_use_id" in error["error"]
    assert actions(api, agent) == []


@pytest.mark.parametrize("tool_name", ["", "a" * 1000, 7])
def test_a_bad_tool_name_is_400(api: Api, tool_name: Any) -> None:
    agent = api.create()
    error = assert_error(
        agent.client.post(HOOK, json=pre("search", tool_name=tool_name)), 400, "bad_request"
    )
    assert "tool_name" in error["error"]
