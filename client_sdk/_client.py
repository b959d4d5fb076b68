"""The agent's clients: ``GuardClient`` (sync) and ``AsyncGuardClient`` (async).

Both are thin: ``_BaseGuardClient`` finds the settings and holds the request
builder (``AgentCore``); the twins only send and await.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, ParamSpec, Protocol, TypeVar, overload

from client_sdk import _guarded
from client_sdk._config import Discovery
from client_sdk._core import AgentCore, Money, agent_id_from_token
from client_sdk._http import AsyncSender, SyncSender
from client_sdk._models import Action, AgentStatus, Decision, Policy
from client_sdk._retry import Retry
from client_sdk.errors import GuardSetupError, InvalidState

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_TIMEOUT = 30.0


class _BaseGuardClient:
    def __init__(
        self,
        token: str | None,
        *,
        agent_id: str | None,
        base_url: str | None,
        timeout: float,
        retry: Retry | None,
    ) -> None:
        discovery = Discovery()
        url = discovery.base_url(base_url)
        found = discovery.agent_token(token)
        resolved = agent_id or agent_id_from_token(found.value)
        if not resolved:
            raise GuardSetupError(
                f"no agent ID: the agent token from {found.source} is not of the form "
                "agt_<agent_id>.<mac>, and no agent_id argument was given",
                looked_at=["the agent_id argument: not given", found.source],
            )
        self._core = AgentCore(resolved)
        self._base_url = url.value
        self._token = found.value
        self.token_source = found.source
        self.timeout = timeout
        self.retry = retry or Retry()

    @property
    def agent_id(self) -> str:
        return self._core.agent_id

    @property
    def base_url(self) -> str:
        return self._base_url

    def __repr__(self) -> str:
        return f"<{type(self).__name__} agent_id={self.agent_id!r} base_url={self.base_url!r}>"


class GuardClient(_BaseGuardClient):
    """An agent's connection to the guard service (sync).

    ``token`` is the agent token (else ``GUARD_AGENT_TOKEN`` from the
    environment or ``./.env``); the agent ID is read from it unless
    ``agent_id`` is given. ``base_url`` defaults to ``GUARD_URL``, then
    ``http://127.0.0.1:9200``.
    """

    def __init__(
        self,
        token: str | None = None,
        *,
        agent_id: str | None = None,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
    ) -> None:
        super().__init__(token, agent_id=agent_id, base_url=base_url, timeout=timeout, retry=retry)
        self._http = SyncSender(self.base_url, self._token, timeout=timeout, retry=self.retry)

    def request_action(
        self,
        tool: str,
        input: Any = None,
        cost: Money | None = None,
        idempotency_key: str | None = None,
    ) -> Decision:
        """Ask to run ``tool``. Every retry of this call carries one ``Idempotency-Key``
        (a new one per call unless given), so the service decides and charges once."""
        return self._http.send(self._core.request_action(tool, input, cost, idempotency_key))

    def get_action(self, action_id: str, wait: float | None = None) -> Action:
        """The action; with ``wait`` (0 < wait <= 60 seconds) the service answers as soon
        as it leaves ``pending_approval``, or after ``wait`` seconds unchanged."""
        return self._http.send(self._core.get_action(action_id, wait))

    def report_outcome(self, action_id: str, status: str, detail: str | None = None) -> AgentStatus:
        """Report ``success`` or ``failure`` of an allowed action; returns the agent status."""
        try:
            return self._http.send(self._core.report_outcome(action_id, status, detail))
        except InvalidState as exc:
            # A resent report whose first copy was recorded: that outcome stands.
            if not exc.resent or self.get_action(action_id).outcome != status:
                raise
            return self.status()

    def status(self) -> AgentStatus:
        """The agent's status: budget, ``spent``, ``remaining`` (Decimal), scars, counters."""
        return self._http.send(self._core.status())

    def cancel(self, action_id: str, reason: str | None = None) -> Action:
        """Withdraw a pending action: it is never charged, and a late approval is
        refused. Returns the action, ``status`` ``cancelled``; ``InvalidState`` if it
        is no longer pending."""
        try:
            return self._http.send(self._core.cancel(action_id, reason))
        except InvalidState as exc:
            # A resent cancel whose first copy was recorded: it stands.
            if exc.resent:
                action = self.get_action(action_id)
                if action.status == "cancelled":
                    return action
            raise

    def policy(self) -> Policy:
        """The agent's policy in force, every default filled in (``GET .../policy``)."""
        return self._http.send(self._core.policy())

    @overload
    def guarded(
        self,
        fn: Callable[P, R],
        /,
        *,
        name: str | None = None,
        cost: Money | None = None,
        approval_timeout: float | None = None,
        keep_pending: bool = False,
    ) -> Callable[P, R]: ...

    @overload
    def guarded(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        cost: Money | None = None,
        approval_timeout: float | None = None,
        keep_pending: bool = False,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    def guarded(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        cost: Money | None = None,
        approval_timeout: float | None = None,
        keep_pending: bool = False,
    ) -> Any:
        """Wrap a sync tool so each call asks first, waits for approval, runs and reports.

        Use as ``@client.guarded``, ``@client.guarded(name=..., cost=...)`` or
        ``client.guarded(tool)(...)``. Raises ``ActionDenied`` on denial and
        ``ApprovalTimeout`` after ``approval_timeout`` seconds pending. A wait
        given up (that timeout, ``KeyboardInterrupt``) cancels the pending
        action, so a late approval cannot charge for a call that did not run;
        ``keep_pending=True`` leaves it pending instead.
        """

        def decorate(tool: Callable[..., Any]) -> Callable[..., Any]:
            spec = _guarded.ToolSpec(
                tool,
                name=name,
                cost=cost,
                approval_timeout=approval_timeout,
                keep_pending=keep_pending,
            )
            return _guarded.wrap_sync(self, spec)

        return decorate if fn is None else decorate(fn)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GuardClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncGuardDecorator(Protocol):
    """What ``AsyncGuardClient.guarded(name=...)`` returns: sync or async tool in,
    coroutine function out."""

    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[P, Coroutine[Any, Any, R]]: ...


class AsyncGuardClient(_BaseGuardClient):
    """An agent's connection to the guard service (async); see ``GuardClient``."""

    def __init__(
        self,
        token: str | None = None,
        *,
        agent_id: str | None = None,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
    ) -> None:
        super().__init__(token, agent_id=agent_id, base_url=base_url, timeout=timeout, retry=retry)
        self._http = AsyncSender(self.base_url, self._token, timeout=timeout, retry=self.retry)

    async def request_action(
        self,
        tool: str,
        input: Any = None,
        cost: Money | None = None,
        idempotency_key: str | None = None,
    ) -> Decision:
        """See ``GuardClient.request_action``."""
        return await self._http.send(self._core.request_action(tool, input, cost, idempotency_key))

    async def get_action(self, action_id: str, wait: float | None = None) -> Action:
        """See ``GuardClient.get_action``."""
        return await self._http.send(self._core.get_action(action_id, wait))

    async def report_outcome(
        self, action_id: str, status: str, detail: str | None = None
    ) -> AgentStatus:
        """See ``GuardClient.report_outcome``."""
        try:
            return await self._http.send(self._core.report_outcome(action_id, status, detail))
        except InvalidState as exc:
            if not exc.resent or (await self.get_action(action_id)).outcome != status:
                raise
            return await self.status()

    async def status(self) -> AgentStatus:
        """See ``GuardClient.status``."""
        return await self._http.send(self._core.status())

    async def cancel(self, action_id: str, reason: str | None = None) -> Action:
        """See ``GuardClient.cancel``."""
        try:
            return await self._http.send(self._core.cancel(action_id, reason))
        except InvalidState as exc:
            if exc.resent:
                action = await self.get_action(action_id)
                if action.status == "cancelled":
                    return action
            raise

    async def policy(self) -> Policy:
        """See ``GuardClient.policy``."""
        return await self._http.send(self._core.policy())

    @overload
    def guarded(
        self,
        fn: Callable[P, Awaitable[R]],
        /,
        *,
        name: str | None = None,
        cost: Money | None = None,
        approval_timeout: float | None = None,
        keep_pending: bool = False,
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    @overload
    def guarded(
        self,
        fn: Callable[P, R],
        /,
        *,
        name: str | None = None,
        cost: Money | None = None,
        approval_timeout: float | None = None,
        keep_pending: bool = False,
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    @overload
    def guarded(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        cost: Money | None = None,
        approval_timeout: float | None = None,
        keep_pending: bool = False,
    ) -> AsyncGuardDecorator: ...

    def guarded(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        cost: Money | None = None,
        approval_timeout: float | None = None,
        keep_pending: bool = False,
    ) -> Any:
        """Wrap a sync or async tool into a coroutine function that asks first, waits
        for approval, runs the tool (awaiting it if async) and reports; see
        ``GuardClient.guarded``. A sync tool runs in the event loop's thread."""

        def decorate(tool: Callable[..., Any]) -> Callable[..., Any]:
            spec = _guarded.ToolSpec(
                tool,
                name=name,
                cost=cost,
                approval_timeout=approval_timeout,
                keep_pending=keep_pending,
            )
            return _guarded.wrap_async(self, spec)

        return decorate if fn is None else decorate(fn)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncGuardClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
