"""The OpenAPI 3.1 document of the HTTP API, served at ``GET /v1/openapi.json``.

Built as a plain dict from small helpers so that each operation reads like a
row of the endpoint table in docs/api.md: its parameters, its body, its answer
and the error codes it can give. Limits come from the modules that enforce
them, so the document cannot drift from the server on a number. The request
bodies are derived from guardd.bodies' models (``body_schema``), and the
lists of words from the core's StrEnums: neither has a second copy here.
``tests/guardd/test_openapi.py`` checks that every route of the app is here
and nowhere else, and ``tests/guardd/test_schemathesis.py`` checks real
answers against it.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

import attrs

from agents_runtime.core.behaviour import SYSTEM
from agents_runtime.core.money import LIMIT, PLACES, Money
from agents_runtime.core.policy import MAX_TOOL_NAME
from agents_runtime.core.vocabulary import (
    ActionStatus,
    Decision,
    GrantStatus,
    Outcome,
    ReasonCode,
    Severity,
)
from agents_runtime.log.canonical import MAX_DEPTH, MAX_SAFE_INT
from agents_runtime.log.ids import AGENT_ID
from agents_runtime.log.kinds import Kind
from guardd import bodies
from guardd.bodies import MAX_NAME, MAX_TEXT
from guardd.errors import STATUS
from guardd.jsonio import MAX_BODY
from guardd.routes.common import LOG_LIMIT_DEFAULT, LOG_LIMIT_MAX, MAX_IDEMPOTENCY_KEY, MAX_WAIT

Schema = dict[str, Any]

JSON = "application/json"
MONEY_LIMIT = int(LIMIT)
HEX64 = "^[0-9a-f]{64}$"
ACTION_ID = "^act-[1-9][0-9]*$"
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
`GET /v1/openapi.json` needs `Authorization: Bearer <token>`: the admin token,
or an agent token (`agt_<agent_id>.<mac>`) that acts on its own agent only.
A missing or invalid token is 401 `unauthorized`; a valid token that may not
do this is 403 `forbidden`.

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
`$.tools.search.requires_aproval: unknown key`.

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


def _obj(
    properties: dict[str, Schema],
    required: list[str] | None = None,
    *,
    description: str | None = None,
    strict: bool = True,
) -> Schema:
    """An object schema; ``strict`` forbids keys that are not listed."""
    schema: Schema = {"type": "object", "properties": properties}
    schema["required"] = list(properties) if required is None else required
    if strict:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _string(min_length: int = 0, max_length: int | None = None, **extra: Any) -> Schema:
    schema: Schema = {"type": "string"}
    if min_length:
        schema["minLength"] = min_length
    if max_length is not None:
        schema["maxLength"] = max_length
    return schema | extra


def _const(value: str) -> Schema:
    return {"type": "string", "const": str(value)}  # a StrEnum member as its plain value


def _enum(choices: type[StrEnum]) -> Schema:
    """A string that is one of ``choices``: the list is the core's own."""
    return {"type": "string", "enum": [member.value for member in choices]}


def _int(minimum: int | None = None, **extra: Any) -> Schema:
    schema: Schema = {"type": "integer", "maximum": MAX_SAFE_INT}
    if minimum is not None:
        schema["minimum"] = minimum
    return schema | extra


def _money(description: str = MONEY_RULES) -> Schema:
    return {
        "type": "number",
        "minimum": 0,
        "exclusiveMaximum": MONEY_LIMIT,
        "description": description,
    }


def _positive(description: str) -> Schema:
    return {
        "type": "number",
        "exclusiveMinimum": 0,
        "exclusiveMaximum": MONEY_LIMIT,
        "description": f"{description} Greater than 0; same limits as money: {MONEY_RULES}",
    }


# -- schemas ------------------------------------------------------------------


def _error_schema() -> Schema:
    return _obj(
        {
            "error": {"type": "string", "description": "A message for people."},
            "code": {"type": "string", "enum": ERROR_CODES, "description": "For programs."},
        },
        description="The body of every error answer.",
    )


def _policy_schemas() -> dict[str, Schema]:
    rule = _obj(
        {
            "cost": _money("The tool's minimum charge (default 0). " + MONEY_RULES),
            "requires_approval": {
                "type": "boolean",
                "description": "When true every call is held for an operator (default false).",
            },
            "max_calls": _nullable(_int(1, description="Lifetime cap on allowed calls.")),
            "approval_timeout_secs": _nullable(
                _positive(
                    "Seconds a held call of this tool may wait for an operator before it "
                    "expires; overrides the policy's `approval_timeout_secs`."
                )
            ),
        },
        required=[],
        description="A tool rule. Every key is optional.",
    )
    rate_limit = _obj(
        {
            "max_actions": _int(1, description="Allowed actions (all tools) per window."),
            "window_secs": _positive("The trailing window in seconds."),
        },
        description="At most `max_actions` allowed actions within the trailing window.",
    )
    policy = _obj(
        {
            "budget": _money("Total credits the agent may spend. " + MONEY_RULES),
            "scar_limit": _positive("Scar score at which the agent is terminated."),
            "tools": {
                "type": "object",
                "propertyNames": _string(1, MAX_TOOL_NAME),
                "additionalProperties": _ref("ToolRule"),
                "description": f"Tool name (1 to {MAX_TOOL_NAME} characters) to its rule.",
            },
            "default": _nullable(_ref("ToolRule")),
            "rate_limit": _nullable(_ref("RateLimit")),
            "approval_timeout_secs": _nullable(
                _positive(
                    "Seconds a held action may wait for an operator, counted from its "
                    "`approval_required` record, before it expires (denied "
                    "`approval_expired`). Absent or null: it waits for ever."
                )
            ),
        },
        required=["budget", "scar_limit", "tools"],
        description=(
            "An agent's policy. `default` is the rule for any tool "
            "not in `tools` (null or absent: such tools are denied `tool_not_allowed`); "
            "its `max_calls` counts per tool name. Unknown keys anywhere are 400 "
            "`bad_request` naming the key, so a typo is never silently ignored."
        ),
    )
    return {"ToolRule": rule, "RateLimit": rate_limit, "Policy": policy}


def _status_schemas() -> dict[str, Schema]:
    head = _obj(
        {"seq": _int(-1), "hash": _string(pattern=HEX64)},
        description="The last record of a log: its seq and hash.",
    )
    scar = _obj(
        {
            "seq": _int(0, description="Seq of the scar record."),
            "severity": _enum(Severity),
            "reason": {"type": "string"},
            "action_id": _string(pattern=ACTION_ID),
        },
        required=["seq", "severity", "reason"],
    )
    status = _obj(
        {
            "agent_id": _ref("AgentId"),
            "alive": {"type": "boolean"},
            "termination_reason": _nullable(
                _string(
                    description="`scar_limit`, `fatal_scar`, `budget_exhausted` or the "
                    "operator's reason; null while alive."
                )
            ),
            "budget": _money(),
            "spent": _money(),
            "remaining": {
                "type": "number",
                "exclusiveMaximum": MONEY_LIMIT,
                "description": "budget minus spent. Negative only when a new policy set a "
                "budget below what was already spent.",
            },
            "scar_score": _int(0),
            "scar_limit": _positive("From the policy."),
            "scars": {"type": "array", "items": _ref("Scar")},
            "actions_allowed": _int(0),
            "actions_denied": _int(0),
            "actions_pending": _int(0),
            "head": _ref("Head"),
            "public_key": _string(pattern=HEX64, description="Hex Ed25519 public key."),
        },
        description="An agent's state, rebuilt from its log.",
    )
    active = _obj(
        {"agent_id": _ref("AgentId"), "state": _const("active"), "status": _ref("AgentStatus")}
    )
    quarantined = _obj(
        {
            "agent_id": _ref("AgentId"),
            "state": _const("quarantined"),
            "error": _string(description="The first bad record of the log, for people."),
            "failure": _ref("VerifyFailure"),
        },
        required=["agent_id", "state", "error"],
    )
    return {
        "AgentId": _string(
            1,
            64,
            pattern=f"^{AGENT_ID.pattern}$",
            description="1 to 64 characters from A-Z a-z 0-9 _ -",
        ),
        "Head": head,
        "Scar": scar,
        "AgentStatus": status,
        "AgentListEntry": {
            "oneOf": [active, quarantined],
            "description": "`status` when active; `error` when its log failed verification.",
        },
        "AgentToken": _string(
            pattern=r"^agt_[A-Za-z0-9_-]{1,64}\.[A-Za-z0-9_-]{43}$",
            description="`agt_<agent_id>.<mac>`; acts on that agent only.",
        ),
    }


def _deny_reason() -> Schema:
    tool = _string(1, MAX_TOOL_NAME)
    variants = [
        _obj({"code": _const(ReasonCode.TERMINATED), "reason": _nullable({"type": "string"})}),
        _obj({"code": _const(ReasonCode.TOOL_NOT_ALLOWED), "tool": tool}),
        _obj({"code": _const(ReasonCode.TOOL_CALL_LIMIT), "tool": tool, "max_calls": _int(1)}),
        _obj(
            {
                "code": _const(ReasonCode.RATE_LIMITED),
                "max_actions": _int(1),
                "window_secs": _positive("The policy's window."),
            }
        ),
        _obj(
            {
                "code": _const(ReasonCode.INSUFFICIENT_BUDGET),
                "cost": _money("The charge."),
                "remaining": {"type": "number"},
            }
        ),
        _obj(
            {
                "code": _const(ReasonCode.REJECTED),
                "by": {"type": "string"},
                "reason": {"type": "string"},
            }
        ),
        _obj(
            {
                "code": _const(ReasonCode.APPROVAL_EXPIRED),
                "timeout_secs": _positive("The approval timeout that ran out."),
            }
        ),
        _obj(
            {
                "code": _const(ReasonCode.CANCELLED),
                "by": {"type": "string", "enum": ["agent", "admin"]},
                "reason": {"type": "string"},
            },
            required=["code", "by"],
        ),
    ]
    return {"oneOf": variants, "description": "Why an action was denied: `code` and its fields."}


GRANT_ID = "^grt-[1-9][0-9]*$"


def _action_schemas() -> dict[str, Schema]:
    action_id = _string(pattern=ACTION_ID)
    grant_id = _string(
        pattern=GRANT_ID,
        description="The grant this allowance drew on in place of an operator's approval.",
    )
    receipt = {
        "type": "array",
        "items": {"type": "string"},
        "minItems": 2,
        "maxItems": 2,
        "description": "The action's action_requested and action_allowed records, each "
        "exactly as its line in the log (no newline): the signed proof that this call was "
        "allowed, for the tool's executor to check (docs/receipts.md). Absent for an "
        "allowance written before allowances named their request.",
    }
    allowed = _obj(
        {
            "decision": _const(Decision.ALLOWED),
            "action_id": action_id,
            "cost": _money("The charge: max(request cost, the tool's minimum)."),
            "remaining": _money("What is left after this charge."),
            "receipt": receipt,
            "grant_id": grant_id,
        },
        required=["decision", "action_id", "cost", "remaining"],
    )
    denied = _obj(
        {"decision": _const(Decision.DENIED), "action_id": action_id, "reason": _ref("DenyReason")}
    )
    pending = _obj({"decision": _const(Decision.PENDING_APPROVAL), "action_id": action_id})
    action = _obj(
        {
            "action_id": action_id,
            "tool": _string(1, MAX_TOOL_NAME),
            "input": {"description": "Any JSON value, recorded verbatim."},
            "cost": _money("The charge (the charge approval would make while pending)."),
            "status": {
                "type": "string",
                "enum": [member.value for member in ActionStatus],
            },
            "outcome": _nullable(_enum(Outcome)),
            "requested_at": _string(format="date-time"),
            "reason": _ref("DenyReason"),
            "approved_by": {"type": "string"},
            "note": {"type": "string"},
            "decided_at": _string(
                format="date-time", description="When a held action left pending_approval."
            ),
            "expires_at": _string(
                format="date-time",
                description="When a pending action expires, if its policy sets a timeout.",
            ),
            "receipt": receipt,
            "grant_id": grant_id,
        },
        required=["action_id", "tool", "input", "cost", "status", "outcome", "requested_at"],
        description="An action. `reason` is present when denied or cancelled; `approved_by` "
        "and `note` when an operator approved it; `receipt` once it was allowed.",
    )
    pending_entry = _obj(
        {
            "requested_at": _string(format="date-time"),
            "seq": _int(0, description="Seq of the action_requested record."),
            "action": _obj(
                {
                    "action_id": action_id,
                    "tool": _string(1, MAX_TOOL_NAME),
                    "input": {"description": "Any JSON value."},
                    "cost": _money("The charge approval would make."),
                }
            ),
            "expires_at": _string(
                format="date-time", description="When it expires, if its policy sets a timeout."
            ),
        },
        required=["requested_at", "seq", "action"],
    )
    return {
        "DenyReason": _deny_reason(),
        "AllowedDecision": allowed,
        "DeniedDecision": denied,
        "PendingDecision": pending,
        "Decision": {
            "oneOf": [_ref("AllowedDecision"), _ref("DeniedDecision"), _ref("PendingDecision")]
        },
        "Action": action,
        "PendingEntry": pending_entry,
    }


def _log_schemas() -> dict[str, Schema]:
    record = _obj(
        {
            "seq": _int(0),
            "kind": _enum(Kind),
            "ts": _string(format="date-time", description="ISO 8601 UTC, microseconds, Z."),
            "prev": _string(pattern=HEX64),
            "hash": _string(pattern=HEX64),
            "sig": _string(pattern="^[0-9a-f]{128}$"),
        },
        strict=False,
        description="A signed log record; each kind has its own further fields. "
        "The format is specified in docs/log-format.md.",
    )
    failure = _obj(
        {
            "line": _int(1, description="1-based line of the first bad record."),
            "seq": _nullable(_int()),
            "reason": {"type": "string", "description": "e.g. `hash does not match content`."},
        }
    )
    verified = _obj(
        {
            "ok": {"const": True},
            "records": _int(0),
            "public_key": _string(pattern=HEX64),
            "head": _ref("Head"),
        }
    )
    failed = _obj({"ok": {"const": False}, "records": _int(0), "failure": _ref("VerifyFailure")})
    return {
        "LogRecord": record,
        "VerifyFailure": failure,
        "VerifyReport": {"oneOf": [verified, failed]},
    }


# The request bodies are guardd.bodies' models: each schema is derived from
# a model's fields (names, types, which are required, descriptions), each
# type's schema given once here, so a field added to a model is documented
# by itself and no second copy of a body can drift.
BODIES: dict[str, type[Any]] = {
    "CreateAgent": bodies.CreateAgent,
    "ActionRequest": bodies.ActionRequest,
    "OutcomeReport": bodies.OutcomeReport,
    "Approve": bodies.ApproveBody,
    "Cancel": bodies.CancelBody,
    "Reject": bodies.RejectBody,
    "AddScar": bodies.ScarBody,
    "Terminate": bodies.TerminateBody,
    "IssueGrant": bodies.GrantBody,
    "RevokeGrant": bodies.RevokeGrantBody,
}
_BODY_NAMES = {model: name for name, model in BODIES.items()}


def _described(schema: Schema, description: str | None) -> Schema:
    return schema if description is None else schema | {"description": description}


def _plain(schema: Schema) -> Callable[[str | None], Schema]:
    return lambda description: _described(schema, description)


def _money_field(description: str | None) -> Schema:
    return _money(MONEY_RULES if description is None else f"{description} {MONEY_RULES}")


def _seconds_field(description: str | None) -> Schema:
    return _positive(description or "Seconds.")


_NAME = _string(1, MAX_NAME)
_TYPE_SCHEMAS: dict[Any, Callable[[str | None], Schema]] = {
    bodies.Name: _plain(_NAME),
    bodies.Operator: _plain(_NAME | {"not": {"const": SYSTEM}}),
    bodies.Text: _plain(_string(1, MAX_TEXT)),
    bodies.Tool: _plain(_string(1, MAX_TOOL_NAME)),
    bodies.AgentId: _plain(_ref("AgentId")),
    bodies.Count: _plain(_int(1)),
    bodies.Seconds: _seconds_field,
    bodies.Timestamp: _plain(_string(format="date-time")),
    bodies.InputMatch: _plain({"type": "object"}),
    Money: _money_field,
    str: _plain({"type": "string"}),
    Any: _plain({}),
}


def _type_schema(type_: Any, description: str | None) -> Schema:
    if get_origin(type_) in (Union, UnionType):  # a NewType | None is a typing.Union
        args = [arg for arg in get_args(type_) if arg is not NoneType]
        if len(args) != 1 or len(get_args(type_)) != 2:
            raise TypeError(f"no schema for {type_}: only X | None")
        return _nullable(_type_schema(args[0], description))
    if isinstance(type_, type) and issubclass(type_, StrEnum):
        return _described(_enum(type_), description)
    make = _TYPE_SCHEMAS.get(type_)
    if make is None:
        raise TypeError(f"no schema for {type_!r}: add it to guardd.openapi._TYPE_SCHEMAS")
    return make(description)


def body_schema(model: type[Any]) -> Schema:
    """The JSON schema of a request body model: a strict object of its fields,
    those without a default required."""
    properties: dict[str, Schema] = {}
    required: list[str] = []
    for field in attrs.fields(attrs.resolve_types(model)):
        component = field.metadata.get(bodies.COMPONENT)
        description = field.metadata.get(bodies.DESCRIPTION)
        if component is not None:
            properties[field.name] = _ref(component)
        else:
            properties[field.name] = _type_schema(field.type, description)
        if field.default is attrs.NOTHING:
            required.append(field.name)
    doc = model.__doc__
    return _obj(properties, required, description=" ".join(doc.split()) if doc else None)


def _body_schemas() -> dict[str, Schema]:
    return {name: body_schema(model) for name, model in BODIES.items()}


def _grant_schemas() -> dict[str, Schema]:
    grant_id = _string(pattern=GRANT_ID)
    grant = _obj(
        {
            "grant_id": grant_id,
            "tool": _string(1, MAX_TOOL_NAME),
            "by": {"type": "string"},
            "note": {"type": "string"},
            "issued_at": _string(format="date-time"),
            "expires_at": _string(format="date-time"),
            "max_calls": _nullable(_int(1)),
            "max_cost": _nullable(_money("The grant's budget.")),
            "input_match": _nullable({"type": "object"}),
            "calls_used": _int(0),
            "cost_used": _money("Charged to the grant so far."),
            "calls_left": _nullable(_int(0)),
            "cost_left": _nullable(_money("What the grant may still spend.")),
            "status": _enum(GrantStatus),
            "revoked_by": {"type": "string"},
            "revoked_at": _string(format="date-time"),
            "revoke_reason": {"type": "string"},
        },
        required=[
            "grant_id",
            "tool",
            "by",
            "issued_at",
            "expires_at",
            "max_calls",
            "max_cost",
            "input_match",
            "calls_used",
            "cost_used",
            "calls_left",
            "cost_left",
            "status",
        ],
        description="An operator's approval of a bounded stream of calls, with what is left.",
    )
    return {
        "Grant": grant,
        "GrantList": _obj({"grants": {"type": "array", "items": _ref("Grant")}}),
    }


def _schemas() -> dict[str, Schema]:
    return {
        "Error": _error_schema(),
        **_policy_schemas(),
        **_status_schemas(),
        **_action_schemas(),
        **_log_schemas(),
        **_body_schemas(),
        **_grant_schemas(),
    }


# -- operation helpers --------------------------------------------------------

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


def _json_response(description: str, schema: Schema) -> Schema:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _errors(*codes: str) -> dict[str, Schema]:
    """Error responses grouped by status, each listing its possible codes."""
    by_status: dict[int, list[str]] = {}
    for code in codes:
        by_status.setdefault(STATUS[code], []).append(code)
    responses: dict[str, Schema] = {}
    for status, status_codes in sorted(by_status.items()):
        schema: Schema = {
            "allOf": [_ref("Error")],
            "properties": {"code": {"enum": status_codes}},
        }
        text = "; ".join(f"`{code}`: {_MEANING[code]}" for code in status_codes)
        response = _json_response(text, schema)
        if status == 401:
            response["headers"] = {
                "WWW-Authenticate": {"schema": {"type": "string", "const": "Bearer"}}
            }
        responses[str(status)] = response
    return responses


AUTH = ("unauthorized", "forbidden", "internal")
AGENT = (*AUTH, "not_found", "quarantined")  # any operation on /v1/agents/{agent_id}
BODY = ("bad_request", "too_large")
WRITE = ("read_only", "unavailable")


def _param(name: str, where: str, schema: Schema, description: str) -> Schema:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "schema": schema,
        "description": description,
    }


AGENT_PARAM = _param("agent_id", "path", _ref("AgentId"), "The agent.")
ACTION_PARAM = _param(
    "action_id", "path", _string(pattern=ACTION_ID), "An action of the agent: `act-<n>`."
)


def _op(
    summary: str,
    ok: Schema,
    errors: dict[str, Schema] | None = None,
    *,
    status: int = 200,
    body: type[Any] | str | None = None,
    params: list[Schema] | None = None,
    public: bool = False,
    tag: str = "agents",
    description: str | None = None,
) -> Schema:
    operation: Schema = {"summary": summary, "tags": [tag]}
    if description:
        operation["description"] = description
    if params:
        operation["parameters"] = params
    if body is not None:
        # A model of guardd.bodies, or the name of a component (the policy).
        name = body if isinstance(body, str) else _BODY_NAMES[body]
        operation["requestBody"] = {
            "required": True,
            "content": {JSON: {"schema": _ref(name)}},
        }
    operation["responses"] = {str(status): ok, **(errors or {})}
    if public:
        operation["security"] = []
    return operation


def _agent_op(
    summary: str,
    ok: Schema,
    *codes: str,
    params: tuple[Schema, ...] = (),
    **kwargs: Any,
) -> Schema:
    """An operation under /v1/agents/{agent_id}."""
    return _op(summary, ok, _errors(*AGENT, *codes), params=[AGENT_PARAM, *params], **kwargs)


def _status_answer(description: str = "The agent's status after the step.") -> Schema:
    return _json_response(description, _ref("AgentStatus"))


# -- paths --------------------------------------------------------------------


def _service_paths() -> dict[str, Schema]:
    static = {"schema": {"type": "string"}}
    console_types = ["text/html", "text/css", "text/javascript", "image/svg+xml"]
    return {
        "/healthz": {
            "get": _op(
                "Liveness",
                _json_response("Up.", _obj({"ok": {"const": True}})),
                _errors("internal"),
                public=True,
                tag="service",
            )
        },
        "/readyz": {
            "get": _op(
                "Readiness: whether this node can decide now",
                _json_response(
                    "Ready: agents loaded, the log store takes writes.",
                    _obj({"ok": {"const": True}}),
                ),
                _errors("unavailable", "internal"),
                public=True,
                tag="service",
            )
        },
        "/metrics": {
            "get": _op(
                "Metrics in the Prometheus text format (admin token only)",
                {
                    "description": "Prometheus text format 0.0.4.",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                _errors("unauthorized", "forbidden", "not_found", "internal"),
                tag="service",
                description=(
                    "Absent (404 not_found) when guardd runs with --no-metrics. "
                    "A --metrics-listen address serves the same text without a token."
                ),
            )
        },
        "/v1/public-key": {
            "get": _op(
                "The Ed25519 key that signs every log",
                _json_response(
                    "The public key.",
                    _obj({"public_key": _string(pattern=HEX64), "algorithm": _const("ed25519")}),
                ),
                _errors("internal"),
                public=True,
                tag="service",
            )
        },
        "/v1/openapi.json": {
            "get": _op(
                "This document",
                _json_response("OpenAPI 3.1.", {"type": "object"}),
                _errors("internal"),
                public=True,
                tag="service",
            )
        },
        "/": {
            "get": _op(
                "The operator console",
                {"description": "A static page.", "content": {"text/html": static}},
                _errors("internal"),
                public=True,
                tag="console",
            )
        },
        "/console/{name}": {
            "get": _op(
                "A static file of the console",
                {
                    "description": "The file.",
                    "content": {media: static for media in console_types},
                },
                _errors("not_found", "internal"),
                params=[_param("name", "path", {"type": "string"}, "File name.")],
                public=True,
                tag="console",
            )
        },
    }


def _agent_paths() -> dict[str, Schema]:
    base = "/v1/agents/{agent_id}"
    actions = base + "/actions"
    one_action = actions + "/{action_id}"
    admin = "Admin token only."
    return {
        "/v1/agents": {
            "post": _op(
                "Create an agent with its policy",
                _json_response(
                    "Created: the agent's status and its token.",
                    _obj({"agent": _ref("AgentStatus"), "token": _ref("AgentToken")}),
                ),
                _errors(*AUTH, *BODY, *WRITE, "agent_exists"),
                status=201,
                body=bodies.CreateAgent,
                description=admin,
            ),
            "get": _op(
                "List every agent",
                _json_response(
                    "Active and quarantined agents, sorted by ID.",
                    _obj({"agents": {"type": "array", "items": _ref("AgentListEntry")}}),
                ),
                _errors(*AUTH),
                description=admin,
            ),
        },
        base: {
            "get": _agent_op(
                "An agent's status",
                _status_answer("The status."),
                description="Its own agent token, or admin.",
            )
        },
        base + "/token": {
            "get": _agent_op(
                "Re-issue the agent's token",
                _json_response("The token.", _obj({"token": _ref("AgentToken")})),
                description=admin,
            )
        },
        base + "/policy": {
            "get": _agent_op(
                "The agent's policy in force",
                _json_response(
                    "The policy with every default filled in, as its last `policy` record has it.",
                    _ref("Policy"),
                ),
                description="Its own agent token, or admin. Also for a terminated agent.",
            ),
            "put": _agent_op(
                "Replace a live agent's policy",
                _status_answer(),
                *BODY,
                *WRITE,
                "invalid_state",
                body="Policy",
                description=admin + " Writes a `policy` record; a terminated agent is "
                "409 `invalid_state` (termination is permanent).",
            ),
        },
        actions: {
            "post": _agent_op(
                "Ask permission for a tool action",
                _json_response("The decision; a denial is a 200 too.", _ref("Decision")),
                *BODY,
                *WRITE,
                "idempotency_conflict",
                params=(
                    _param(
                        "Idempotency-Key",
                        "header",
                        _string(1, MAX_IDEMPOTENCY_KEY),
                        "A repeat with the same key returns the first decision and creates "
                        "nothing; the same key with another body is 409.",
                    ),
                ),
                body=bodies.ActionRequest,
                description="Its own agent token, or admin. The charge is the larger of "
                "`cost` and the tool's minimum. A 400 uses no action ID and writes nothing.",
            )
        },
        actions + "/pending": {
            "get": _agent_op(
                "Actions waiting for an operator",
                _json_response(
                    "Oldest first.",
                    _obj({"pending": {"type": "array", "items": _ref("PendingEntry")}}),
                ),
                description=admin,
            )
        },
        one_action: {
            "get": _agent_op(
                "An action (poll while pending)",
                _json_response("The action.", _ref("Action")),
                "bad_request",
                "unknown_action",
                params=(
                    ACTION_PARAM,
                    _param(
                        "wait",
                        "query",
                        {"type": "number", "minimum": 0, "maximum": MAX_WAIT},
                        f"Long-poll: answer as soon as the action leaves pending_approval, "
                        f"or after this many seconds (0 to {MAX_WAIT}).",
                    ),
                ),
                description="Its own agent token, or admin.",
            )
        },
        one_action + "/outcome": {
            "post": _agent_op(
                "Report the outcome of an allowed action",
                _status_answer(),
                *BODY,
                *WRITE,
                "unknown_action",
                "invalid_state",
                params=(ACTION_PARAM,),
                body=bodies.OutcomeReport,
                description="Its own agent token, or admin; `harmful` is admin only (403). "
                "Exactly one outcome per allowed action; otherwise 409 `invalid_state`.",
            )
        },
        one_action + "/approve": {
            "post": _agent_op(
                "Approve a pending action (re-runs every check)",
                _json_response(
                    "`allowed`, or `denied` if a check now fails.",
                    {"oneOf": [_ref("AllowedDecision"), _ref("DeniedDecision")]},
                ),
                *BODY,
                *WRITE,
                "unknown_action",
                "invalid_state",
                params=(ACTION_PARAM,),
                body=bodies.ApproveBody,
                description=admin + " 409 `invalid_state` unless the action is pending.",
            )
        },
        one_action + "/reject": {
            "post": _agent_op(
                "Reject a pending action",
                _json_response("Denied with reason code `rejected`.", _ref("DeniedDecision")),
                *BODY,
                *WRITE,
                "unknown_action",
                "invalid_state",
                params=(ACTION_PARAM,),
                body=bodies.RejectBody,
                description=admin + " 409 `invalid_state` unless the action is pending.",
            )
        },
        one_action + "/cancel": {
            "post": _agent_op(
                "Withdraw a pending action",
                _json_response("The action, now `cancelled`.", _ref("Action")),
                *BODY,
                *WRITE,
                "unknown_action",
                "invalid_state",
                params=(ACTION_PARAM,),
                body=bodies.CancelBody,
                description="Its own agent token, or admin. Writes `action_cancelled`: never "
                "charged, no scar, long-polls answer at once. 409 `invalid_state` unless the "
                "action is pending; an approve or reject afterwards is 409 too, saying when "
                "it was cancelled.",
            )
        },
        base + "/grants": {
            "get": _agent_op(
                "List the agent's grants",
                _json_response("Every grant, with what is left.", _ref("GrantList")),
                description=admin,
            ),
            "post": _agent_op(
                "Grant approval for a bounded stream of calls",
                _json_response("The grant.", _ref("Grant")),
                *BODY,
                *WRITE,
                "invalid_state",
                status=201,
                body=bodies.GrantBody,
                description=admin + " Writes `grant_issued`. A request the policy would hold "
                "for approval that matches an unexpired grant with room left is allowed at "
                "once, its `action_allowed` naming the grant. 409 `invalid_state` when the "
                "agent is terminated.",
            ),
        },
        base + "/grants/{grant_id}/revoke": {
            "post": _agent_op(
                "Revoke a grant",
                _json_response("The grant, now `revoked`.", _ref("Grant")),
                *BODY,
                *WRITE,
                "invalid_state",
                params=(_param("grant_id", "path", _string(pattern=GRANT_ID), "A grant."),),
                body=bodies.RevokeGrantBody,
                description=admin + " Writes `grant_revoked`. 404 `not_found` for a grant "
                "the agent does not have; 409 `invalid_state` when revoked already.",
            )
        },
        base + "/scars": {
            "post": _agent_op(
                "Add a scar",
                _status_answer(),
                *BODY,
                *WRITE,
                "unknown_action",
                body=bodies.ScarBody,
                description=admin + " An `action_id` that does not exist is 404 `unknown_action`.",
            )
        },
        base + "/terminate": {
            "post": _agent_op(
                "Terminate the agent (permanent)",
                _status_answer(),
                *BODY,
                *WRITE,
                "already_terminated",
                body=bodies.TerminateBody,
                description=admin,
            )
        },
        base + "/log": {
            "get": _agent_op(
                "Signed log records",
                _json_response(
                    "Records with seq greater than `after`, and the head.",
                    _obj(
                        {
                            "records": {"type": "array", "items": _ref("LogRecord")},
                            "head": _ref("Head"),
                        }
                    ),
                ),
                "bad_request",
                params=(
                    _param(
                        "after",
                        "query",
                        {"type": "integer", "minimum": -1},
                        "Return records after this seq (default -1: from seq 0).",
                    ),
                    _param(
                        "limit",
                        "query",
                        {"type": "integer", "minimum": 1},
                        f"At most this many records (default {LOG_LIMIT_DEFAULT}; "
                        f"above {LOG_LIMIT_MAX} counts as {LOG_LIMIT_MAX}).",
                    ),
                ),
                description=admin,
            )
        },
        base + "/verify": {
            "get": _agent_op(
                "Verify the log's chain and signatures",
                _json_response("The verification report.", _ref("VerifyReport")),
                description=admin + " Checks against the server's public key.",
            )
        },
    }


def document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document, as a fresh dict."""
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
        ],
        "paths": {**_service_paths(), **_agent_paths()},
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The admin token, or an agent token `agt_<agent_id>.<mac>`.",
                }
            },
        },
    }
