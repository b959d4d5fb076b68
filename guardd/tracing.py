"""Traces: a span per decision, approval and outcome, exported over OTLP/HTTP.

Imported only when an ``OTEL_*`` variable asks for traces
(``guardd.config.tracing_wanted``): without one, guardd never imports
OpenTelemetry and a route pays one ``is None`` test. The OpenTelemetry SDK
reads its own variables (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``, ``OTEL_RESOURCE_ATTRIBUTES``...).

A route times the command it sends its agent's actor and hands the reply
here; the span is made after the fact with that start time and ended at
once, so nothing is held open across an ``await`` and no context is pushed.
Its parent is the caller's W3C ``traceparent``, when the request carries
one. A decision's span context is remembered by agent and action ID (at most
``REMEMBERED`` of them, oldest forgotten first), so that the approval,
rejection, cancellation and outcome of that action link to it, whichever
trace their own requests belong to.

Names and attributes follow OpenTelemetry's GenAI conventions where they
have a name (``gen_ai.*``) and ours (``guard.*``) where they have none; the
tool input goes in only with ``--otel-record-input``. docs/operations.md,
"Traces", lists them.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from time import time_ns
from typing import Any, ParamSpec

from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Link, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue
from werkzeug.datastructures import Headers

from guardd.jsonio import dumps
from guardd.tracing_spans import DirectSpans, SdkSpans

__all__ = [
    "APPROVAL_SPANS",
    "DECISION_SPAN",
    "FLUSH_TIMEOUT",
    "OUTCOME_SPAN",
    "REMEMBERED",
    "Tracer",
    "endpoint",
    "start_tracing",
]

DECISION_SPAN = "apply_guardrail guardd"
APPROVAL_SPANS = {
    "approve": "approve_action guardd",
    "reject": "reject_action guardd",
    "cancel": "cancel_action guardd",
}
OUTCOME_SPAN = "report_outcome guardd"
# Seconds guardd, stopping, waits for the backend to take the spans it still
# holds: a backend that is down must not hold up the stop.
FLUSH_TIMEOUT = 3.0
# Decisions whose span context is kept for the spans of what follows them:
# about 420 bytes each (measured with tracemalloc), under 30 MiB when full.
REMEMBERED = 65536

log = logging.getLogger("guardd.tracing")
P = ParamSpec("P")


def _never_fails(make: Callable[P, None]) -> Callable[P, None]:
    """A span that cannot be made is logged and left out: the request it
    describes is decided and written already, and must be answered."""

    @functools.wraps(make)
    def made(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            make(*args, **kwargs)
        except Exception:
            log.warning("a span could not be made (%s)", make.__name__, exc_info=True)

    return made


# A remembered decision: its span's trace ID, span ID, trace flags and trace
# state (None when empty), and its tool.
_Remembered = tuple[int, int, int, TraceState | None, str]

_W3C = TraceContextTextMapPropagator()


def _parent(headers: Headers) -> Context | None:
    """The caller's span, from its W3C ``traceparent`` (and ``tracestate``);
    None without one (or with one that does not parse): the span is a root."""
    # getlist, not get: a header that is absent costs get an exception
    # raised and caught (a few us), on every request without a traceparent.
    traceparent = headers.getlist("traceparent")
    if not traceparent:
        return None
    carrier = {"traceparent": traceparent[0]}
    tracestate = headers.getlist("tracestate")
    if tracestate:
        carrier["tracestate"] = tracestate[0]
    return _W3C.extract(carrier)


def _rule(reply: Mapping[str, Any]) -> str | None:
    """The policy rule a decision names, if any: a name, or an object with one."""
    reason = reply.get("reason")
    rule = reply.get("rule") or (reason.get("rule") if reason else None)
    if isinstance(rule, Mapping):
        rule = rule.get("name") or rule.get("id")
    return None if rule is None else str(rule)


class Tracer:
    """Makes guardd's spans, and remembers each decision's span context."""

    def __init__(
        self,
        provider: TracerProvider,
        *,
        record_input: bool = False,
        exporter: SpanExporter | None = None,
        processor: SpanProcessor | None = None,
    ) -> None:
        """``processor``: the provider's only span processor, the provider
        built without span limits of its own (as ``start_tracing`` builds
        it): spans are then handed to it directly (guardd.tracing_spans);
        without one, they are made by the SDK's tracer."""
        self.provider = provider
        self.record_input = record_input
        self._exporter = exporter
        self._make: SdkSpans | DirectSpans = (
            SdkSpans(provider) if processor is None else DirectSpans(provider, processor)
        )
        # (agent ID, action ID) -> the decision's span context as plain
        # values, and its tool; oldest first. Ordered so that forgetting the
        # oldest is O(1): a plain dict's first key, after many are deleted
        # from its front, is found by a scan over the holes they leave (8 us
        # a decision when full). Plain values (not a SpanContext, a tuple
        # subclass): the collector stops tracking a tuple of ints and strings,
        # and a full collection then skips the 65,536 entries instead of
        # walking some 200,000 objects (about 90 ms longer each time).
        self._decisions: OrderedDict[tuple[str, str], _Remembered] = OrderedDict()

    @_never_fails
    def decision(
        self,
        agent_id: str,
        tool: str,
        tool_input: Any,
        reply: Mapping[str, Any],
        started: int,
        headers: Headers,
    ) -> None:
        """The span of an action request answered with ``reply`` (a
        decision), begun at ``started`` (``time.time_ns()``)."""
        action_id = reply["action_id"]
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "apply_guardrail",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": action_id,
            "gen_ai.agent.id": agent_id,
            "guard.decision": reply["decision"],
        }
        self._decided(attributes, reply)
        if self.record_input:
            attributes["gen_ai.tool.call.arguments"] = dumps(tool_input).decode()
        made = self._make(DECISION_SPAN, _parent(headers), attributes, (), started, time_ns())
        self._remember((agent_id, action_id), made, tool)

    @_never_fails
    def approval(
        self,
        kind: str,
        agent_id: str,
        action_id: str,
        reply: Mapping[str, Any],
        started: int,
        headers: Headers,
        *,
        by: str | None = None,
    ) -> None:
        """The span of an operator's approval or rejection (``reply``: its
        decision), or of a cancellation (``reply``: the action), linked to
        the action's decision span."""
        key = (agent_id, action_id)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.tool.call.id": action_id,
            "gen_ai.agent.id": agent_id,
        }
        if "decision" in reply:
            attributes["guard.decision"] = reply["decision"]
            self._decided(attributes, reply)
        else:
            attributes["guard.action.status"] = reply["status"]
        if by:
            attributes["guard.by"] = by
        self._linked(APPROVAL_SPANS[kind], key, attributes, started, headers)
        if kind != "approve" or reply.get("decision") != "allowed":
            self._decisions.pop(key, None)  # no outcome will follow

    @_never_fails
    def outcome(
        self,
        agent_id: str,
        action_id: str,
        status: str,
        started: int,
        headers: Headers,
    ) -> None:
        """The span of an outcome report, linked to the action's decision span."""
        key = (agent_id, action_id)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.tool.call.id": action_id,
            "gen_ai.agent.id": agent_id,
            "guard.outcome": status,
        }
        self._linked(OUTCOME_SPAN, key, attributes, started, headers)
        self._decisions.pop(key, None)  # one outcome per action

    def shutdown(self, timeout: float = FLUSH_TIMEOUT) -> None:
        """Export what is still queued, then stop; after ``timeout`` seconds
        the exporter is stopped too (its retries end, what is left is
        dropped). Blocks: run it off the event loop."""
        stopping = threading.Thread(target=self.provider.shutdown, name="traces-stop", daemon=True)
        stopping.start()
        stopping.join(timeout)
        if stopping.is_alive() and self._exporter is not None:
            self._exporter.shutdown()
            stopping.join(timeout)

    @staticmethod
    def _decided(attributes: dict[str, AttributeValue], reply: Mapping[str, Any]) -> None:
        reason = reply.get("reason")
        if reason:
            attributes["guard.reason_code"] = reason["code"]
        rule = _rule(reply)
        if rule is not None:
            attributes["guard.rule"] = rule

    def _linked(
        self,
        name: str,
        key: tuple[str, str],
        attributes: dict[str, AttributeValue],
        started: int,
        headers: Headers,
    ) -> None:
        known = self._decisions.get(key)
        links: tuple[Link, ...] = ()
        if known is not None:
            trace_id, span_id, flags, state, tool = known
            decided = SpanContext(
                trace_id, span_id, is_remote=False, trace_flags=TraceFlags(flags), trace_state=state
            )
            links = (Link(decided),)
            attributes["gen_ai.tool.name"] = tool
        self._make(name, _parent(headers), attributes, links, started, time_ns())

    def _remember(self, key: tuple[str, str], made: SpanContext, tool: str) -> None:
        decisions = self._decisions
        decisions.pop(key, None)  # a retry's decision: newest last
        state = made.trace_state
        decisions[key] = (made.trace_id, made.span_id, int(made.trace_flags), state or None, tool)
        if len(decisions) > REMEMBERED:
            decisions.popitem(last=False)


def _resource() -> Resource:
    """What the SDK's variables say (``OTEL_SERVICE_NAME``,
    ``OTEL_RESOURCE_ATTRIBUTES``), named ``guardd`` unless they name it."""
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "guardd"}))
    return resource


def start_tracing(*, record_input: bool = False) -> Tracer:
    """A tracer exporting in batches over OTLP/HTTP, as the ``OTEL_*``
    variables configure it; its sampler too (``OTEL_TRACES_SAMPLER``,
    parent-based always-on by default)."""
    # Imported here: it brings in an HTTP client that nothing else needs.
    from guardd.tracing_wire import Exporter

    exporter = Exporter()
    # guardd stops it itself (Tracer.shutdown), within a bound; not at exit.
    provider = TracerProvider(resource=_resource(), shutdown_on_exit=False)
    processor = BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return Tracer(provider, record_input=record_input, exporter=exporter, processor=processor)


def endpoint(env: Mapping[str, str]) -> str:
    """Where the spans go, as the exporter works it out (for the start banner)."""
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if traces:
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318"
    return base.rstrip("/") + "/v1/traces"
