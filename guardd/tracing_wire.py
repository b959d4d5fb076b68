"""OTLP/HTTP export of spans, with OTLP's protobuf encoding written out by hand.

The OTLP exporter builds a protobuf message object for every span, attribute
and value, then serializes them: about 30 us a span, on the export thread,
but under the GIL, so taken from the event loop all the same. guardd's spans
are all alike (a few string attributes, maybe a link, no events), and their
wire form is a short run of tagged fields: this writes those bytes directly,
in a few microseconds. A span of another shape (events, or an attribute that
is not a string, bool, int or float) is encoded by the SDK's own encoder.

The bytes are those of ``encode_spans(spans).SerializePartialToString()``
exactly; tests/guardd/test_tracing_wire.py proves it on guardd's spans and on
spans of every shape. Field numbers: opentelemetry-proto's trace.proto,
common.proto and resource.proto.

``Exporter`` is the SDK's OTLP/HTTP exporter (its settings, session,
compression) sending those bytes, retrying as the SDK's does: a refused
connection or an answer 429, 502, 503 or 504, again after 1, 2, 4... seconds
(give or take a fifth), up to 6 tries within its timeout, and none once it
is stopped. It uses members of the SDK's exporter that are not its public
API (``_export(data, timeout)``, ``_timeout``, ``_shutdown``,
``_shutdown_in_progress``): with an SDK whose exporter lacks them, it leaves
the export to the SDK's own method, slower but right.
"""

from __future__ import annotations

import functools
import inspect
import logging
import random
import struct
import time
from collections.abc import Sequence

import requests
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind
from opentelemetry.util.types import Attributes

__all__ = ["Exporter", "encode"]

log = logging.getLogger("guardd.tracing")
TRIES = 6
RETRIED = frozenset({429, 502, 503, 504})

# Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
# A tag is (field number << 3) | wire type.
_KIND = {  # SpanKind -> Span.SpanKind, whose 0 is "unspecified"
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}
# SpanFlags: bit 8 says bit 9 is known; bit 9, that the parent is remote.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
# Field 1 of 16 bytes, 2 of 8 (in a Span and a Link), a Span's field 4 of 8.
_TRACE_ID = b"\x0a\x10"
_SPAN_ID = b"\x12\x08"
_PARENT_ID = b"\x22\x08"
_double = struct.Struct("<d").pack
_fixed64 = struct.Struct("<Q").pack
_fixed32 = struct.Struct("<I").pack


class _OtherShape(Exception):
    """A span this module does not write: the SDK's encoder does."""


_BYTE = [bytes((n,)) for n in range(256)]


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: a string, bytes or a message (written even
    when empty: a message set, or a value of a ``oneof``)."""
    return _BYTE[tag] + _varint(len(payload)) + payload


def _string(tag: int, text: str) -> bytes:
    """A plain string field: left out when empty, its default."""
    return _field(tag, text.encode()) if text else b""


def _value(value: object) -> bytes:
    """An AnyValue: string 1, bool 2, int 3 (int64), double 4."""
    if isinstance(value, str):
        return _field(0x0A, value.encode())
    if isinstance(value, bool):  # before int: a bool is an int
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        if not -(1 << 63) <= value < 1 << 63:
            raise _OtherShape
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + _double(value)
    raise _OtherShape


@functools.lru_cache(maxsize=1024)
def _key(key: str) -> bytes:
    """KeyValue.key (1); a span's keys are few, and the same each time."""
    return _string(0x0A, key)


def _attributes(tag: int, attributes: Attributes) -> bytes:
    """Repeated KeyValue (key 1, value 2) as field ``tag``."""
    if not attributes:
        return b""
    return b"".join(
        [_field(tag, _key(key) + _field(0x12, _value(value))) for key, value in attributes.items()]
    )


def _flags(parent: SpanContext | None) -> bytes:
    if parent is not None and parent.is_remote:
        return _fixed32(_HAS_IS_REMOTE | _IS_REMOTE)
    return _fixed32(_HAS_IS_REMOTE)


def _trace_state(tag: int, context: SpanContext) -> bytes:
    state = context.trace_state
    if not state:
        return b""
    return _string(tag, ",".join(f"{k}={v}" for k, v in state.items()))


def _link(link: Link) -> bytes:
    """Span.Link: trace_id 1, span_id 2, attributes 4, dropped 5, flags 6;
    its trace state (3) is not written, as the SDK's encoder writes none."""
    context = link.context
    dropped = link.dropped_attributes
    return (
        _TRACE_ID
        + context.trace_id.to_bytes(16, "big")
        + _SPAN_ID
        + context.span_id.to_bytes(8, "big")
        + _attributes(0x22, link.attributes)
        + (b"\x28" + _varint(dropped) if dropped else b"")
        + b"\x35"
        + _flags(context)
    )


def _span(span: ReadableSpan) -> bytes:
    """A Span message: fields in number order, defaults left out, as the
    protobuf runtime writes them."""
    if span.events:
        raise _OtherShape
    context = span.context
    parent = span.parent
    status = span.status
    out = [
        _TRACE_ID,
        context.trace_id.to_bytes(16, "big"),
        _SPAN_ID,
        context.span_id.to_bytes(8, "big"),
        _trace_state(0x1A, context),
    ]
    if parent is not None:
        out.append(_PARENT_ID)
        out.append(parent.span_id.to_bytes(8, "big"))
    out.append(_string(0x2A, span.name))
    out.append(b"\x30" + _varint(_KIND[span.kind]))
    if span.start_time:
        out.append(b"\x39" + _fixed64(span.start_time))
    if span.end_time:
        out.append(b"\x41" + _fixed64(span.end_time))
    out.append(_attributes(0x4A, span.attributes))
    if span.dropped_attributes:
        out.append(b"\x50" + _varint(span.dropped_attributes))
    if span.dropped_events:
        out.append(b"\x60" + _varint(span.dropped_events))
    for link in span.links:
        out.append(_field(0x6A, _link(link)))
    if span.dropped_links:
        out.append(b"\x70" + _varint(span.dropped_links))
    # Status, always present (an empty one when unset): message 2, code 3.
    code = status.status_code.value
    description = status.description
    out.append(
        _field(
            0x7A,
            (_field(0x12, description.encode()) if description else b"")
            + (b"\x18" + _varint(code) if code else b""),
        )
    )
    out.append(b"\x85\x01" + _flags(parent))  # flags: field 16, fixed32
    return b"".join(out)


def _one(span: ReadableSpan) -> bytes:
    """The Span message of ``span``, by hand or by the SDK's encoder."""
    try:
        return _span(span)
    except _OtherShape:
        request = encode_spans([span])
        encoded: bytes = (
            request.resource_spans[0].scope_spans[0].spans[0].SerializePartialToString()
        )
        return encoded


def _around(message: ResourceSpans | ScopeSpans, inner: bytes) -> bytes:
    """``message`` (its field 2 left empty) with ``inner`` as its field 2:
    after its field 1 (the resource or scope), before its field 3 (the
    schema URL)."""
    whole: bytes = message.SerializePartialToString()
    tail = _string(0x1A, message.schema_url)
    return whole[: len(whole) - len(tail)] + inner + tail


def encode(spans: Sequence[ReadableSpan]) -> bytes:
    """An ExportTraceServiceRequest of ``spans``, serialized: grouped by
    resource, then by instrumentation scope, each in the order first met.
    Each group's resource and scope are the SDK encoder's (once a batch:
    all of guardd's spans have the same)."""
    groups: dict[Resource, dict[InstrumentationScope | None, list[ReadableSpan]]] = {}
    last: tuple[Resource | None, InstrumentationScope | None] = (None, None)
    group: list[ReadableSpan] = []
    for span in spans:
        resource = span.resource
        scope = span.instrumentation_scope or None
        # A resource hashes by its attributes as JSON (some 20 us): looked
        # up only when it is not the very object of the span before.
        if resource is not last[0] or scope is not last[1]:
            group = groups.setdefault(resource, {}).setdefault(scope, [])
            last = (resource, scope)
        group.append(span)
    out = []
    for by_scope in groups.values():
        scope_spans = []
        for group in by_scope.values():
            resource_spans = encode_spans(group[:1]).resource_spans[0]
            scope = resource_spans.scope_spans[0]
            scope.ClearField("spans")
            encoded = b"".join([_field(0x12, _one(span)) for span in group])
            scope_spans.append(_field(0x12, _around(scope, encoded)))
        resource_spans.ClearField("scope_spans")
        out.append(_field(0x0A, _around(resource_spans, b"".join(scope_spans))))
    return b"".join(out)


class Exporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP exporter, encoding with ``encode``."""

    def __init__(self, endpoint: str | None = None) -> None:
        super().__init__(endpoint)
        self.encodes = self._fits()

    def _fits(self) -> bool:
        """Whether the SDK's exporter has what ``export`` uses of it."""
        try:
            parameters = inspect.signature(self._export).parameters
        except (AttributeError, TypeError, ValueError):
            return False
        return len(parameters) >= 2 and all(
            hasattr(self, name) for name in ("_timeout", "_shutdown", "_shutdown_in_progress")
        )

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not self.encodes:
            return super().export(spans)
        if self._shutdown:
            return SpanExportResult.FAILURE
        data = encode(spans)
        deadline = time.monotonic() + self._timeout
        for attempt in range(TRIES):
            try:
                response = self._export(data, deadline - time.monotonic())
            except requests.exceptions.RequestException as error:
                why: object = error
                again = isinstance(error, requests.exceptions.ConnectionError)
            else:
                if response.ok:
                    return SpanExportResult.SUCCESS
                why = f"{response.status_code} {response.reason}"
                again = response.status_code in RETRIED
            pause = 2**attempt * random.uniform(0.8, 1.2)  # noqa: S311 - jitter, no secret
            if not again or attempt + 1 == TRIES or pause > deadline - time.monotonic():
                break
            log.warning("spans not exported (%s), trying again in %.1f s", why, pause)
            if self._shutdown_in_progress.wait(pause):
                break
        log.error("%d spans not exported (%s)", len(spans), why)
        return SpanExportResult.FAILURE
