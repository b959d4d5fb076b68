"""The PydanticAI adapter on a real agent run: PydanticAI's own ``FunctionModel``
plays the model (it calls the tools the test scripts, then answers with
text), and a real guardd decides."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

from client_sdk import AsyncGuardClient
from client_sdk.integrations.pydantic_ai import ACTION_ID_KEY, ActionGuard
from tests.client_sdk.integrations.conftest import GuardedAgent

SAFETY = 60  # seconds: a hang fails the test instead of stalling the suite


def scripted(*calls: tuple[str, dict[str, Any]]) -> FunctionModel:
    """A model that makes ``calls`` in its first turn, then says "done"."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[
                ToolCallPart(name, args, tool_call_id=f"call-{i}")
                for i, (name, args) in enumerate(calls)
            ]
        )

    return FunctionModel(respond)


def received(messages: list[ModelMessage]) -> dict[str, Any]:
    """What the model was given back for each tool call, by call ID."""
    return {
        part.tool_call_id: part.content
        for message in messages
        for part in getattr(message, "parts", [])
        if isinstance(part, ToolReturnPart | RetryPromptPart)
    }


class Tools:
    """The agent's tools; each records that it ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []

    def agent(self, model: FunctionModel, guard: ActionGuard, *, deferred: bool = True) -> Agent:
        output: Any = [str, DeferredToolRequests] if deferred else str
        agent = Agent(model, output_type=output, capabilities=[guard])
        ran = self.ran

        @agent.tool_plain
        def search(query: str, limit: int = 3) -> str:
            ran.append(("search", {"query": query, "limit": limit}))
            return f"3 results for {query}"

        @agent.tool_plain
        def send_email(to: str, body: str) -> str:
            ran.append(("send_email", {"to": to, "body": body}))
            return f"sent to {to}"

        @agent.tool_plain
        def transfer(to: str, amount: float) -> str:
            ran.append(("transfer", {"to": to, "amount": amount}))
            return "transferred"

        @agent.tool_plain
        def flaky() -> str:
            ran.append(("flaky", {}))
            raise RuntimeError("the disk is full")

        @agent.tool_plain
        def delete_everything() -> str:
            ran.append(("delete_everything", {}))
            return "deleted"

        return agent


EMAIL = ("send_email", {"to": "a@example.com", "body": "hi"})


async def test_an_allowed_call_runs_with_the_models_exact_arguments_and_its_success_is_logged(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(
        scripted(("search", {"query": "guards"})), ActionGuard(guarded_agent.client)
    )
    result = await agent.run("find guards")
    assert result.output == "done"
    assert tools.ran == [("search", {"query": "guards", "limit": 3})]
    assert received(result.all_messages()) == {"call-0": "3 results for guards"}
    (requested,) = await guarded_agent.records("action_requested")
    assert (requested["tool"], requested["input"]) == ("search", {"query": "guards"})
    assert await guarded_agent.outcomes() == {"search": "success"}


async def test_a_denied_call_never_runs_and_the_model_is_told_the_reason_code(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(scripted(("delete_everything", {})), ActionGuard(guarded_agent.client))
    result = await agent.run("clean up")
    assert tools.ran == []
    told = received(result.all_messages())["call-0"]
    assert "(tool_not_allowed)" in told
    assert "did not run" in told
    assert await guarded_agent.outcomes() == {}


async def test_a_held_call_ends_the_run_with_deferred_requests_and_resumes_once_approved(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuard(guarded_agent.client)
    agent = tools.agent(scripted(EMAIL), guard)
    first = await agent.run("write to a")
    assert isinstance(first.output, DeferredToolRequests)
    (held,) = first.output.approvals
    assert held.tool_name == "send_email"
    assert tools.ran == []
    (approved,) = await guarded_agent.approve_all()
    assert first.output.metadata[held.tool_call_id] == {ACTION_ID_KEY: approved}

    results = await guard.decisions(first.output)
    second = await agent.run(message_history=first.all_messages(), deferred_tool_results=results)
    assert second.output == "done"
    assert tools.ran == [("send_email", {"to": "a@example.com", "body": "hi"})]
    assert received(second.all_messages())["call-0"] == "sent to a@example.com"
    assert await guarded_agent.outcomes() == {"send_email": "success"}


async def test_a_rejected_call_never_runs_and_the_model_is_told_it_was_rejected(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuard(guarded_agent.client)
    agent = tools.agent(scripted(EMAIL), guard)
    first = await agent.run("write to a")
    assert isinstance(first.output, DeferredToolRequests)
    await guarded_agent.reject_all()
    results = await guard.decisions(first.output)
    second = await agent.run(message_history=first.all_messages(), deferred_tool_results=results)
    assert tools.ran == []
    told = received(second.all_messages())["call-0"]
    assert "(rejected)" in told
    assert "not to that address" in told


async def test_an_approval_made_in_the_framework_alone_does_not_run_a_call_still_held(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(scripted(EMAIL), ActionGuard(guarded_agent.client))
    first = await agent.run("write to a")
    assert isinstance(first.output, DeferredToolRequests)
    forged = first.output.build_results(approve_all=True, metadata=first.output.metadata)
    second = await agent.run(message_history=first.all_messages(), deferred_tool_results=forged)
    assert tools.ran == []
    assert isinstance(second.output, DeferredToolRequests)  # held again, on the same action
    assert second.output.metadata == first.output.metadata


async def test_with_wait_a_held_call_waits_inside_the_run_and_runs_once_approved(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(
        scripted(EMAIL), ActionGuard(guarded_agent.client, wait=True), deferred=False
    )
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(guarded_agent.approve_all)
            result = await agent.run("write to a")
    assert result.output == "done"
    assert tools.ran == [("send_email", {"to": "a@example.com", "body": "hi"})]
    assert await guarded_agent.outcomes() == {"send_email": "success"}


async def test_two_calls_of_one_turn_are_asked_at_once(guarded_agent: GuardedAgent) -> None:
    # Both are held before either is decided: asked one after the other, the
    # second would wait for the first's decision, and that never comes.
    tools = Tools()
    model = scripted(EMAIL, ("send_email", {"to": "b@example.com", "body": "hey"}))
    agent = tools.agent(model, ActionGuard(guarded_agent.client, wait=True), deferred=False)
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(guarded_agent.approve_all, 2)
            result = await agent.run("write to both")
    assert result.output == "done"
    assert sorted(args["to"] for _, args in tools.ran) == ["a@example.com", "b@example.com"]


async def test_a_wait_that_times_out_withdraws_the_action_and_refuses_the_call(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuard(guarded_agent.client, wait=True, approval_timeout=0.2)
    result = await tools.agent(scripted(EMAIL), guard, deferred=False).run("write to a")
    assert tools.ran == []
    assert "(approval_timeout)" in received(result.all_messages())["call-0"]
    (cancelled,) = await guarded_agent.records("action_cancelled")
    assert cancelled["by"] == "agent"


async def test_a_run_cancelled_while_a_call_waits_withdraws_the_action(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(
        scripted(EMAIL), ActionGuard(guarded_agent.client, wait=True), deferred=False
    )
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(agent.run, "write to a")
            await guarded_agent.next_pending()
            group.cancel_scope.cancel()
    assert tools.ran == []
    assert await guarded_agent.admin.list_pending(guarded_agent.agent_id) == []
    assert len(await guarded_agent.records("action_cancelled")) == 1


async def test_the_cost_comes_from_the_argument_named_in_cost_from(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuard(guarded_agent.client, cost_from={"transfer": "amount"})
    agent = tools.agent(scripted(("transfer", {"to": "bob", "amount": 30})), guard)
    await agent.run("pay bob")
    assert tools.ran == [("transfer", {"to": "bob", "amount": 30})]
    status = await guarded_agent.client.status()
    assert status.remaining == 70


async def test_a_cost_argument_that_is_not_a_number_refuses_the_call(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuard(guarded_agent.client, cost_from={"transfer": "to"})
    agent = tools.agent(scripted(("transfer", {"to": "bob", "amount": 30})), guard)
    result = await agent.run("pay bob")
    assert tools.ran == []
    assert "(bad_cost)" in received(result.all_messages())["call-0"]


async def test_a_tool_that_raises_has_its_failure_reported(guarded_agent: GuardedAgent) -> None:
    tools = Tools()
    agent = tools.agent(scripted(("flaky", {})), ActionGuard(guarded_agent.client))
    with pytest.raises(RuntimeError, match="the disk is full"):
        await agent.run("try")
    assert await guarded_agent.outcomes() == {"flaky": "failure"}
    (outcome,) = await guarded_agent.records("outcome")
    assert outcome["detail"] == "RuntimeError: the disk is full"


async def test_with_the_guard_down_no_tool_runs_and_the_model_is_told(
    guard_down: AsyncGuardClient,
) -> None:
    tools = Tools()
    agent = tools.agent(scripted(("search", {"query": "x"})), ActionGuard(guard_down))
    result = await agent.run("find x")
    assert tools.ran == []
    assert "(guard_unreachable)" in received(result.all_messages())["call-0"]


async def test_an_approval_built_by_hand_without_the_action_id_finds_the_same_held_action(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(scripted(EMAIL), ActionGuard(guarded_agent.client))
    first = await agent.run("write to a")
    assert isinstance(first.output, DeferredToolRequests)
    by_hand = first.output.build_results(approve_all=True)  # no metadata
    second = await agent.run(message_history=first.all_messages(), deferred_tool_results=by_hand)
    assert tools.ran == []
    assert isinstance(second.output, DeferredToolRequests)
    assert second.output.metadata == first.output.metadata
    assert len(await guarded_agent.records("action_requested")) == 1
