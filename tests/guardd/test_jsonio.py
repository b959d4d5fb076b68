"""Reading request bodies: whole bodies parse, bodies that stop arriving are
refused after the body timeout with the usual error shape."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from quart import Quart, Response

from guardd.errors import register_error_handlers
from guardd.jsonio import SEND_AT_ONCE, json_response, read_json


def _echo_app(body_timeout: float) -> Quart:
    app = Quart("echo")
    app.config["BODY_TIMEOUT"] = body_timeout
    register_error_handlers(app)

    @app.post("/echo")
    async def echo() -> Response:
        return json_response({"got": await read_json()})

    return app


async def test_a_whole_body_is_read_and_parsed() -> None:
    client = _echo_app(5).test_client()
    response = await client.post("/echo", data=b'{"a": 1.5}')
    assert response.status_code == 200
    assert await response.get_json() == {"got": {"a": 1.5}}


async def test_a_body_that_stops_arriving_is_refused_after_the_body_timeout() -> None:
    client = _echo_app(0.2).test_client()
    async with client.request("/echo", method="POST") as connection:
        await connection.send(b'{"a": ')  # and nothing more, never complete
        data = await asyncio.wait_for(connection.receive(), 5)
        assert connection.status_code == 400
    body: Any = json.loads(data)
    assert body["code"] == "bad_request"
    assert body["error"] == "request body did not arrive within 0.2 seconds"


def test_small_answers_skip_the_send_timeout_and_large_ones_keep_it() -> None:
    small = json_response({"ok": True})
    large = json_response({"blob": "x" * SEND_AT_ONCE})
    assert small.timeout is None  # sent without asyncio.wait_for
    assert large.timeout is Ellipsis  # Quart's RESPONSE_TIMEOUT applies
