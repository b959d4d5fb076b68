"""The Google ADK adapter on a real ``Runner``: a ``BaseLlm`` of the test's
own plays the model (it calls the tools the test scripts, then answers with
text), ADK runs the agent, and a real guardd decides."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types
from pydantic import Field

from client_sdk import AsyncGuardClient
from client_sdk.integrations.google_adk import ActionGuardPlugin
from tests.client_sdk.integrations.conftest import GuardedAgent

SAFETY = 60  # seconds: a hang fails the test instead of stalling the suite


class ScriptedLlm(BaseLlm):
    """Makes the scripted calls in its first turn, then says "done"."""

    model: str = "scripted"
    calls: list[tuple[str, dict[str, Any]]] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        answered = any(
            part.function_response
            for content in llm_request.contents
            for part in content.parts or []
        )
        if answered:
            parts = [types.Part(text="done")]
        else:
            parts = [
                types.Part(function_call=types.FunctionCall(name=name, args=args, id=f"call-{i}"))
                for i, (name, args) in enumerate(self.calls)
            ]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


class Tools:
    """The agent's tools; each records that it ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        ran = self.ran

        def search(query: str, limit: int = 3) -> str:
            """Search the web."""
            ran.append(("search", {"query": query, "limit": limit}))
            return f"3 results for {query}"

        def send_email(to: str, body: str) -> str:
            """Send an email."""
            ran.append(("send_email", {"to": to, "body": body}))
            return f"sent to {to}"

        def transfer(to: str, amount: float) -> str:
            """Send money."""
            ran.append(("transfer", {"to": to, "amount": amount}))
            return "transferred"

        def flaky() -> str:
            """Fail."""
            ran.append(("flaky", {}))
            raise RuntimeError("the disk is full")

        def delete_everything() -> str:
            """Delete everything."""
            ran.append(("delete_everything", {}))
            return "deleted"

        self.all = [search, send_email, transfer, flaky, delete_everything]

    def runner(
        self, guard: ActionGuardPlugin, *calls: tuple[str, dict[str, Any]]
    ) -> InMemoryRunner:
        agent = LlmAgent(name="assistant", model=ScriptedLlm(calls=list(calls)), tools=self.all)
        return InMemoryRunner(app=App(name="guarded", root_agent=agent, plugins=[guard]))


async def run(runner: InMemoryRunner, text: str) -> list[Event]:
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    message = types.Content(role="user", parts=[types.Part(text=text)])
    return [
        event
        async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message)
    ]


def received(events: list[Event]) -> dict[str, Any]:
    """What the model was given back for each tool call, by call ID."""
    return {
        response.id: response.response
        for event in events
        for response in event.get_function_responses()
    }


def final_text(events: list[Event]) -> str | None:
    texts = [p.text for e in events if e.content for p in e.content.parts or [] if p.text]
    return texts[-1] if texts else None


EMAIL = ("send_email", {"to": "a@example.com", "body": "hi"})
EMAIL_B = ("send_email", {"to": "b@example.com", "body": "hey"})


async def test_an_allowed_call_runs_with_the_models_exact_arguments_and_its_success_is_logged(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    runner = tools.runner(ActionGuardPlugin(guarded_agent.client), ("search", {"query": "guards"}))
    events = await run(runner, "find guards")
    assert final_text(events) == "done"
    assert tools.ran == [("search", {"query": "guards", "limit": 3})]
    assert received(events) == {"call-0": {"result": "3 results for guards"}}
    (requested,) = await guarded_agent.records("action_requested")
    assert (requested["tool"], requested["input"]) == ("search", {"query": "guards"})
    assert await guarded_agent.outcomes() == {"search": "success"}


async def test_a_denied_call_never_runs_and_the_model_is_told_the_reason_code(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    runner = tools.runner(ActionGuardPlugin(guarded_agent.client), ("delete_everything", {}))
    events = await run(runner, "clean up")
    assert final_text(events) == "done"
    assert tools.ran == []
    assert "(tool_not_allowed)" in received(events)["call-0"]["error"]
    assert await guarded_agent.outcomes() == {}


async def test_a_held_call_waits_and_runs_once_approved(guarded_agent: GuardedAgent) -> None:
    tools = Tools()
    runner = tools.runner(ActionGuardPlugin(guarded_agent.client), EMAIL)
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(guarded_agent.approve_all)
            events = await run(runner, "write to a")
    assert final_text(events) == "done"
    assert tools.ran == [("send_email", {"to": "a@example.com", "body": "hi"})]
    assert await guarded_agent.outcomes() == {"send_email": "success"}


async def test_a_rejected_call_never_runs_and_the_model_is_told_it_was_rejected(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    runner = tools.runner(ActionGuardPlugin(guarded_agent.client), EMAIL)
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(guarded_agent.reject_all)
            events = await run(runner, "write to a")
    assert tools.ran == []
    told = received(events)["call-0"]["error"]
    assert "(rejected)" in told
    assert "not to that address" in told


async def test_two_calls_of_one_turn_are_asked_at_once(guarded_agent: GuardedAgent) -> None:
    # Both are held before either is decided: asked one after the other, the
    # second would wait for the first's decision, and that never comes.
    tools = Tools()
    runner = tools.runner(ActionGuardPlugin(guarded_agent.client), EMAIL, EMAIL_B)
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(guarded_agent.approve_all, 2)
            events = await run(runner, "write to both")
    assert final_text(events) == "done"
    assert sorted(args["to"] for _, args in tools.ran) == ["a@example.com", "b@example.com"]


async def test_a_wait_that_times_out_withdraws_the_action_and_refuses_the_call(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    runner = tools.runner(ActionGuardPlugin(guarded_agent.client, approval_timeout=0.2), EMAIL)
    events = await run(runner, "write to a")
    assert tools.ran == []
    assert "(approval_timeout)" in received(events)["call-0"]["error"]
    assert len(await guarded_agent.records("action_cancelled")) == 1


async def test_a_run_cancelled_while_a_call_waits_withdraws_the_action(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    runner = tools.runner(ActionGuardPlugin(guarded_agent.client), EMAIL)
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(run, runner, "write to a")
            await guarded_agent.next_pending()
            group.cancel_scope.cancel()
    assert tools.ran == []
    assert await guarded_agent.admin.list_pending(guarded_agent.agent_id) == []
    assert len(await guarded_agent.records("action_cancelled")) == 1


async def test_the_cost_comes_from_the_argument_named_in_cost_from(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuardPlugin(guarded_agent.client, cost_from={"transfer": "amount"})
    await run(tools.runner(guard, ("transfer", {"to": "bob", "amount": 30})), "pay bob")
    assert tools.ran == [("transfer", {"to": "bob", "amount": 30})]
    assert (await guarded_agent.client.status()).remaining == 70


async def test_a_tool_that_raises_has_its_failure_reported(guarded_agent: GuardedAgent) -> None:
    tools = Tools()
    runner = tools.runner(ActionGuardPlugin(guarded_agent.client), ("flaky", {}))
    with pytest.raises(RuntimeError, match="the disk is full"):
        await run(runner, "try")
    assert await guarded_agent.outcomes() == {"flaky": "failure"}


async def test_with_the_guard_down_no_tool_runs_and_the_model_is_told(
    guard_down: AsyncGuardClient,
) -> None:
    tools = Tools()
    events = await run(tools.runner(ActionGuardPlugin(guard_down), ("search", {"query": "x"})), "x")
    assert tools.ran == []
    assert "(guard_unreachable)" in received(events)["call-0"]["error"]
