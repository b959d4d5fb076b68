"""Traces: a real guardd exporting its spans over OTLP/HTTP to a receiver
started by the test, which decodes them with the opentelemetry-proto
messages. Span names and attributes, parents from ``traceparent``, links from
approvals and outcomes to the decision, tool inputs only with
--otel-record-input, and nothing at all without an OTEL_* variable."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from time import time_ns
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from werkzeug.datastructures import Headers

from guardd import tracing
from guardd.config import SettingsError, parse_settings, tracing_wanted
from guardd.tracing import Tracer
from tests.guardd.conftest import Api, ok, serving
from tests.guardd.test_hook_claude_code import HOOK, post, pre
from tests.support.otlp import OtlpReceiver, Span
from tests.support.server import GuardServer

DECISION = "apply_guardrail guardd"
SECRET = "the-secret-in-the-input"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def traced_env(receiver: OtlpReceiver) -> dict[str, str]:
    # Batches leave every 20 ms instead of every 5 s, so the tests wait little.
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "20"}


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    try:
        yield receiver
    finally:
        receiver.stop()


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver) -> Iterator[Api]:
    with serving(tmp_path_factory.mktemp("traced") / "guard-data", env=traced_env(receiver)) as api:
        yield api


def one(receiver: OtlpReceiver, name: str, action_id: str, agent_id: str) -> Span:
    """The one span ``name`` of that action, once it has arrived."""

    def mine(spans: list[Span]) -> list[Span]:
        return [
            s
            for s in spans
            if s.name == name
            and s.attributes.get("gen_ai.tool.call.id") == action_id
            and s.attributes.get("gen_ai.agent.id") == agent_id
        ]

    spans = receiver.wait_for(lambda spans: bool(mine(spans)))
    found = mine(spans)
    assert len(found) == 1, found
    return found[0]


def test_each_decision_is_one_apply_guardrail_span_with_the_genai_attributes(
    traced: Api, receiver: OtlpReceiver
) -> None:
    agent = traced.create()
    allowed = ok(agent.act("search", input={"q": SECRET}))
    denied = ok(agent.act("delete_everything", input={"q": SECRET}))
    held = ok(agent.act("send_email", input={"to": SECRET}))

    span = one(receiver, DECISION, allowed["action_id"], agent.agent_id)
    assert span.attributes == {
        "gen_ai.operation.name": "apply_guardrail",
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.id": allowed["action_id"],
        "gen_ai.agent.id": agent.agent_id,
        "guard.decision": "allowed",
    }
    assert span.resource["service.name"] == "guardd"
    assert span.parent_span_id == ""
    assert span.start_ns <= span.end_ns

    span = one(receiver, DECISION, denied["action_id"], agent.agent_id)
    assert span.attributes["guard.decision"] == "denied"
    assert span.attributes["guard.reason_code"] == "tool_not_allowed"
    assert span.attributes["gen_ai.tool.name"] == "delete_everything"

    span = one(receiver, DECISION, held["action_id"], agent.agent_id)
    assert span.attributes["guard.decision"] == "pending_approval"
    assert "guard.reason_code" not in span.attributes


def test_tool_inputs_are_in_no_span_by_default(traced: Api, receiver: OtlpReceiver) -> None:
    agent = traced.create()
    allowed = ok(agent.act("search", input={"q": SECRET}))
    one(receiver, DECISION, allowed["action_id"], agent.agent_id)
    for span in receiver.spans:
        assert "gen_ai.tool.call.arguments" not in span.attributes
        assert SECRET not in repr(span.attributes)


def test_a_traceparent_makes_the_decision_span_its_child(
    traced: Api, receiver: OtlpReceiver
) -> None:
    agent = traced.create()
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    allowed = ok(
        agent.client.post(f"{agent.path}/actions", json={"tool": "search"}, headers=headers)
    )
    span = one(receiver, DECISION, allowed["action_id"], agent.agent_id)
    assert (span.trace_id, span.parent_span_id) == (TRACE_ID, PARENT_ID)


@pytest.mark.parametrize(
    "traceparent",
    [
        "garbage",
        f"00-{'0' * 32}-{PARENT_ID}-01",
        f"ff-{TRACE_ID}-{PARENT_ID}-01",
        "00-" + "x" * 200,
    ],
)
def test_a_traceparent_that_does_not_parse_makes_a_root_span_not_an_error(
    traced: Api, receiver: OtlpReceiver, traceparent: str
) -> None:
    agent = traced.create()
    headers = {"traceparent": traceparent, "tracestate": "=,=bad"}
    response = agent.client.post(f"{agent.path}/actions", json={"tool": "search"}, headers=headers)
    span = one(receiver, DECISION, ok(response)["action_id"], agent.agent_id)
    assert span.parent_span_id == ""
    assert span.trace_id not in (TRACE_ID, "0" * 32)


def test_an_unsampled_traceparent_exports_no_span(traced: Api, receiver: OtlpReceiver) -> None:
    agent = traced.create()
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00"}
    ok(agent.client.post(f"{agent.path}/actions", json={"tool": "search"}, headers=headers))
    marker = ok(agent.act("search"))  # the default sampler follows the parent's flag
    one(receiver, DECISION, marker["action_id"], agent.agent_id)
    assert [s for s in receiver.spans if s.attributes.get("gen_ai.agent.id") == agent.agent_id] == [
        one(receiver, DECISION, marker["action_id"], agent.agent_id)
    ]


def test_approval_and_outcome_spans_link_to_the_decision_span(
    traced: Api, receiver: OtlpReceiver
) -> None:
    agent = traced.create()
    held = ok(agent.act("send_email", input={"to": "bob"}))
    action_id = held["action_id"]
    ok(traced.approve(agent, action_id))
    outcome_parent = "1111111111111111"
    headers = {"traceparent": f"00-{TRACE_ID}-{outcome_parent}-01"}
    ok(
        agent.client.post(
            f"{agent.path}/actions/{action_id}/outcome", json={"status": "success"}, headers=headers
        )
    )
    decided = one(receiver, DECISION, action_id, agent.agent_id)
    approved = one(receiver, "approve_action guardd", action_id, agent.agent_id)
    reported = one(receiver, "report_outcome guardd", action_id, agent.agent_id)
    assert approved.links == ((decided.trace_id, decided.span_id),)
    assert approved.attributes == {
        "gen_ai.tool.call.id": action_id,
        "gen_ai.agent.id": agent.agent_id,
        "gen_ai.tool.name": "send_email",
        "guard.decision": "allowed",
        "guard.by": "alice",
    }
    assert reported.links == ((decided.trace_id, decided.span_id),)
    assert reported.attributes["guard.outcome"] == "success"
    assert reported.attributes["gen_ai.tool.name"] == "send_email"
    assert (reported.trace_id, reported.parent_span_id) == (TRACE_ID, outcome_parent)


def test_a_rejection_and_a_cancellation_link_to_their_decisions(
    traced: Api, receiver: OtlpReceiver
) -> None:
    agent = traced.create()
    rejected_id = ok(agent.act("send_email"))["action_id"]
    cancelled_id = ok(agent.act("send_email"))["action_id"]
    ok(traced.reject(agent, rejected_id))
    ok(agent.client.post(f"{agent.path}/actions/{cancelled_id}/cancel", json={"reason": "moot"}))

    decided = one(receiver, DECISION, rejected_id, agent.agent_id)
    rejected = one(receiver, "reject_action guardd", rejected_id, agent.agent_id)
    assert rejected.links == ((decided.trace_id, decided.span_id),)
    assert rejected.attributes["guard.decision"] == "denied"
    assert rejected.attributes["guard.reason_code"] == "rejected"

    decided = one(receiver, DECISION, cancelled_id, agent.agent_id)
    cancelled = one(receiver, "cancel_action guardd", cancelled_id, agent.agent_id)
    assert cancelled.links == ((decided.trace_id, decided.span_id),)
    assert cancelled.attributes["guard.action.status"] == "cancelled"
    assert cancelled.attributes["guard.by"] == "agent"


def test_a_cancellation_by_an_operator_names_the_operator(
    traced: Api, receiver: OtlpReceiver
) -> None:
    agent = traced.create()
    action_id = ok(agent.act("send_email"))["action_id"]
    issued = ok(
        traced.admin.post("/v1/operators/tokens", json={"name": "carol", "role": "approver"}), 201
    )
    carol = traced.client(issued["token"])
    ok(carol.post(f"{agent.path}/actions/{action_id}/cancel", json={"reason": "moot"}))

    cancelled = one(receiver, "cancel_action guardd", action_id, agent.agent_id)
    assert cancelled.attributes["guard.by"] == "carol"


def test_a_claude_code_hook_call_and_its_outcome_are_traced_as_a_request_is(
    traced: Api, receiver: OtlpReceiver
) -> None:
    agent = traced.create()
    asked = pre("search", {"query": SECRET})
    ok(agent.client.post(HOOK, json=asked))
    ok(agent.client.post(HOOK, json=post(asked, {"success": True})))
    decided = receiver.wait_for(
        lambda spans: any(s.attributes.get("gen_ai.agent.id") == agent.agent_id for s in spans)
    )
    action_id = next(
        s.attributes["gen_ai.tool.call.id"]
        for s in decided
        if s.attributes.get("gen_ai.agent.id") == agent.agent_id
    )
    span = one(receiver, DECISION, action_id, agent.agent_id)
    assert span.attributes["gen_ai.tool.name"] == "search"
    assert span.attributes["guard.decision"] == "allowed"
    reported = one(receiver, "report_outcome guardd", action_id, agent.agent_id)
    assert reported.links == ((span.trace_id, span.span_id),)
    assert reported.attributes["guard.outcome"] == "success"


def test_otel_record_input_puts_the_tool_input_in_the_decision_span(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    server = GuardServer(
        tmp_path / "guard-data", env=traced_env(receiver), args=["--otel-record-input"]
    ).start()
    api = Api(server)
    try:
        agent = api.create()
        tool_input = {"q": SECRET, "n": 2, "price": 0.1}  # 0.1 arrives as a Decimal
        allowed = ok(agent.act("search", input=tool_input))
        span = one(receiver, DECISION, allowed["action_id"], agent.agent_id)
    finally:
        api.close()
        server.kill()
    assert json.loads(span.attributes["gen_ai.tool.call.arguments"]) == tool_input
    assert "traces: OTLP/HTTP to " in server.read_output()
    assert "(tool inputs recorded)" in server.read_output()


def test_spans_still_queued_at_stop_are_sent_before_guardd_exits(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    # A batch would leave only after an hour: only the stop sends it.
    env = traced_env(receiver) | {"OTEL_BSP_SCHEDULE_DELAY": "3600000"}
    server = GuardServer(tmp_path / "guard-data", env=env).start()
    api = Api(server)
    try:
        agent = api.create()
        allowed = ok(agent.act("search"))
        assert server.stop() == 0
    finally:
        api.close()
        server.kill()
    one(receiver, DECISION, allowed["action_id"], agent.agent_id)


def test_the_settings_of_the_jaeger_and_tempo_examples_reach_the_backend(
    tmp_path: Path,
) -> None:
    # docs/operations.md, "Traces": a service name, resource attributes, the
    # full traces URL, and gzip, as a collector or Tempo behind a proxy takes.
    receiver = OtlpReceiver().start()
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{receiver.url}/v1/traces",
        "OTEL_SERVICE_NAME": "guard-eu",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        "OTEL_BSP_SCHEDULE_DELAY": "20",
    }
    server = GuardServer(tmp_path / "guard-data", env=env).start()
    api = Api(server)
    try:
        agent = api.create()
        allowed = ok(agent.act("search"))
        span = one(receiver, DECISION, allowed["action_id"], agent.agent_id)
    finally:
        api.close()
        server.kill()
        receiver.stop()
    assert span.resource["service.name"] == "guard-eu"
    assert span.resource["deployment.environment"] == "prod"
    assert set(receiver.encodings) == {"gzip"}
    assert receiver.refused == []
    assert f"traces: OTLP/HTTP to {receiver.url}/v1/traces" in server.read_output()


def test_without_otel_variables_nothing_is_exported(tmp_path: Path) -> None:
    receiver = OtlpReceiver().start()
    # The receiver's address set the usual way, but under a name that is no
    # OTEL_* variable: guardd must not trace.
    server = GuardServer(tmp_path / "guard-data", env={"NOT_OTEL_ENDPOINT": receiver.url}).start()
    api = Api(server)
    try:
        agent = api.create()
        held = ok(agent.act("send_email"))
        ok(agent.act("search"))
        ok(api.approve(agent, held["action_id"]))
        assert server.stop() == 0  # a tracing guardd would flush its spans here
    finally:
        api.close()
        server.kill()
        receiver.stop()
    assert receiver.posts == 0
    assert receiver.spans == []
    assert "traces:" not in server.read_output()


def test_serving_without_traces_never_imports_opentelemetry() -> None:
    code = (
        "import sys; import guardd.__main__, guardd.app, guardd.routes.actions, "
        "guardd.routes.hooks; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"


# -- which variables turn traces on -------------------------------------------------


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        pytest.param({}, False, id="none"),
        pytest.param({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True, id="endpoint"),
        pytest.param({"OTEL_SERVICE_NAME": "guard-eu"}, True, id="any-otel-variable"),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"},
            False,
            id="sdk-disabled",
        ),
        pytest.param({"OTEL_TRACES_EXPORTER": "none"}, False, id="exporter-none"),
        pytest.param({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, True, id="http-protobuf"),
    ],
)
def test_tracing_is_on_when_an_otel_variable_asks(env: dict[str, str], wanted: bool) -> None:
    assert tracing_wanted(env) is wanted
    assert parse_settings([], env).tracing is wanted


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"OTEL_TRACES_EXPORTER": "zipkin"},
            r"^OTEL_TRACES_EXPORTER must be otlp or none, not 'zipkin': "
            r"guardd exports traces over OTLP/HTTP$",
            id="exporter",
        ),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            r"^OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf, not 'grpc': "
            r"guardd exports traces over OTLP/HTTP$",
            id="protocol",
        ),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            r"^OTEL_EXPORTER_OTLP_TRACES_PROTOCOL must be http/protobuf, not 'http/json': "
            r"guardd exports traces over OTLP/HTTP$",
            id="traces-protocol",
        ),
        pytest.param(
            {"GUARD_OTEL_RECORD_INPUT": "on"},
            r"^--otel-record-input puts tool inputs in traces, and no OTEL_\* variable "
            r"turns traces on \(set OTEL_EXPORTER_OTLP_ENDPOINT\)$",
            id="record-input-without-traces",
        ),
        pytest.param(
            {"GUARD_OTEL_RECORD_INPUT": "yes", "OTEL_SERVICE_NAME": "g"},
            r"^GUARD_OTEL_RECORD_INPUT must be on or off, not 'yes'$",
            id="record-input-word",
        ),
    ],
)
def test_trace_settings_guardd_cannot_honour_stop_it_at_start(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        parse_settings([], env)


def test_otel_record_input_flag_and_variable() -> None:
    env = {"OTEL_SERVICE_NAME": "g"}
    assert parse_settings(["--otel-record-input"], env).otel_record_input
    assert parse_settings([], env | {"GUARD_OTEL_RECORD_INPUT": "on"}).otel_record_input
    assert not parse_settings([], env | {"GUARD_OTEL_RECORD_INPUT": "off"}).otel_record_input
    assert not parse_settings([], env).otel_record_input


def test_traces_asked_for_without_the_sdk_stop_guardd_before_it_touches_anything(
    tmp_path: Path,
) -> None:
    # The SDK made unimportable, as where the otel extra is not installed.
    code = (
        "import sys; sys.modules['opentelemetry.sdk'] = None; "
        "from guardd.__main__ import main; "
        "sys.exit(main(['--data-dir', sys.argv[1], '--port', '1']))"
    )
    data_dir = tmp_path / "guard-data"
    env = {"PATH": "/usr/bin:/bin", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(data_dir)], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith(
        "guardd: an OTEL_* variable turns traces on, and the OpenTelemetry SDK cannot be imported ("
    )
    assert proc.stderr.endswith(
        "): install guardd's otel extra (in a clone: pip install '.[otel]'), "
        "or unset the OTEL_* variables\n"
    )
    assert not data_dir.exists()


# -- the tracer in-process: rules, and the bound on what it remembers -------------------


def in_memory(**kwargs: Any) -> tuple[Tracer, InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    return Tracer(provider, **kwargs), exported


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param({"rule": "no-prod-writes"}, id="rule-in-the-reply"),
        pytest.param({"rule": {"name": "no-prod-writes", "id": "r1"}}, id="rule-object"),
        pytest.param(
            {"reason": {"code": "rule_denied", "rule": "no-prod-writes"}}, id="rule-in-the-reason"
        ),
    ],
)
def test_a_decision_naming_a_rule_carries_guard_rule(reply: dict[str, Any]) -> None:
    tracer, exported = in_memory()
    reply = {"decision": "denied", "action_id": "act-1", **reply}
    tracer.decision("a", "deploy", {}, reply, time_ns(), Headers())
    (span,) = exported.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["guard.rule"] == "no-prod-writes"


def test_only_the_latest_decisions_are_remembered_for_links(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tracing, "REMEMBERED", 2)
    tracer, exported = in_memory()
    for n in (1, 2, 3):
        reply = {"decision": "pending_approval", "action_id": f"act-{n}"}
        tracer.decision("a", "send_email", {}, reply, time_ns(), Headers())
    for n in (1, 3):
        reply = {"decision": "allowed", "action_id": f"act-{n}"}
        tracer.approval("approve", "a", f"act-{n}", reply, time_ns(), Headers(), by="ann")
    spans = {
        (s.name, s.attributes["gen_ai.tool.call.id"]): s for s in exported.get_finished_spans()
    }  # type: ignore[index]
    assert spans["approve_action guardd", "act-1"].links == ()  # forgotten: the oldest
    (link,) = spans["approve_action guardd", "act-3"].links
    assert link.context == spans[DECISION, "act-3"].context


def test_a_span_that_cannot_be_made_is_logged_and_the_request_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tracer, exported = in_memory()
    tracer.decision("a", "search", {}, {"decision": "allowed"}, time_ns(), Headers())  # no ID
    assert exported.get_finished_spans() == ()
    assert caplog.messages == ["a span could not be made (decision)"]


def test_remembered_decisions_are_left_out_of_the_collectors_walks() -> None:
    # 65,536 of them when full: a full collection walking each one's objects
    # took about 90 ms longer, every time.
    tracer, _ = in_memory()
    for n in range(3):
        reply = {"decision": "pending_approval", "action_id": f"act-{n}"}
        tracer.decision("a", "search", {}, reply, time_ns(), Headers())
    gc.collect()
    remembered = list(tracer._decisions.items())
    assert len(remembered) == 3
    assert not any(gc.is_tracked(key) or gc.is_tracked(value) for key, value in remembered)
