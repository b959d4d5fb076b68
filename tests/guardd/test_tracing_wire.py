"""guardd.tracing_wire writes the very bytes the SDK's OTLP encoder writes
(``encode_spans(spans).SerializePartialToString()``): on guardd's own spans,
and on spans of every other shape the SDK can make. Its exporter sends them
to a real receiver, and tries again when the backend is not ready."""

from __future__ import annotations

from collections.abc import Iterator
from time import time_ns

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)
from werkzeug.datastructures import Headers

from guardd.tracing import Tracer
from guardd.tracing_wire import Exporter, encode
from tests.support.otlp import OtlpReceiver

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def sdk_bytes(spans: tuple[ReadableSpan, ...]) -> bytes:
    encoded: bytes = encode_spans(spans).SerializePartialToString()
    return encoded


def guardd_spans(record_input: bool) -> tuple[ReadableSpan, ...]:
    """A decision of each kind, with and without a caller's span, and the
    approvals, rejection, cancellation and outcomes that link to them."""
    exported = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "guardd"}))
    provider.add_span_processor(SimpleSpanProcessor(exported))
    tracer = Tracer(provider, record_input=record_input)
    plain = Headers()
    traced = Headers({"traceparent": TRACEPARENT, "tracestate": "vendor=x,other=y"})
    replies = [
        {"decision": "allowed", "action_id": "act-1"},
        {"decision": "denied", "action_id": "act-2", "reason": {"code": "rule_denied"}},
        {"decision": "denied", "action_id": "act-3", "rule": {"name": "no-prod-writes"}},
        {"decision": "pending_approval", "action_id": "act-4"},
        {"decision": "pending_approval", "action_id": "act-5"},
        {"decision": "pending_approval", "action_id": "act-6"},
    ]
    for n, reply in enumerate(replies):
        headers = traced if n % 2 else plain
        tool_input = {"query": "é" * 200, "n": n}  # a length of two bytes, and UTF-8
        tracer.decision(f"agent-{n}", "search", tool_input, reply, time_ns(), headers)
    approved = {"decision": "allowed", "action_id": "act-4"}
    tracer.approval("approve", "agent-3", "act-4", approved, time_ns(), plain, by="ann")
    rejected = {"decision": "denied", "action_id": "act-5", "reason": {"code": "rejected"}}
    tracer.approval("reject", "agent-4", "act-5", rejected, time_ns(), traced, by="bob")
    cancelled = {"status": "cancelled", "action_id": "act-6"}
    tracer.approval("cancel", "agent-5", "act-6", cancelled, time_ns(), plain, by="agent")
    tracer.outcome("agent-3", "act-4", "success", time_ns(), traced)
    tracer.outcome("agent-0", "act-1", "failure", time_ns(), plain)
    tracer.outcome("agent-9", "act-unknown", "harmful", time_ns(), plain)  # no link
    spans = exported.get_finished_spans()
    assert len(spans) == 12
    assert sum(bool(s.links) for s in spans) == 5
    return spans


@pytest.mark.parametrize("record_input", [False, True], ids=["default", "record-input"])
def test_guardds_spans_encode_to_the_sdks_bytes(record_input: bool) -> None:
    spans = guardd_spans(record_input)
    assert encode(spans) == sdk_bytes(spans)


def other_spans() -> tuple[ReadableSpan, ...]:
    """Every shape: each kind, values of each type (long, empty, negative,
    UTF-8, sequences), events, a status with a description, links with
    attributes, remote and local parents, a trace state, and spans of two
    resources and two scopes interleaved."""
    exported = InMemorySpanExporter()
    resources = [
        Resource({"service.name": "a", "n": 1}, schema_url="https://schema/1"),
        Resource({"service.name": "b"}),
    ]
    tracers = []
    for resource in resources:
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(SimpleSpanProcessor(exported))
        tracers.append(provider.get_tracer("first", "1.0", schema_url="https://scope/1"))
        tracers.append(provider.get_tracer("second"))
    state = TraceState([("k", "v"), ("other", "w")])
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1), trace_state=state)
    local = SpanContext(1 << 127, (1 << 64) - 1, is_remote=False, trace_flags=TraceFlags(1))
    values: list[dict[str, object]] = [
        {"s": "x" * 300, "empty": "", "utf8": "日本語"},
        {"yes": True, "no": False, "zero": 0, "neg": -5, "big": (1 << 63) - 1, "min": -(1 << 63)},
        {"f": 1.5, "nf": -0.0, "fz": 0.0},
        {"seq": ("a", "b"), "ints": (1, 2)},  # sequences: the SDK's encoder writes them
        {},
    ]
    kinds = list(SpanKind)
    for n in range(20):
        tracer = tracers[n % 4]
        parent = [None, remote, local][n % 3]
        context = None if parent is None else set_span_in_context(NonRecordingSpan(parent))
        links = []
        if n % 4 == 1:
            links = [Link(remote, {"why": "follows"}), Link(local)]
        span = tracer.start_span(
            f"span {n}" if n % 7 else "",
            context=context,
            kind=kinds[n % len(kinds)],
            attributes=values[n % len(values)],  # type: ignore[arg-type]
            links=links,
            start_time=1_700_000_000_000_000_000 + n,
        )
        if n % 6 == 5:
            span.add_event("happened", {"x": 1})
        if n % 5 == 2:
            span.set_status(Status(StatusCode.ERROR, "it broke"))
        if n % 5 == 3:
            span.set_status(Status(StatusCode.OK))
        span.end(end_time=1_700_000_000_000_000_100 + n)
    return exported.get_finished_spans()


def test_spans_of_every_shape_encode_to_the_sdks_bytes() -> None:
    spans = other_spans()
    assert encode(spans) == sdk_bytes(spans)


def test_no_spans_and_one_span_encode_to_the_sdks_bytes() -> None:
    spans = guardd_spans(False)
    assert encode(()) == sdk_bytes(()) == b""
    assert encode(spans[:1]) == sdk_bytes(spans[:1])


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    try:
        yield receiver
    finally:
        receiver.stop()


@pytest.mark.parametrize("encodes", [True, False], ids=["by-hand", "sdk-fallback"])
def test_the_exporter_sends_the_spans_to_the_backend(receiver: OtlpReceiver, encodes: bool) -> None:
    spans = guardd_spans(False)
    exporter = Exporter(endpoint=f"{receiver.url}/v1/traces")
    assert exporter.encodes  # the installed SDK has what it uses
    exporter.encodes = encodes  # False: as with an SDK that lacks it
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert receiver.posts == 1
    assert [s.name for s in receiver.spans] == [s.name for s in spans]


def test_the_exporter_tries_again_while_the_backend_is_unavailable(
    receiver: OtlpReceiver,
) -> None:
    receiver.unavailable = 1
    spans = guardd_spans(False)
    exporter = Exporter(endpoint=f"{receiver.url}/v1/traces")
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert receiver.unavailable == 0  # answered 503 once
    assert receiver.posts == 1  # then taken
    assert len(receiver.spans) == len(spans)


def test_the_exporter_does_not_try_again_when_the_backend_refuses_the_spans(
    receiver: OtlpReceiver,
) -> None:
    exporter = Exporter(endpoint=f"{receiver.url}/elsewhere")  # answered 400
    try:
        assert exporter.export(guardd_spans(False)) is SpanExportResult.FAILURE
    finally:
        exporter.shutdown()
    assert receiver.refused == ["path /elsewhere"]


def test_a_stopped_exporter_sends_nothing(receiver: OtlpReceiver) -> None:
    exporter = Exporter(endpoint=f"{receiver.url}/v1/traces")
    exporter.shutdown()
    assert exporter.export(guardd_spans(False)) is SpanExportResult.FAILURE
    assert receiver.posts == 0
