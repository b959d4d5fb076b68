"""Google ADK: ``ActionGuardPlugin``, a plugin that guards every tool of an app.

``App(name=..., root_agent=..., plugins=[ActionGuardPlugin(client)])``: every
tool call of every agent of the app goes to guardd first (``before_tool_callback``),
with the tool's name and the arguments as the model gave them. Allowed: the
tool runs, and its outcome is reported (``after_tool_callback``: success;
``on_tool_error_callback``: failure, the error going on as ADK handles it).
Refused: the callback answers the call itself with ``{"error": <refusal>}``,
the reason code in it, so ADK skips the tool and the model reads the refusal
as the tool's response.

A held call waits in the callback for the operator's decision (at most
``approval_timeout`` seconds, then it is withdrawn and refused); the other
calls of the turn, which ADK runs concurrently, go on meanwhile. A run
cancelled while a call waits withdraws the held action.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from client_sdk import AsyncGuardClient
from client_sdk.integrations._common import ToolGuard

__all__ = ["ActionGuardPlugin"]


class ActionGuardPlugin(BasePlugin):
    """Guards every tool call of the runner it is given to.

    ``client`` is the agent's ``AsyncGuardClient``; ``cost_from`` maps a tool
    name to the argument carrying its cost; ``approval_timeout`` bounds a wait
    for an operator (seconds).
    """

    def __init__(
        self,
        client: AsyncGuardClient,
        *,
        cost_from: Mapping[str, str] | None = None,
        approval_timeout: float | None = None,
        name: str = "action_guard",
    ) -> None:
        super().__init__(name)
        self.guard = ToolGuard(client, cost_from=cost_from, approval_timeout=approval_timeout)
        self._running: dict[str, str] = {}  # function call ID -> its allowed action

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        verdict = await self.guard.decide(tool.name, tool_args)
        if not verdict.allowed:
            return {"error": verdict.refusal}
        assert verdict.action_id is not None
        self._running[_call_id(tool_context)] = verdict.action_id
        return None

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        action_id = self._running.pop(_call_id(tool_context), None)
        if action_id is not None:  # None: refused, or its failure was reported
            await self.guard.report(action_id)
        return None

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        action_id = self._running.pop(_call_id(tool_context), None)
        if action_id is not None:
            await self.guard.report(action_id, error)
        return None


def _call_id(tool_context: ToolContext) -> str:
    return tool_context.function_call_id or ""
