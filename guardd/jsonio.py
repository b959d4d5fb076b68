"""JSON in and out of HTTP. Numbers go out in their exact shortest form
(Decimal 5 as ``5``, 0.3 as ``0.3``) and come in as int or Decimal."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from quart import Response, g, request

from agents_runtime.errors import CanonicalError
from agents_runtime.log import canonical

JSON_TYPE = "application/json"
MAX_BODY = 1024 * 1024


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=canonical.number_fragment)


# Every answer carries these; set at construction, where it costs least
# (werkzeug's Headers raise and catch an exception per lookup of a missing key).
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
_JSON_HEADERS = {"Cache-Control": "no-store", **SECURITY_HEADERS}


# A body this small fits in the socket's send buffer, so sending it cannot
# stall on a client that does not read. Such answers go without Quart's send
# timeout (RESPONSE_TIMEOUT), which costs a task and a timer per request
# (asyncio.wait_for); larger ones keep it.
SEND_AT_ONCE = 64 * 1024


class BodyError(ValueError):
    """A request body ``read_json`` refuses; ``guardd.errors`` answers it
    400 bad_request, as it answers its own BadRequest.

    Not a BadRequest itself: guardd.errors builds every error answer with
    ``json_response``, so this module must not need guardd.errors.
    """


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    extra = {**_JSON_HEADERS, **headers} if headers else _JSON_HEADERS
    body = dumps(value)
    response = Response(body, status=status, headers=extra, content_type=JSON_TYPE)
    if len(body) <= SEND_AT_ONCE:
        response.timeout = None
    return response


async def read_json() -> Any:
    """The request body as strict JSON, or BodyError saying what is wrong."""
    body = request.body
    # What request.get_data does, with asyncio.timeout in place of wait_for:
    # no task, no extra turn of the loop, per request.
    try:
        async with asyncio.timeout(request.body_timeout):
            data = await body
    except TimeoutError:
        raise BodyError(
            f"request body did not arrive within {request.body_timeout:g} seconds"
        ) from None
    body.clear()  # get_data(cache=False): the bytes are not kept
    g.body_read = True  # nothing left for app._finish to drain
    if not data:
        raise BodyError("request body must be a JSON object")
    try:
        return canonical.loads(data)
    except CanonicalError as exc:
        raise BodyError(f"request body: {exc}") from None
