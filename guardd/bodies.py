"""Request bodies: plain attrs models, structured strictly at the edge by one
private cattrs converter. Unknown keys, wrong types and out-of-range values
are a 400 whose message names the key path."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, NewType, TypeVar

import attrs
import cattrs
from cattrs.errors import ClassValidationError

from agents_runtime.core.behaviour import SYSTEM
from agents_runtime.core.money import Money, to_money
from agents_runtime.core.policy import MAX_TOOL_NAME, Policy, parse_policy
from agents_runtime.core.validation import error_messages
from agents_runtime.core.vocabulary import Outcome, Severity
from agents_runtime.errors import PolicyError
from agents_runtime.log.canonical import MAX_SAFE_INT
from agents_runtime.log.record import timestamp
from guardd.errors import BadRequest

Name = NewType("Name", str)  # who: approver, operator (1-128 characters)
Operator = NewType("Operator", str)  # a Name other than "system"
Text = NewType("Text", str)  # reasons and notes (1-4096 characters)
Tool = NewType("Tool", str)
AgentId = NewType("AgentId", str)
Count = NewType("Count", int)  # a whole number from 1
Seconds = NewType("Seconds", Decimal)  # a positive duration
Timestamp = NewType("Timestamp", str)  # ISO 8601 with an offset, as a record ts (UTC)
InputMatch = NewType("InputMatch", dict)  # type: ignore[type-arg]
MAX_GRANT_SECS = 10 * 366 * 24 * 3600  # ten years: beyond that, say so with a policy

MAX_NAME = 128
MAX_TEXT = 4096


# What guardd.openapi reads off a field, beside its type: its description,
# and a component schema to name in place of the type's (the policy, whose
# strict parser lives in the core).
DESCRIPTION = "description"
COMPONENT = "component"


def _doc(description: str) -> dict[str, str]:
    return {DESCRIPTION: description}


@attrs.frozen
class CreateAgent:
    agent_id: AgentId
    policy: Any = attrs.field(metadata={COMPONENT: "Policy"})


@attrs.frozen
class ActionRequest:
    tool: Tool
    input: Any = attrs.field(
        default=None, metadata=_doc("Any JSON value (default null), recorded verbatim.")
    )
    cost: Money | None = attrs.field(
        default=None, metadata=_doc("The requested charge (default 0).")
    )


@attrs.frozen
class OutcomeReport:
    status: Outcome = attrs.field(metadata=_doc("`harmful` needs the admin token."))
    detail: Text | None = None


@attrs.frozen
class ApproveBody:
    approver: Name
    note: Text | None = None


@attrs.frozen
class RejectBody:
    approver: Name
    reason: Text
    scar: Severity | None = None


@attrs.frozen
class CancelBody:
    reason: Text | None = None


@attrs.frozen
class ScarBody:
    severity: Severity
    reason: Text
    action_id: str | None = attrs.field(
        default=None, metadata=_doc("Must name an existing action.")
    )
    by: Operator | None = attrs.field(
        default=None,
        metadata=_doc(
            "The operator, logged as the scar record's `by` (`operator` when absent); "
            '"system" is reserved for the service.'
        ),
    )


@attrs.frozen
class TerminateBody:
    reason: Text
    by: Operator = attrs.field(
        metadata=_doc('Who terminates; "system" is reserved for the service.')
    )


@attrs.frozen
class GrantBody:
    """At least one bound (`max_calls`, `max_cost`) and exactly one expiry
    (`ttl_secs`, `expires_at`); otherwise 400."""

    tool: Tool
    by: Operator = attrs.field(metadata=_doc("The operator who grants."))
    note: Text | None = None
    max_calls: Count | None = attrs.field(
        default=None, metadata=_doc("Calls the grant allows at most.")
    )
    max_cost: Money | None = attrs.field(
        default=None, metadata=_doc("Budget the grant's calls may spend at most.")
    )
    ttl_secs: Seconds | None = attrs.field(
        default=None, metadata=_doc("Seconds from now until the grant expires.")
    )
    expires_at: Timestamp | None = attrs.field(
        default=None, metadata=_doc("When it expires (future).")
    )
    input_match: InputMatch | None = attrs.field(
        default=None, metadata=_doc("Exact values the call's input must hold at these keys.")
    )


@attrs.frozen
class RevokeGrantBody:
    by: Operator
    reason: Text | None = None


# Control characters (Unicode category Cc: C0, DEL, C1). In a name (tool,
# approver, operator) none; in free text (notes, reasons, detail) only tab and
# line feed. Anything else could rewrite what a terminal or a log viewer
# shows of the signed log: a carriage return, an escape sequence, a NUL.
# A name holds no format character either (category Cf: the invisible ones
# such as U+200B, U+00AD, U+FEFF, and the bidirectional controls such as
# U+202E) and no line or paragraph separator (U+2028, U+2029): names that
# differ only by them look alike in the console and the log. Free text holds
# no bidirectional embedding, override or isolate (U+202A-U+202E,
# U+2066-U+2069), which reorder what a terminal shows after them; it keeps
# the other format characters (emoji sequences are joined by U+200D).
_NAME_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_TEXT_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_TEXT_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_NOT_IN_NAMES = {
    "Cc": "control characters",
    "Cf": "invisible or bidirectional format characters",
    "Zl": "line or paragraph separators",
    "Zp": "line or paragraph separators",
}


def _code(char: str) -> str:
    return f"U+{ord(char):04X}"


def _unwanted_in_name(value: str) -> str | None:
    """What a name may not hold, as "<what> (U+XXXX)" for the first such
    character of ``value``; None if there is none."""
    if value.isascii():  # the usual name: only C0 controls and DEL to look for
        found = _NAME_CONTROL.search(value)
        return None if found is None else f"control characters ({_code(found.group())})"
    for char in value:
        what = _NOT_IN_NAMES.get(unicodedata.category(char))
        if what is not None:
            return f"{what} ({_code(char)})"
    return None


def _unwanted_in_text(value: str) -> str | None:
    """What free text may not hold, as for _unwanted_in_name."""
    found = _TEXT_CONTROL.search(value)
    if found is not None:
        return f"control characters other than tab and line feed ({_code(found.group())})"
    found = _TEXT_BIDI.search(value)
    if found is not None:
        return f"bidirectional embeddings, overrides or isolates ({_code(found.group())})"
    return None


def _string(
    limit: int, what: str, unwanted: Callable[[str], str | None] = _unwanted_in_name
) -> Any:
    def hook(value: Any, _: Any) -> str:
        if not isinstance(value, str):
            raise ValueError("must be a string")
        if not 1 <= len(value) <= limit:
            raise ValueError(f"{what} must be 1 to {limit} characters")
        found = unwanted(value)
        if found is not None:
            raise ValueError(f"{what} must not contain {found}")
        return value

    return hook


def _operator(value: Any, _: Any) -> str:
    name: str = _string(MAX_NAME, "names")(value, None)
    # "system" marks what the service does by itself; an operator using it
    # would make the log say the policy did what a person did.
    if name == SYSTEM:
        raise ValueError(f'"{SYSTEM}" is reserved for automatic terminations')
    return name


def _plain_str(value: Any, _: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def _agent_id(value: Any, _: Any) -> str:
    from agents_runtime.log.ids import valid_agent_id

    if not isinstance(value, str) or not valid_agent_id(value):
        raise ValueError("agent_id must be 1 to 64 characters from A-Z a-z 0-9 _ -")
    return value


def _choice(value: Any, type_: type[StrEnum]) -> StrEnum:
    if not isinstance(value, str) or value not in type_._value2member_map_:
        raise ValueError("must be one of " + ", ".join(type_))
    return type_(value)


def _count(value: Any, _: Any) -> int:
    if type(value) is not int or not 1 <= value <= MAX_SAFE_INT:
        raise ValueError(f"must be a whole number from 1 to {MAX_SAFE_INT}")
    return value


def _seconds(value: Any, _: Any) -> Decimal:
    number = to_money(value)
    if not 0 < number <= MAX_GRANT_SECS:
        raise ValueError(f"must be a number of seconds above 0, at most {MAX_GRANT_SECS}")
    return number


def _timestamp(value: Any, _: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ValueError("must be an ISO 8601 time with its offset, e.g. 2026-01-01T12:00:00Z")
    return timestamp(moment)


def _input_match(value: Any, _: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("must be an object of the exact values the call's input must hold")
    return value


def _object(value: Any) -> Any:
    if not isinstance(value, dict):
        raise ValueError("must be an object")
    return value


_converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
_converter.register_structure_hook(Name, _string(MAX_NAME, "names"))
_converter.register_structure_hook(Operator, _operator)
_converter.register_structure_hook(Text, _string(MAX_TEXT, "text", _unwanted_in_text))
_converter.register_structure_hook(Tool, _string(MAX_TOOL_NAME, "tool"))
_converter.register_structure_hook(AgentId, _agent_id)
_converter.register_structure_hook(Count, _count)
_converter.register_structure_hook(Seconds, _seconds)
_converter.register_structure_hook(Timestamp, _timestamp)
_converter.register_structure_hook(InputMatch, _input_match)
_converter.register_structure_hook(str, _plain_str)
_converter.register_structure_hook(Money, lambda v, _: to_money(v))
_converter.register_structure_hook(Decimal, lambda v, _: to_money(v))
for _choices in (Outcome, Severity):
    _converter.register_structure_hook(_choices, _choice)
_converter.register_structure_hook(Any, lambda v, _: v)
for _cls in (
    CreateAgent,
    ActionRequest,
    OutcomeReport,
    ApproveBody,
    RejectBody,
    CancelBody,
    ScarBody,
    TerminateBody,
    GrantBody,
    RevokeGrantBody,
):
    _hook = _converter.gen_structure_attrs_fromdict(_cls)
    _converter.register_structure_hook(_cls, lambda v, t, _h=_hook: _h(_object(v), t))

T = TypeVar("T")


def parse_body(value: Any, cls: type[T]) -> T:
    try:
        return _converter.structure(value, cls)
    except (ClassValidationError, ValueError, TypeError, ExceptionGroup) as exc:
        raise BadRequest("; ".join(error_messages(exc, "$")) or "invalid body") from None


def parse_grant_body(value: Any) -> GrantBody:
    """A grant's body: at least one bound and exactly one expiry, in the future."""
    body = parse_body(value, GrantBody)
    if body.max_calls is None and body.max_cost is None:
        raise BadRequest("$: a grant needs a bound: max_calls, max_cost or both")
    if (body.ttl_secs is None) == (body.expires_at is None):
        raise BadRequest("$: a grant needs an expiry: ttl_secs or expires_at, not both")
    if body.expires_at is not None and datetime.fromisoformat(body.expires_at) <= datetime.now(UTC):
        raise BadRequest(f"$.expires_at: {body.expires_at} is not in the future")
    return body


def parse_policy_body(value: Any, path: str = "$") -> Policy:
    try:
        policy = parse_policy(value)
    except PolicyError as exc:
        message = str(exc)
        if path != "$":
            message = "; ".join(path + part.strip()[1:] for part in message.split(";"))
        raise BadRequest(message) from None
    # Here, not in the policy schema: logs written before this rule must
    # still load. A tool name no request may carry could never match.
    for name in policy.tools:
        found = _unwanted_in_name(name)
        if found is not None:
            raise BadRequest(f"{path}.tools: tool names must not contain {found}")
    return policy
