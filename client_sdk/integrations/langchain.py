"""LangChain / LangGraph: ``ActionGuardMiddleware`` guards every tool of an agent.

``create_agent(model, tools, middleware=[ActionGuardMiddleware(client)])``:
each tool call goes to guardd before it runs (``awrap_tool_call``), with the
tool's name and the arguments as the model gave them. Allowed: it runs, and
its outcome is reported (``failure`` when the tool raises or answers with an
error ``ToolMessage``). Refused: it does not run, and the model gets an error
``ToolMessage`` carrying the refusal, the reason code in it.

A held call, when the agent has a checkpointer, is a LangGraph ``interrupt``
whose value names the held action (``{"type": "guard_approval", "action_id",
"tool", "args"}``): the run stops with ``__interrupt__`` and the thread is
saved. ``await ActionGuardMiddleware.decisions(client, interrupts)`` waits for
guardd's decisions on them, all at once, and returns what to resume with
(``Command(resume=...)``). On resuming, guardd is asked again where the action
stands: only an action an operator allowed runs, whatever the resume value
says; one still pending interrupts again. Without a checkpointer the call
waits where it stands, as ``guarded`` does.

The middleware is async (``ainvoke``, ``astream``): it talks to guardd with an
``AsyncGuardClient``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, Interrupt, interrupt

from client_sdk import AsyncGuardClient
from client_sdk.integrations._common import ToolGuard, Verdict

__all__ = ["INTERRUPT_TYPE", "ActionGuardMiddleware"]

INTERRUPT_TYPE = "guard_approval"
"""The ``type`` of the value of the interrupts this middleware raises."""

# Where LangGraph keeps the run's checkpointer in its config (its constant
# CONFIG_KEY_CHECKPOINTER): an interrupt needs one to resume from.
_CHECKPOINTER_KEY = "__pregel_checkpointer"

ToolHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]


class ActionGuardMiddleware(AgentMiddleware):
    """Guards every tool call of the agent it is given to.

    ``client`` is the agent's ``AsyncGuardClient``; ``cost_from`` maps a tool
    name to the argument carrying its cost; ``approval_timeout`` bounds a wait
    for an operator when the call waits in place (seconds), after which the
    held action is withdrawn and the call refused.
    """

    def __init__(
        self,
        client: AsyncGuardClient,
        *,
        cost_from: Mapping[str, str] | None = None,
        approval_timeout: float | None = None,
    ) -> None:
        super().__init__()
        self.guard = ToolGuard(client, cost_from=cost_from, approval_timeout=approval_timeout)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command[Any]:
        call = request.tool_call
        name, args = call["name"], dict(call["args"])
        configurable = (request.runtime.config or {}).get("configurable") or {}
        checkpointed = configurable.get(_CHECKPOINTER_KEY) is not None
        if checkpointed:
            # The node runs again from the start when the thread resumes: the
            # same key brings back the same action instead of a second one.
            key = _idempotency_key(configurable.get("thread_id"), call.get("id"))
            verdict = await self.guard.ask(name, args, idempotency_key=key)
            while verdict.pending:
                assert verdict.action_id is not None
                interrupt(
                    {
                        "type": INTERRUPT_TYPE,
                        "action_id": verdict.action_id,
                        "tool": name,
                        "args": args,
                    }
                )
                verdict = await self.guard.recheck(verdict.action_id)
        else:
            verdict = await self.guard.decide(name, args)
        if not verdict.allowed:
            return ToolMessage(
                content=verdict.refusal or "refused",
                tool_call_id=call.get("id") or "",
                name=name,
                status="error",
            )
        assert verdict.action_id is not None
        try:
            result = await handler(request)
        except Exception as exc:
            await self.guard.report(verdict.action_id, exc)
            raise
        if isinstance(result, ToolMessage) and result.status == "error":
            await self.guard.report(verdict.action_id, _ToolFailed(result.text))
        else:
            await self.guard.report(verdict.action_id)
        return result

    @staticmethod
    async def decisions(
        client: AsyncGuardClient,
        interrupts: Iterable[Interrupt],
        *,
        approval_timeout: float | None = None,
    ) -> dict[str, Any]:
        """Wait for guardd's decision on every action the ``interrupts`` hold
        (others are left out), concurrently; returns the resume map, interrupt
        ID to the action's verdict, for ``Command(resume=...)``.

        A wait given up (``approval_timeout``, cancelled) withdraws the
        actions still held.
        """
        guard = ToolGuard(client, approval_timeout=approval_timeout)
        held = {
            item.id: item.value["action_id"]
            for item in interrupts
            if isinstance(item.value, dict) and item.value.get("type") == INTERRUPT_TYPE
        }
        verdicts: dict[str, Verdict] = {}

        async def decide(interrupt_id: str, action_id: str) -> None:
            verdicts[interrupt_id] = await guard.wait(action_id)

        async with anyio.create_task_group() as group:
            for interrupt_id, action_id in held.items():
                group.start_soon(decide, interrupt_id, action_id)
        return {
            interrupt_id: {"action_id": held[interrupt_id], "status": verdict.status}
            for interrupt_id, verdict in verdicts.items()
        }


class _ToolFailed(Exception):
    """A tool that answered with an error message instead of raising."""


def _idempotency_key(thread_id: Any, call_id: Any) -> str | None:
    if not call_id:
        return None
    digest = hashlib.sha256(f"{thread_id}\x00{call_id}".encode()).hexdigest()
    return f"langgraph-{digest}"
