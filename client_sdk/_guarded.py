"""``guarded(tool)``: ask the service, wait for approval, run, report.

The steps that need no I/O, shared by both clients; the flow itself, the
same for both, is ``_guard`` in ``_async.py`` (``_sync.py`` is generated from
it):

1. bind the call's arguments to the tool's parameter names (defaults applied)
   and check that they are JSON-safe: that is the action's ``input``;
2. request the action (under an ``Idempotency-Key`` of its own); while it is
   ``pending_approval``, long-poll it (``approval_timeout`` seconds at most,
   then ``ApprovalTimeout``). A wait that ends without a decision (the
   timeout, ``KeyboardInterrupt``, the async call cancelled) withdraws the
   action (``cancel``) unless ``keep_pending``: the tool will not run, so a
   late approval must not charge for it. A request cut short the same way
   is sent again under the same key, which makes no second action and
   answers with the first decision: a held action it names is withdrawn;
3. denied, at request time or when an operator decided: ``ActionDenied``;
4. allowed: run the tool (passing the decision's receipt as ``guard_receipt``
   to a tool that declares that keyword parameter, so it can check the
   permission itself); report ``success``, or ``failure`` and re-raise the
   tool's own exception object.

An outcome report that fails after the tool raised is logged, and the tool's
exception is raised all the same: it is the one the caller needs to see.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, ParamSpec, Protocol, TypeVar, cast, overload

import anyio

from client_sdk import _json
from client_sdk._core import MAX_WAIT, Money, check_money
from client_sdk._models import Action, Decision
from client_sdk.errors import (
    ActionDenied,
    GuardError,
    InvalidState,
    ToolInputError,
    UnexpectedActionState,
)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

logger = logging.getLogger("client_sdk")

MAX_DETAIL = 1000  # characters of the exception text sent with a failure outcome
WITHDRAW_WITHIN = 10.0  # seconds a cancel may take once the wait was given up
RECEIPT_PARAMETER = "guard_receipt"


class ToolSpec:
    """A tool function and how it is guarded: its name, cost and approval timeout.

    This is the sync client's: it cannot await, so it refuses an async tool
    (``AsyncToolSpec`` takes both).
    """

    accepts_async = False

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
        if self.is_async and not self.accepts_async:
            raise TypeError(
                f"GuardClient.guarded wraps sync functions; {tool_name!r} is async: "
                "use AsyncGuardClient"
            )

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

    def call(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], receipt: tuple[str, ...] | None
    ) -> Any:
        """Run the tool as its caller called it, plus the receipt if it takes one."""
        return self.fn(*args, **kwargs, **self.receipt_kwargs(receipt))


class AsyncToolSpec(ToolSpec):
    """The async client's ``ToolSpec``: a sync tool, or an async one it awaits."""

    accepts_async = True

    async def acall(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], receipt: tuple[str, ...] | None
    ) -> Any:
        result = self.call(args, kwargs, receipt)
        if self.is_async:
            result = await cast(Awaitable[Any], result)
        return result


class AsyncGuardDecorator(Protocol):
    """What ``AsyncGuardClient.guarded(name=...)`` returns: sync or async tool in,
    coroutine function out."""

    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[P, Coroutine[Any, Any, R]]: ...


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


def deadline(spec: ToolSpec) -> float | None:
    return None if spec.approval_timeout is None else time.monotonic() + spec.approval_timeout


def log_lost_report(action_id: str, error: GuardError) -> None:
    logger.warning("could not report the failure of action %s: %s", action_id, error)


def log_lost_cancel(action_id: str, error: GuardError) -> None:
    if isinstance(error, InvalidState):
        # Decided in the meantime (approved as the wait ended, say): the tool
        # does not run all the same; the message says who decided what.
        logger.warning("could not withdraw action %s: %s", action_id, error)
    else:
        logger.warning("could not withdraw action %s; it may stay pending: %s", action_id, error)


WHY_TIMEOUT = "guarded: no decision within approval_timeout"
WHY_INTERRUPT = "guarded: the waiting call was interrupted"
WHY_CANCELLED = "guarded: the waiting call was cancelled"


def log_lost_ask(tool: str, error: GuardError) -> None:
    logger.warning(
        "could not learn what the cut-short request for %s became; an action for it "
        "may stay pending: %s",
        tool,
        error,
    )


def log_allowed_not_run(action_id: str) -> None:
    # Only a pending action can be withdrawn; a failure report would scar the
    # agent for a tool that never ran. The charge made when it was allowed stands.
    logger.warning(
        "action %s was allowed as its call was cut short; the tool did not run", action_id
    )


@contextlib.contextmanager
def async_shield(what: str) -> Iterator[None]:
    """Around the async flow's withdrawal of ``what``: shielded from AnyIO's
    cancellation, and bounded, so a service that does not answer cannot hold
    the cancellation up for long; giving up is logged."""
    with anyio.move_on_after(WITHDRAW_WITHIN, shield=True) as bound:
        yield
    if bound.cancelled_caught:
        logger.warning(
            "could not withdraw %s: no answer within %g seconds; it may stay pending",
            what,
            WITHDRAW_WITHIN,
        )


def shield(what: str) -> contextlib.nullcontext[None]:
    """The sync flow's ``async_shield``: a sync call is never cancelled part-way,
    so there is nothing to shield; the client's timeout bounds it."""
    return contextlib.nullcontext()


async def run_to_the_end(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its end although the calling task is being cancelled.

    An AnyIO shield stops AnyIO's own cancellation only: under asyncio a
    ``Task.cancel`` (how agent frameworks, ``asyncio.wait_for`` and
    ``asyncio.run`` on Ctrl-C cancel), repeated at times, would still cut the
    work short. So under asyncio the work runs as a task of its own, and the
    caller, cancelled meanwhile, waits for it before it goes on being
    cancelled (with one ``CancelledError`` for however many cancels came).
    """
    if anyio.get_cancelled_exc_class() is not asyncio.CancelledError:
        with anyio.CancelScope(shield=True):
            return await work
    task = asyncio.ensure_future(work)
    cancelled = False
    with anyio.CancelScope(shield=True):  # AnyIO's scopes need not cancel it again and again
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()


def async_runs_to_the_end(
    fn: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """``fn``, whose every call runs to its end (``run_to_the_end``)."""

    @functools.wraps(fn)
    async def to_the_end(*args: P.args, **kwargs: P.kwargs) -> T:
        return await run_to_the_end(fn(*args, **kwargs))

    return to_the_end


def runs_to_the_end(fn: Callable[P, T]) -> Callable[P, T]:
    """The sync flow's ``async_runs_to_the_end``: ``fn`` itself. Nothing cancels a
    sync call; a second ``KeyboardInterrupt`` can still cut it short, as it can
    any Python code."""
    return fn
