"""An OTLP/HTTP trace receiver for tests: a threaded HTTP server on 127.0.0.1
that takes ``POST /v1/traces`` (protobuf, gzip or not), decodes each export
with the ``opentelemetry-proto`` messages and keeps every span it held."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.server import free_port

PATH = "/v1/traces"


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


@attrs.frozen
class Span:
    """One exported span, its IDs in hex as in a ``traceparent``."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: int
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]  # (trace ID, span ID) of each linked span
    resource: dict[str, Any]
    start_ns: int
    end_ns: int


def _spans(request: ExportTraceServiceRequest) -> list[Span]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    Span(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        links=tuple((ln.trace_id.hex(), ln.span_id.hex()) for ln in span.links),
                        resource=resource,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                    )
                )
    return spans


class OtlpReceiver:
    """Start with ``start()``, point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at ``url``."""

    def __init__(self) -> None:
        self.port = free_port()
        self.spans: list[Span] = []
        self.posts = 0
        self.refused: list[str] = []  # why a POST was answered 400
        self.unavailable = 0  # POSTs still to answer 503, as a backend starting up
        self.encodings: list[str | None] = []  # each POST's Content-Encoding
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.encodings.append(self.headers.get("Content-Encoding"))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                why = None
                if self.path != PATH:
                    why = f"path {self.path}"
                elif self.headers.get("Content-Type") != "application/x-protobuf":
                    why = f"content type {self.headers.get('Content-Type')}"
                if why is not None:
                    with receiver._lock:
                        receiver.refused.append(why)
                    self.send_response(400)
                    self.end_headers()
                    return
                with receiver._lock:
                    busy = receiver.unavailable > 0
                    receiver.unavailable -= busy
                if busy:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(raw)
                with receiver._lock:
                    receiver.posts += 1
                    receiver.spans.extend(_spans(request))
                body = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def named(self, name: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.name == name]

    def wait_for(self, found: Callable[[list[Span]], bool], timeout: float = 20.0) -> list[Span]:
        """The spans received, once ``found`` holds of them; AssertionError,
        listing what came, when it does not within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if found(spans):
                return spans
            if time.monotonic() > deadline:
                shown = [(s.name, s.attributes) for s in spans]
                raise AssertionError(f"spans received: {shown}; refused: {self.refused}")
            time.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.support.otlp SPANS.jsonl``: a receiver for the
    TypeScript client's tests. Prints its port, appends each span it gets
    to the file as one JSON object, and stops when its standard input
    closes (or after ten minutes, whatever happens to its parent)."""
    import json
    import signal
    import sys

    (path,) = sys.argv[1:] if argv is None else argv
    signal.alarm(600)
    receiver = OtlpReceiver().start()
    written = 0
    print(receiver.port, flush=True)

    def flush() -> None:
        nonlocal written
        with receiver._lock:
            spans = receiver.spans[written:]
            written = len(receiver.spans)
        with open(path, "a", encoding="utf-8") as out:
            for span in spans:
                out.write(json.dumps(attrs.asdict(span)) + "\n")

    stop = threading.Event()

    def keep_flushing() -> None:
        while not stop.wait(0.02):
            flush()

    threading.Thread(target=keep_flushing, daemon=True).start()
    sys.stdin.read()
    stop.set()
    receiver.stop()
    flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
