"""The only I/O: send a ``Request`` with retries, sync or async.

``SyncSender`` and ``AsyncSender`` are line-for-line twins; keep them so.
"""

from __future__ import annotations

import os
import time
from typing import Any, TypeVar

import anyio
import httpx

from client_sdk._core import Request, failure_reason, parse_response, transport_message
from client_sdk._retry import Retry
from client_sdk.errors import TransportError

T = TypeVar("T")

USER_AGENT = "agent-action-guard-client/0.1"

# Failures that happen before any byte of the request left: always safe to resend.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _timeout(base: httpx.Timeout, request: Request[Any]) -> httpx.Timeout:
    if not request.wait or base.read is None:
        return base
    return httpx.Timeout(
        connect=base.connect, read=base.read + request.wait, write=base.write, pool=base.pool
    )


def _headers(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }


def _request_headers(request: Request[Any]) -> dict[str, str]:
    headers = dict(request.headers)
    if request.body is not None:
        headers["Content-Type"] = "application/json"
    return headers


def _os_reason(exc: BaseException) -> str | None:
    """The operating system's words for the failure under ``exc``, if any: the
    async transport says only "All connection attempts failed" on top of it."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None and seen.errno > 0:
            return os.strerror(seen.errno)
        seen = seen.__cause__ or seen.__context__
    return None


def _transport_error(
    base_url: str, request: Request[Any], attempt: int, exc: Exception
) -> TransportError:
    reason = failure_reason(type(exc).__name__, _os_reason(exc) or str(exc))
    sent = not isinstance(exc, _NOT_SENT)
    return TransportError(
        transport_message(base_url, request, attempt, reason, sent=sent), url=base_url
    )


class SyncSender:
    def __init__(self, base_url: str, token: str, *, timeout: float, retry: Retry) -> None:
        self.retry = retry
        self.base_url = base_url
        self._timeout = httpx.Timeout(timeout)
        self._client = httpx.Client(base_url=base_url, headers=_headers(token), timeout=timeout)

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
                    headers=_request_headers(request),
                    timeout=_timeout(self._timeout, request),
                )
            except httpx.TransportError as exc:
                sent = not isinstance(exc, _NOT_SENT)
                if (sent and not request.resendable) or not self.retry.may_retry(attempt):
                    raise _transport_error(self.base_url, request, attempt, exc) from exc
                seen = seen or sent
            else:
                if response.status_code != 503 or not self.retry.may_retry(attempt):
                    return parse_response(
                        request, response.status_code, response.content, resent=seen
                    )
            time.sleep(self.retry.delay(attempt))

    def close(self) -> None:
        self._client.close()


class AsyncSender:
    def __init__(self, base_url: str, token: str, *, timeout: float, retry: Retry) -> None:
        self.retry = retry
        self.base_url = base_url
        self._timeout = httpx.Timeout(timeout)
        self._client = httpx.AsyncClient(
            base_url=base_url, headers=_headers(token), timeout=timeout
        )

    async def send(self, request: Request[T]) -> T:
        attempt = 0
        seen = False  # an earlier attempt may have reached the service
        while True:
            attempt += 1
            try:
                response = await self._client.request(
                    request.method,
                    request.path,
                    params=request.params,
                    content=request.body,
                    headers=_request_headers(request),
                    timeout=_timeout(self._timeout, request),
                )
            except httpx.TransportError as exc:
                sent = not isinstance(exc, _NOT_SENT)
                if (sent and not request.resendable) or not self.retry.may_retry(attempt):
                    raise _transport_error(self.base_url, request, attempt, exc) from exc
                seen = seen or sent
            else:
                if response.status_code != 503 or not self.retry.may_retry(attempt):
                    return parse_response(
                        request, response.status_code, response.content, resent=seen
                    )
            await anyio.sleep(self.retry.delay(attempt))

    async def aclose(self) -> None:
        await self._client.aclose()
