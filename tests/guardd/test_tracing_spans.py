"""guardd.tracing_spans.DirectSpans makes the very span the SDK's tracer
makes (SdkSpans): the same IDs, flags, trace state, parent, attributes,
links, times, resource and scope, and the same OTLP bytes, with every
sampler guardd can be configured with; and leaves to the SDK's tracer the
spans the SDK would change (limits, values that are not strings)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue
from werkzeug.datastructures import Headers

from agents_runtime.core.vocabulary import ActionStatus
from agents_runtime.core.vocabulary import Decision as Decided
from guardd.tracing import DECISION_SPAN, OUTCOME_SPAN, Tracer
from guardd.tracing_spans import DirectSpans, SdkSpans
from guardd.tracing_wire import encode

STARTED = 1_764_000_000_123_456_789
ENDED = STARTED + 345_678
SAMPLED_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"


class Counting(IdGenerator):
    """IDs 1, 2, 3...: two providers given one each draw the same IDs
    when their spans are made in the same order. It says its trace IDs are
    random, as the SDK's own generator does (a flag on the span), unless
    ``random`` is false."""

    def __init__(self, random: bool = True) -> None:
        self.n = 0
        self.random = random

    def is_trace_id_random(self) -> bool:
        return self.random

    def generate_span_id(self) -> int:
        self.n += 1
        return self.n

    def generate_trace_id(self) -> int:
        self.n += 1
        return (0xABC << 64) + self.n


class RecordOnly(Sampler):
    """Records every span and samples none (kept from the export)."""

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: Any = None,
        attributes: Any = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        return SamplingResult(Decision.RECORD_ONLY, {"sampler.mark": "kept"}, None)

    def get_description(self) -> str:
        return "RecordOnly"


class StartsCounted(SimpleSpanProcessor):
    """The SDK's simple processor, counting the spans started through it."""

    started = 0

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        self.started += 1
        super().on_start(span, parent_context)


SAMPLERS = [
    pytest.param(None, id="default-parentbased-always-on"),
    pytest.param(ALWAYS_ON, id="always-on"),
    pytest.param(ALWAYS_OFF, id="always-off"),
    pytest.param(ParentBased(TraceIdRatioBased(0.5)), id="parentbased-ratio"),
    pytest.param(ParentBased(ALWAYS_OFF), id="parentbased-always-off"),
    pytest.param(RecordOnly(), id="record-only"),
]


def provider(
    sampler: Sampler | None, random: bool = True
) -> tuple[TracerProvider, InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    made = TracerProvider(
        sampler=sampler,
        resource=Resource.create({"service.name": "guardd"}),
        id_generator=Counting(random),
        shutdown_on_exit=False,
    )
    made.add_span_processor(SimpleSpanProcessor(exported))
    return made, exported


def makers(
    sampler: Sampler | None, random: bool = True
) -> tuple[SdkSpans, InMemorySpanExporter, DirectSpans, InMemorySpanExporter]:
    sdk_provider, by_sdk = provider(sampler, random)
    exported = InMemorySpanExporter()
    direct_provider = TracerProvider(
        sampler=sampler,
        resource=Resource.create({"service.name": "guardd"}),
        id_generator=Counting(random),
        shutdown_on_exit=False,
    )
    processor = SimpleSpanProcessor(exported)
    direct_provider.add_span_processor(processor)
    return SdkSpans(sdk_provider), by_sdk, DirectSpans(direct_provider, processor), exported


def parent(traceparent: str | None, tracestate: str | None = None) -> Context | None:
    if traceparent is None:
        return None
    carrier = {"traceparent": traceparent}
    if tracestate is not None:
        carrier["tracestate"] = tracestate
    return TraceContextTextMapPropagator().extract(carrier)


def fields(span: ReadableSpan, *, end: bool = True) -> dict[str, Any]:
    """Everything an exporter can read of a span."""
    return {
        "name": span.name,
        "context": span.context,
        "parent": span.parent,
        "kind": span.kind,
        "attributes": dict(span.attributes or {}),
        "events": list(span.events),
        "links": [(link.context, dict(link.attributes or {})) for link in span.links],
        "status": (span.status.status_code, span.status.description),
        "start_time": span.start_time,
        "end_time": span.end_time if end else None,
        "resource": span.resource.attributes,
        "scope": span.instrumentation_scope,
        "dropped": (span.dropped_attributes, span.dropped_events, span.dropped_links),
    }


def attributes(n: int) -> dict[str, AttributeValue]:
    return {
        "gen_ai.operation.name": "apply_guardrail",
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.id": f"act-{n}",
        "gen_ai.agent.id": "agent-1",
        "guard.decision": "denied",
        "guard.reason_code": "rule_denied",
        "guard.rule": "no-prod-writes",
        "gen_ai.tool.call.arguments": '{"query":"' + "é" * 300 + '"}',
    }


def guardds_shapes() -> Iterator[tuple[str, Context | None, dict[str, AttributeValue], bool]]:
    """(name, parent, attributes, linked) of each span guardd makes."""
    yield DECISION_SPAN, None, attributes(1), False
    yield DECISION_SPAN, parent(SAMPLED_PARENT, "vendor=x,other=y"), attributes(2), False
    yield DECISION_SPAN, parent(UNSAMPLED_PARENT), attributes(3), False
    yield DECISION_SPAN, parent("00-not-a-traceparent"), attributes(4), False
    yield OUTCOME_SPAN, None, {"gen_ai.tool.call.id": "act-1", "guard.outcome": "success"}, True
    yield "approve_action guardd", parent(SAMPLED_PARENT), {"guard.by": "ann"}, True
    yield "cancel_action guardd", None, {}, False


@pytest.mark.parametrize("random", [True, False], ids=["random-ids", "other-ids"])
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_direct_spans_are_the_sdks_spans_field_for_field_and_byte_for_byte(
    sampler: Sampler | None, random: bool
) -> None:
    sdk, by_sdk, direct, by_direct = makers(sampler, random)
    assert direct.direct
    link_to = SpanContext(0x1234, 0x5678, is_remote=False, trace_flags=TraceFlags(0x01))
    for name, context, attrs, linked in guardds_shapes():
        links = (Link(link_to),) if linked else ()
        made_by_sdk = sdk(name, context, dict(attrs), links, STARTED, ENDED)
        made_direct = direct(name, context, dict(attrs), links, STARTED, ENDED)
        assert made_direct == made_by_sdk
    sdk_spans = by_sdk.get_finished_spans()
    direct_spans = by_direct.get_finished_spans()
    assert [fields(s) for s in direct_spans] == [fields(s) for s in sdk_spans]
    assert encode(direct_spans) == encode(sdk_spans)
    if sampler is None:  # the default samples all of these but the unsampled parent's
        assert len(sdk_spans) == 6
        assert bool(sdk_spans[0].context.trace_flags & 0x02) is random  # random trace ID


def run_guardds_calls(tracer: Tracer) -> None:
    """What guardd's routes ask of a tracer: decisions, an approval, a
    rejection, a cancellation, outcomes (linked and not); the decisions and
    statuses as guardd's replies carry them, members of str enums."""
    plain = Headers()
    traced = Headers({"traceparent": SAMPLED_PARENT, "tracestate": "vendor=x"})
    for n, reply in enumerate(
        [
            {"decision": Decided.ALLOWED, "action_id": "act-0"},
            {"decision": Decided.DENIED, "action_id": "act-1", "reason": {"code": "rule_denied"}},
            {"decision": Decided.PENDING_APPROVAL, "action_id": "act-2"},
            {"decision": Decided.PENDING_APPROVAL, "action_id": "act-3"},
            {"decision": Decided.PENDING_APPROVAL, "action_id": "act-4", "rule": {"name": "r"}},
        ]
    ):
        tracer.decision(
            f"agent-{n}", "search", {"q": n}, reply, STARTED + n, traced if n % 2 else plain
        )
    approved = {"decision": Decided.ALLOWED, "action_id": "act-2"}
    tracer.approval("approve", "agent-2", "act-2", approved, STARTED, plain, by="ann")
    rejected = {"decision": Decided.DENIED, "action_id": "act-3", "reason": {"code": "rejected"}}
    tracer.approval("reject", "agent-3", "act-3", rejected, STARTED, traced, by="bob")
    cancelled = {"status": ActionStatus.CANCELLED}
    tracer.approval("cancel", "agent-4", "act-4", cancelled, STARTED, plain)
    tracer.outcome("agent-2", "act-2", "success", STARTED, traced)
    tracer.outcome("agent-0", "act-0", "failure", STARTED, plain)
    tracer.outcome("agent-9", "act-unknown", "harmful", STARTED, plain)


@pytest.mark.parametrize("record_input", [False, True], ids=["default", "record-input"])
def test_a_tracer_given_its_processor_makes_the_spans_the_sdks_tracer_makes(
    record_input: bool,
) -> None:
    sdk_provider, by_sdk = provider(None)
    run_guardds_calls(Tracer(sdk_provider, record_input=record_input))
    direct_provider = TracerProvider(
        resource=Resource.create({"service.name": "guardd"}),
        id_generator=Counting(),
        shutdown_on_exit=False,
    )
    by_direct = InMemorySpanExporter()
    processor = StartsCounted(by_direct)
    direct_provider.add_span_processor(processor)
    run_guardds_calls(Tracer(direct_provider, record_input=record_input, processor=processor))
    sdk_spans = by_sdk.get_finished_spans()
    direct_spans = by_direct.get_finished_spans()
    assert len(sdk_spans) == 11
    assert sum(bool(s.links) for s in sdk_spans) == 5
    # The end is read from the clock when each span is made.
    assert [fields(s, end=False) for s in direct_spans] == [fields(s, end=False) for s in sdk_spans]
    assert all(s.end_time is not None and s.end_time >= s.start_time for s in direct_spans)
    # Every one took the direct road: the SDK's tracer calls on_start.
    assert processor.started == 0


@pytest.mark.parametrize(
    ("env", "attrs", "direct_at_all"),
    [
        pytest.param(
            {"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "8"}, attributes(1), False, id="length-limit"
        ),
        pytest.param(
            {"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "8"}, attributes(1), False, id="all-lengths"
        ),
        pytest.param(
            {"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "3"}, attributes(1), True, id="count-limit"
        ),
        pytest.param(
            {},
            {"guard.count": 3, "guard.ok": True, "gen_ai.tool.name": "s"},
            True,
            id="not-strings",
        ),
        pytest.param({"OTEL_SDK_DISABLED": "true"}, attributes(1), False, id="sdk-disabled"),
    ],
)
def test_spans_the_sdk_would_change_are_left_to_the_sdks_tracer(
    monkeypatch: pytest.MonkeyPatch,
    env: Mapping[str, str],
    attrs: dict[str, AttributeValue],
    direct_at_all: bool,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    sdk, by_sdk, direct, by_direct = makers(None)
    assert direct.direct is direct_at_all
    assert direct(DECISION_SPAN, None, dict(attrs), (), STARTED, ENDED) == sdk(
        DECISION_SPAN, None, dict(attrs), (), STARTED, ENDED
    )
    sdk_spans = by_sdk.get_finished_spans()
    direct_spans = by_direct.get_finished_spans()
    assert [fields(s) for s in direct_spans] == [fields(s) for s in sdk_spans]
    assert len(sdk_spans) == (0 if "OTEL_SDK_DISABLED" in env else 1)


def test_a_link_the_sdk_would_drop_or_change_is_left_to_the_sdks_tracer() -> None:
    sdk, by_sdk, direct, by_direct = makers(None)
    invalid = SpanContext(0, 0, is_remote=False)
    with_attributes = SpanContext(0x12, 0x34, is_remote=False)
    for link in (Link(invalid), Link(with_attributes, {"n": 1})):
        made_by_sdk = sdk(OUTCOME_SPAN, None, {"a": "b"}, (link,), STARTED, ENDED)
        assert direct(OUTCOME_SPAN, None, {"a": "b"}, (link,), STARTED, ENDED) == made_by_sdk
    assert [fields(s) for s in by_direct.get_finished_spans()] == [
        fields(s) for s in by_sdk.get_finished_spans()
    ]


def test_start_tracing_hands_spans_straight_to_its_batch_processor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from guardd.tracing import start_tracing

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    tracer = start_tracing()
    try:
        assert isinstance(tracer._make, DirectSpans)
        assert tracer._make.direct
    finally:
        tracer.shutdown(timeout=0.1)
