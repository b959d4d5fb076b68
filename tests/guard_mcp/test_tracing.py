"""guard-mcp carries the MCP client's trace context to guardd: a ``traceparent``
in a ``tools/call``'s ``_meta`` (the MCP convention) becomes the parent of
guardd's decision and outcome spans."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.guard_mcp.conftest import TEST_TIMEOUT, Upstream, guard_mcp_stdio
from tests.support.otlp import OtlpReceiver, Span
from tests.support.server import GuardServer

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


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
    """This module's guardd, tracing to ``receiver``."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "20"}
    guardd = GuardServer(tmp_path_factory.mktemp("traced") / "guard-data", env=env).start()
    try:
        yield guardd
    finally:
        guardd.kill()


async def test_a_traceparent_in_the_calls_meta_parents_the_guard_spans(
    server: GuardServer, new_agent, upstream: Upstream, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    agent = new_agent({"echo": {"cost": 1}})
    meta = {"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"}
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            result = await client.call_tool("echo", {"text": "hi"}, meta=meta)
    assert result.is_error is False

    def mine(spans: list[Span]) -> list[Span]:
        return [s for s in spans if s.attributes.get("gen_ai.agent.id") == agent.agent_id]

    spans = mine(receiver.wait_for(lambda spans: len(mine(spans)) == 2))
    assert {s.name for s in spans} == {"apply_guardrail guardd", "report_outcome guardd"}
    for span in spans:
        assert (span.trace_id, span.parent_span_id) == (TRACE_ID, CALLER_SPAN)
