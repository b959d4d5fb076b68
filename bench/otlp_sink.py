"""A local OTLP/HTTP trace receiver for the tracing benchmark:
``python -m bench.otlp_sink --port N``. It takes ``POST /v1/traces``,
decodes each export (so guardd's exporter does all its real work, and the
spans are counted) and answers 200; ``GET /count`` answers the spans and
exports received so far as JSON. It runs in its own process, so its CPU is
not the benchmark driver's, and stops on SIGTERM (or after an hour)."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ANSWER = ExportTraceServiceResponse().SerializeToString()
MAX_LIFE = 3600  # seconds: a sink whose benchmark died stops by itself


class Counts:
    def __init__(self) -> None:
        self.spans = 0
        self.exports = 0
        self.lock = threading.Lock()


def handler(counts: Counts) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a collector would

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
            with counts.lock:
                counts.spans += spans
                counts.exports += 1
            self._answer(ANSWER, "application/x-protobuf")

        def do_GET(self) -> None:
            with counts.lock:
                body = json.dumps({"spans": counts.spans, "exports": counts.exports}).encode()
            self._answer(body, "application/json")

        def _answer(self, body: bytes, content_type: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.otlp_sink")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(Counts()))
    server.daemon_threads = True

    def stop(*_: object) -> None:
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(MAX_LIFE)
    server.serve_forever()
    server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
