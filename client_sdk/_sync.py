# Generated from client_sdk/_async.py by sdk/unasync.py: do not edit.
# Change _async.py, then run: python sdk/unasync.py
"""The sync clients and their sender, generated from ``_async.py``: read that."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, ParamSpec, Self, TypeVar, cast, overload

import httpx

from client_sdk import _guarded, _http
from client_sdk._config import Discovery, Found
from client_sdk._core import (
    DEFAULT_LOG_LIMIT,
    AdminCore,
    AgentCore,
    Money,
    Request,
    agent_id_from_token,
    new_idempotency_key,
    next_log_after,
    parse_response,
)
from client_sdk._models import (
    Action,
    AgentListEntry,
    AgentStatus,
    CreatedAgent,
    Decision,
    IssuedOperatorToken,
    LogPage,
    Me,
    OperatorToken,
    PendingEntry,
    Policy,
    VerifyReport,
)
from client_sdk._retry import Retry
from client_sdk.errors import ApprovalTimeout, GuardError, GuardSetupError, InvalidState

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0


class SyncSender:
    """Sends a ``Request``: again after a failure, as far as the retry policy
    and the request allow; the only place that touches the network."""

    def __init__(self, base_url: str, token: str, *, timeout: float, retry: Retry) -> None:
        self.retry = retry
        self.base_url = base_url
        self._timeout = httpx.Timeout(timeout)
        self._client = httpx.Client(
            base_url=base_url, headers=_http.client_headers(token), timeout=timeout
        )

    def send(self, request: Request[T]) -> T:
        attempt = 0
        seen = False  # an earlier attempt may have reached the service
        while True:
            attempt += 1
            try:
                response = self._client.request(
                    request.method,
                    request.path,
                    params=request.params,
                    content=request.body,
                    headers=_http.request_headers(request),
                    timeout=_http.timeout_for(self._timeout, request),
                )
            except httpx.TransportError as exc:
                sent = not isinstance(exc, _http.NOT_SENT)
                if (sent and not request.resendable) or not self.retry.may_retry(attempt):
                    raise _http.transport_error(self.base_url, request, attempt, exc) from exc
                seen = seen or sent
            else:
                if response.status_code != 503 or not self.retry.may_retry(attempt):
                    return parse_response(
                        request, response.status_code, response.content, resent=seen
                    )
            time.sleep(self.retry.delay(attempt))

    def close(self) -> None:
        self._client.close()


class _Connection:
    """What both clients hold: the address, the token and the open sender."""

    def __init__(self, url: Found, token: Found, timeout: float, retry: Retry | None) -> None:
        self._base_url = url.value
        self._token = token.value
        self.token_source = token.source
        self.timeout = timeout
        self.retry = retry or Retry()
        self._http = SyncSender(self.base_url, self._token, timeout=timeout, retry=self.retry)

    @property
    def base_url(self) -> str:
        return self._base_url

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class GuardClient(_Connection):
    """An agent's connection to the guard service.

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
        super().__init__(url, found, timeout, retry)

    @property
    def agent_id(self) -> str:
        return self._core.agent_id

    def __repr__(self) -> str:
        return f"<{type(self).__name__} agent_id={self.agent_id!r} base_url={self.base_url!r}>"

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
        return _report_outcome(self._http, self._core, action_id, status, detail)

    def status(self) -> AgentStatus:
        """The agent's status: budget, ``spent``, ``remaining`` (Decimal), scars, counters."""
        return self._http.send(self._core.status())

    def cancel(self, action_id: str, reason: str | None = None) -> Action:
        """Withdraw a pending action: it is never charged, and a late approval is
        refused. Returns the action, ``status`` ``cancelled``; ``InvalidState`` if it
        is no longer pending."""
        return _cancel(self._http, self._core, action_id, reason)

    def policy(self) -> Policy:
        """The agent's policy in force, every default filled in (``GET .../policy``)."""
        return self._http.send(self._core.policy())

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
        """Wrap a tool so each call asks first, waits for approval, runs the tool and reports.

        Use as ``@client.guarded``, ``@client.guarded(name=..., cost=...)`` or
        ``client.guarded(tool)(...)``. Raises ``ActionDenied`` on denial and
        ``ApprovalTimeout`` after ``approval_timeout`` seconds pending. A wait
        given up (that timeout, ``KeyboardInterrupt``, an async call cancelled,
        by AnyIO or asyncio, however often) cancels the pending action, so a
        late approval cannot charge for a call that did not run; so does a
        request cut short, sent again under its key to learn the action.
        ``keep_pending=True`` leaves it pending instead.
        The sync client wraps sync tools; the async client wraps sync or async
        tools into coroutine functions (a sync tool runs in the event loop's
        thread, an async one is awaited).
        """

        def decorate(tool: Callable[..., Any]) -> Callable[..., Any]:
            spec = _guarded.ToolSpec(
                tool,
                name=name,
                cost=cost,
                approval_timeout=approval_timeout,
                keep_pending=keep_pending,
            )
            return _guard(self, spec)

        return decorate if fn is None else decorate(fn)


class AdminClient(_Connection):
    """An operator's connection to the guard service: every admin endpoint, and
    the agent endpoints on any agent (the admin may report ``harmful``).

    ``token`` is the admin token; else ``GUARD_ADMIN_TOKEN`` from the
    environment, then ``./.env``, then ``$GUARD_DATA_DIR/keys/admin.token``
    (``./guard-data`` by default). ``base_url`` defaults to ``GUARD_URL``,
    then ``http://127.0.0.1:9200``.
    """

    def __init__(
        self,
        token: str | None = None,
        *,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
    ) -> None:
        self._core = AdminCore()
        discovery = Discovery()
        url = discovery.base_url(base_url)
        super().__init__(url, discovery.admin_token(token), timeout, retry)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} base_url={self.base_url!r}>"

    def public_key(self) -> str:
        """The hex Ed25519 key that signs every log."""
        return self._http.send(self._core.public_key())

    def create_agent(self, agent_id: str, policy: Mapping[str, Any]) -> CreatedAgent:
        """Create an agent; returns its status and its token."""
        return self._http.send(self._core.create_agent(agent_id, policy))

    def list_agents(self) -> list[AgentListEntry]:
        """Every agent, active (with its ``status``) or quarantined (with ``error``)."""
        return self._http.send(self._core.list_agents())

    def reissue_token(self, agent_id: str) -> str:
        return self._http.send(self._core.reissue_token(agent_id))

    def agent_status(self, agent_id: str) -> AgentStatus:
        return self._http.send(self._core.agent(agent_id).status())

    def policy(self, agent_id: str) -> Policy:
        """The agent's policy in force, every default filled in (``GET .../policy``)."""
        return self._http.send(self._core.agent(agent_id).policy())

    def set_policy(self, agent_id: str, policy: Mapping[str, Any]) -> AgentStatus:
        """Replace a live agent's policy (``PUT .../policy``); returns the agent status."""
        return self._http.send(self._core.set_policy(agent_id, policy))

    def request_action(
        self,
        agent_id: str,
        tool: str,
        input: Any = None,
        cost: Money | None = None,
        idempotency_key: str | None = None,
    ) -> Decision:
        core = self._core.agent(agent_id)
        return self._http.send(core.request_action(tool, input, cost, idempotency_key))

    def get_action(self, agent_id: str, action_id: str, wait: float | None = None) -> Action:
        return self._http.send(self._core.agent(agent_id).get_action(action_id, wait))

    def report_outcome(
        self, agent_id: str, action_id: str, status: str, detail: str | None = None
    ) -> AgentStatus:
        """Report ``success``, ``failure`` or ``harmful``; returns the agent status."""
        core = self._core.agent(agent_id)
        return _report_outcome(self._http, core, action_id, status, detail)

    def list_pending(self, agent_id: str) -> list[PendingEntry]:
        """Actions waiting for approval, oldest first."""
        return self._http.send(self._core.list_pending(agent_id))

    def cancel(self, agent_id: str, action_id: str, reason: str | None = None) -> Action:
        """Withdraw a pending action on the agent's behalf (``by: admin`` in the log)."""
        return _cancel(self._http, self._core.agent(agent_id), action_id, reason)

    def approve(
        self, agent_id: str, action_id: str, *, approver: str, note: str | None = None
    ) -> Decision:
        """Approve a pending action; the checks run again, so the answer may be a denial."""
        return self._http.send(self._core.approve(agent_id, action_id, approver, note))

    def reject(
        self,
        agent_id: str,
        action_id: str,
        *,
        approver: str,
        reason: str,
        scar: str | None = None,
    ) -> Decision:
        return self._http.send(self._core.reject(agent_id, action_id, approver, reason, scar))

    def add_scar(
        self,
        agent_id: str,
        *,
        severity: str,
        reason: str,
        action_id: str | None = None,
        by: str | None = None,
    ) -> AgentStatus:
        """Scar the agent; ``by`` (the operator) is logged in the ``scar`` record."""
        return self._http.send(self._core.add_scar(agent_id, severity, reason, action_id, by))

    def terminate(self, agent_id: str, *, reason: str, by: str) -> AgentStatus:
        return self._http.send(self._core.terminate(agent_id, reason, by))

    def log_page(self, agent_id: str, after: int = -1, limit: int = DEFAULT_LOG_LIMIT) -> LogPage:
        """One page: ``records`` with ``seq`` > ``after`` (at most ``limit``) and ``head``."""
        return self._http.send(self._core.log_page(agent_id, after, limit))

    def log(
        self, agent_id: str, after: int = -1, limit: int = DEFAULT_LOG_LIMIT
    ) -> Iterator[dict[str, Any]]:
        """Every record with ``seq`` > ``after``, fetched ``limit`` (1-5000) at a time;
        on the async client, an async iterator.

        Pages are fetched lazily until the head of the log is reached."""
        self._core.log_page(agent_id, after, limit)  # bad arguments fail here, not later
        return self._log(agent_id, after, limit)

    def _log(self, agent_id: str, after: int, limit: int) -> Iterator[dict[str, Any]]:
        cursor: int | None = after
        while cursor is not None:
            page = self.log_page(agent_id, cursor, limit)
            yield from page.records
            cursor = next_log_after(page)

    def verify(self, agent_id: str) -> VerifyReport:
        """The service's verification of the agent's log."""
        return self._http.send(self._core.verify(agent_id))

    def me(self) -> Me:
        """Who this client's token is to the service: name, ``by_id``, roles and ``via``."""
        return self._http.send(self._core.me())

    def create_operator_token(
        self, name: str, role: str, ttl_secs: int | None = None
    ) -> IssuedOperatorToken:
        """Issue an operator token holding ``role`` (``viewer``, ``approver`` or
        ``admin``), valid ``ttl_secs`` seconds (None: until revoked). The answer's
        ``token`` is the secret: the service never shows it again."""
        return self._http.send(self._core.create_operator_token(name, role, ttl_secs))

    def list_operator_tokens(self) -> list[OperatorToken]:
        """Every operator token issued, oldest first, without secrets."""
        return self._http.send(self._core.list_operator_tokens())

    def revoke_operator_token(self, token_id: str) -> OperatorToken:
        """Revoke a token: from then on it is refused on every node."""
        return self._http.send(self._core.revoke_operator_token(token_id))


# ---- what both clients do on an agent's actions, beyond one request ---------


def _report_outcome(
    http: SyncSender, core: AgentCore, action_id: str, status: str, detail: str | None
) -> AgentStatus:
    try:
        return http.send(core.report_outcome(action_id, status, detail))
    except InvalidState as exc:
        # A resent report whose first copy was recorded: that outcome stands.
        if not exc.resent:
            raise
        recorded = http.send(core.get_action(action_id))
        if recorded.outcome != status:
            raise
        return http.send(core.status())


def _cancel(http: SyncSender, core: AgentCore, action_id: str, reason: str | None) -> Action:
    try:
        return http.send(core.cancel(action_id, reason))
    except InvalidState as exc:
        # A resent cancel whose first copy was recorded: it stands.
        if exc.resent:
            action = http.send(core.get_action(action_id))
            if action.status == "cancelled":
                return action
        raise


# ---- guarded(tool): the flow in _guarded.py's docstring ----------------------


def _guard(client: GuardClient, spec: _guarded.ToolSpec) -> Callable[..., Any]:
    @functools.wraps(spec.fn)
    def guarded_tool(*args: Any, **kwargs: Any) -> Any:
        tool_input = spec.bind(args, kwargs)
        decision = _ask(client, spec, tool_input)
        action_id, receipt = _wait(client, decision, spec)
        try:
            result = spec.call(args, kwargs, receipt)
        except Exception as exc:
            try:
                client.report_outcome(action_id, "failure", _guarded.failure_detail(exc))
            except GuardError as error:
                _guarded.log_lost_report(action_id, error)
            raise
        client.report_outcome(action_id, "success")
        return result

    return guarded_tool


def _ask(client: GuardClient, spec: _guarded.ToolSpec, tool_input: Any) -> Decision:
    # A key of our own: a request cut short can be sent again to learn its action.
    key = new_idempotency_key()
    try:
        return client.request_action(spec.name, tool_input, spec.cost, key)
    except KeyboardInterrupt:
        if not spec.keep_pending:
            _abandon(client, spec, tool_input, key, _guarded.WHY_INTERRUPT)
        raise


def _wait(
    client: GuardClient, decision: Decision, spec: _guarded.ToolSpec
) -> tuple[str, tuple[str, ...] | None]:
    """The allowed action's ID and its receipt; raises when it is not allowed."""
    action_id = _guarded.ready(decision)
    if action_id is not None:
        return action_id, decision.receipt
    try:
        return _poll(client, decision, spec)
    except ApprovalTimeout as exc:
        if spec.keep_pending:
            raise
        _withdraw(client, decision.action_id, _guarded.WHY_TIMEOUT)
        raise ApprovalTimeout(exc.action_id, exc.timeout, withdrawn=True) from None
    except KeyboardInterrupt:
        if not spec.keep_pending:
            _withdraw(client, decision.action_id, _guarded.WHY_INTERRUPT)
        raise


def _poll(
    client: GuardClient, decision: Decision, spec: _guarded.ToolSpec
) -> tuple[str, tuple[str, ...] | None]:
    deadline = _guarded.deadline(spec)
    while True:
        wait = _guarded.poll_wait(deadline, time.monotonic())
        if wait is None:
            raise ApprovalTimeout(decision.action_id, cast(float, spec.approval_timeout))
        action = client.get_action(decision.action_id, wait=wait)
        if action.status != "pending_approval":
            return _guarded.settle(action), action.receipt


@_guarded.runs_to_the_end
def _withdraw(client: GuardClient, action_id: str, why: str) -> None:
    with _guarded.shield(f"action {action_id}"):
        _cancel_held(client, action_id, why)


@_guarded.runs_to_the_end
def _abandon(
    client: GuardClient, spec: _guarded.ToolSpec, tool_input: Any, key: str, why: str
) -> None:
    """The request was cut short: guardd may hold its action, with nobody
    left to wait for it. The same request again (same key: the first
    decision, no second action) says which; a held one is withdrawn."""
    with _guarded.shield(f"the cut-short request for {spec.name}"):
        try:
            decision = client.request_action(spec.name, tool_input, spec.cost, key)
        except GuardError as error:
            _guarded.log_lost_ask(spec.name, error)
            return
        if decision.pending:
            _cancel_held(client, decision.action_id, why)
        elif decision.allowed:
            _guarded.log_allowed_not_run(decision.action_id)


def _cancel_held(client: GuardClient, action_id: str, why: str) -> None:
    try:
        client.cancel(action_id, why)
    except GuardError as error:
        _guarded.log_lost_cancel(action_id, error)
