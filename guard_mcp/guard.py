"""Asking guardd, and what each answer becomes for the MCP client.

``Gate.call`` is the whole life of one ``tools/call``: ask (one
``Idempotency-Key`` for every retry, so a retry never charges twice), wait
for a person when the policy says so, run the call through ``forward`` only
when it is allowed, and report its outcome. Every way it can end that does
not run the call is a tool result with ``isError`` and a text the model can
act on; nothing is forwarded when guardd cannot be asked (fail closed).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import Any

import anyio
import mcp_types as types

from client_sdk import (
    Action,
    AsyncGuardClient,
    Decision,
    GuardError,
    InvalidState,
    Policy,
    ToolRule,
    TransportError,
)
from guard_mcp.config import Settings

log = logging.getLogger("guard_mcp")

#: Where ``--receipts`` puts an allowed call's receipt in the forwarded
#: ``tools/call`` request's ``_meta`` (docs/receipts.md).
RECEIPT_META_KEY = "agent-action-guard/receipt"

#: Longest single long-poll of an action (the service's bound is 60 s); the
#: person waiting sees a progress message after each one.
POLL_SECONDS = 15.0

#: The longest a cancelled or stopping call spends withdrawing its action.
WITHDRAW_SECONDS = 10.0

Progress = Callable[[float, float | None, str], Awaitable[None]]
#: Runs the call upstream, given the allowed call's receipt (None: none given).
Forward = Callable[[tuple[str, ...] | None], Awaitable[types.CallToolResult]]


def tool_error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _number(value: Any) -> str:
    if isinstance(value, Decimal | int | float) and not isinstance(value, bool):
        return format(value, "f") if isinstance(value, Decimal) else str(value)
    return repr(value)


def denial_text(reason: Mapping[str, Any] | None, action_id: str) -> str:
    """``denied by guard: <code> (<what it means>)`` for a denial's reason object."""
    reason = dict(reason or {})
    code = str(reason.pop("code", "denied"))
    if code == "insufficient_budget":
        detail = f"needs {_number(reason.get('cost'))}, {_number(reason.get('remaining'))} left"
    elif code == "tool_not_allowed":
        detail = f"{reason.get('tool')} is not in the agent's policy"
    elif code == "tool_call_limit":
        detail = f"{reason.get('tool')} may run at most {_number(reason.get('max_calls'))} times"
    elif code == "terminated":
        detail = f"the agent is terminated: {reason.get('reason')}"
    elif code == "rejected":
        detail = f"rejected by {reason.get('by')}: {reason.get('reason')}"
    elif code == "policy_rule":
        detail = f"policy rule {reason.get('rule')}: {reason.get('message')}"
    elif code == "policy_error" and "rule" in reason:
        detail = f"policy rule {reason.get('rule')} cannot judge this call: {reason.get('message')}"
    elif code == "policy_error":
        detail = f"the call's amount cannot be read: {reason.get('message')}"
    else:
        detail = ", ".join(f"{k}={_number(v)}" for k, v in reason.items())
    text = f"denied by guard: {code}" + (f" ({detail})" if detail else "")
    return f"{text}; action {action_id}; the call was not run."


def rule_note(rule: ToolRule, cost_argument: str | None) -> str:
    """What a tool's description says about its rule, or '' when nothing needs saying."""
    notes = []
    effects = {r.get("effect") for r in rule.rules or ()}
    if rule.requires_approval and "allow" not in effects:
        notes.append("each call waits for a person's approval")
    elif rule.requires_approval or "require_approval" in effects:
        # A policy rule decides by the call's arguments and history.
        notes.append("a call may need a person's approval")
    if cost_argument is None and rule.cost_from is not None:
        cost_argument = rule.cost_from
    if cost_argument is not None:
        notes.append(f"costs the number in its '{cost_argument}' argument")
        if rule.cost > 0:
            notes[-1] += f" (at least {_number(rule.cost)})"
    elif rule.cost > 0:
        notes.append(f"costs {_number(rule.cost)} of the agent's budget")
    return f"[guard: {'; '.join(notes)}]" if notes else ""


class Gate:
    """The agent's connection to guardd, as guard-mcp uses it."""

    def __init__(self, client: AsyncGuardClient, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.console = client.base_url.rstrip("/") + "/"
        # Why held calls are being cancelled when guard-mcp itself is stopping
        # (set on a signal); None: a cancellation comes from the client.
        self.stopping: str | None = None

    async def policy(self) -> Policy:
        return await self.client.policy()

    def unreachable(self, exc: GuardError) -> str:
        return f"guard unreachable, the call was not run (fail closed): {exc}"

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        cost: Decimal | None,
        forward: Forward,
        progress: Progress,
    ) -> types.CallToolResult:
        # One key for the ask, its retries by the SDK, and its repeat below.
        key = uuid.uuid4().hex
        try:
            decision = await self.client.request_action(tool, arguments, cost, key)
        except TransportError as exc:
            return tool_error(self.unreachable(exc))
        except GuardError as exc:  # an error answer, or arguments the SDK cannot send
            return tool_error(f"guard refused the request, the call was not run: {exc}")
        except anyio.get_cancelled_exc_class():
            # Cancelled while the ask was out: guardd may have decided it
            # (and held it) without guard-mcp learning the action's id.
            await self._settle_lost_ask(tool, arguments, cost, key)
            raise
        if decision.pending:
            return await self._held(tool, decision, forward, progress)
        if decision.denied:
            return tool_error(denial_text(decision.reason, decision.action_id))
        return await self._run(decision.action_id, decision.receipt, forward)

    async def _settle_lost_ask(
        self, tool: str, arguments: dict[str, Any], cost: Decimal | None, key: str
    ) -> None:
        """Learn what became of an ask whose answer a cancellation lost, by
        repeating it with the same key (guardd answers a repeat with the
        first decision and makes no new action; it decides now an ask that
        never reached it), and leave nothing behind: a held action is
        withdrawn, an allowed one reported ``failure``, as it will not run.
        Shielded, so that it is sent; bounded like a withdrawal."""
        why = self.stopping or "cancelled by the client"
        with anyio.move_on_after(WITHDRAW_SECONDS, shield=True) as bounded:
            try:
                decision = await self.client.request_action(tool, arguments, cost, key)
            except GuardError as exc:
                log.error(
                    "%s %s while guardd was asked; could not learn its decision (%s): an "
                    "action for it may stay pending, reject it at the console %s",
                    tool,
                    why,
                    exc,
                    self.console,
                )
                return
            if decision.pending:
                withdrawn = await self.withdraw(decision.action_id, why)
                if isinstance(withdrawn, Action) and withdrawn.status == "allowed":
                    await self._report(decision.action_id, "failure", f"{why}, not run")
            elif decision.allowed:
                # Charged when it was decided; it will not run.
                await self._report(decision.action_id, "failure", f"{why}, not run")
        if bounded.cancelled_caught:
            log.error(
                "%s %s while guardd was asked; guardd did not answer within %g s: an action "
                "for it may stay pending, reject it at the console %s",
                tool,
                why,
                WITHDRAW_SECONDS,
                self.console,
            )

    async def _held(
        self,
        tool: str,
        decision: Decision,
        forward: Forward,
        progress: Progress,
    ) -> types.CallToolResult:
        action_id = decision.action_id
        started = time.monotonic()
        waiting = (
            f"{tool} ({action_id}) waits for a person's approval at the guard console "
            f"{self.console}"
        )
        log.info("%s", waiting)
        try:
            action = await self._wait(tool, action_id, started, waiting, progress)
        except anyio.get_cancelled_exc_class():
            # The client cancelled (notifications/cancelled) or went away, or
            # guard-mcp is stopping.
            why = self.stopping or "cancelled by the client"
            # Shielded, so that the withdrawal is sent; bounded, so that a
            # guardd that does not answer cannot keep a stopping proxy alive.
            with anyio.move_on_after(WITHDRAW_SECONDS, shield=True) as bounded:
                withdrawn = await self.withdraw(action_id, why)
                if isinstance(withdrawn, Action) and withdrawn.status == "allowed":
                    # Approved just before: charged, but it will never run.
                    await self._report(action_id, "failure", f"{why}, not run")
            if bounded.cancelled_caught:
                log.error(
                    "%s %s; guardd did not answer within %g s, it may stay pending: "
                    "reject it at the console %s",
                    action_id,
                    why,
                    WITHDRAW_SECONDS,
                    self.console,
                )
            raise
        if isinstance(action, types.CallToolResult):
            return action
        return await self._decided(action, forward)

    async def _wait(
        self, tool: str, action_id: str, started: float, waiting: str, progress: Progress
    ) -> Action | types.CallToolResult:
        """The action once decided, or the result when no decision comes."""
        timeout = self.settings.approval_timeout
        while True:
            elapsed = time.monotonic() - started
            shown = f"{waiting} ({math.floor(elapsed)} of {timeout:g} s)"
            await progress(elapsed, timeout, shown)
            left = timeout - elapsed
            if left <= 0:
                withdrawn = await self.withdraw(action_id, "timed out")
                if isinstance(withdrawn, Action):  # decided at the last moment
                    return withdrawn
                return tool_error(
                    f"timed out after {timeout:g} s waiting for approval of {action_id} "
                    f"({tool}); the call was not run. {withdrawn}"
                )
            try:
                action = await self.client.get_action(action_id, wait=min(left, POLL_SECONDS))
            except TransportError as exc:
                return tool_error(
                    f"guard unreachable while {action_id} waited for approval, the call "
                    f"was not run (fail closed): {exc}"
                )
            except GuardError as exc:
                return tool_error(f"guard refused, the call was not run: {exc}")
            if action.status != "pending_approval":
                return action

    async def _decided(self, action: Action, forward: Forward) -> types.CallToolResult:
        if action.status == "allowed":
            return await self._run(action.action_id, action.receipt, forward)
        if action.status == "denied":
            return tool_error(denial_text(action.reason, action.action_id))
        return tool_error(
            f"guard: {action.action_id} left approval as {action.status!r}; the call was not run."
        )

    async def withdraw(self, action_id: str, why: str) -> Action | str:
        """Withdraw a held action on guardd (``cancel``), so that a late
        approval can never charge for a call that did not run.

        Returns what the model is told, or the action when a person decided
        it in the meantime (that decision stands). When guardd cannot be
        told, the action stays pending and the person is asked to reject it.
        """
        try:
            await self.client.cancel(action_id, reason=f"guard-mcp: {why}")
        except InvalidState:
            try:
                return await self.client.get_action(action_id)
            except GuardError as exc:
                return self._left_pending(action_id, why, exc)
        except GuardError as exc:
            return self._left_pending(action_id, why, exc)
        log.warning("%s %s; withdrawn on guardd", action_id, why)
        return f"The action was withdrawn on guardd: {action_id} is cancelled, never charged."

    def _left_pending(self, action_id: str, why: str, exc: GuardError) -> str:
        log.error("%s %s; could not withdraw it, it stays pending: %s", action_id, why, exc)
        return (
            f"The action could not be withdrawn ({exc}) and may stay pending on guardd: "
            f"reject {action_id} at the console {self.console} so that a late approval "
            "cannot charge for a call that did not run."
        )

    async def _run(
        self, action_id: str, receipt: tuple[str, ...] | None, forward: Forward
    ) -> types.CallToolResult:
        try:
            result = await forward(receipt)
        except BaseException as exc:
            # Shielded, so that a cancelled call is still reported; bounded,
            # so that a guardd that does not answer cannot keep a stopping
            # guard-mcp alive (the SDK alone would wait and retry for minutes).
            with anyio.move_on_after(WITHDRAW_SECONDS, shield=True) as bounded:
                await self._report(action_id, "failure", f"upstream failed: {exc!s}"[:500])
            if bounded.cancelled_caught:
                log.error(
                    "could not report failure of %s to guardd within %g s",
                    action_id,
                    WITHDRAW_SECONDS,
                )
            raise
        await self._report(action_id, "failure" if result.is_error else "success", None)
        return result

    async def _report(self, action_id: str, status: str, detail: str | None) -> None:
        try:
            await self.client.report_outcome(action_id, status, detail)
        except GuardError as exc:
            # The call ran: its result goes back whatever the report's fate.
            log.error("could not report %s of %s to guardd: %s", status, action_id, exc)
