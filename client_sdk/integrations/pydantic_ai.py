"""PydanticAI: ``ActionGuard``, a capability that guards every tool of an agent.

``Agent(model, capabilities=[ActionGuard(client)])``: each tool call goes to
guardd before it runs (``wrap_tool_execute``), with the tool's name and the
arguments as the model gave them. Allowed: it runs, and its outcome is
reported. Refused: it does not run, and the model gets the refusal as the
call's result, the reason code in it.

A held call becomes PydanticAI's own deferred tool approval: the capability
raises ``ApprovalRequired`` carrying the action ID, and the run ends with
``DeferredToolRequests`` as its output (the agent's ``output_type`` must allow
it). ``await guard.decisions(requests)`` waits for the operators' decisions
on guardd, all at once, and turns them into the ``DeferredToolResults`` the
next run resumes with. With ``wait=True`` a held call waits where it stands
instead, as ``guarded`` does, and the run goes on by itself once an operator
decided (the other calls of the turn run meanwhile: PydanticAI runs them
concurrently). A run cancelled while a call waits withdraws the held action.

On resuming, an approval counts only if guardd allowed the action: the
capability asks guardd again, so a ``DeferredToolResults`` built by hand
(``approve_all=True``) cannot run a call the operator did not approve.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import anyio
from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, ValidatedToolArgs, WrapToolExecuteHandler
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import (
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
    ToolDefinition,
    ToolDenied,
)

from client_sdk import AsyncGuardClient
from client_sdk.integrations._common import ToolGuard, Verdict

__all__ = ["ACTION_ID_KEY", "ActionGuard"]

ACTION_ID_KEY = "guard_action_id"
"""The key of the held action's ID in a deferred call's metadata."""


class ActionGuard(AbstractCapability[Any]):
    """Guards every tool call of the agent it is given to.

    ``client`` is the agent's ``AsyncGuardClient``; ``cost_from`` maps a tool
    name to the argument carrying its cost; ``approval_timeout`` bounds a wait
    for an operator (seconds), after which the held action is withdrawn and
    the call refused; ``wait=True`` waits for held calls inside the run
    instead of ending it with ``DeferredToolRequests``.
    """

    def __init__(
        self,
        client: AsyncGuardClient,
        *,
        cost_from: Mapping[str, str] | None = None,
        approval_timeout: float | None = None,
        wait: bool = False,
    ) -> None:
        self.guard = ToolGuard(client, cost_from=cost_from, approval_timeout=approval_timeout)
        self.wait = wait

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live client: not built from a spec

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        held = _held_action(ctx)
        # The call's ID is the request's Idempotency-Key: a call deferred and
        # resumed without the action ID (results built by hand) finds the same
        # action rather than making a second one.
        key = _key(call.tool_call_id)
        if held is not None:
            verdict = await self.guard.recheck(held)
        elif self.wait:
            verdict = await self.guard.decide(
                call.tool_name, call.args_as_dict(), idempotency_key=key
            )
        else:
            verdict = await self.guard.ask(call.tool_name, call.args_as_dict(), idempotency_key=key)
        if verdict.pending:
            raise ApprovalRequired(metadata={ACTION_ID_KEY: verdict.action_id})
        if not verdict.allowed:
            return verdict.refusal
        assert verdict.action_id is not None
        try:
            result = await handler(args)
        except Exception as exc:
            await self.guard.report(verdict.action_id, exc)
            raise
        await self.guard.report(verdict.action_id)
        return result

    async def decisions(self, requests: DeferredToolRequests) -> DeferredToolResults:
        """Wait for guardd's decision on every call of ``requests`` this guard
        held, concurrently, and return them as results to resume the run with.

        An allowed action becomes ``ToolApproved``, anything else ``ToolDenied``
        with the refusal text. Calls deferred for other reasons are left out.
        A wait given up (``approval_timeout``, cancelled) withdraws the actions
        still held.
        """
        held = {
            call.tool_call_id: action_id
            for call in requests.approvals
            if (action_id := (requests.metadata.get(call.tool_call_id) or {}).get(ACTION_ID_KEY))
        }
        verdicts: dict[str, Verdict] = {}

        async def decide(call_id: str, action_id: str) -> None:
            verdicts[call_id] = await self.guard.wait(action_id)

        async with anyio.create_task_group() as group:
            for call_id, action_id in held.items():
                group.start_soon(decide, call_id, action_id)
        results = DeferredToolResults()
        for call_id, verdict in verdicts.items():
            if verdict.allowed:
                results.approvals[call_id] = ToolApproved()
                results.metadata[call_id] = {ACTION_ID_KEY: held[call_id]}
            else:
                results.approvals[call_id] = ToolDenied(verdict.refusal or "denied")
        return results


def _held_action(ctx: RunContext[Any]) -> str | None:
    """The action ID an approved call carries back from ``decisions``, if any."""
    if not ctx.tool_call_approved or not isinstance(ctx.tool_call_metadata, dict):
        return None
    action_id = ctx.tool_call_metadata.get(ACTION_ID_KEY)
    return action_id if isinstance(action_id, str) else None


def _key(tool_call_id: str) -> str:
    return "pydantic-ai-" + hashlib.sha256(tool_call_id.encode()).hexdigest()
