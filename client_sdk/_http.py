"""What both senders (``AsyncSender`` in ``_async.py``, ``SyncSender`` generated
from it) need besides the network: headers, timeouts and the words of a
``TransportError``."""

from __future__ import annotations

import os
from typing import Any

import httpx

from client_sdk._core import Request, failure_reason, transport_message
from client_sdk._trace import trace_headers
from client_sdk.errors import TransportError

USER_AGENT = "guardd-client/0.1"

# Failures that happen before any byte of the request left: always safe to resend.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def timeout_for(base: httpx.Timeout, request: Request[Any]) -> httpx.Timeout:
    """``base``, with the time the service may hold a long-poll added to the read timeout."""
    if not request.wait or base.read is None:
        return base
    return httpx.Timeout(
        connect=base.connect, read=base.read + request.wait, write=base.write, pool=base.pool
    )


def client_headers(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }


def request_headers(request: Request[Any]) -> dict[str, str]:
    """The request's own headers, its body's type, and the caller's trace
    context (``_trace``), built again for each attempt."""
    headers = dict(request.headers)
    if request.body is not None:
        headers["Content-Type"] = "application/json"
    trace = trace_headers()
    if trace is not None:
        headers.update(trace)
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


def transport_error(
    base_url: str, request: Request[Any], attempt: int, exc: Exception
) -> TransportError:
    reason = failure_reason(type(exc).__name__, _os_reason(exc) or str(exc))
    sent = not isinstance(exc, NOT_SENT)
    return TransportError(
        transport_message(base_url, request, attempt, reason, sent=sent), url=base_url
    )
