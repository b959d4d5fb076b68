"""OpenAI Agents SDK: ``ActionGuard.protect(agent)`` guards every function tool.

``agent = guard.protect(Agent(...))`` returns a clone of the agent whose
function tools ask guardd first, with the tool's name and the arguments as the
model gave them. Three of the SDK's own hooks are set on a copy of each tool:

- ``needs_approval``: asks guardd; a call guardd holds for an operator becomes
  a run interruption (``result.interruptions``), the SDK's pause for a human;
- ``tool_input_guardrails`` (first in the list): right before the tool runs,
  takes guardd's word on the call; anything but ``allowed`` rejects it with
  the refusal text as the message the model receives (``reject_content``);
- the tool's invoker and its failure formatter: the outcome is reported once
  the tool ran, ``failure`` when it raised (the SDK's own error text still
  goes to the model, or the exception still ends the run, as the tool said).

``await guard.resolve(result)`` waits for guardd's decision on every held
call of an interrupted run, all at once, and answers each on the run's state
(``state.approve`` when guardd allowed it, ``state.reject`` with the refusal
otherwise); ``Runner.run(agent, state)`` then resumes. On resuming the
guardrail asks guardd again (the same Idempotency-Key, made from the call ID,
finds the same action), so a call approved on the state alone, without an
operator's approval on guardd, does not run: it waits for that decision.

Tools of other kinds (hosted tools, computer, shell) are left as they are.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any, TypeVar

import anyio
from agents import (
    Agent,
    FunctionTool,
    RunContextWrapper,
    RunResult,
    RunResultStreaming,
    RunState,
    Tool,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
)
from agents.items import ToolApprovalItem
from agents.tool import resolve_function_tool_failure_error_function
from agents.tool_context import ToolContext

from client_sdk import AsyncGuardClient
from client_sdk.integrations._common import ToolGuard, Verdict

__all__ = ["ActionGuard"]

TContext = TypeVar("TContext")


class ActionGuard:
    """Guards the function tools of the agents it protects.

    ``client`` is the agent's ``AsyncGuardClient``; ``cost_from`` maps a tool
    name to the argument carrying its cost; ``approval_timeout`` bounds a wait
    for an operator (seconds), after which the held action is withdrawn and
    the call refused.
    """

    def __init__(
        self,
        client: AsyncGuardClient,
        *,
        cost_from: Mapping[str, str] | None = None,
        approval_timeout: float | None = None,
    ) -> None:
        self.guard = ToolGuard(client, cost_from=cost_from, approval_timeout=approval_timeout)
        self._asked: dict[str, Verdict] = {}  # call ID -> guardd's first word on it
        self._allowed: dict[str, str] = {}  # call ID -> allowed action, until it ran
        self._failed: dict[str, Exception] = {}  # call ID -> what the tool raised
        self._guardrail = ToolInputGuardrail[Any](self._check, name="action_guard")

    def protect(self, agent: Agent[TContext]) -> Agent[TContext]:
        """A clone of ``agent`` whose function tools ask guardd first."""
        return agent.clone(tools=[self.tool(tool) for tool in agent.tools])

    def tool(self, tool: Tool) -> Tool:
        """A guarded copy of one function tool; other tools unchanged."""
        if not isinstance(tool, FunctionTool):
            return tool
        guarded = copy.copy(tool)  # the copy's invoker is bound to the copy
        name = tool.name

        async def needs_approval(
            ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
        ) -> bool:
            verdict = await self.guard.ask(name, params, idempotency_key=_key(call_id))
            self._asked[call_id] = verdict
            return verdict.pending

        formatter = resolve_function_tool_failure_error_function(tool)
        failed = self._failed

        def record_failure(ctx: RunContextWrapper[Any], error: Exception) -> Any:
            if isinstance(ctx, ToolContext):
                failed[ctx.tool_call_id] = error
            return None if formatter is None else formatter(ctx, error)

        invoke = guarded.on_invoke_tool

        async def invoke_and_report(ctx: ToolContext[Any], arguments: str) -> Any:
            action_id = self._allowed.pop(ctx.tool_call_id, None)
            if action_id is None:
                # The guardrail did not run: the SDK skips it when it continues
                # a nested agent-tool run. Fail closed: ask here (the same key
                # finds the action the first invocation was allowed on).
                verdict = await self.guard.decide(
                    name, _arguments(arguments), idempotency_key=_key(ctx.tool_call_id)
                )
                if not verdict.allowed:
                    return verdict.refusal
                action_id = verdict.action_id or ""
            try:
                result = await invoke(ctx, arguments)
            except Exception as exc:
                self._failed.pop(ctx.tool_call_id, None)
                await self.guard.report(action_id, exc)
                raise
            await self.guard.report(action_id, self._failed.pop(ctx.tool_call_id, None))
            return result

        guarded.needs_approval = needs_approval
        guarded.tool_input_guardrails = [self._guardrail, *(tool.tool_input_guardrails or [])]
        guarded._failure_error_function = record_failure
        guarded._use_default_failure_error_function = False
        guarded.on_invoke_tool = invoke_and_report
        return guarded

    async def _check(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Right before the tool runs: guardd's word on the call, waiting for an
        operator if it is still held."""
        context = data.context
        call_id = context.tool_call_id
        verdict = self._asked.pop(call_id, None)
        if verdict is None:  # resumed in another process, or never asked
            args = _arguments(context.tool_arguments)
            verdict = await self.guard.ask(context.tool_name, args, idempotency_key=_key(call_id))
        if verdict.pending:
            assert verdict.action_id is not None
            verdict = await self.guard.recheck(verdict.action_id)
            if verdict.pending:
                verdict = await self.guard.wait(verdict.action_id or "")
        if not verdict.allowed:
            return ToolGuardrailFunctionOutput.reject_content(
                verdict.refusal or "refused", output_info={"code": verdict.code}
            )
        assert verdict.action_id is not None
        self._allowed[call_id] = verdict.action_id
        return ToolGuardrailFunctionOutput.allow({"action_id": verdict.action_id})

    async def resolve(self, result: RunResult | RunResultStreaming) -> RunState[Any]:
        """The interrupted run's state with every call guardd held answered.

        Waits for guardd's decisions, concurrently; an allowed action is
        approved on the state, anything else rejected with the refusal as the
        model's message. Interruptions of other tools are left for you to
        answer. A wait given up (``approval_timeout``, cancelled) withdraws
        the actions still held.
        """
        state = result.to_state()
        verdicts: dict[int, tuple[ToolApprovalItem, Verdict]] = {}

        async def decide(index: int, item: ToolApprovalItem) -> None:
            call_id = item.call_id or ""
            args = _arguments(item.arguments)
            asked = self._asked.get(call_id) or await self.guard.ask(
                item.tool_name or "", args, idempotency_key=_key(call_id)
            )
            if not asked.pending or asked.action_id is None:
                return  # not held by guardd: not ours to answer
            verdicts[index] = (item, await self.guard.wait(asked.action_id))

        async with anyio.create_task_group() as group:
            for index, item in enumerate(result.interruptions):
                group.start_soon(decide, index, item)
        for index in sorted(verdicts):
            item, verdict = verdicts[index]
            if verdict.allowed:
                state.approve(item)
            else:
                state.reject(item, rejection_message=verdict.refusal)
        return state


def _key(call_id: str) -> str:
    return "openai-agents-" + hashlib.sha256(call_id.encode()).hexdigest()


def _arguments(raw: str | None) -> dict[str, Any]:
    try:
        parsed = json.loads(raw or "{}")
    except ValueError:
        return {"arguments": raw}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}
