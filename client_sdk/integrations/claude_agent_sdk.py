"""Claude Agent SDK: ``ActionGuard`` answers Claude's permission requests from guardd.

``options = guard.options(ClaudeAgentOptions(...))`` sets the SDK's own
permission callback (``can_use_tool``) and two hooks:

- ``can_use_tool`` asks guardd with the tool's name and its input as Claude
  gave it (the tool use ID is the request's Idempotency-Key, so a repeated
  permission request finds the same action). Allowed: ``PermissionResultAllow``.
  Held: the callback waits for the operator's decision (at most
  ``approval_timeout`` seconds, then the action is withdrawn and the call
  refused). Refused: ``PermissionResultDeny`` whose message is the refusal,
  the reason code in it, which Claude reads as the tool's result.
- ``PostToolUse`` and ``PostToolUseFailure`` hooks report the outcome of an
  allowed call, ``success`` or ``failure`` (with the error Claude Code gives).

Claude asks permission only for calls no rule already allows: tools listed in
``allowed_tools``, a ``permission_mode`` such as ``bypassPermissions`` or
``acceptEdits``, and the settings' own allow rules let calls through without
asking, and so without the guard (the SDK warns of the first).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

from claude_agent_sdk import (
    ClaudeAgentOptions,
    HookContext,
    HookInput,
    HookJSONOutput,
    HookMatcher,
    PermissionResult,
    PermissionResultAllow,
    PermissionResultDeny,
    ToolPermissionContext,
)

from client_sdk import AsyncGuardClient
from client_sdk.integrations._common import ToolGuard

__all__ = ["ActionGuard"]


class _ToolFailed(Exception):
    """What Claude Code says went wrong with a tool, as the failure's detail."""


class ActionGuard:
    """Answers a Claude agent's permission requests from guardd and reports
    the outcomes.

    ``client`` is the agent's ``AsyncGuardClient``; ``cost_from`` maps a tool
    name to the input field carrying its cost; ``approval_timeout`` bounds a
    wait for an operator (seconds).
    """

    def __init__(
        self,
        client: AsyncGuardClient,
        *,
        cost_from: Mapping[str, str] | None = None,
        approval_timeout: float | None = None,
    ) -> None:
        self.guard = ToolGuard(client, cost_from=cost_from, approval_timeout=approval_timeout)
        self._running: dict[str, str] = {}  # tool use ID -> its allowed action

    def options(self, options: ClaudeAgentOptions | None = None) -> ClaudeAgentOptions:
        """``options`` (or the defaults) with the permission callback and the
        outcome hooks set; hooks already there are kept."""
        base = options or ClaudeAgentOptions()
        hooks: dict[Any, list[HookMatcher]] = {k: list(v) for k, v in (base.hooks or {}).items()}
        for event in ("PostToolUse", "PostToolUseFailure"):
            hooks.setdefault(event, []).append(HookMatcher(hooks=[self.report_outcome]))
        return dataclasses.replace(base, can_use_tool=self.can_use_tool, hooks=hooks)

    async def can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResult:
        """The ``can_use_tool`` callback: guardd's decision, waiting while held."""
        key = _key(context.tool_use_id)
        verdict = await self.guard.ask(tool_name, tool_input, idempotency_key=key)
        if verdict.pending:
            assert verdict.action_id is not None
            verdict = await self.guard.wait(verdict.action_id)
        if not verdict.allowed:
            return PermissionResultDeny(message=verdict.refusal or "refused")
        assert verdict.action_id is not None
        if context.tool_use_id:
            self._running[context.tool_use_id] = verdict.action_id
        return PermissionResultAllow()

    async def report_outcome(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """The ``PostToolUse`` / ``PostToolUseFailure`` hook: report the outcome."""
        call_id = tool_use_id or str(input_data.get("tool_use_id") or "")
        action_id = self._running.pop(call_id, None)
        if action_id is not None:  # None: not a call this guard allowed
            if input_data["hook_event_name"] == "PostToolUseFailure":
                error = str(input_data.get("error") or "the tool failed")
                await self.guard.report(action_id, _ToolFailed(error))
            else:
                await self.guard.report(action_id)
        return {}


def _key(tool_use_id: str | None) -> str | None:
    if not tool_use_id:
        return None
    return "claude-agent-sdk-" + hashlib.sha256(tool_use_id.encode()).hexdigest()
