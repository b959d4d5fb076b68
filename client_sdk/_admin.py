"""The operator's clients: ``AdminClient`` (sync) and ``AsyncAdminClient`` (async).

Every admin endpoint, plus the agent endpoints on any agent (the admin token
may do everything, including reporting ``harmful``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from types import TracebackType
from typing import Any

from client_sdk._config import Discovery
from client_sdk._core import DEFAULT_LOG_LIMIT, AdminCore, Money, next_log_after
from client_sdk._http import AsyncSender, SyncSender
from client_sdk._models import (
    Action,
    AgentListEntry,
    AgentStatus,
    CreatedAgent,
    Decision,
    LogPage,
    PendingEntry,
    Policy,
    VerifyReport,
)
from client_sdk._retry import Retry
from client_sdk.errors import InvalidState

DEFAULT_TIMEOUT = 30.0


class _BaseAdminClient:
    def __init__(
        self, token: str | None, *, base_url: str | None, timeout: float, retry: Retry | None
    ) -> None:
        discovery = Discovery()
        url = discovery.base_url(base_url)
        found = discovery.admin_token(token)
        self._core = AdminCore()
        self._base_url = url.value
        self._token = found.value
        self.token_source = found.source
        self.timeout = timeout
        self.retry = retry or Retry()

    @property
    def base_url(self) -> str:
        return self._base_url

    def __repr__(self) -> str:
        return f"<{type(self).__name__} base_url={self.base_url!r}>"


class AdminClient(_BaseAdminClient):
    """An operator's connection to the guard service (sync).

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
        super().__init__(token, base_url=base_url, timeout=timeout, retry=retry)
        self._http = SyncSender(self.base_url, self._token, timeout=timeout, retry=self.retry)

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
        try:
            return self._http.send(
                self._core.agent(agent_id).report_outcome(action_id, status, detail)
            )
        except InvalidState as exc:
            if not exc.resent or self.get_action(agent_id, action_id).outcome != status:
                raise
            return self.agent_status(agent_id)

    def list_pending(self, agent_id: str) -> list[PendingEntry]:
        """Actions waiting for approval, oldest first."""
        return self._http.send(self._core.list_pending(agent_id))

    def cancel(self, agent_id: str, action_id: str, reason: str | None = None) -> Action:
        """Withdraw a pending action on the agent's behalf (``by: admin`` in the log)."""
        try:
            return self._http.send(self._core.agent(agent_id).cancel(action_id, reason))
        except InvalidState as exc:
            if exc.resent:
                action = self.get_action(agent_id, action_id)
                if action.status == "cancelled":
                    return action
            raise

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
        """Every record with ``seq`` > ``after``, fetched ``limit`` (1-5000) at a time.

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

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncAdminClient(_BaseAdminClient):
    """An operator's connection to the guard service (async); see ``AdminClient``."""

    def __init__(
        self,
        token: str | None = None,
        *,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
    ) -> None:
        super().__init__(token, base_url=base_url, timeout=timeout, retry=retry)
        self._http = AsyncSender(self.base_url, self._token, timeout=timeout, retry=self.retry)

    async def public_key(self) -> str:
        return await self._http.send(self._core.public_key())

    async def create_agent(self, agent_id: str, policy: Mapping[str, Any]) -> CreatedAgent:
        return await self._http.send(self._core.create_agent(agent_id, policy))

    async def list_agents(self) -> list[AgentListEntry]:
        return await self._http.send(self._core.list_agents())

    async def reissue_token(self, agent_id: str) -> str:
        return await self._http.send(self._core.reissue_token(agent_id))

    async def agent_status(self, agent_id: str) -> AgentStatus:
        return await self._http.send(self._core.agent(agent_id).status())

    async def policy(self, agent_id: str) -> Policy:
        return await self._http.send(self._core.agent(agent_id).policy())

    async def set_policy(self, agent_id: str, policy: Mapping[str, Any]) -> AgentStatus:
        return await self._http.send(self._core.set_policy(agent_id, policy))

    async def request_action(
        self,
        agent_id: str,
        tool: str,
        input: Any = None,
        cost: Money | None = None,
        idempotency_key: str | None = None,
    ) -> Decision:
        core = self._core.agent(agent_id)
        return await self._http.send(core.request_action(tool, input, cost, idempotency_key))

    async def get_action(self, agent_id: str, action_id: str, wait: float | None = None) -> Action:
        return await self._http.send(self._core.agent(agent_id).get_action(action_id, wait))

    async def report_outcome(
        self, agent_id: str, action_id: str, status: str, detail: str | None = None
    ) -> AgentStatus:
        try:
            return await self._http.send(
                self._core.agent(agent_id).report_outcome(action_id, status, detail)
            )
        except InvalidState as exc:
            if not exc.resent or (await self.get_action(agent_id, action_id)).outcome != status:
                raise
            return await self.agent_status(agent_id)

    async def list_pending(self, agent_id: str) -> list[PendingEntry]:
        return await self._http.send(self._core.list_pending(agent_id))

    async def cancel(self, agent_id: str, action_id: str, reason: str | None = None) -> Action:
        try:
            return await self._http.send(self._core.agent(agent_id).cancel(action_id, reason))
        except InvalidState as exc:
            if exc.resent:
                action = await self.get_action(agent_id, action_id)
                if action.status == "cancelled":
                    return action
            raise

    async def approve(
        self, agent_id: str, action_id: str, *, approver: str, note: str | None = None
    ) -> Decision:
        return await self._http.send(self._core.approve(agent_id, action_id, approver, note))

    async def reject(
        self,
        agent_id: str,
        action_id: str,
        *,
        approver: str,
        reason: str,
        scar: str | None = None,
    ) -> Decision:
        return await self._http.send(self._core.reject(agent_id, action_id, approver, reason, scar))

    async def add_scar(
        self,
        agent_id: str,
        *,
        severity: str,
        reason: str,
        action_id: str | None = None,
        by: str | None = None,
    ) -> AgentStatus:
        return await self._http.send(self._core.add_scar(agent_id, severity, reason, action_id, by))

    async def terminate(self, agent_id: str, *, reason: str, by: str) -> AgentStatus:
        return await self._http.send(self._core.terminate(agent_id, reason, by))

    async def log_page(
        self, agent_id: str, after: int = -1, limit: int = DEFAULT_LOG_LIMIT
    ) -> LogPage:
        return await self._http.send(self._core.log_page(agent_id, after, limit))

    def log(
        self, agent_id: str, after: int = -1, limit: int = DEFAULT_LOG_LIMIT
    ) -> AsyncIterator[dict[str, Any]]:
        """Every record with ``seq`` > ``after``: ``async for record in admin.log(id)``."""
        self._core.log_page(agent_id, after, limit)  # bad arguments fail here, not later
        return self._log(agent_id, after, limit)

    async def _log(self, agent_id: str, after: int, limit: int) -> AsyncIterator[dict[str, Any]]:
        cursor: int | None = after
        while cursor is not None:
            page = await self.log_page(agent_id, cursor, limit)
            for record in page.records:
                yield record
            cursor = next_log_after(page)

    async def verify(self, agent_id: str) -> VerifyReport:
        return await self._http.send(self._core.verify(agent_id))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncAdminClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
