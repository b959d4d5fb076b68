"""One declaration per endpoint: who may call it, what it reads, what it answers.

A route declares itself with ``@blueprint.endpoint(...)`` (``guardd.routes.
common``), right above its function: method, URL rule, summary, the caller it
admits, its body model, query and header parameters, its reply shape and the
error codes only it can give. The declaration is all there is: the blueprint
authenticates, parses what is declared and hands it to the route as
arguments, and ``guardd.openapi`` builds the document from the same
declarations. The error codes every endpoint of a kind can give (a token's,
an agent's, a body's) follow from the declaration; ``errors`` adds the rest.

This module knows no route and no Quart: the parameters here turn the text
of a query or a header into a value, or say 400 ``bad_request``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import Enum
from typing import Any

import attrs

from guardd.errors import BadRequest
from guardd.wire import ActionId, AgentId, GrantId, PolicyName

JSON = "application/json"

# What the endpoints accept; the document quotes the same numbers.
MAX_WAIT = 60  # seconds a long-poll may wait
LOG_LIMIT_DEFAULT = 500  # records a log read returns unless told
LOG_LIMIT_MAX = 5000  # a larger limit counts as this
MAX_IDEMPOTENCY_KEY = 128  # characters


class Access(Enum):
    """Who an endpoint admits (its value: what the document says of it). On a
    path that names an agent (``<agent_id>``) the agent is found after the
    token is checked: 404, or 503 quarantined. ``TOKEN_AGENT`` admits an
    agent token alone, and acts on the agent that token names (the path names
    none): for a caller that cannot put its agent's ID in a URL. An operator
    (the admin token, an operator token, a person signed in) must hold the
    endpoint's role (``Endpoint.role``)."""

    PUBLIC = "no token"
    OPERATOR = "An operator only."
    AGENT = "Its own agent token, or an operator."  # on a path that names an agent
    TOKEN_AGENT = "An agent token only (an operator is 403): it acts on the token's agent."  # noqa: S105


PUBLIC, OPERATOR, AGENT, TOKEN_AGENT = (
    Access.PUBLIC,
    Access.OPERATOR,
    Access.AGENT,
    Access.TOKEN_AGENT,
)
# The OpenAPI keys that say who an operation admits: the Access member's name
# in lower case (public, operator, agent, token_agent), and the operator role.
CALLER_EXTENSION = "x-guard-caller"
ROLE_EXTENSION = "x-guard-role"
# Set on an operation the admin token is refused (403): it is no person.
PERSON_EXTENSION = "x-guard-person"


@attrs.frozen
class Query:
    """A query parameter, handed to the route as ``arg`` (its name)."""

    name: str
    parse: Callable[[str | None], Any]  # its text, None when absent
    schema: dict[str, Any]
    description: str

    @property
    def arg(self) -> str:
        return self.name


@attrs.frozen
class Header:
    """A request header, handed to the route as ``arg``."""

    name: str
    arg: str
    parse: Callable[[list[str]], Any]  # every value the request has for it
    schema: dict[str, Any]
    description: str


@attrs.frozen
class PathParam:
    """How the document describes a ``<name>`` of a URL rule."""

    type: Any
    description: str


PATH_PARAMS = {
    "agent_id": PathParam(AgentId, "The agent."),
    "action_id": PathParam(ActionId, "An action of the agent: `act-<n>`."),
    "grant_id": PathParam(GrantId, "A grant."),
    "policy_name": PathParam(PolicyName, "A named policy."),
    "name": PathParam(str, "File name."),
    "token_id": PathParam(str, "An operator token: `tok-<16 hex>`."),
    "credential_id": PathParam(str, "A passkey's credential ID, base64url."),
}


@attrs.frozen
class Reply:
    """A successful answer: its shape (a ``guardd.replies`` class, a union of
    them, or ``str`` for text), what it means, its status and media types."""

    shape: Any
    description: str
    status: int = 200
    media: tuple[str, ...] = (JSON,)


@attrs.frozen
class Endpoint:
    """One endpoint, declared beside the function that serves it (``view``)."""

    method: str
    rule: str  # Quart's: /v1/agents/<agent_id>
    summary: str
    caller: Access
    reply: Reply
    view: Callable[..., Any]
    tag: str
    # The operator role it needs (guardd.auth.ROLES): set for OPERATOR and AGENT,
    # None for the others; None on OPERATOR too: any operator, whatever they hold.
    role: str | None = None
    body: Any = None  # a body model, or a union of them (one of several bodies)
    query: tuple[Query, ...] = ()
    headers: tuple[Header, ...] = ()
    errors: tuple[str, ...] = ()  # beyond those that follow from the rest
    writes: bool = False  # read_only and unavailable when the log cannot take it
    description: str | None = None
    # Only a person or a program with its own identity, not the admin token
    # (passkeys: a passkey belongs to someone); the route refuses it.
    person: bool = False
    # The command whose reply is this endpoint's reply: the actor renders it in
    # its turn with the view of ``reply.shape`` (guardd.views.in_turn), so a
    # command's body, reply shape and view are all read here, beside its route.
    sends: type | None = None

    @property
    def path(self) -> str:
        """The OpenAPI path: ``/v1/agents/{agent_id}``."""
        return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", self.rule)

    @property
    def path_params(self) -> tuple[str, ...]:
        return tuple(re.findall(r"<(?:[^:<>]+:)?([^<>]+)>", self.rule))

    @property
    def on_agent(self) -> bool:
        return "agent_id" in self.path_params

    @property
    def has_agent(self) -> bool:
        """It acts on one agent: the path's, or the token's."""
        return self.on_agent or self.caller is TOKEN_AGENT

    def codes(self) -> tuple[str, ...]:
        """Every error code this endpoint can answer, in a fixed order."""
        codes: list[str] = []
        if self.caller is not PUBLIC:
            codes += ["unauthorized", "forbidden"]
        codes.append("internal")
        if self.caller is not PUBLIC:
            codes.append("unavailable")  # an OIDC token while its issuer cannot be reached
        if self.has_agent:
            codes += ["not_found", "quarantined"]
        if self.query or self.headers:
            codes.append("bad_request")
        if self.body is not None:
            codes += ["bad_request", "too_large"]
        if self.writes:
            codes += ["read_only", "unavailable"]
        if "action_id" in self.path_params:
            codes.append("unknown_action")
        codes += self.errors
        return tuple(dict.fromkeys(codes))


# -- the parameters ----------------------------------------------------------------

_INTEGER = re.compile(r"-?[0-9]+")
_NUMBER = re.compile(r"-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def wait_param(text: str | None) -> float:
    if text is None:
        return 0.0
    # float() alone would also take " 5", "1_0" and non-ASCII digits such as "٥".
    wait = float(text) if _NUMBER.fullmatch(text) else -1.0
    if not 0 <= wait <= MAX_WAIT:  # also false for NaN
        raise BadRequest(f"wait must be a number of seconds from 0 to {MAX_WAIT}")
    return wait


def int_param(name: str, text: str | None, *, default: int, minimum: int) -> int:
    if text is None:
        return default
    try:
        if not _INTEGER.fullmatch(text):  # int() alone takes " 5", "1_0", "٥"
            raise ValueError(text)
        value = int(text)  # ValueError past 4300 digits too
    except ValueError:
        raise BadRequest(f"{name} must be an integer") from None
    if value < minimum:
        raise BadRequest(f"{name} must be at least {minimum}")
    return value


def idempotency_key(keys: list[str]) -> str | None:
    if not keys:
        return None
    if len(keys) > 1:
        # Which one would the repeat be matched on? Neither: refuse.
        raise BadRequest("one Idempotency-Key header at most")
    key = keys[0]
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise BadRequest(f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} characters")
    # Header bytes arrive decoded as Latin-1, so a non-ASCII byte is a char above 127.
    if not (key.isascii() and key.isprintable()):
        raise BadRequest("Idempotency-Key must be printable ASCII (no tab, no other bytes)")
    return key


WAIT = Query(
    "wait",
    wait_param,
    {"type": "number", "minimum": 0, "maximum": MAX_WAIT},
    f"Long-poll: answer as soon as the action leaves pending_approval, "
    f"or after this many seconds (0 to {MAX_WAIT}).",
)
AFTER = Query(
    "after",
    lambda text: int_param("after", text, default=-1, minimum=-1),
    {"type": "integer", "minimum": -1},
    "Return records after this seq (default -1: from seq 0).",
)
LIMIT = Query(
    "limit",
    lambda text: min(int_param("limit", text, default=LOG_LIMIT_DEFAULT, minimum=1), LOG_LIMIT_MAX),
    {"type": "integer", "minimum": 1},
    f"At most this many records (default {LOG_LIMIT_DEFAULT}; "
    f"above {LOG_LIMIT_MAX} counts as {LOG_LIMIT_MAX}).",
)
IDEMPOTENCY_KEY = Header(
    "Idempotency-Key",
    "idempotency_key",
    idempotency_key,
    {"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY},
    "A repeat with the same key returns the first decision and creates nothing; "
    "the same key with another body is 409.",
)
