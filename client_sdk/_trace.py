"""W3C trace context on each request, so that guardd's spans are children of
the caller's (docs/sdk.md, "Traces").

The client does not need OpenTelemetry and never imports it: a span can be
current only in a program that has imported ``opentelemetry.trace`` already,
so the client looks for that module among those loaded and, when it is there
and a span is current, sends that span's ``traceparent`` (and
``tracestate``). Without OpenTelemetry that costs one dictionary lookup a
request. ``trace_context`` hands the client a ``traceparent`` from elsewhere
(an incoming request, an MCP call's ``_meta``), for code that has no
OpenTelemetry span to give; it wins over the current span.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

# version 00, or a later one (a later version may add fields after these):
# trace ID, span ID, flags; an all-zero ID is invalid.
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_MAX_TRACESTATE = 512  # the W3C limit a receiver must at least take

_given: ContextVar[dict[str, str] | None] = ContextVar("client_sdk_trace_context", default=None)


def valid_traceparent(value: object) -> bool:
    """Whether ``value`` is a W3C ``traceparent`` header worth sending."""
    if not isinstance(value, str) or _TRACEPARENT.match(value) is None:
        return False
    version = value[:2]
    if version == "ff":  # forbidden
        return False
    if version == "00":
        return len(value) == 55
    return len(value) == 55 or value[55] == "-"


@contextmanager
def trace_context(traceparent: str | None, tracestate: str | None = None) -> Iterator[None]:
    """Send ``traceparent`` (and ``tracestate``) with every request made in
    this block, by this task or thread, instead of the current
    OpenTelemetry span's. A ``traceparent`` that is not a valid W3C one (or
    None) is not sent, and nothing else is either: the requests then carry
    no trace context, as without this block and without a current span."""
    headers: dict[str, str] = {}
    if valid_traceparent(traceparent):
        assert traceparent is not None
        headers["traceparent"] = traceparent
        if isinstance(tracestate, str) and tracestate and len(tracestate) <= _MAX_TRACESTATE:
            headers["tracestate"] = tracestate
    token = _given.set(headers)
    try:
        yield
    finally:
        _given.reset(token)


def _from_current_span(trace: Any) -> dict[str, str] | None:
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    headers = {
        "traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-"
        f"{context.trace_flags:02x}"
    }
    state = context.trace_state
    if state:
        headers["tracestate"] = state.to_header()
    return headers


def trace_headers() -> dict[str, str] | None:
    """The trace context headers for a request sent now, if any."""
    given = _given.get()
    if given is not None:
        return given or None
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    return _from_current_span(trace)
