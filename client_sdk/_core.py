"""Everything the clients do that is not I/O: building requests, reading answers.

The clients (``_async.py``, and ``_sync.py`` generated from it) only pass
the ``Request`` objects made here to their sender and return what
``parse_response`` makes of the answer, so both build exactly the same
requests and raise exactly the same errors. Each answer is read by its
parser in ``_parsers.py``, generated with the classes it makes from the
service's OpenAPI document (``sdk/models.py``).
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import attrs

from client_sdk import _json
from client_sdk._models import (
    Action,
    AgentListEntry,
    AgentStatus,
    CreatedAgent,
    Decision,
    IssuedOperatorToken,
    LogPage,
    Me,
    OperatorToken,
    PendingEntry,
    Policy,
    VerifyReport,
)
from client_sdk._parsers import (
    parse_action,
    parse_agents,
    parse_created,
    parse_decision,
    parse_issued_operator_token,
    parse_log_page,
    parse_me,
    parse_operator_token,
    parse_operator_tokens,
    parse_pending,
    parse_policy,
    parse_public_key,
    parse_status,
    parse_token,
    parse_verify_report,
)
from client_sdk.errors import (
    ERRORS_BY_CODE,
    ERRORS_BY_STATUS,
    APIError,
    InvalidResponse,
    ToolInputError,
)

T = TypeVar("T")

#: Money accepted in requests: sent as a JSON number, exactly.
Money = Decimal | int | float

MAX_WAIT = 60  # seconds; the service's bound for ?wait=
MAX_LOG_LIMIT = 5000
DEFAULT_LOG_LIMIT = 500

_AGENT_TOKEN = re.compile(r"agt_([A-Za-z0-9_-]{1,64})\.[A-Za-z0-9_-]+")


@attrs.frozen
class Request(Generic[T]):
    """One HTTP request, ready to send as often as the retry policy allows.

    ``wait`` is how long the service may hold the answer (long-poll); the
    sender adds it to the read timeout. ``resendable`` says whether the request
    may be sent again after an attempt the service may have acted on.
    """

    method: str
    path: str
    parse: Callable[[Any], T]
    params: Mapping[str, str] = attrs.field(factory=dict)
    body: bytes | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)
    wait: float = 0.0
    resendable: bool = True


def agent_id_from_token(token: str) -> str | None:
    """The agent ID inside an agent token ``agt_<agent_id>.<mac>``, or None."""
    match = _AGENT_TOKEN.fullmatch(token)
    return match.group(1) if match else None


def new_idempotency_key() -> str:
    return uuid.uuid4().hex


def _segment(value: str) -> str:
    return quote(value, safe="")


def _json_body(value: Any) -> bytes:
    return _json.dumps(value)


def check_money(value: Money, what: str) -> Money:
    if isinstance(value, bool) or not isinstance(value, Decimal | int | float):
        raise TypeError(f"{what} must be a number (Decimal, int or float), not {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{what} must be finite, not {value!r}")
    if isinstance(value, Decimal) and not value.is_finite():
        raise ValueError(f"{what} must be finite, not {value!r}")
    return value


def _wait_param(wait: float) -> str:
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 < wait <= MAX_WAIT:
        raise ValueError(f"wait must be a number of seconds in (0, {MAX_WAIT}], not {wait!r}")
    if float(wait).is_integer():
        return str(int(wait))
    # Milliseconds are plenty; round up so a tiny wait never becomes 0.
    return f"{math.ceil(wait * 1000) / 1000:.3f}".rstrip("0")


# ---- reading answers ------------------------------------------------------


def next_log_after(page: LogPage) -> int | None:
    """The ``after`` for the page following ``page``, or None when it was the last."""
    if not page.records:
        return None
    last = page.records[-1].get("seq")
    if type(last) is not int:
        raise InvalidResponse(f"a log record's 'seq' should be an integer, got {last!r}")
    return None if last >= page.head.seq else last


def error_from_response(status: int, content: bytes, *, resent: bool = False) -> APIError:
    """The exception for a non-2xx answer: by its ``code``, else by its status."""
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        code: str = body["code"]
        message = body.get("error")
        cls = ERRORS_BY_CODE.get(code) or ERRORS_BY_STATUS.get(status, APIError)
        return cls(str(message or code), status=status, code=code, resent=resent)
    cls = ERRORS_BY_STATUS.get(status, APIError)
    text = content[:200].decode("utf-8", "replace").strip()
    message = f"HTTP {status} without an error body" + (f": {text}" if text else "")
    code = cls.default_code if cls is not APIError else f"http_{status}"
    return cls(message, status=status, code=code, resent=resent)


def parse_response(request: Request[T], status: int, content: bytes, *, resent: bool = False) -> T:
    """``request``'s result from the answer, or the mapped APIError."""
    if not 200 <= status < 300:
        raise error_from_response(status, content, resent=resent)
    try:
        body = _json.loads(content)
    except ValueError as exc:
        raise InvalidResponse(f"{request.method} {request.path}: body is not JSON") from exc
    try:
        return request.parse(body)
    except InvalidResponse as exc:
        raise InvalidResponse(f"{request.method} {request.path}: {exc.message}") from None


# ---- failures without an answer --------------------------------------------

_ERRNO = re.compile(r"^\[Errno -?\d+\]\s*")


def failure_reason(kind: str, text: str) -> str:
    """A transport failure in a few words: ``connection refused``, ``timed out``."""
    text = _ERRNO.sub("", text).strip()
    return (text[:1].lower() + text[1:]) if text else kind


def transport_message(
    base_url: str, request: Request[Any], attempts: int, reason: str, *, sent: bool
) -> str:
    """What ``TransportError`` says: the address tried first, then what was asked.

    ``sent`` means the request may have reached the service before the
    connection failed, so it may have acted on it.
    """
    what = f"{request.method} {request.path}, {attempts} attempt{'s' if attempts > 1 else ''}"
    if sent:
        return (
            f"no answer from guardd at {base_url}: {reason} "
            f"({what}; the service may have received the request)"
        )
    return f"cannot reach guardd at {base_url}: {reason} ({what})"


# ---- requests --------------------------------------------------------------


class AgentCore:
    """Requests on one agent's own endpoints (agent token, or admin)."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self.path = f"/v1/agents/{_segment(agent_id)}"

    def request_action(
        self,
        tool: str,
        input: Any = None,
        cost: Money | None = None,
        idempotency_key: str | None = None,
    ) -> Request[Decision]:
        problem = _json.json_safety_problem(input, "input")
        if problem:
            raise ToolInputError(
                f"input of tool {tool!r} is not JSON-safe: {problem}", argument="input"
            )
        body: dict[str, Any] = {"tool": tool, "input": input}
        if cost is not None:
            body["cost"] = check_money(cost, "cost")
        key = idempotency_key or new_idempotency_key()
        return Request(
            "POST",
            f"{self.path}/actions",
            parse_decision,
            body=_json_body(body),
            headers={"Idempotency-Key": key},
        )

    def get_action(self, action_id: str, wait: float | None = None) -> Request[Action]:
        params = {} if wait is None else {"wait": _wait_param(wait)}
        return Request(
            "GET",
            f"{self.path}/actions/{_segment(action_id)}",
            parse_action,
            params=params,
            wait=0.0 if wait is None else float(wait),
        )

    def report_outcome(
        self, action_id: str, status: str, detail: str | None = None
    ) -> Request[AgentStatus]:
        body = {"status": status} | ({} if detail is None else {"detail": detail})
        # Resending is safe: a second copy gets 409 invalid_state, which the
        # client checks against the action's recorded outcome.
        return Request(
            "POST",
            f"{self.path}/actions/{_segment(action_id)}/outcome",
            parse_status,
            body=_json_body(body),
        )

    def status(self) -> Request[AgentStatus]:
        return Request("GET", self.path, parse_status)

    def cancel(self, action_id: str, reason: str | None = None) -> Request[Action]:
        body = {} if reason is None else {"reason": reason}
        # Resending is safe: a second copy gets 409 invalid_state, which the
        # client checks against the action's status.
        return Request(
            "POST",
            f"{self.path}/actions/{_segment(action_id)}/cancel",
            parse_action,
            body=_json_body(body),
        )

    def policy(self) -> Request[Policy]:
        return Request("GET", f"{self.path}/policy", parse_policy)


class AdminCore:
    """Requests only the admin token may make, plus the agent ones on any agent."""

    def agent(self, agent_id: str) -> AgentCore:
        return AgentCore(agent_id)

    def public_key(self) -> Request[str]:
        return Request("GET", "/v1/public-key", parse_public_key)

    def create_agent(self, agent_id: str, policy: Mapping[str, Any]) -> Request[CreatedAgent]:
        return Request(
            "POST",
            "/v1/agents",
            parse_created,
            body=_json_body({"agent_id": agent_id, "policy": dict(policy)}),
            resendable=False,
        )

    def list_agents(self) -> Request[list[AgentListEntry]]:
        return Request("GET", "/v1/agents", parse_agents)

    def reissue_token(self, agent_id: str) -> Request[str]:
        return Request("GET", f"{self.agent(agent_id).path}/token", parse_token)

    def set_policy(self, agent_id: str, policy: Mapping[str, Any]) -> Request[AgentStatus]:
        return Request(
            "PUT",
            f"{self.agent(agent_id).path}/policy",
            parse_status,
            body=_json_body(dict(policy)),
        )

    def list_pending(self, agent_id: str) -> Request[list[PendingEntry]]:
        return Request("GET", f"{self.agent(agent_id).path}/actions/pending", parse_pending)

    def approve(
        self, agent_id: str, action_id: str, approver: str, note: str | None = None
    ) -> Request[Decision]:
        body = {"approver": approver} | ({} if note is None else {"note": note})
        return Request(
            "POST",
            f"{self.agent(agent_id).path}/actions/{_segment(action_id)}/approve",
            parse_decision,
            body=_json_body(body),
            resendable=False,
        )

    def reject(
        self, agent_id: str, action_id: str, approver: str, reason: str, scar: str | None = None
    ) -> Request[Decision]:
        body = {"approver": approver, "reason": reason} | ({} if scar is None else {"scar": scar})
        return Request(
            "POST",
            f"{self.agent(agent_id).path}/actions/{_segment(action_id)}/reject",
            parse_decision,
            body=_json_body(body),
            resendable=False,
        )

    def add_scar(
        self, agent_id: str, severity: str, reason: str, action_id: str | None, by: str | None
    ) -> Request[AgentStatus]:
        body = {"severity": severity, "reason": reason}
        if action_id is not None:
            body["action_id"] = action_id
        if by is not None:
            body["by"] = by
        return Request(
            "POST",
            f"{self.agent(agent_id).path}/scars",
            parse_status,
            body=_json_body(body),
            resendable=False,
        )

    def terminate(self, agent_id: str, reason: str, by: str) -> Request[AgentStatus]:
        return Request(
            "POST",
            f"{self.agent(agent_id).path}/terminate",
            parse_status,
            body=_json_body({"reason": reason, "by": by}),
            resendable=False,
        )

    def log_page(
        self, agent_id: str, after: int = -1, limit: int = DEFAULT_LOG_LIMIT
    ) -> Request[LogPage]:
        if isinstance(after, bool) or not isinstance(after, int) or after < -1:
            raise ValueError(f"after must be an integer >= -1, not {after!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LOG_LIMIT:
            raise ValueError(f"limit must be an integer in [1, {MAX_LOG_LIMIT}], not {limit!r}")
        return Request(
            "GET",
            f"{self.agent(agent_id).path}/log",
            parse_log_page,
            params={"after": str(after), "limit": str(limit)},
        )

    def verify(self, agent_id: str) -> Request[VerifyReport]:
        return Request("GET", f"{self.agent(agent_id).path}/verify", parse_verify_report)

    def me(self) -> Request[Me]:
        return Request("GET", "/v1/me", parse_me)

    def create_operator_token(
        self, name: str, role: str, ttl_secs: int | None = None
    ) -> Request[IssuedOperatorToken]:
        body: dict[str, Any] = {"name": name, "role": role}
        if ttl_secs is not None:
            body["ttl_secs"] = ttl_secs
        return Request(
            "POST",
            "/v1/operators/tokens",
            parse_issued_operator_token,
            body=_json_body(body),
            resendable=False,
        )

    def list_operator_tokens(self) -> Request[list[OperatorToken]]:
        return Request("GET", "/v1/operators/tokens", parse_operator_tokens)

    def revoke_operator_token(self, token_id: str) -> Request[OperatorToken]:
        return Request(
            "POST",
            f"/v1/operators/tokens/{_segment(token_id)}/revoke",
            parse_operator_token,
            resendable=False,
        )
