"""The OpenAPI 3.1 document of the HTTP API, served at ``GET /v1/openapi.json``.

Built, never written: each operation from its endpoint's declaration
(``guardd.endpoints``, beside the route that serves it), each schema from a
model (``guardd.bodies`` for request bodies, ``guardd.replies`` for answers),
each type's schema given once here (``_TYPES``), the lists of words from the
core's StrEnums, and the limits from the modules that enforce them. So no
operation, schema or number has a second copy that could drift.
``document(endpoints)`` is the document of those endpoints;
``guardd.app.document()`` that of the whole service. ``tests/guardd/
test_openapi.py`` checks it against the app and against real answers,
``tests/guardd/test_schemathesis.py`` fuzzes the service with it, and the
client's classes are generated from it (``sdk/models.py``).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable
from enum import StrEnum
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin

import attrs

from agents_runtime.core.behaviour import SYSTEM
from agents_runtime.core.money import LIMIT, PLACES, Money
from agents_runtime.core.policy import MAX_APPROVALS, MAX_TOOL_NAME
from agents_runtime.log.canonical import MAX_DEPTH, MAX_SAFE_INT
from agents_runtime.log.ids import AGENT_ID
from guardd import bodies, replies, wire
from guardd.bodies import MAX_NAME, MAX_TEXT
from guardd.endpoints import (
    CALLER_EXTENSION,
    JSON,
    MAX_IDEMPOTENCY_KEY,
    PATH_PARAMS,
    PERSON_EXTENSION,
    PUBLIC,
    ROLE_EXTENSION,
    Endpoint,
    Header,
    Query,
)
from guardd.errors import STATUS
from guardd.jsonio import MAX_BODY

Schema = dict[str, Any]

MONEY_LIMIT = int(LIMIT)
HEX64 = "^[0-9a-f]{64}$"
ACTION_ID = "^act-[1-9][0-9]*$"
GRANT_ID = "^grt-[1-9][0-9]*$"
ERROR_CODES = list(STATUS)  # every code the server can answer, in status order

MONEY_RULES = (
    f"An exact decimal: at most {PLACES} decimal places and below {MONEY_LIMIT} "
    "(larger or finer values get 400 bad_request). Read as a decimal, never a binary float."
)

DESCRIPTION = f"""\
Agent Action Guard decides whether an AI agent's tool actions are allowed,
charges a budget, records scars, holds actions for human approval and keeps a
signed, hash-chained log per agent. See docs/api.md for a short guide.

**Authentication.** Every `/v1` operation except `GET /v1/public-key` and
`GET /v1/openapi.json` needs `Authorization: Bearer <token>`: an operator's
(the admin token, an operator token `opr_...`, or with single sign-on the
identity provider's JWT), or an agent token (`agt_<agent_id>.<mac>`) that acts
on its own agent only. An operator needs the role an operation names in
`x-guard-role`: `viewer` (every read), `approver` (viewer, and approve,
reject, cancel, grants) or `admin` (everything); each role holds those before
it, and the admin token holds every role. A missing or invalid token is 401
`unauthorized`; a valid token that may not do this is 403 `forbidden`, whose
message names the role that is missing.

**Errors.** Every error answer has the body `{{"error": <message>, "code": <code>}}`.
An unknown path is 404 `not_found`, a known path with another method is 405
`method_not_allowed` (with an `Allow` header). A denied action is not an error:
it is a 200 decision with `decision` = `denied`.

**Request bodies.** At most {MAX_BODY} bytes (1 MiB; more is 413 `too_large`,
with or without Content-Length). The body is parsed as strict JSON whatever
the Content-Type says (`application/json` is expected; `text/plain` with a
JSON body is accepted, a form-encoded body is 400): no duplicate keys, no
`NaN` or infinities, integers within ±{MAX_SAFE_INT} (2^53-1), no lone
surrogates, valid UTF-8, nesting at most {MAX_DEPTH} levels. Unknown keys and
wrong types are 400 `bad_request` whose message names the key path, e.g.
`$.tools.search.requires_aproval: unknown key`. One body takes other keys
and ignores them: a Claude Code hook's input, which Claude Code extends.

**Numbers.** Money (budgets, costs, `spent`, `remaining`) is exact: at most
{PLACES} decimal places and below {MONEY_LIMIT}. Responses write integral
values without a fraction (`5`) and others in shortest form (`0.3`).

Every `GET` operation also answers `HEAD`. Bytes that are not HTTP (a NUL or
CR in a header, raw non-ASCII in the request target, a header block over
16 KiB) are refused by the HTTP server before guardd sees them, with a bare
400 or 431 and no JSON body.
"""


# -- schema helpers -----------------------------------------------------------


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _described(schema: Schema, description: str | None) -> Schema:
    return schema if description is None else schema | {"description": description}


def _string(min_length: int = 0, max_length: int | None = None, **extra: Any) -> Schema:
    schema: Schema = {"type": "string"}
    if min_length:
        schema["minLength"] = min_length
    if max_length is not None:
        schema["maxLength"] = max_length
    return schema | extra


def _enum(choices: type[StrEnum]) -> Schema:
    """A string that is one of ``choices``: the list is the core's own."""
    return {"type": "string", "enum": [member.value for member in choices]}


def _int(minimum: int | None = None) -> Schema:
    schema: Schema = {"type": "integer", "maximum": MAX_SAFE_INT}
    if minimum is not None:
        schema["minimum"] = minimum
    return schema


def _money(description: str) -> Schema:
    return {
        "type": "number",
        "minimum": 0,
        "exclusiveMaximum": MONEY_LIMIT,
        "description": description,
    }


def _positive(description: str | None) -> Schema:
    rules = f"Greater than 0; same limits as money: {MONEY_RULES}"
    return {
        "type": "number",
        "exclusiveMinimum": 0,
        "exclusiveMaximum": MONEY_LIMIT,
        "description": rules if description is None else f"{description} {rules}",
    }


def _plain(schema: Schema) -> Callable[[str | None], Schema]:
    return lambda description: _described(schema, description)


# -- each type's schema, once ---------------------------------------------------

_NAME = _string(1, MAX_NAME)
_RECEIPT = {
    "type": "array",
    "items": {"type": "string"},
    "minItems": 2,
    "maxItems": 2,
    "description": "The action's action_requested and action_allowed records, each "
    "exactly as its line in the log (no newline): the signed proof that this call was "
    "allowed, for the tool's executor to check (docs/receipts.md). Absent for an "
    "allowance written before allowances named their request.",
}
_TYPES: dict[Any, Callable[[str | None], Schema]] = {
    wire.Name: _plain(_NAME),
    wire.Operator: _plain(_NAME | {"not": {"const": SYSTEM}}),
    wire.Text: _plain(_string(1, MAX_TEXT)),
    wire.Tool: _plain(_string(1, MAX_TOOL_NAME)),
    wire.Count: _plain(_int(1)),
    wire.Quorum: _plain({"type": "integer", "minimum": 1, "maximum": MAX_APPROVALS}),
    wire.Whole: _plain(_int(0)),
    wire.HeadSeq: _plain(_int(-1)),
    wire.Seconds: lambda description: _positive(description or "Seconds."),
    wire.Positive: _positive,
    wire.Timestamp: _plain(_string(format="date-time")),
    wire.InputMatch: _plain({"type": "object"}),
    wire.Hex64: _plain(_string(pattern=HEX64)),
    wire.Signature: _plain(_string(pattern="^[0-9a-f]{128}$")),
    wire.ActionId: _plain(_string(pattern=ACTION_ID)),
    wire.GrantId: _plain(_string(pattern=GRANT_ID)),
    wire.Receipt: _plain(_RECEIPT),
    wire.ErrorCode: _plain({"type": "string", "enum": ERROR_CODES}),
    wire.CallId: _plain(_string(1, MAX_IDEMPOTENCY_KEY, pattern="^[ -~]+$")),
    # Money in a request: what it may be is part of what it means.
    Money: lambda description: _money(
        MONEY_RULES if description is None else f"{description} {MONEY_RULES}"
    ),
    wire.Amount: lambda description: _money(description or MONEY_RULES),
    wire.Balance: _plain({"type": "number", "exclusiveMaximum": MONEY_LIMIT}),
    str: _plain({"type": "string"}),
    int: _plain(_int()),
    bool: _plain({"type": "boolean"}),
    Any: _plain({}),
}
# Types named in the document as schemas of their own.
_SCALARS: dict[Any, tuple[str, Schema]] = {
    wire.AgentId: (
        "AgentId",
        _string(
            1,
            64,
            pattern=f"^{AGENT_ID.pattern}$",
            description="1 to 64 characters from A-Z a-z 0-9 _ -",
        ),
    ),
    wire.PolicyName: (
        "PolicyName",
        _string(
            1,
            64,
            pattern=f"^{AGENT_ID.pattern}$",
            description="A named policy: 1 to 64 characters from A-Z a-z 0-9 _ -",
        ),
    ),
    wire.AgentToken: (
        "AgentToken",
        _string(
            pattern=r"^agt_[A-Za-z0-9_-]{1,64}\.[A-Za-z0-9_-]{43}$",
            description="`agt_<agent_id>.<mac>`; acts on that agent only.",
        ),
    ),
}


class _Components:
    """The document's named schemas, each made once, as the operations name
    their types: a model (an attrs class of guardd.bodies or guardd.replies),
    a ``OneOf`` of them, or a type of ``_SCALARS``."""

    def __init__(self) -> None:
        self.schemas: dict[str, Schema] = {}

    def _named(self, name: str, make: Callable[[], Schema]) -> Schema:
        if name not in self.schemas:
            self.schemas[name] = {}  # taken, should a model name itself
            self.schemas[name] = make()
        return _ref(name)

    def schema(self, type_: Any, description: str | None = None) -> Schema:
        """The schema of a field (or a reply, or a body) of ``type_``."""
        origin = get_origin(type_)
        if origin in (Union, UnionType):  # X | None, or a union of models
            args = get_args(type_)
            rest = [arg for arg in args if arg is not NoneType]
            if len(rest) < len(args):
                inner = functools.reduce(operator.or_, rest)
                return _nullable(self.schema(inner, description))
            return _described({"oneOf": [self.schema(arg) for arg in rest]}, description)
        if origin is Literal:
            return _described(_literal(get_args(type_)), description)
        if origin is list:
            (item,) = get_args(type_)
            return _described({"type": "array", "items": self.schema(item)}, description)
        if origin is dict:
            key, value = get_args(type_)
            if value in (Any, object):
                return _described({"type": "object"}, description)
            schema: Schema = {"type": "object"}
            if key is not str:
                schema["propertyNames"] = self.schema(key)
            schema["additionalProperties"] = self.schema(value)
            return _described(schema, description)
        if isinstance(type_, type) and issubclass(type_, StrEnum):
            return _described(_enum(type_), description)
        if isinstance(type_, type) and issubclass(type_, replies.OneOf):
            return self._named(type_.__name__, lambda: self._one_of(type_))
        if attrs.has(type_):
            name = bodies.NAMES.get(type_, type_.__name__)
            return _described(self._named(name, lambda: self.model(type_)), description)
        scalar = _SCALARS.get(type_)
        if scalar is not None:
            name, schema = scalar
            return _described(self._named(name, lambda: schema), description)
        make = _TYPES.get(type_)
        if make is None:
            raise TypeError(f"no schema for {type_!r}: add it to guardd.openapi._TYPES")
        return make(description)

    def model(self, model: type[Any]) -> Schema:
        """An object of the model's fields: those without a default required,
        no other key unless the model says ``more_keys``."""
        properties: dict[str, Schema] = {}
        required: list[str] = []
        for field in attrs.fields(attrs.resolve_types(model)):
            properties[field.name] = self.schema(field.type, field.metadata.get(wire.DESCRIPTION))
            if field.default is attrs.NOTHING:
                required.append(field.name)
        schema: Schema = {"type": "object", "properties": properties, "required": required}
        if not getattr(model, "more_keys", False):
            schema["additionalProperties"] = False
        return _described(schema, _docstring(model))

    def _one_of(self, union: type[replies.OneOf]) -> Schema:
        variants = [self.schema(variant) for variant in union.variants]
        return _described({"oneOf": variants}, _docstring(union))


def _literal(values: tuple[Any, ...]) -> Schema:
    if all(isinstance(value, bool) for value in values) and len(values) == 1:
        return {"const": values[0]}
    if not all(isinstance(value, str) for value in values):
        raise TypeError(f"no schema for Literal{list(values)}: strings, or one bool")
    words = [str(value) for value in values]  # a StrEnum member as its plain value
    if len(words) == 1:
        return {"type": "string", "const": words[0]}
    return {"type": "string", "enum": words}


def _docstring(cls: type) -> str | None:
    doc = cls.__dict__.get("__doc__")
    return " ".join(doc.split()) if doc else None


# -- operations -------------------------------------------------------------------

_MEANING = {
    "bad_request": "invalid input",
    "unauthorized": "missing or invalid token",
    "forbidden": "valid token, not allowed here",
    "not_found": "no such agent or path",
    "unknown_action": "no such action",
    "method_not_allowed": "wrong method",
    "agent_exists": "agent ID already taken",
    "invalid_state": "wrong state for this step",
    "already_terminated": "the agent is already terminated",
    "idempotency_conflict": "Idempotency-Key reused with another body",
    "too_large": f"body over {MAX_BODY} bytes",
    "internal": "server-side failure",
    "quarantined": "the agent's log failed verification at startup",
    "read_only": "no signing key: nothing can be written",
    "unavailable": "the service cannot take the request now",
}


def _errors(codes: Iterable[str], components: _Components) -> dict[str, Schema]:
    """Error responses grouped by status, each listing its possible codes."""
    by_status: dict[int, list[str]] = {}
    for code in codes:
        by_status.setdefault(STATUS[code], []).append(code)
    error = components.schema(replies.Error)
    responses: dict[str, Schema] = {}
    for status, status_codes in sorted(by_status.items()):
        schema: Schema = {"allOf": [error], "properties": {"code": {"enum": status_codes}}}
        text = "; ".join(f"`{code}`: {_MEANING[code]}" for code in status_codes)
        response: Schema = {"description": text, "content": {JSON: {"schema": schema}}}
        if status == 401:
            response["headers"] = {
                "WWW-Authenticate": {"schema": {"type": "string", "const": "Bearer"}}
            }
        responses[str(status)] = response
    return responses


def _parameter(name: str, where: str, schema: Schema, description: str) -> Schema:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "schema": schema,
        "description": description,
    }


def _parameters(endpoint: Endpoint, components: _Components) -> list[Schema]:
    params = [
        _parameter(
            name, "path", components.schema(PATH_PARAMS[name].type), PATH_PARAMS[name].description
        )
        for name in endpoint.path_params
    ]
    declared: tuple[Query | Header, ...] = (*endpoint.query, *endpoint.headers)
    for param in declared:
        where = "query" if isinstance(param, Query) else "header"
        params.append(_parameter(param.name, where, param.schema, param.description))
    return params


def _operation(endpoint: Endpoint, components: _Components) -> Schema:
    operation: Schema = {"summary": endpoint.summary, "tags": [endpoint.tag]}
    caller = endpoint.caller
    said = [] if caller is PUBLIC else [caller.value]
    if endpoint.role is not None:
        said.append(f"An operator needs the `{endpoint.role}` role.")
    if endpoint.description:
        said.append(endpoint.description)
    if said:
        operation["description"] = " ".join(said)
    params = _parameters(endpoint, components)
    if params:
        operation["parameters"] = params
    if endpoint.body is not None:
        body = components.schema(endpoint.body)
        operation["requestBody"] = {"required": True, "content": {JSON: {"schema": body}}}
    reply = endpoint.reply
    content = {media: {"schema": components.schema(reply.shape)} for media in reply.media}
    operation["responses"] = {
        str(reply.status): {"description": reply.description, "content": content},
        **_errors(endpoint.codes(), components),
    }
    if caller is PUBLIC:
        operation["security"] = []
    operation[CALLER_EXTENSION] = caller.name.lower()
    if endpoint.role is not None:
        operation[ROLE_EXTENSION] = endpoint.role
    if endpoint.person:
        operation[PERSON_EXTENSION] = True
    return operation


def document(endpoints: Iterable[Endpoint]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``endpoints``, as a fresh dict."""
    components = _Components()
    components.schema(replies.Error)  # first: every error answer names it
    paths: dict[str, Schema] = {}
    for endpoint in endpoints:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(
            endpoint, components
        )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Agent Action Guard",
            "version": "1",
            "description": DESCRIPTION,
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "servers": [{"url": "/", "description": "This server."}],
        "security": [{"bearer": []}],
        "tags": [
            {"name": "service", "description": "Health, keys and this document."},
            {"name": "console", "description": "The operator console (static files)."},
            {"name": "agents", "description": "Agents, actions, approvals and the log."},
            {"name": "operators", "description": "Who calls, and the operators' tokens."},
        ],
        "paths": paths,
        "components": {
            "schemas": components.schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The admin token, an operator token `opr_...`, "
                    "an agent token `agt_<agent_id>.<mac>`, or, with single sign-on, "
                    "a JWT of the identity provider.",
                }
            },
        },
    }
