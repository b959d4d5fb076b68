"""The clients send the caller's W3C trace context, and guardd's spans become
children of the caller's span: a real guardd exporting to an OTLP/HTTP
receiver started by the test, and an OpenTelemetry SDK tracer in the test."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span as OtelSpan
from opentelemetry.trace import Tracer

from client_sdk import AsyncGuardClient, trace_context
from client_sdk._trace import valid_traceparent
from tests.client_sdk.conftest import FAST_RETRY
from tests.support.otlp import OtlpReceiver, Span
from tests.support.server import GuardServer

DECISION = "apply_guardrail guardd"
OUTCOME = "report_outcome guardd"
GIVEN_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
GIVEN_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    try:
        yield receiver
    finally:
        receiver.stop()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver
) -> Iterator[GuardServer]:
    """This module's guardd (the conftest's ``admin``, ``new_agent`` and
    ``connect`` use it), tracing to ``receiver``."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "20"}
    guardd = GuardServer(tmp_path_factory.mktemp("traced") / "guard-data", env=env).start()
    try:
        yield guardd
    finally:
        guardd.kill()


@pytest.fixture(scope="module")
def tracer() -> Tracer:
    # The agent's own tracer: its spans stay in the test (no exporter), only
    # their context travels to guardd.
    return TracerProvider().get_tracer("agent")


def guardd_span(receiver: OtlpReceiver, name: str, agent_id: str, action_id: str) -> Span:
    def mine(spans: list[Span]) -> list[Span]:
        return [
            s
            for s in spans
            if s.name == name
            and s.attributes["gen_ai.agent.id"] == agent_id
            and s.attributes["gen_ai.tool.call.id"] == action_id
        ]

    (span,) = mine(receiver.wait_for(lambda spans: bool(mine(spans))))
    return span


def ids(span: OtelSpan) -> tuple[str, str]:
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def test_a_request_in_a_span_makes_the_decision_span_its_child(
    new_agent, connect, tracer: Tracer, receiver: OtlpReceiver
) -> None:
    created = new_agent()
    client = connect(created)
    with tracer.start_as_current_span("agent step") as step:
        decision = client.request_action("search", {"q": "x"})
    span = guardd_span(receiver, DECISION, created.agent_id, decision.action_id)
    assert (span.trace_id, span.parent_span_id) == ids(step)


async def test_the_async_client_sends_the_current_span_too(
    server: GuardServer, new_agent, tracer: Tracer, receiver: OtlpReceiver
) -> None:
    created = new_agent()
    async with AsyncGuardClient(created.token, base_url=server.url, retry=FAST_RETRY) as client:
        with tracer.start_as_current_span("agent step") as step:
            decision = await client.request_action("search", {"q": "x"})
    span = guardd_span(receiver, DECISION, created.agent_id, decision.action_id)
    assert (span.trace_id, span.parent_span_id) == ids(step)


def test_a_guarded_tool_shows_as_decision_then_outcome_under_the_callers_span(
    new_agent, connect, tracer: Tracer, receiver: OtlpReceiver
) -> None:
    created = new_agent()
    client = connect(created)

    @client.guarded
    def search(query: str) -> str:
        return query

    with tracer.start_as_current_span("model call") as model_call:
        assert search("weather") == "weather"
    decided = guardd_span(receiver, DECISION, created.agent_id, "act-1")
    reported = guardd_span(receiver, OUTCOME, created.agent_id, "act-1")
    assert (decided.trace_id, decided.parent_span_id) == ids(model_call)
    assert (reported.trace_id, reported.parent_span_id) == ids(model_call)
    assert reported.links == ((decided.trace_id, decided.span_id),)
    assert reported.attributes["guard.outcome"] == "success"


def test_without_a_current_span_the_decision_span_is_a_root(
    new_agent, connect, receiver: OtlpReceiver
) -> None:
    created = new_agent()
    decision = connect(created).request_action("search", {"q": "x"})
    assert (
        guardd_span(receiver, DECISION, created.agent_id, decision.action_id).parent_span_id == ""
    )


def test_trace_context_gives_the_parent_without_an_opentelemetry_span(
    new_agent, connect, tracer: Tracer, receiver: OtlpReceiver
) -> None:
    created = new_agent()
    client = connect(created)
    with (
        tracer.start_as_current_span("not this one"),
        trace_context(f"00-{GIVEN_TRACE}-{GIVEN_SPAN}-01", "vendor=1"),
    ):
        decision = client.request_action("search", {"q": "x"})
    span = guardd_span(receiver, DECISION, created.agent_id, decision.action_id)
    assert (span.trace_id, span.parent_span_id) == (GIVEN_TRACE, GIVEN_SPAN)


def test_trace_context_with_an_invalid_traceparent_sends_none(
    new_agent, connect, tracer: Tracer, receiver: OtlpReceiver
) -> None:
    created = new_agent()
    client = connect(created)
    with tracer.start_as_current_span("not this one either"), trace_context("00-nonsense"):
        decision = client.request_action("search", {"q": "x"})
    assert (
        guardd_span(receiver, DECISION, created.agent_id, decision.action_id).parent_span_id == ""
    )


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        pytest.param(f"00-{GIVEN_TRACE}-{GIVEN_SPAN}-01", True, id="sampled"),
        pytest.param(f"00-{GIVEN_TRACE}-{GIVEN_SPAN}-00", True, id="not-sampled"),
        pytest.param(f"01-{GIVEN_TRACE}-{GIVEN_SPAN}-01-more", True, id="later-version"),
        pytest.param(f"00-{GIVEN_TRACE}-{GIVEN_SPAN}-01-more", False, id="v00-with-more"),
        pytest.param(f"ff-{GIVEN_TRACE}-{GIVEN_SPAN}-01", False, id="version-ff"),
        pytest.param(f"00-{'0' * 32}-{GIVEN_SPAN}-01", False, id="zero-trace-id"),
        pytest.param(f"00-{GIVEN_TRACE}-{'0' * 16}-01", False, id="zero-span-id"),
        pytest.param(f"00-{GIVEN_TRACE.upper()}-{GIVEN_SPAN}-01", False, id="upper-case"),
        pytest.param(None, False, id="none"),
        pytest.param(42, False, id="not-a-string"),
    ],
)
def test_valid_traceparent(value: object, valid: bool) -> None:
    assert valid_traceparent(value) is valid


def test_the_client_never_imports_opentelemetry() -> None:
    code = (
        "import sys; from client_sdk import _http; from client_sdk._core import AgentCore; "
        "headers = _http.request_headers(AgentCore('a').request_action('t', {}, None, 'k')); "
        "assert 'traceparent' not in headers, headers; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"
