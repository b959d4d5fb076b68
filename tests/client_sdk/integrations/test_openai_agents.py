"""The OpenAI Agents SDK adapter on a real ``Runner.run``: the SDK's own
``ScriptedModel`` plays the model (it calls the tools the test scripts, then
answers with text), and a real guardd decides."""

from __future__ import annotations

from typing import Any

import anyio
from agents import (
    Agent,
    FunctionTool,
    Runner,
    RunResult,
    function_tool,
    set_tracing_disabled,
)
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext

from client_sdk import AsyncGuardClient
from client_sdk.integrations.openai_agents import ActionGuard
from tests.client_sdk.integrations.conftest import GuardedAgent

# The SDK exports traces over the network by default; these tests stay on loopback.
set_tracing_disabled(True)


def scripted(*calls: tuple[str, dict[str, Any]]) -> ScriptedModel:
    """A model that makes ``calls`` in its first turn, then says "done"."""
    first = [function_call(name, args, call_id=f"call-{i}") for i, (name, args) in enumerate(calls)]
    return ScriptedModel([first, [assistant_message("done")]])


def received(result: RunResult) -> dict[str, Any]:
    """What the model was given back for each tool call, by call ID."""
    return {
        item.raw_item["call_id"]: item.output
        for item in result.new_items
        if isinstance(item, ToolCallOutputItem)
    }


class Tools:
    """The agent's tools; each records that it ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        ran = self.ran

        @function_tool
        def search(query: str, limit: int = 3) -> str:
            """Search the web."""
            ran.append(("search", {"query": query, "limit": limit}))
            return f"3 results for {query}"

        @function_tool
        def send_email(to: str, body: str) -> str:
            """Send an email."""
            ran.append(("send_email", {"to": to, "body": body}))
            return f"sent to {to}"

        @function_tool
        def transfer(to: str, amount: float) -> str:
            """Send money."""
            ran.append(("transfer", {"to": to, "amount": amount}))
            return "transferred"

        @function_tool
        def flaky() -> str:
            """Fail."""
            ran.append(("flaky", {}))
            raise RuntimeError("the disk is full")

        @function_tool
        def delete_everything() -> str:
            """Delete everything."""
            ran.append(("delete_everything", {}))
            return "deleted"

        self.all = [search, send_email, transfer, flaky, delete_everything]

    def agent(self, model: ScriptedModel, guard: ActionGuard) -> Agent[Any]:
        return guard.protect(Agent(name="assistant", model=model, tools=self.all))


EMAIL = ("send_email", {"to": "a@example.com", "body": "hi"})
EMAIL_B = ("send_email", {"to": "b@example.com", "body": "hey"})


async def test_an_allowed_call_runs_with_the_models_exact_arguments_and_its_success_is_logged(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(
        scripted(("search", {"query": "guards"})), ActionGuard(guarded_agent.client)
    )
    result = await Runner.run(agent, "find guards")
    assert result.final_output == "done"
    assert tools.ran == [("search", {"query": "guards", "limit": 3})]
    assert received(result) == {"call-0": "3 results for guards"}
    (requested,) = await guarded_agent.records("action_requested")
    assert (requested["tool"], requested["input"]) == ("search", {"query": "guards"})
    assert await guarded_agent.outcomes() == {"search": "success"}


async def test_a_denied_call_never_runs_and_the_model_is_told_the_reason_code(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(scripted(("delete_everything", {})), ActionGuard(guarded_agent.client))
    result = await Runner.run(agent, "clean up")
    assert result.final_output == "done"
    assert tools.ran == []
    assert "(tool_not_allowed)" in received(result)["call-0"]
    assert await guarded_agent.outcomes() == {}


async def test_a_held_call_interrupts_the_run_and_resumes_once_approved(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuard(guarded_agent.client)
    agent = tools.agent(scripted(EMAIL), guard)
    first = await Runner.run(agent, "write to a")
    (held,) = first.interruptions
    assert held.tool_name == "send_email"
    assert tools.ran == []
    await guarded_agent.approve_all()
    state = await guard.resolve(first)
    second = await Runner.run(agent, state)
    assert second.final_output == "done"
    assert tools.ran == [("send_email", {"to": "a@example.com", "body": "hi"})]
    assert received(second)["call-0"] == "sent to a@example.com"
    assert len(await guarded_agent.records("action_requested")) == 1
    assert await guarded_agent.outcomes() == {"send_email": "success"}


async def test_a_rejected_call_never_runs_and_the_model_is_told_it_was_rejected(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuard(guarded_agent.client)
    agent = tools.agent(scripted(EMAIL), guard)
    first = await Runner.run(agent, "write to a")
    await guarded_agent.reject_all()
    second = await Runner.run(agent, await guard.resolve(first))
    assert tools.ran == []
    told = received(second)["call-0"]
    assert "(rejected)" in told
    assert "not to that address" in told


async def test_an_approval_on_the_state_alone_waits_for_the_operator_before_running(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuard(guarded_agent.client)
    agent = tools.agent(scripted(EMAIL), guard)
    first = await Runner.run(agent, "write to a")
    state = first.to_state()
    state.approve(first.interruptions[0])
    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(guarded_agent.reject_all)
            second = await Runner.run(agent, state)
    assert tools.ran == []
    assert "(rejected)" in received(second)["call-0"]


async def test_two_held_calls_of_one_turn_interrupt_together_and_resume_together(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuard(guarded_agent.client)
    agent = tools.agent(scripted(EMAIL, EMAIL_B), guard)
    first = await Runner.run(agent, "write to both")
    assert len(first.interruptions) == 2
    await guarded_agent.approve_all(2)
    second = await Runner.run(agent, await guard.resolve(first))
    assert second.final_output == "done"
    assert sorted(args["to"] for _, args in tools.ran) == ["a@example.com", "b@example.com"]


async def test_a_resolve_that_times_out_withdraws_the_action_and_refuses_the_call(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuard(guarded_agent.client, approval_timeout=0.2)
    agent = tools.agent(scripted(EMAIL), guard)
    first = await Runner.run(agent, "write to a")
    second = await Runner.run(agent, await guard.resolve(first))
    assert tools.ran == []
    assert "(approval_timeout)" in received(second)["call-0"]
    assert len(await guarded_agent.records("action_cancelled")) == 1


async def test_the_cost_comes_from_the_argument_named_in_cost_from(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuard(guarded_agent.client, cost_from={"transfer": "amount"})
    await Runner.run(tools.agent(scripted(("transfer", {"to": "bob", "amount": 30})), guard), "pay")
    assert tools.ran == [("transfer", {"to": "bob", "amount": 30})]
    assert (await guarded_agent.client.status()).remaining == 70


async def test_a_tool_that_raises_has_its_failure_reported_and_the_model_gets_the_sdks_error(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    result = await Runner.run(
        tools.agent(scripted(("flaky", {})), ActionGuard(guarded_agent.client)), "try"
    )
    assert received(result)["call-0"].startswith("An error occurred while running the tool")
    assert await guarded_agent.outcomes() == {"flaky": "failure"}
    (outcome,) = await guarded_agent.records("outcome")
    assert outcome["detail"] == "RuntimeError: the disk is full"


async def test_with_the_guard_down_no_tool_runs_and_the_model_is_told(
    guard_down: AsyncGuardClient,
) -> None:
    tools = Tools()
    agent = tools.agent(scripted(("search", {"query": "x"})), ActionGuard(guard_down))
    result = await Runner.run(agent, "find x")
    assert tools.ran == []
    assert "(guard_unreachable)" in received(result)["call-0"]


async def test_allowed_calls_of_one_turn_all_run(guarded_agent: GuardedAgent) -> None:
    tools = Tools()
    calls = [("search", {"query": f"q{i}"}) for i in range(2)]
    result = await Runner.run(tools.agent(scripted(*calls), ActionGuard(guarded_agent.client)), "x")
    assert result.final_output == "done"
    assert sorted(args["query"] for _, args in tools.ran) == ["q0", "q1"]
    assert await guarded_agent.outcomes() == {"search": "success"}


async def test_a_run_resumed_by_another_guard_finds_the_same_action(
    guarded_agent: GuardedAgent,
) -> None:
    # A new ActionGuard knows nothing of the first run: as a resumed process.
    tools = Tools()
    first = await Runner.run(tools.agent(scripted(EMAIL), ActionGuard(guarded_agent.client)), "a")
    await guarded_agent.approve_all()
    later = ActionGuard(guarded_agent.client)
    agent = tools.agent(scripted(EMAIL), later)
    second = await Runner.run(agent, await later.resolve(first))
    assert tools.ran == [("send_email", {"to": "a@example.com", "body": "hi"})]
    assert len(await guarded_agent.records("action_requested")) == 1
    assert await guarded_agent.outcomes() == {"send_email": "success"}
    assert second.final_output is not None


async def test_a_streamed_run_is_guarded_and_resumed_the_same_way(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuard(guarded_agent.client)
    agent = tools.agent(scripted(EMAIL), guard)
    first = Runner.run_streamed(agent, "write to a")
    async for _ in first.stream_events():
        pass
    assert [i.tool_name for i in first.interruptions] == ["send_email"]
    assert tools.ran == []
    await guarded_agent.approve_all()
    second = Runner.run_streamed(agent, await guard.resolve(first))
    async for _ in second.stream_events():
        pass
    assert second.final_output == "done"
    assert tools.ran == [("send_email", {"to": "a@example.com", "body": "hi"})]
    assert await guarded_agent.outcomes() == {"send_email": "success"}


async def test_a_tool_invoked_without_its_guardrail_asks_guardd_itself(
    guarded_agent: GuardedAgent,
) -> None:
    # The SDK skips input guardrails when it continues a nested agent-tool
    # run: the guarded invoker then asks guardd itself (fail closed).
    tools = Tools()
    guard = ActionGuard(guarded_agent.client)
    search, _, _, _, delete_everything = (guard.tool(t) for t in tools.all)
    assert isinstance(search, FunctionTool)
    assert isinstance(delete_everything, FunctionTool)

    def context(name: str, arguments: str) -> ToolContext[Any]:
        return ToolContext(
            context=None, tool_name=name, tool_call_id=f"direct-{name}", tool_arguments=arguments
        )

    refused = await delete_everything.on_invoke_tool(context("delete_everything", "{}"), "{}")
    assert "(tool_not_allowed)" in refused
    arguments = '{"query": "q"}'
    assert await search.on_invoke_tool(context("search", arguments), arguments) == "3 results for q"
    assert tools.ran == [("search", {"query": "q", "limit": 3})]
    assert await guarded_agent.outcomes() == {"search": "success"}
