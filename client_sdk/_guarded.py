"""``guarded(tool)``: ask the service, wait for approval, run, report.

The flow, the same for the sync and the async client:

1. bind the call's arguments to the tool's parameter names (defaults applied)
   and check that they are JSON-safe: that is the action's ``input``;
2. request the action; while it is ``pending_approval``, long-poll it
   (``approval_timeout`` seconds at most, then ``ApprovalTimeout``). A wait
   that ends without a decision (the timeout, ``KeyboardInterrupt``, the async
   call cancelled) withdraws the action (``cancel``) unless ``keep_pending``:
   the tool will not run, so a late approval must not charge for it;
3. denied, at request time or when an operator decided: ``ActionDenied``;
4. allowed: run the tool (passing the decision's receipt as ``guard_receipt``
   to a tool that declares that keyword parameter, so it can check the
   permission itself); report ``success``, or ``failure`` and re-raise the
   tool's own exception object.

An outcome report that fails after the tool raised is logged, and the tool's
exception is raised all the same: it is the one the caller needs to see.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

import anyio

from client_sdk import _json
from client_sdk._core import MAX_WAIT, Money, check_money
from client_sdk._models import Action, Decision
from client_sdk.errors import (
    ActionDenied,
    ApprovalTimeout,
    GuardError,
    InvalidState,
    ToolInputError,
    UnexpectedActionState,
)

if TYPE_CHECKING:
    from client_sdk._client import AsyncGuardClient, GuardClient


logger = logging.getLogger("client_sdk")

MAX_DETAIL = 1000  # characters of the exception text sent with a failure outcome
WITHDRAW_WITHIN = 10.0  # seconds a cancel may take once the wait was given up
RECEIPT_PARAMETER = "guard_receipt"


class ToolSpec:
    """A tool function and how it is guarded: its name, cost and approval timeout."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None,
        cost: Money | None,
        approval_timeout: float | None,
        keep_pending: bool = False,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"guarded() needs a function, not {fn!r}")
        tool_name = name or getattr(fn, "__name__", None)
        if not isinstance(tool_name, str) or not tool_name:
            raise TypeError(f"{fn!r} has no __name__; pass guarded(..., name=...)")
        if approval_timeout is not None and not approval_timeout >= 0:
            raise ValueError(f"approval_timeout must be >= 0 seconds, not {approval_timeout!r}")
        self.fn = fn
        self.name = tool_name
        self.cost = None if cost is None else check_money(cost, "cost")
        self.approval_timeout = approval_timeout
        self.keep_pending = keep_pending
        signature = inspect.signature(fn)
        receipt = signature.parameters.get(RECEIPT_PARAMETER)
        # A tool that takes the receipt gets it from guarded, never from its
        # caller, and it is no part of the action's input.
        self.takes_receipt = receipt is not None and receipt.kind in (
            inspect.Parameter.KEYWORD_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        )
        if self.takes_receipt:
            params = list(signature.parameters.values())
            after = params[params.index(cast(inspect.Parameter, receipt)) + 1 :]
            if any(p.kind in (p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in after):
                # Positional arguments would land on it: guarded passes it by name.
                raise TypeError(
                    f"{tool_name!r}: declare {RECEIPT_PARAMETER} keyword-only (after *) "
                    "or as the last positional parameter"
                )
            kept = [p for p in params if p.name != RECEIPT_PARAMETER]
            signature = signature.replace(parameters=kept)
        self.signature = signature
        self.is_async = inspect.iscoroutinefunction(fn)

    def receipt_kwargs(self, receipt: tuple[str, ...] | None) -> dict[str, Any]:
        """What the tool is called with besides the caller's arguments."""
        return {RECEIPT_PARAMETER: receipt} if self.takes_receipt else {}

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The action's input: arguments by parameter name, defaults applied.

        A call that does not fit the signature raises the same TypeError that
        calling the function would, before anything is sent.
        """
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        for name, value in bound.arguments.items():
            problem = _json.json_safety_problem(value, name)
            if problem:
                raise ToolInputError(
                    f"argument {name!r} of tool {self.name!r} is not JSON-safe: {problem}",
                    argument=name,
                )
        return dict(bound.arguments)


def ready(decision: Decision) -> str | None:
    """The action ID if the tool may run now, None if pending; raises if denied."""
    if decision.denied:
        raise ActionDenied(decision.action_id, decision.reason or {"code": "denied"})
    return decision.action_id if decision.allowed else None


def settle(action: Action) -> str:
    """The action ID of an action that left ``pending_approval`` allowed; raises otherwise."""
    if action.status == "allowed":
        return action.action_id
    if action.status in ("denied", "cancelled"):
        # denied: by an operator, a re-run check, or approval_expired;
        # cancelled: withdrawn by someone else (the admin) meanwhile.
        raise ActionDenied(action.action_id, action.reason or {"code": action.status})
    raise UnexpectedActionState(action.action_id, action.status)


def poll_wait(deadline: float | None, now: float) -> float | None:
    """Seconds to long-poll next, or None once ``deadline`` has passed."""
    if deadline is None:
        return MAX_WAIT
    left = deadline - now
    return None if left <= 0 else min(MAX_WAIT, left)


def failure_detail(exc: BaseException) -> str:
    return f"{type(exc).__qualname__}: {exc}"[:MAX_DETAIL]


def _deadline(spec: ToolSpec) -> float | None:
    return None if spec.approval_timeout is None else time.monotonic() + spec.approval_timeout


def _log_lost_report(action_id: str, error: GuardError) -> None:
    logger.warning("could not report the failure of action %s: %s", action_id, error)


def _log_lost_cancel(action_id: str, error: GuardError) -> None:
    if isinstance(error, InvalidState):
        # Decided in the meantime (approved as the wait ended, say): the tool
        # does not run all the same; the message says who decided what.
        logger.warning("could not withdraw action %s: %s", action_id, error)
    else:
        logger.warning("could not withdraw action %s; it may stay pending: %s", action_id, error)


WHY_TIMEOUT = "guarded: no decision within approval_timeout"
WHY_INTERRUPT = "guarded: the waiting call was interrupted"
WHY_CANCELLED = "guarded: the waiting call was cancelled"


# ---- sync ------------------------------------------------------------------


def wait_sync(
    client: GuardClient, decision: Decision, spec: ToolSpec
) -> tuple[str, tuple[str, ...] | None]:
    """The allowed action's ID and its receipt; raises when it is not allowed."""
    action_id = ready(decision)
    if action_id is not None:
        return action_id, decision.receipt
    try:
        return _poll_sync(client, decision, spec)
    except ApprovalTimeout as exc:
        if spec.keep_pending:
            raise
        _withdraw_sync(client, decision.action_id, WHY_TIMEOUT)
        raise ApprovalTimeout(exc.action_id, exc.timeout, withdrawn=True) from None
    except KeyboardInterrupt:
        if not spec.keep_pending:
            _withdraw_sync(client, decision.action_id, WHY_INTERRUPT)
        raise


def _poll_sync(
    client: GuardClient, decision: Decision, spec: ToolSpec
) -> tuple[str, tuple[str, ...] | None]:
    deadline = _deadline(spec)
    while True:
        wait = poll_wait(deadline, time.monotonic())
        if wait is None:
            raise ApprovalTimeout(decision.action_id, cast(float, spec.approval_timeout))
        action = client.get_action(decision.action_id, wait=wait)
        if action.status != "pending_approval":
            return settle(action), action.receipt


def _withdraw_sync(client: GuardClient, action_id: str, why: str) -> None:
    try:
        client.cancel(action_id, why)
    except GuardError as error:
        _log_lost_cancel(action_id, error)


def wrap_sync(client: GuardClient, spec: ToolSpec) -> Callable[..., Any]:
    if spec.is_async:
        raise TypeError(
            f"GuardClient.guarded wraps sync functions; {spec.name!r} is async: "
            "use AsyncGuardClient"
        )

    @functools.wraps(spec.fn)
    def guarded_tool(*args: Any, **kwargs: Any) -> Any:
        tool_input = spec.bind(args, kwargs)
        decision = client.request_action(spec.name, tool_input, cost=spec.cost)
        action_id, receipt = wait_sync(client, decision, spec)
        try:
            result = spec.fn(*args, **kwargs, **spec.receipt_kwargs(receipt))
        except Exception as exc:
            try:
                client.report_outcome(action_id, "failure", failure_detail(exc))
            except GuardError as error:
                _log_lost_report(action_id, error)
            raise
        client.report_outcome(action_id, "success")
        return result

    return guarded_tool


# ---- async -----------------------------------------------------------------


async def wait_async(
    client: AsyncGuardClient, decision: Decision, spec: ToolSpec
) -> tuple[str, tuple[str, ...] | None]:
    """The allowed action's ID and its receipt; raises when it is not allowed."""
    action_id = ready(decision)
    if action_id is not None:
        return action_id, decision.receipt
    try:
        return await _poll_async(client, decision, spec)
    except ApprovalTimeout as exc:
        if spec.keep_pending:
            raise
        await _withdraw_async(client, decision.action_id, WHY_TIMEOUT)
        raise ApprovalTimeout(exc.action_id, exc.timeout, withdrawn=True) from None
    except anyio.get_cancelled_exc_class():
        if not spec.keep_pending:
            await _withdraw_async(client, decision.action_id, WHY_CANCELLED)
        raise
    except KeyboardInterrupt:
        if not spec.keep_pending:
            await _withdraw_async(client, decision.action_id, WHY_INTERRUPT)
        raise


async def _withdraw_async(client: AsyncGuardClient, action_id: str, why: str) -> None:
    # Shielded: the task may be the one being cancelled; bounded, so a
    # service that does not answer cannot hold the cancellation up for long.
    with anyio.move_on_after(WITHDRAW_WITHIN, shield=True):
        try:
            await client.cancel(action_id, why)
        except GuardError as error:
            _log_lost_cancel(action_id, error)


async def _poll_async(
    client: AsyncGuardClient, decision: Decision, spec: ToolSpec
) -> tuple[str, tuple[str, ...] | None]:
    deadline = _deadline(spec)
    while True:
        wait = poll_wait(deadline, time.monotonic())
        if wait is None:
            raise ApprovalTimeout(decision.action_id, cast(float, spec.approval_timeout))
        action = await client.get_action(decision.action_id, wait=wait)
        if action.status != "pending_approval":
            return settle(action), action.receipt


def wrap_async(client: AsyncGuardClient, spec: ToolSpec) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(spec.fn)
    async def guarded_tool(*args: Any, **kwargs: Any) -> Any:
        tool_input = spec.bind(args, kwargs)
        decision = await client.request_action(spec.name, tool_input, cost=spec.cost)
        action_id, receipt = await wait_async(client, decision, spec)
        try:
            result = spec.fn(*args, **kwargs, **spec.receipt_kwargs(receipt))
            if spec.is_async:
                result = await cast(Awaitable[Any], result)
        except Exception as exc:
            try:
                await client.report_outcome(action_id, "failure", failure_detail(exc))
            except GuardError as error:
                _log_lost_report(action_id, error)
            raise
        await client.report_outcome(action_id, "success")
        return result

    return guarded_tool
