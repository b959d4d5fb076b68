"""The LangChain adapter on a real ``create_agent`` run: LangChain's own
``GenericFakeChatModel`` plays the model (it calls the tools the test scripts,
then answers with text), LangGraph runs the graph, and a real guardd decides."""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from client_sdk import AsyncGuardClient
from client_sdk.integrations.langchain import INTERRUPT_TYPE, ActionGuardMiddleware
from tests.client_sdk.integrations.conftest import GuardedAgent

SAFETY = 60  # seconds: a hang fails the test instead of stalling the suite
_threads = itertools.count(1)


class ScriptedChat(GenericFakeChatModel):
    """The fake chat model, taking the tools it is bound to (it never reads them)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
        return self


def scripted(*calls: tuple[str, dict[str, Any]]) -> ScriptedChat:
    """A model that makes ``calls`` in its first turn, then says "done"."""
    first = AIMessage(
        content="",
        tool_calls=[
            {"name": name, "args": args, "id": f"call-{i}", "type": "tool_call"}
            for i, (name, args) in enumerate(calls)
        ],
    )
    return ScriptedChat(messages=iter([first, AIMessage(content="done")]))


def received(state: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


class Tools:
    """The agent's tools; each records that it ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        ran = self.ran

        @tool
        def search(query: str, limit: int = 3) -> str:
            """Search the web."""
            ran.append(("search", {"query": query, "limit": limit}))
            return f"3 results for {query}"

        @tool
        def send_email(to: str, body: str) -> str:
            """Send an email."""
            ran.append(("send_email", {"to": to, "body": body}))
            return f"sent to {to}"

        @tool
        def transfer(to: str, amount: float) -> str:
            """Send money."""
            ran.append(("transfer", {"to": to, "amount": amount}))
            return "transferred"

        @tool
        def flaky() -> str:
            """Fail."""
            ran.append(("flaky", {}))
            raise RuntimeError("the disk is full")

        @tool
        def delete_everything() -> str:
            """Delete everything."""
            ran.append(("delete_everything", {}))
            return "deleted"

        self.all = [search, send_email, transfer, flaky, delete_everything]

    def agent(
        self, model: ScriptedChat, guard: ActionGuardMiddleware, *, checkpointed: bool = False
    ) -> Any:
        saver = InMemorySaver() if checkpointed else None
        return create_agent(model, self.all, middleware=[guard], checkpointer=saver)


def thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"thread-{next(_threads)}"}}


def ask(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text)]}


EMAIL = ("send_email", {"to": "a@example.com", "body": "hi"})


async def test_an_allowed_call_runs_with_the_models_exact_arguments_and_its_success_is_logged(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(
        scripted(("search", {"query": "guards"})), ActionGuardMiddleware(guarded_agent.client)
    )
    state = await agent.ainvoke(ask("find guards"))
    assert state["messages"][-1].content == "done"
    assert tools.ran == [("search", {"query": "guards", "limit": 3})]
    assert received(state)["call-0"].content == "3 results for guards"
    (requested,) = await guarded_agent.records("action_requested")
    assert (requested["tool"], requested["input"]) == ("search", {"query": "guards"})
    assert await guarded_agent.outcomes() == {"search": "success"}


async def test_a_denied_call_never_runs_and_the_model_gets_an_error_message_with_the_reason(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(
        scripted(("delete_everything", {})), ActionGuardMiddleware(guarded_agent.client)
    )
    state = await agent.ainvoke(ask("clean up"))
    assert tools.ran == []
    told = received(state)["call-0"]
    assert told.status == "error"
    assert "(tool_not_allowed)" in told.content
    assert await guarded_agent.outcomes() == {}


async def test_a_held_call_interrupts_the_thread_and_resumes_once_approved(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(
        scripted(EMAIL), ActionGuardMiddleware(guarded_agent.client), checkpointed=True
    )
    config = thread()
    state = await agent.ainvoke(ask("write to a"), config)
    (paused,) = state["__interrupt__"]
    assert paused.value["type"] == INTERRUPT_TYPE
    assert (paused.value["tool"], paused.value["args"]) == EMAIL
    assert tools.ran == []
    (approved,) = await guarded_agent.approve_all()
    assert paused.value["action_id"] == approved

    resume = await ActionGuardMiddleware.decisions(guarded_agent.client, state["__interrupt__"])
    assert resume == {paused.id: {"action_id": approved, "status": "allowed"}}
    state = await agent.ainvoke(Command(resume=resume), config)
    assert state["messages"][-1].content == "done"
    assert tools.ran == [("send_email", {"to": "a@example.com", "body": "hi"})]
    assert received(state)["call-0"].content == "sent to a@example.com"
    # asked once: resuming brought back the same action, not a second one
    assert len(await guarded_agent.records("action_requested")) == 1
    assert await guarded_agent.outcomes() == {"send_email": "success"}


async def test_a_rejected_call_never_runs_and_the_model_is_told_it_was_rejected(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(
        scripted(EMAIL), ActionGuardMiddleware(guarded_agent.client), checkpointed=True
    )
    config = thread()
    state = await agent.ainvoke(ask("write to a"), config)
    await guarded_agent.reject_all()
    resume = await ActionGuardMiddleware.decisions(guarded_agent.client, state["__interrupt__"])
    state = await agent.ainvoke(Command(resume=resume), config)
    assert tools.ran == []
    told = received(state)["call-0"]
    assert told.status == "error"
    assert "(rejected)" in told.content
    assert "not to that address" in told.content


async def test_resuming_before_an_operator_decided_runs_nothing_and_interrupts_again(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(
        scripted(EMAIL), ActionGuardMiddleware(guarded_agent.client), checkpointed=True
    )
    config = thread()
    first = await agent.ainvoke(ask("write to a"), config)
    (paused,) = first["__interrupt__"]
    forged = {paused.id: {"action_id": paused.value["action_id"], "status": "allowed"}}
    second = await agent.ainvoke(Command(resume=forged), config)
    assert tools.ran == []
    (again,) = second["__interrupt__"]
    assert again.value["action_id"] == paused.value["action_id"]
    await guarded_agent.approve_all()
    resume = await ActionGuardMiddleware.decisions(guarded_agent.client, second["__interrupt__"])
    third = await agent.ainvoke(Command(resume=resume), config)
    assert third["messages"][-1].content == "done"
    assert tools.ran == [("send_email", {"to": "a@example.com", "body": "hi"})]


async def test_without_a_checkpointer_a_held_call_waits_and_runs_once_approved(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(scripted(EMAIL), ActionGuardMiddleware(guarded_agent.client))
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(guarded_agent.approve_all)
            state = await agent.ainvoke(ask("write to a"))
    assert state["messages"][-1].content == "done"
    assert tools.ran == [("send_email", {"to": "a@example.com", "body": "hi"})]
    assert await guarded_agent.outcomes() == {"send_email": "success"}


async def test_two_calls_of_one_turn_are_asked_at_once(guarded_agent: GuardedAgent) -> None:
    # Both are held before either is decided: asked one after the other, the
    # second would wait for the first's decision, and that never comes.
    tools = Tools()
    model = scripted(EMAIL, ("send_email", {"to": "b@example.com", "body": "hey"}))
    agent = tools.agent(model, ActionGuardMiddleware(guarded_agent.client))
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(guarded_agent.approve_all, 2)
            state = await agent.ainvoke(ask("write to both"))
    assert state["messages"][-1].content == "done"
    assert sorted(args["to"] for _, args in tools.ran) == ["a@example.com", "b@example.com"]


async def test_two_held_calls_of_one_turn_interrupt_together_and_resume_together(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    model = scripted(EMAIL, ("send_email", {"to": "b@example.com", "body": "hey"}))
    agent = tools.agent(model, ActionGuardMiddleware(guarded_agent.client), checkpointed=True)
    config = thread()
    state = await agent.ainvoke(ask("write to both"), config)
    assert len(state["__interrupt__"]) == 2
    await guarded_agent.approve_all(2)
    resume = await ActionGuardMiddleware.decisions(guarded_agent.client, state["__interrupt__"])
    state = await agent.ainvoke(Command(resume=resume), config)
    assert state["messages"][-1].content == "done"
    assert sorted(args["to"] for _, args in tools.ran) == ["a@example.com", "b@example.com"]


async def test_a_wait_that_times_out_withdraws_the_action_and_refuses_the_call(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuardMiddleware(guarded_agent.client, approval_timeout=0.2)
    state = await tools.agent(scripted(EMAIL), guard).ainvoke(ask("write to a"))
    assert tools.ran == []
    assert "(approval_timeout)" in received(state)["call-0"].content
    assert len(await guarded_agent.records("action_cancelled")) == 1


async def test_a_run_cancelled_while_a_call_waits_withdraws_the_action(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(scripted(EMAIL), ActionGuardMiddleware(guarded_agent.client))
    with anyio.fail_after(SAFETY):
        async with anyio.create_task_group() as group:
            group.start_soon(agent.ainvoke, ask("write to a"))
            await guarded_agent.next_pending()
            group.cancel_scope.cancel()
    assert tools.ran == []
    assert await guarded_agent.admin.list_pending(guarded_agent.agent_id) == []
    assert len(await guarded_agent.records("action_cancelled")) == 1


async def test_the_cost_comes_from_the_argument_named_in_cost_from(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuardMiddleware(guarded_agent.client, cost_from={"transfer": "amount"})
    await tools.agent(scripted(("transfer", {"to": "bob", "amount": 30})), guard).ainvoke(
        ask("pay bob")
    )
    assert tools.ran == [("transfer", {"to": "bob", "amount": 30})]
    assert (await guarded_agent.client.status()).remaining == 70


async def test_a_tool_that_raises_has_its_failure_reported(guarded_agent: GuardedAgent) -> None:
    tools = Tools()
    agent = tools.agent(scripted(("flaky", {})), ActionGuardMiddleware(guarded_agent.client))
    with pytest.raises(RuntimeError, match="the disk is full"):
        await agent.ainvoke(ask("try"))
    assert await guarded_agent.outcomes() == {"flaky": "failure"}


async def test_with_the_guard_down_no_tool_runs_and_the_model_is_told(
    guard_down: AsyncGuardClient,
) -> None:
    tools = Tools()
    agent = tools.agent(scripted(("search", {"query": "x"})), ActionGuardMiddleware(guard_down))
    state = await agent.ainvoke(ask("find x"))
    assert tools.ran == []
    assert "(guard_unreachable)" in received(state)["call-0"].content


async def test_a_tool_error_message_is_reported_as_a_failure(guarded_agent: GuardedAgent) -> None:
    def fail() -> str:
        raise ToolException("the mailbox is full")

    flaky = StructuredTool.from_function(
        fail, name="flaky", description="Fail politely.", handle_tool_error=True
    )
    guard = ActionGuardMiddleware(guarded_agent.client)
    agent = create_agent(scripted(("flaky", {})), [flaky], middleware=[guard])
    state = await agent.ainvoke(ask("try"))
    assert received(state)["call-0"].status == "error"
    assert await guarded_agent.outcomes() == {"flaky": "failure"}
    (outcome,) = await guarded_agent.records("outcome")
    assert "the mailbox is full" in outcome["detail"]


async def test_a_synchronous_run_is_refused_before_any_tool_runs(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    agent = tools.agent(
        scripted(("search", {"query": "x"})), ActionGuardMiddleware(guarded_agent.client)
    )
    with pytest.raises(NotImplementedError, match="ainvoke"):
        await anyio.to_thread.run_sync(agent.invoke, ask("find x"))
    assert tools.ran == []


def graph_of(tools: Tools, model: ScriptedChat, guard: ActionGuardMiddleware) -> Any:
    """A LangGraph graph of its own (no create_agent): the model, then a
    ToolNode the guard wraps."""

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(tools.all, awrap_tool_call=guard.awrap_tool_call))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=InMemorySaver())


async def test_a_plain_langgraph_tool_node_is_guarded_through_awrap_tool_call(
    guarded_agent: GuardedAgent,
) -> None:
    tools = Tools()
    guard = ActionGuardMiddleware(guarded_agent.client)
    model = scripted(EMAIL, ("delete_everything", {}))
    app = graph_of(tools, model, guard)
    config = thread()
    state = await app.ainvoke(ask("write to a, then clean up"), config)
    (paused,) = state["__interrupt__"]
    assert paused.value["tool"] == "send_email"
    await guarded_agent.approve_all()
    resume = await ActionGuardMiddleware.decisions(guarded_agent.client, state["__interrupt__"])
    state = await app.ainvoke(Command(resume=resume), config)
    assert state["messages"][-1].content == "done"
    assert tools.ran == [("send_email", {"to": "a@example.com", "body": "hi"})]
    assert "(tool_not_allowed)" in received(state)["call-1"].content
    assert await guarded_agent.outcomes() == {"send_email": "success"}


async def test_an_allowed_call_beside_a_held_one_runs_once_across_the_resume(
    guarded_agent: GuardedAgent,
) -> None:
    # create_agent runs each tool call as a task of its own: resuming re-runs
    # only the interrupted one.
    tools = Tools()
    model = scripted(("search", {"query": "q"}), EMAIL)
    guard = ActionGuardMiddleware(guarded_agent.client)
    agent = tools.agent(model, guard, checkpointed=True)
    config = thread()
    state = await agent.ainvoke(ask("search, then write to a"), config)
    assert tools.ran == [("search", {"query": "q", "limit": 3})]
    await guarded_agent.approve_all()
    resume = await ActionGuardMiddleware.decisions(guarded_agent.client, state["__interrupt__"])
    await agent.ainvoke(Command(resume=resume), config)
    assert [tool for tool, _ in tools.ran] == ["search", "send_email"]
    assert len(await guarded_agent.records("action_requested")) == 2
    assert len(await guarded_agent.records("outcome")) == 2
