"""The Claude Agent SDK adapter, against a real guardd. A real session needs
the Claude Code CLI and a model, so the permission callback and the hooks are
called here as the SDK calls them, with the SDK's own types
(``ToolPermissionContext``, the hook inputs, ``PermissionResult*``), and a
whole session runs through the SDK's client and control protocol with a
scripted CLI on the other end of its ``Transport``."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
from claude_agent_sdk import (
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    ToolPermissionContext,
    Transport,
)

from client_sdk import AsyncGuardClient
from client_sdk.integrations.claude_agent_sdk import ActionGuard
from tests.client_sdk.integrations.conftest import GuardedAgent

SAFETY = 60  # seconds: a hang fails the test instead of stalling the suite
EMAIL = {"to": "a@example.com", "body": "hi"}


def context(tool_use_id: str) -> ToolPermissionContext:
    return ToolPermissionContext(tool_use_id=tool_use_id)


def post(tool: str, args: dict[str, Any], tool_use_id: str, error: str | None = None) -> Any:
    """The hook input Claude Code sends once the tool ran."""
    base = {
        "session_id": "s-1",
        "transcript_path": "transcript.jsonl",
        "cwd": ".",
        "tool_name": tool,
        "tool_input": args,
        "tool_use_id": tool_use_id,
    }
    if error is None:
        return base | {"hook_event_name": "PostToolUse", "tool_response": {"ok": True}}
    return base | {"hook_event_name": "PostToolUseFailure", "error": error}


async def test_an_allowed_call_is_allowed_and_its_success_is_reported(
    guarded_agent: GuardedAgent,
) -> None:
    guard = ActionGuard(guarded_agent.client)
    result = await guard.can_use_tool("search", {"query": "guards"}, context("toolu_1"))
    assert isinstance(result, PermissionResultAllow)
    (requested,) = await guarded_agent.records("action_requested")
    assert (requested["tool"], requested["input"]) == ("search", {"query": "guards"})
    assert (
        await guard.report_outcome(post("search", {}, "toolu_1"), "toolu_1", {"signal": None}) == {}
    )
    assert await guarded_agent.outcomes() == {"search": "success"}


async def test_a_denied_call_is_denied_with_the_reason_code_in_the_message(
    guarded_agent: GuardedAgent,
) -> None:
    guard = ActionGuard(guarded_agent.client)
    result = await guard.can_use_tool("Bash", {"command": "rm -rf /"}, context("toolu_1"))
    assert isinstance(result, PermissionResultDeny)
    assert "(tool_not_allowed)" in result.message
    assert not result.interrupt


async def test_a_held_call_waits_and_is_allowed_once_approved(guarded_agent: GuardedAgent) -> None:
    guard = ActionGuard(guarded_agent.client)
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(guarded_agent.approve_all)
            result = await guard.can_use_tool("send_email", EMAIL, context("toolu_1"))
    assert isinstance(result, PermissionResultAllow)
    await guard.report_outcome(post("send_email", EMAIL, "toolu_1"), "toolu_1", {"signal": None})
    assert await guarded_agent.outcomes() == {"send_email": "success"}


async def test_a_rejected_call_is_denied_saying_it_was_rejected(
    guarded_agent: GuardedAgent,
) -> None:
    guard = ActionGuard(guarded_agent.client)
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(guarded_agent.reject_all)
            result = await guard.can_use_tool("send_email", EMAIL, context("toolu_1"))
    assert isinstance(result, PermissionResultDeny)
    assert "(rejected)" in result.message
    assert "not to that address" in result.message


async def test_two_permission_requests_are_asked_at_once(guarded_agent: GuardedAgent) -> None:
    # The SDK answers each permission request in a task of its own: both are
    # held before either is decided.
    guard = ActionGuard(guarded_agent.client)
    results: list[Any] = []

    async def ask(tool_use_id: str, to: str) -> None:
        args = {"to": to, "body": "hi"}
        results.append(await guard.can_use_tool("send_email", args, context(tool_use_id)))

    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(ask, "toolu_1", "a@example.com")
            group.start_soon(ask, "toolu_2", "b@example.com")
            await guarded_agent.approve_all(2)
    assert [type(r) for r in results] == [PermissionResultAllow, PermissionResultAllow]


async def test_a_repeated_permission_request_finds_the_same_action(
    guarded_agent: GuardedAgent,
) -> None:
    guard = ActionGuard(guarded_agent.client)
    for _ in range(2):
        await guard.can_use_tool("search", {"query": "guards"}, context("toolu_1"))
    assert len(await guarded_agent.records("action_requested")) == 1


async def test_a_wait_that_times_out_withdraws_the_action_and_denies(
    guarded_agent: GuardedAgent,
) -> None:
    guard = ActionGuard(guarded_agent.client, approval_timeout=0.2)
    result = await guard.can_use_tool("send_email", EMAIL, context("toolu_1"))
    assert isinstance(result, PermissionResultDeny)
    assert "(approval_timeout)" in result.message
    assert len(await guarded_agent.records("action_cancelled")) == 1


async def test_a_permission_request_cancelled_while_waiting_withdraws_the_action(
    guarded_agent: GuardedAgent,
) -> None:
    guard = ActionGuard(guarded_agent.client)
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(guard.can_use_tool, "send_email", EMAIL, context("toolu_1"))
            await guarded_agent.next_pending()
            group.cancel_scope.cancel()
    assert await guarded_agent.admin.list_pending(guarded_agent.agent_id) == []
    assert len(await guarded_agent.records("action_cancelled")) == 1


async def test_the_cost_comes_from_the_input_field_named_in_cost_from(
    guarded_agent: GuardedAgent,
) -> None:
    guard = ActionGuard(guarded_agent.client, cost_from={"transfer": "amount"})
    result = await guard.can_use_tool("transfer", {"to": "bob", "amount": 30}, context("t1"))
    assert isinstance(result, PermissionResultAllow)
    assert (await guarded_agent.client.status()).remaining == 70


async def test_a_failed_tool_is_reported_as_a_failure_with_claudes_error(
    guarded_agent: GuardedAgent,
) -> None:
    guard = ActionGuard(guarded_agent.client)
    await guard.can_use_tool("flaky", {}, context("toolu_1"))
    hook_input = post("flaky", {}, "toolu_1", error="Exit code 1: disk full")
    await guard.report_outcome(hook_input, "toolu_1", {"signal": None})
    (outcome,) = await guarded_agent.records("outcome")
    assert outcome["outcome"] == "failure"
    assert "Exit code 1: disk full" in outcome["detail"]


async def test_with_the_guard_down_the_call_is_denied(guard_down: AsyncGuardClient) -> None:
    result = await ActionGuard(guard_down).can_use_tool("search", {"query": "x"}, context("t1"))
    assert isinstance(result, PermissionResultDeny)
    assert "(guard_unreachable)" in result.message


def test_options_set_the_callback_and_add_the_outcome_hooks_to_those_given(
    guard_down: AsyncGuardClient,
) -> None:
    async def mine(*_: Any) -> Any:
        return {}

    guard = ActionGuard(guard_down)
    given = ClaudeAgentOptions(hooks={"PostToolUse": [HookMatcher(hooks=[mine])]}, max_turns=3)
    options = guard.options(given)
    assert options.can_use_tool == guard.can_use_tool
    assert options.max_turns == 3
    assert options.hooks is not None
    assert [m.hooks for m in options.hooks["PostToolUse"]] == [[mine], [guard.report_outcome]]
    assert [m.hooks for m in options.hooks["PostToolUseFailure"]] == [[guard.report_outcome]]
    assert given.hooks == {"PostToolUse": [given.hooks["PostToolUse"][0]]}  # left as it was


class ScriptedCLI(Transport):
    """The Claude Code CLI's side of the SDK's control protocol, scripted: it
    answers ``initialize`` (keeping the hooks the SDK registers), and when the
    user's message comes, asks permission for every scripted tool call at
    once, "runs" the allowed ones, calls the outcome hooks the SDK registered,
    and ends the turn with a result message."""

    def __init__(self, *calls: tuple[str, dict[str, Any], str | None]) -> None:
        self.calls = calls  # (tool, input, the error it fails with or None)
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self.answers: dict[str, dict[str, Any]] = {}  # tool use ID -> permission answer
        self._out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._hooks: dict[str, Any] = {}
        self._numbers = itertools.count(1)
        self._turns: set[asyncio.Task[None]] = set()

    async def connect(self) -> None:
        pass

    def is_ready(self) -> bool:
        return True

    async def end_input(self) -> None:
        pass

    async def close(self) -> None:
        self._out.put_nowait(None)

    async def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        while (message := await self._out.get()) is not None:
            yield message

    async def write(self, data: str) -> None:
        message = json.loads(data)
        if message["type"] == "control_request":  # initialize, from the SDK
            self._hooks = message["request"].get("hooks") or {}
            answer = {"subtype": "success", "request_id": message["request_id"], "response": {}}
            await self._out.put({"type": "control_response", "response": answer})
        elif message["type"] == "control_response":
            response = message["response"]
            self._waiting.pop(response["request_id"]).set_result(response)
        elif message["type"] == "user":
            turn = asyncio.ensure_future(self._turn())
            self._turns.add(turn)
            turn.add_done_callback(self._turns.discard)

    async def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        request_id = f"cli-{next(self._numbers)}"
        self._waiting[request_id] = asyncio.get_running_loop().create_future()
        await self._out.put(
            {"type": "control_request", "request_id": request_id, "request": request}
        )
        return await self._waiting[request_id]

    async def _turn(self) -> None:
        await asyncio.gather(*(self._tool(f"toolu_{i}", *c) for i, c in enumerate(self.calls)))
        await self._out.put(
            {
                "type": "result",
                "subtype": "success",
                "duration_ms": 1,
                "duration_api_ms": 1,
                "is_error": False,
                "num_turns": 1,
                "session_id": "s-1",
                "result": "done",
            }
        )

    async def _tool(
        self, tool_use_id: str, tool: str, args: dict[str, Any], error: str | None
    ) -> None:
        answer = await self._ask(
            {
                "subtype": "can_use_tool",
                "tool_name": tool,
                "input": args,
                "tool_use_id": tool_use_id,
            }
        )
        self.answers[tool_use_id] = answer["response"]
        if answer["response"]["behavior"] != "allow":
            return
        self.ran.append((tool, args))
        event = "PostToolUse" if error is None else "PostToolUseFailure"
        hook_input = post(tool, args, tool_use_id, error)
        for matcher in self._hooks.get(event, []):
            for callback_id in matcher["hookCallbackIds"]:
                await self._ask(
                    {
                        "subtype": "hook_callback",
                        "callback_id": callback_id,
                        "input": hook_input,
                        "tool_use_id": tool_use_id,
                    }
                )


async def session(guard: ActionGuard, cli: ScriptedCLI) -> list[Any]:
    async with ClaudeSDKClient(guard.options(), transport=cli) as claude:
        await claude.query("go")
        return [message async for message in claude.receive_response()]


async def test_through_the_sdk_a_session_asks_guardd_and_reports_each_outcome(
    guarded_agent: GuardedAgent,
) -> None:
    # The SDK's own control protocol carries the permission requests and the
    # hooks: an allowed call that succeeds, one that fails, a denied one, and
    # a held one approved meanwhile, all in one turn.
    guard = ActionGuard(guarded_agent.client)
    cli = ScriptedCLI(
        ("search", {"query": "guards"}, None),
        ("flaky", {}, "Exit code 1: disk full"),
        ("Bash", {"command": "rm -rf /"}, None),
        ("send_email", EMAIL, None),
    )
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(guarded_agent.approve_all)
            messages = await session(guard, cli)
    assert messages[-1].result == "done"
    assert sorted(tool for tool, _ in cli.ran) == ["flaky", "search", "send_email"]
    assert cli.answers["toolu_0"] == {"behavior": "allow", "updatedInput": {"query": "guards"}}
    assert cli.answers["toolu_2"]["behavior"] == "deny"
    assert "(tool_not_allowed)" in cli.answers["toolu_2"]["message"]
    assert await guarded_agent.outcomes() == {
        "search": "success",
        "flaky": "failure",
        "send_email": "success",
    }
