"""Every error a client sees, produced here and nowhere else.

The tree::

    ApiError                      an error answer: status, code, message
    ├── BadRequest                400 bad_request
    ├── Unauthorized              401 unauthorized
    ├── ApiForbidden              403 forbidden
    └── ApiNotFound               404 not_found

    guardd.jsonio.BodyError       400 bad_request (a body that cannot be read as strict JSON)

agents_runtime errors (AgentError subclasses) carry their own code; werkzeug's
HTTP exceptions (unknown path, wrong method, body too large) and anything
unexpected are mapped by ``register_error_handlers``. The body is always
``{"error": <message>, "code": <code>}``; no stack trace ever reaches a client.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from quart import Quart, Response, has_request_context, request
from werkzeug.exceptions import HTTPException

from agents_runtime.errors import AgentError, GuardError
from guardd.jsonio import BodyError, json_response

log = logging.getLogger("guardd")

STATUS: dict[str, int] = {
    "bad_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "unknown_action": 404,
    "method_not_allowed": 405,
    "agent_exists": 409,
    "invalid_state": 409,
    "already_terminated": 409,
    "idempotency_conflict": 409,
    "too_large": 413,
    "internal": 500,
    "quarantined": 503,
    "read_only": 503,
    "unavailable": 503,
}

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


class ApiError(Exception):
    code = "internal"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    @property
    def status(self) -> int:
        return STATUS[self.code]


class BadRequest(ApiError):
    code = "bad_request"


class Unauthorized(ApiError):
    code = "unauthorized"


class ApiForbidden(ApiError):
    code = "forbidden"


class ApiNotFound(ApiError):
    code = "not_found"


def error_response(code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return json_response({"error": message, "code": code}, STATUS[code], headers)


def register_error_handlers(app: Quart) -> None:
    @app.errorhandler(ApiError)
    async def _api(exc: ApiError) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if exc.code == "unauthorized" else None
        return error_response(exc.code, exc.message, headers)

    @app.errorhandler(BodyError)
    async def _body(exc: BodyError) -> Response:
        return error_response("bad_request", str(exc))

    @app.errorhandler(AgentError)
    async def _agent(exc: AgentError) -> Response:
        if exc.code == "internal":
            log.error("agent error answered 500: %s", exc)
        return error_response(exc.code if exc.code in STATUS else "internal", str(exc))

    @app.errorhandler(HTTPException)
    async def _http(exc: HTTPException) -> Response:
        status = exc.code or 500
        code = _HTTP_CODES.get(status, "bad_request" if 400 <= status < 500 else "internal")
        messages = {
            "not_found": "no such path",
            "method_not_allowed": "method not allowed on this path",
            "too_large": "request body is larger than 1 MiB",
        }
        headers: dict[str, str] = {}
        if status == 405:
            allowed: Any = getattr(exc, "valid_methods", None)
            if allowed:
                headers["Allow"] = ", ".join(sorted(allowed))
        return error_response(code, messages.get(code, exc.description or code), headers)

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception) -> Response:
        request_id = uuid.uuid4().hex[:12]
        # One line naming the request and the cause, so that a grep for the
        # id the client was given finds it; the traceback follows it.
        where = f"{request.method} {request.path}" if has_request_context() else "-"
        cause = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, GuardError):
            log.error("request %s (%s) failed: %s", request_id, where, cause)
        else:
            log.error("request %s (%s) failed: %s", request_id, where, cause, exc_info=exc)
        return error_response("internal", f"internal error (request id {request_id})")
