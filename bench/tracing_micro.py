"""The cost of one decision's span, in-process: ``guardd.tracing.Tracer``
as ``start_tracing`` builds it (batch processor, OTLP/HTTP exporter), its
spans sent to a local receiver (``bench/otlp_sink.py``, its own process).

It times N ``Tracer.decision`` calls as a route makes them (a reply dict, the
request's headers without a ``traceparent``), then waits until every span is
exported, and prints per decision: the CPU and wall time of the calls on the
calling thread (what the event loop pays), and the CPU time of the whole
process over the calls and the flush (the export thread's encoding and POSTs
included: under the GIL, that is taken from the event loop too). Figures
from a busy machine swing widely: compare medians of runs alternated.
``--profile`` prints where the calling thread's time goes (cProfile, top 25
by own time).

    python -m bench.tracing_micro                  # 20 000 decisions, 5 repeats
    python -m bench.tracing_micro -n 5000 --profile
    python -m bench.tracing_micro --sdk-encoder    # the SDK's exporter, to compare
    python -m bench.tracing_micro --sdk-spans      # spans made by the SDK's tracer
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import httpx
from werkzeug.datastructures import Headers

from bench.http_bench import free_port
from guardd.tracing import REMEMBERED, Tracer, start_tracing


def _sink(port: int) -> subprocess.Popen[bytes]:
    sink = subprocess.Popen(
        [sys.executable, "-m", "bench.otlp_sink", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/count", timeout=1.0)
            return sink
        except httpx.TransportError:
            if time.monotonic() > deadline:
                sink.kill()
                raise
            time.sleep(0.05)


def _decisions(n: int, start: int) -> list[tuple[str, str, dict[str, object]]]:
    """(agent, tool, reply) of n decisions as guardd answers them: mostly
    allowed, some denied by a rule, some held."""
    out = []
    for i in range(start, start + n):
        reply: dict[str, object] = {"action_id": f"act_{i:012d}", "decision": "allowed"}
        if i % 10 == 7:
            reply = {
                "action_id": reply["action_id"],
                "decision": "denied",
                "reason": {"code": "rule_denied", "rule": "no-prod-writes"},
            }
        elif i % 10 == 9:
            reply = {"action_id": reply["action_id"], "decision": "pending_approval"}
        out.append((f"bench-agent-{i % 64:03d}", "search", reply))
    return out


def _sdk_exported() -> Tracer:
    """The tracer as start_tracing builds it, but with the SDK's own OTLP
    exporter (and its encoder) in place of guardd.tracing_wire's."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from guardd.tracing import _resource

    exporter = OTLPSpanExporter()
    provider = TracerProvider(resource=_resource(), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracer(provider, exporter=exporter)


def _sdk_made() -> Tracer:
    """The tracer as start_tracing builds it, but making its spans through
    the SDK's tracer rather than handing them to the batch processor
    (guardd.tracing_spans)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from guardd.tracing import _resource
    from guardd.tracing_wire import Exporter

    exporter = Exporter()
    provider = TracerProvider(resource=_resource(), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracer(provider, exporter=exporter)


def run(n: int, repeats: int, profile: bool, sdk_encoder: bool, sdk_spans: bool = False) -> None:
    port = free_port()
    sink = _sink(port)
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    os.environ["OTEL_TRACES_SAMPLER"] = "always_on"
    # A loop makes spans faster than requests come: a queue that holds them
    # all, so that each is exported and its cost counted, not dropped.
    os.environ.setdefault("OTEL_BSP_MAX_QUEUE_SIZE", "1000000")
    if sdk_encoder:
        tracer = _sdk_exported()
    elif sdk_spans:
        tracer = _sdk_made()
    else:
        tracer = start_tracing()
    headers = Headers({"Authorization": "Bearer x", "Content-Type": "application/json"})
    tool_input = {"query": "weather in Lyon"}
    try:
        made = 0

        def batch(count: int) -> Callable[[], None]:
            nonlocal made
            work = _decisions(count, made)
            made += count
            decision = tracer.decision

            def go() -> None:
                for agent, tool, reply in work:
                    decision(agent, tool, tool_input, reply, time.time_ns(), headers)

            return go

        # Warm up (imports, the first connection) and fill the decisions
        # remembered for links, as in a guardd that has run a while.
        batch(REMEMBERED + 2000)()
        tracer.provider.force_flush()
        calls: list[float] = []
        owns: list[float] = []
        totals: list[float] = []
        for _ in range(repeats):
            go = batch(n)
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            own0 = time.thread_time()
            go()
            own1 = time.thread_time()
            t1 = time.perf_counter()
            tracer.provider.force_flush()
            cpu1 = time.process_time()
            calls.append((t1 - t0) / n * 1e6)
            owns.append((own1 - own0) / n * 1e6)
            totals.append((cpu1 - cpu0) / n * 1e6)
        print(
            f"{n} decisions x {repeats}, per decision (min / median): calling thread"
            f" CPU {min(owns):.1f} / {statistics.median(owns):.1f} us, wall"
            f" {min(calls):.1f} / {statistics.median(calls):.1f} us; process CPU with"
            f" export {min(totals):.1f} / {statistics.median(totals):.1f} us"
        )
        if profile:
            go = batch(n)
            profiler = cProfile.Profile()
            profiler.runcall(go)
            tracer.provider.force_flush()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        tracer.shutdown()
        counts = httpx.get(f"http://127.0.0.1:{port}/count", timeout=10.0).json()
        print(
            f"receiver: {counts['spans']} spans of {made} decisions in {counts['exports']} exports"
        )
    finally:
        sink.terminate()
        sink.wait(10)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.tracing_micro",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-n", type=int, default=20000, help="decisions per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile the calls once more")
    parser.add_argument(
        "--sdk-encoder",
        action="store_true",
        help="export with the SDK's OTLP exporter and encoder, to compare",
    )
    parser.add_argument(
        "--sdk-spans",
        action="store_true",
        help="make the spans through the SDK's tracer, to compare",
    )
    args = parser.parse_args(argv)
    run(args.n, args.repeats, args.profile, args.sdk_encoder, args.sdk_spans)


if __name__ == "__main__":
    main(sys.argv[1:])
