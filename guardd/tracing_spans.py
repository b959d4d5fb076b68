"""Making guardd's spans: through the SDK's tracer, or handed straight to the
span processor.

guardd's spans are made after the fact, already ended, by one call each
(``guardd.tracing``). Through the SDK's tracer (``SdkSpans``, the reference)
that call builds a live span for an instant: a lock, a checked copy of the
attributes with a lock of its own, bounded lists for events and links, the
processors' start and end hooks, then a read-only copy for the export
queue. About 16 us a span in a quiet loop and several times that inside a
busy guardd, where its objects also feed the garbage collector: the largest
part of what traces cost a decision (docs/benchmarks.md, "tracing cost").

``DirectSpans`` makes the same span from the SDK's public parts: the
provider's sampler, ID generator and resource, a ``SpanContext``, and a
``ReadableSpan`` handed to the one span processor guardd installs (about
4 us). It takes this road only where the result is the SDK's own, field for
field (tests/guardd/test_tracing_spans.py compares the two on every shape of
span guardd makes, with several samplers, and their OTLP bytes): attribute
values that are strings (a ``str`` enum's member included, which the SDK
keeps as it is too), fewer attributes and links than the span limits
allow, and no limit on an attribute's length; any other span goes through
the SDK's tracer. What it leaves out: the processors' ``on_start`` (the
batch and simple processors do nothing there) and the SDK's counts of its
own spans (exported only to a meter provider, which guardd does not set).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, get_current_span
from opentelemetry.util.types import AttributeValue

__all__ = ["SCOPE", "DirectSpans", "SdkSpans"]

SCOPE = "guardd"  # the instrumentation scope's name
_INTERNAL = SpanKind.INTERNAL
_SAMPLED = TraceFlags.SAMPLED
# A sampler's decisions: drop, record only (kept from the export), or
# record and sample.
_DROP = Decision.DROP
_SAMPLE = Decision.RECORD_AND_SAMPLE
# Set on a trace ID known to be random (W3C trace context, level 2): the SDKs
# that have the flag set it, older ones do not.
_RANDOM_ID = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)


def _own_version() -> str:
    try:
        return version("guardd")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return ""


def _or(limit: int | None, unlimited: int) -> int:
    return unlimited if limit is None else limit


class SdkSpans:
    """Spans made by the SDK's tracer: started, then ended at once."""

    def __init__(self, provider: TracerProvider) -> None:
        self._tracer = provider.get_tracer(SCOPE, _own_version())

    def __call__(
        self,
        name: str,
        parent: Context | None,
        attributes: Mapping[str, AttributeValue],
        links: Sequence[Link],
        started: int,
        ended: int,
    ) -> SpanContext:
        """A span begun at ``started`` and ended at ``ended`` (ns since the
        epoch), the child of the span in ``parent`` (or of the current one);
        its span context."""
        span = self._tracer.start_span(
            name,
            context=parent,
            kind=_INTERNAL,
            attributes=attributes,
            links=links,
            start_time=started,
        )
        span.end(ended)
        return span.get_span_context()


class DirectSpans:
    """The SDK's span, made without a live span and handed to ``processor``.

    ``provider`` must be built without span limits of its own (they are read
    from the ``OTEL_*`` variables, as it reads them), and ``processor`` must
    be its only span processor."""

    def __init__(self, provider: TracerProvider, processor: SpanProcessor) -> None:
        self._sdk = SdkSpans(provider)
        self._processor = processor
        self._sampler = provider.sampler
        self._ids = provider.id_generator
        self._resource = provider.resource
        tracer = self._sdk._tracer
        # A disabled SDK (OTEL_SDK_DISABLED) gives a tracer that makes no spans.
        self.direct = isinstance(tracer, SdkTracer)
        self._info = getattr(tracer, "instrumentation_info", None)
        self._scope = InstrumentationScope(SCOPE, _own_version(), None, None)
        self._random_ids = bool(_RANDOM_ID) and self._ids.is_trace_id_random()
        limits = SpanLimits()
        # None: no limit ("unset" in the variable).
        unlimited = 1 << 62
        self._max_attributes = _or(limits.max_span_attributes, unlimited)
        self._max_links = _or(limits.max_links, unlimited)
        # A limit on a value's length: the SDK cuts values; leave it to it.
        if limits.max_span_attribute_length is not None:
            self.direct = False

    def __call__(
        self,
        name: str,
        parent: Context | None,
        attributes: Mapping[str, AttributeValue],
        links: Sequence[Link],
        started: int,
        ended: int,
    ) -> SpanContext:
        """As ``SdkSpans.__call__``."""
        if not (self.direct and self._fits(attributes, links)):
            return self._sdk(name, parent, attributes, links, started, ended)
        # As the SDK's Tracer.start_span does, in its order (the IDs are drawn
        # in the same sequence): the parent, the trace ID, the sampler.
        parent_context: SpanContext | None = get_current_span(parent).get_span_context()
        if parent_context is not None and parent_context.is_valid:
            trace_id = parent_context.trace_id
            random_id = bool(parent_context.trace_flags & _RANDOM_ID)
        else:
            parent_context = None
            trace_id = self._ids.generate_trace_id()
            random_id = self._random_ids
        sampled = self._sampler.should_sample(parent, trace_id, name, _INTERNAL, attributes, links)
        decision = sampled.decision
        flags = (_SAMPLED if decision is _SAMPLE else 0) | (_RANDOM_ID if random_id else 0)
        context = SpanContext(
            trace_id,
            self._ids.generate_span_id(),
            is_remote=False,
            trace_flags=TraceFlags(flags),
            trace_state=sampled.trace_state,
        )
        if decision is not _DROP:
            span = ReadableSpan(
                name,
                context,
                parent_context,
                self._resource,
                sampled.attributes,
                (),
                tuple(links),
                _INTERNAL,
                self._info,
                start_time=started,
                end_time=ended,
                instrumentation_scope=self._scope,
            )
            self._processor.on_end(span)
        return context

    def _fits(self, attributes: Mapping[str, AttributeValue], links: Sequence[Link]) -> bool:
        """Whether the SDK would keep the span as given: every attribute (all
        strings, none dropped), every link (valid, without attributes)."""
        if len(attributes) > self._max_attributes or len(links) > self._max_links:
            return False
        for value in attributes.values():
            if not isinstance(value, str):  # guardd's decisions are str enums
                return False
        for link in links:
            if link.attributes or not link.context.is_valid:
                return False
        return True
