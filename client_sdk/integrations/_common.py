"""What every adapter does, free of any framework: ask guardd about one tool
call, wait while an operator decides, report the outcome, and word a refusal
the model can act on.

The adapters differ only in where they stand in their framework's tool-call
path and in how a held call pauses the run; the rules are the same for all:

- the tool's name and the arguments exactly as the model gave them are the
  action (``cost_from`` names, per tool, the argument that carries the cost);
- anything short of ``allowed`` means the tool does not run, and the model is
  told why in one sentence carrying the reason code (``refusal``): a denial,
  an operator's rejection, a cost argument that is not a number, and the
  guard itself unreachable (fail closed, code ``guard_unreachable``);
- a wait given up (``approval_timeout``, the task cancelled, an interrupt)
  withdraws the held action, as ``guarded`` does, so a late approval cannot
  charge for a call that never ran;
- the outcome is reported once the tool ran; a report that fails is logged,
  not raised: the tool ran, and its result belongs to the model.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal

import anyio
import attrs

from client_sdk import (
    Action,
    ActionDenied,
    AsyncGuardClient,
    Decision,
    GuardError,
    InvalidState,
    TransportError,
)
from client_sdk._guarded import run_to_the_end

logger = logging.getLogger("client_sdk.integrations")

Money = Decimal | int | float
MAX_POLL = 60.0  # seconds: the service's longest long-poll
WITHDRAW_WITHIN = 10.0  # seconds a withdrawal may take once a wait was given up
MAX_DETAIL = 1000  # characters of a tool's exception sent with a failure outcome

WHY_TIMEOUT = "no decision within approval_timeout"
WHY_CANCELLED = "the waiting call was cancelled"
WHY_INTERRUPT = "the waiting call was interrupted"
WHY_GUARD_LOST = "the guard stopped answering while the call waited"


@attrs.frozen
class Verdict:
    """The guard's word on one tool call.

    ``status`` is ``allowed`` (run it; ``action_id`` is the action to report
    on), ``pending`` (an operator decides; ``action_id`` is the held action)
    or ``refused`` (do not run it; ``refusal`` is the text for the model and
    ``code`` the reason code).
    """

    status: Literal["allowed", "pending", "refused"]
    action_id: str | None = None
    code: str | None = None
    refusal: str | None = None

    @property
    def allowed(self) -> bool:
        return self.status == "allowed"

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    @property
    def refused(self) -> bool:
        return self.status == "refused"


def refusal_text(code: str, message: str) -> str:
    """The sentence a refused call answers the model with: the code first, so
    the model (and whoever reads the transcript) can act on it."""
    return f"The action guard refused this tool call ({code}): {message}. The tool did not run."


def refused(code: str, message: str, action_id: str | None = None) -> Verdict:
    return Verdict("refused", action_id, code, refusal_text(code, message))


def denied(error: ActionDenied) -> Verdict:
    return refused(error.code, error.message, error.action_id)


def unavailable(error: GuardError, action_id: str | None = None) -> Verdict:
    """Fail closed: a guard that cannot be asked refuses the call."""
    logger.warning("the action guard could not be asked; the tool call is refused: %s", error)
    code = "guard_unreachable" if isinstance(error, TransportError) else error.code
    return refused(code, f"the guard could not decide: {error.message}", action_id)


def from_decision(decision: Decision) -> Verdict:
    if decision.allowed:
        return Verdict("allowed", decision.action_id)
    if decision.denied:
        return denied(ActionDenied(decision.action_id, decision.reason or {"code": "denied"}))
    return Verdict("pending", decision.action_id)


def from_action(action: Action) -> Verdict:
    """The verdict on an action that left ``pending_approval`` (or never was)."""
    if action.status == "allowed":
        return Verdict("allowed", action.action_id)
    if action.status == "pending_approval":
        return Verdict("pending", action.action_id)
    if action.status in ("denied", "cancelled"):
        reason = action.reason or {"code": action.status}
        return denied(ActionDenied(action.action_id, reason))
    return refused(
        "unexpected_state",
        f"action {action.action_id} is {action.status}, not allowed",
        action.action_id,
    )


def failure_detail(error: BaseException) -> str:
    return f"{type(error).__qualname__}: {error}"[:MAX_DETAIL]


class ToolGuard:
    """Asks guardd about tool calls for one agent (an ``AsyncGuardClient``).

    ``cost_from`` maps a tool name to the argument that carries the call's
    cost (``{"transfer": "amount"}``); a call without that argument is priced
    by the policy. ``approval_timeout`` bounds a wait for an operator, in
    seconds (None: as long as the service holds the action).
    """

    def __init__(
        self,
        client: AsyncGuardClient,
        *,
        cost_from: Mapping[str, str] | None = None,
        approval_timeout: float | None = None,
    ) -> None:
        if not isinstance(client, AsyncGuardClient):
            raise TypeError(f"the adapters need an AsyncGuardClient, not {client!r}")
        if approval_timeout is not None and not approval_timeout >= 0:
            raise ValueError(f"approval_timeout must be >= 0 seconds, not {approval_timeout!r}")
        self.client = client
        self.cost_from = dict(cost_from or {})
        self.approval_timeout = approval_timeout

    def cost(self, tool: str, args: Mapping[str, Any]) -> Money | None:
        """The cost the call's own arguments carry, if its tool has a ``cost_from``."""
        name = self.cost_from.get(tool)
        if name is None or name not in args:
            return None
        value = args[name]
        if isinstance(value, bool) or not isinstance(value, Decimal | int | float | str):
            raise ValueError(f"argument {name!r} is the cost and must be a number, not {value!r}")
        try:
            number = Decimal(value) if isinstance(value, str) else value
        except ArithmeticError:
            raise ValueError(
                f"argument {name!r} is the cost and must be a number, not {value!r}"
            ) from None
        if not Decimal(number).is_finite():
            raise ValueError(f"argument {name!r} is the cost and must be finite, not {value!r}")
        return number

    async def ask(
        self, tool: str, args: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> Verdict:
        """Request the action; no waiting. A repeat with the same ``idempotency_key``
        (a framework running the call again on resuming) gets the first decision
        on the same action back."""
        try:
            cost = self.cost(tool, args)
        except ValueError as exc:
            return refused("bad_cost", str(exc))
        # Always a key of our own: a request cut short by a cancellation can be
        # sent again to learn which action it made, and withdraw it.
        key = idempotency_key or f"adapter-{uuid.uuid4().hex}"
        try:
            decision = await self.client.request_action(
                tool, dict(args), cost=cost, idempotency_key=key
            )
        except anyio.get_cancelled_exc_class():
            await self._abandon(tool, args, cost, key)
            raise
        except ActionDenied as exc:
            return denied(exc)
        except GuardError as exc:
            return unavailable(exc)
        return from_decision(decision)

    async def wait(self, action_id: str) -> Verdict:
        """Wait for the operator's decision on a held action.

        A wait given up withdraws the action: ``approval_timeout`` passed
        (refused, code ``approval_timeout``), the guard lost (refused), the
        task cancelled or interrupted (re-raised).
        """
        deadline = (
            None if self.approval_timeout is None else time.monotonic() + self.approval_timeout
        )
        try:
            while True:
                left = MAX_POLL if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    await self.withdraw(action_id, WHY_TIMEOUT)
                    return refused(
                        "approval_timeout",
                        f"no operator decided on action {action_id} within "
                        f"{self.approval_timeout} seconds; it was withdrawn",
                        action_id,
                    )
                try:
                    action = await self.client.get_action(action_id, wait=min(MAX_POLL, left))
                except GuardError as exc:
                    await self.withdraw(action_id, WHY_GUARD_LOST)
                    return unavailable(exc, action_id)
                if action.status != "pending_approval":
                    return from_action(action)
        except anyio.get_cancelled_exc_class():
            await self.withdraw(action_id, WHY_CANCELLED)
            raise
        except KeyboardInterrupt:
            await self.withdraw(action_id, WHY_INTERRUPT)
            raise

    async def decide(
        self, tool: str, args: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> Verdict:
        """Ask, and wait while the call is held: ``allowed`` or ``refused``."""
        verdict = await self.ask(tool, args, idempotency_key=idempotency_key)
        if verdict.pending:
            assert verdict.action_id is not None
            verdict = await self.wait(verdict.action_id)
        return verdict

    async def recheck(self, action_id: str) -> Verdict:
        """Where a held action stands now (after a run paused on it resumes)."""
        try:
            return from_action(await self.client.get_action(action_id))
        except GuardError as exc:
            return unavailable(exc, action_id)

    async def withdraw(self, action_id: str, why: str) -> None:
        """Cancel a held action, to the end even if the caller is being
        cancelled, and bounded, so a silent guard cannot hold it up for long."""
        await run_to_the_end(self._withdraw(action_id, why))

    async def _withdraw(self, action_id: str, why: str) -> None:
        with anyio.move_on_after(WITHDRAW_WITHIN):
            try:
                await self.client.cancel(action_id, why)
            except InvalidState as exc:
                logger.warning("could not withdraw action %s: %s", action_id, exc)
            except GuardError as exc:
                logger.warning(
                    "could not withdraw action %s; it may stay pending: %s", action_id, exc
                )

    async def _abandon(
        self, tool: str, args: Mapping[str, Any], cost: Money | None, key: str
    ) -> None:
        """The caller was cancelled while its request was in flight: the action
        may exist, held, with nobody left to wait for it. The same request again
        (same key: the first decision, no second action) says which; a held
        one is withdrawn."""
        await run_to_the_end(self._find_and_withdraw(tool, args, cost, key))

    async def _find_and_withdraw(
        self, tool: str, args: Mapping[str, Any], cost: Money | None, key: str
    ) -> None:
        with anyio.move_on_after(WITHDRAW_WITHIN):
            try:
                decision = await self.client.request_action(
                    tool, dict(args), cost=cost, idempotency_key=key
                )
            except GuardError as exc:
                logger.warning("could not learn what a cancelled tool call asked for: %s", exc)
                return
            if decision.pending:
                await self._withdraw(decision.action_id, WHY_CANCELLED)
            elif decision.allowed:
                logger.warning(
                    "action %s was allowed as its tool call was cancelled; the tool did not run",
                    decision.action_id,
                )

    async def report(self, action_id: str, error: BaseException | None = None) -> None:
        """Report ``success``, or ``failure`` with the error, for an allowed call that ran."""
        status, detail = ("success", None) if error is None else ("failure", failure_detail(error))
        try:
            await self.client.report_outcome(action_id, status, detail)
        except GuardError as exc:
            logger.warning("could not report the %s of action %s: %s", status, action_id, exc)
