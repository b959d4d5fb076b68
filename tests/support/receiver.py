"""A webhook receiver for tests: a threaded HTTP server on 127.0.0.1 that
records every POST, checks each signature with its own implementation of the
Standard Webhooks scheme, and answers as the test tells it (a status, a wait,
a huge body), so that hostile and broken receivers can be played."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

from tests.support.server import free_port

KEY = bytes(range(32))
SECRET = "whsec_" + base64.b64encode(KEY).decode()
CHUNK = 64 * 1024


@attrs.frozen
class Post:
    """One POST as it arrived."""

    id: str
    valid: bool  # its signature checks out with KEY
    body: Any  # the JSON body
    raw: bytes
    headers: dict[str, str]

    @property
    def type(self) -> str:
        return str(self.body.get("type", ""))

    @property
    def agent_id(self) -> str:
        return str(self.body["data"]["agent_id"])


@attrs.frozen
class Answer:
    """What the receiver does with a POST: wait ``hold`` seconds (cut short
    when the receiver stops), then answer ``status`` with ``body_size`` bytes
    of body, sent as the client reads them until it closes."""

    status: int = 204
    hold: float = 0.0
    body_size: int = 0


def accept(post: Post) -> Answer:
    """The well-behaved receiver: 204 when the signature checks out, else 400."""
    return Answer(204 if post.valid else 400)


class Receiver:
    """Records every POST in ``posts``; those it answered 2xx also in ``got``."""

    def __init__(self, answer: Callable[[Post], Answer] = accept, port: int | None = None) -> None:
        self.port = port or free_port()
        self.path = "/hook"  # with a query, say: the receiver answers on any path
        self.answer = answer
        self.posts: list[Post] = []
        self.got: list[Post] = []
        self.body_bytes_sent = 0  # bytes of answer bodies the clients took
        self.server: ThreadingHTTPServer | None = None
        self.stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                post = receiver.record(raw, dict(self.headers.items()))
                answer = receiver.answer(post)
                if answer.hold:
                    receiver.stopping.wait(answer.hold)
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Length", str(answer.body_size))
                    self.end_headers()
                    self.wfile.flush()
                    if 200 <= answer.status < 300:
                        receiver.got.append(post)
                    self.send_body(answer.body_size)
                except OSError:
                    self.close_connection = True  # the client has gone

            def send_body(self, size: int) -> None:
                chunk = b"\0" * CHUNK
                left = size
                while left > 0 and not receiver.stopping.is_set():
                    piece = chunk[: min(CHUNK, left)]
                    self.wfile.write(piece)
                    receiver.body_bytes_sent += len(piece)
                    left -= len(piece)
                self.wfile.flush()

            def log_message(self, *args: Any) -> None:
                pass

        self.stopping.clear()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def record(self, raw: bytes, headers: dict[str, str]) -> Post:
        lower = {k.lower(): v for k, v in headers.items()}
        msg_id = lower.get("webhook-id", "")
        signed = f"{msg_id}.{lower.get('webhook-timestamp', '')}.".encode() + raw
        expected = base64.b64encode(hmac.new(KEY, signed, hashlib.sha256).digest())
        given = [s.split(",", 1)[-1] for s in lower.get("webhook-signature", "").split()]
        valid = any(hmac.compare_digest(g.encode(), expected) for g in given)
        post = Post(msg_id, valid, json.loads(raw), raw, lower)
        self.posts.append(post)
        return post

    def stop(self) -> None:
        self.stopping.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Post]:
        """The first ``count`` accepted POSTs, once there are that many."""
        return self.wait_until(lambda: len(self.got) >= count, timeout)[:count]

    def wait_until(self, done: Callable[[], bool], timeout: float = 20.0) -> list[Post]:
        """Wait until ``done()``; returns ``got``."""
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, [p.id for p in self.posts]
            time.sleep(0.05)
        return self.got

    def ids(self) -> list[str]:
        """The ids of every POST, in the order they arrived (retries repeat)."""
        return [p.id for p in self.posts]
