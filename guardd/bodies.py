"""Request bodies: plain attrs models, structured strictly at the edge by one
private cattrs converter. Unknown keys, wrong types and out-of-range values
are a 400 whose message names the key path.

Each endpoint names its body model (``guardd.endpoints``); ``PARSERS`` says
which function turns the JSON into what the route is handed: the model
itself (``parse_body``), or, for the policy, the core's ``Policy``. The
models' field types are ``guardd.wire``'s, which ``guardd.openapi`` also
documents: the document's request bodies are these classes.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, ClassVar, Literal, NamedTuple, TypeVar

import attrs
import cattrs
from cattrs.errors import ClassValidationError
from cattrs.gen import make_dict_structure_fn

from agents_runtime.core.behaviour import SYSTEM
from agents_runtime.core.money import Money, to_money
from agents_runtime.core.policy import MAX_TOOL_NAME, Policy, parse_policy
from agents_runtime.core.validation import error_messages
from agents_runtime.core.vocabulary import Effect, Outcome, Severity
from agents_runtime.errors import PolicyError
from agents_runtime.log.canonical import MAX_SAFE_INT
from agents_runtime.log.policies import valid_name
from agents_runtime.log.record import timestamp
from guardd.auth import Role
from guardd.endpoints import MAX_IDEMPOTENCY_KEY
from guardd.errors import BadRequest
from guardd.wire import (
    AgentId,
    CallId,
    Count,
    InputMatch,
    Name,
    Operator,
    PolicyName,
    Positive,
    Quorum,
    Seconds,
    Text,
    Timestamp,
    Tool,
    doc,
    optional,
)

# What a body's approver or by is, now that operators have identities.
SIGNED_NAME = (
    "Required with the admin token (recorded as given). Another operator may leave it "
    "out (their display name is recorded); given, it must be that name, else 403."
)
MAX_TOKEN_SECS = 365 * 24 * 3600  # an operator token lives at most a year
MAX_GRANT_SECS = 10 * 366 * 24 * 3600  # ten years: beyond that, say so with a policy

MAX_NAME = 128
MAX_TEXT = 4096


# -- the policy: parsed by the core's strict parser; these say what it takes ------
# (a test holds their fields to the core's Policy, ToolRule and RateLimit).


@attrs.frozen(kw_only=True)
class RuleBody:
    """A policy rule: when `when` (a CEL expression) is true for a call, `effect`
    decides it and the rules after it are not evaluated. `when` reads `tool`,
    `input`, `agent` (`budget`, `spent`, `remaining`, `scar_score`,
    `actions_allowed`), `history` (`tags_used`, `tag_last_used`, `calls`) and
    `now`, nothing else."""

    name: str = doc("1 to 64 characters, no control characters; unique in its list.")
    when: str = doc("A CEL expression giving a boolean, e.g. `double(input.amount) > 100.0`.")
    effect: Effect
    message: str = optional("A `deny` rule's message (in its denial's reason).")
    scar: Severity = optional("A `deny` rule's scar on each denial (default: none).")
    approval_passkey: bool | Literal["both"] = optional(
        "A `require_approval` rule's: each approval of a call it holds must carry the "
        'approver\'s passkey assertion (`true`), and each rejection too (`"both"`).'
    )


@attrs.frozen(kw_only=True)
class ToolRuleBody:
    """A tool rule. Every key is optional."""

    cost: Money = optional("The tool's minimum charge (default 0).")
    requires_approval: bool = optional(
        "When true every call is held for an operator (default false)."
    )
    max_calls: Count | None = optional("Lifetime cap on allowed calls.")
    approval_timeout_secs: Positive | None = optional(
        "Seconds a held call of this tool may wait for an operator before it "
        "expires; overrides the policy's `approval_timeout_secs`."
    )
    rules: list[RuleBody] = optional(
        "Evaluated in order before the other checks; the first whose `when` is true "
        "decides (`deny`: denied `policy_rule`; `require_approval`: held; `allow`: "
        "allowed even when `requires_approval` is true). None true: `requires_approval` "
        "decides."
    )
    tags: list[str] = optional(
        "Short names (1 to 64 characters) that `history.tags_used` remembers of each allowed call."
    )
    cost_from: str = optional(
        "A key (or dotted key path) of the input whose value is the call's money "
        "amount: the charge is the largest of the request's `cost`, `cost` and that "
        "value. Missing or not a number: denied `policy_error`."
    )
    approvals_required: Quorum = optional(
        "Operators who must each approve a held call (1 to 10, default 1); each "
        "approval before the last writes `approval_recorded`."
    )
    approval_passkey: bool | Literal["both"] = optional(
        "`true`: each approval of a held call must carry the approver's passkey "
        'assertion (`passkey`); `"both"`: each rejection too (default false).'
    )


@attrs.frozen(kw_only=True)
class RateLimitBody:
    """At most `max_actions` allowed actions within the trailing window."""

    max_actions: Count = doc("Allowed actions (all tools) per window.")
    window_secs: Positive = doc("The trailing window in seconds.")


@attrs.frozen(kw_only=True)
class PolicyBody:
    """An agent's policy. `default` is the rule for any tool not in `tools` (null
    or absent: such tools are denied `tool_not_allowed`); its `max_calls` counts
    per tool name. Unknown keys anywhere are 400 `bad_request` naming the key, so
    a typo is never silently ignored."""

    budget: Money = doc("Total credits the agent may spend.")
    scar_limit: Positive = doc("Scar score at which the agent is terminated.")
    tools: dict[Tool, ToolRuleBody] = doc(
        f"Tool name (1 to {MAX_TOOL_NAME} characters) to its rule."
    )
    default: ToolRuleBody | None = None
    rate_limit: RateLimitBody | None = None
    approval_timeout_secs: Positive | None = optional(
        "Seconds a held action may wait for an operator, counted from its "
        "`approval_required` record, before it expires (denied `approval_expired`). "
        "Absent or null: it waits for ever."
    )


@attrs.frozen
class CreateAgent:
    agent_id: AgentId
    policy: PolicyBody


@attrs.frozen(kw_only=True)
class CreateFollower:
    """A new agent that follows a named policy from its newest version on."""

    agent_id: AgentId
    policy_ref: PolicyName = doc("The named policy (`PUT /v1/policies/{policy_name}`).")


class NewAgent(NamedTuple):
    """What ``POST /v1/agents`` hands its route: the ID and the policy,
    parsed, or the named policy it follows."""

    agent_id: str
    policy: Policy | None
    policy_ref: str | None = None


@attrs.frozen(kw_only=True)
class PolicyRef:
    """A named policy to follow (or to try in shadow)."""

    policy_ref: PolicyName = doc("The named policy; its newest version is taken.")


class PolicyOrRef(NamedTuple):
    """A policy, parsed, or the name of a named policy."""

    policy: Policy | None
    policy_ref: str | None


@attrs.frozen
class ActionRequest:
    tool: Tool
    input: Any = optional("Any JSON value (default null), recorded verbatim.")
    cost: Money | None = optional("The requested charge (default 0).")


@attrs.frozen
class OutcomeReport:
    status: Outcome = doc("`harmful` needs the admin token.")
    detail: Text | None = None


# The hook events POST /v1/hooks/claude-code serves.
PRE_TOOL_USE, POST_TOOL_USE, POST_TOOL_USE_FAILURE = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
)
HOOK_EVENTS = (PRE_TOOL_USE, POST_TOOL_USE, POST_TOOL_USE_FAILURE)


@attrs.frozen
class ClaudeCodeHook:
    """A Claude Code hook's input, as Claude Code posts it. Only the keys below
    are read; any other (`session_id`, `cwd`, `transcript_path`,
    `permission_mode`, and whatever later versions add) is accepted and left
    alone."""

    more_keys: ClassVar[bool] = True  # Claude Code adds keys over time

    hook_event_name: str = doc(
        "`PreToolUse` asks for the call; `PostToolUse` and `PostToolUseFailure` "
        "report its outcome. Any other event is 400."
    )
    tool_name: Tool = doc("The tool, as the agent's policy names it.")
    tool_use_id: CallId = doc(
        f"The call's ID: the action's Idempotency-Key (1 to {MAX_IDEMPOTENCY_KEY} "
        "printable ASCII characters)."
    )
    tool_input: Any = optional("The call's arguments, recorded verbatim.")
    tool_response: Any = optional(
        "PostToolUse: what the tool answered. An object with `success: false` or "
        "`is_error: true` reports a failure."
    )
    error: Any = optional("PostToolUseFailure: what went wrong (a string, kept as the detail).")


@attrs.frozen
class ApproveBody:
    approver: Name | None = optional(SIGNED_NAME)
    note: Text | None = None
    passkey: Any = optional(
        "The approver's passkey assertion (the `PublicKeyCredential` JSON of "
        "`navigator.credentials.get`, as `toJSON()` gives it), made with the action's "
        "`approval-options`. Required when the tool's rule has `approval_passkey`; "
        "written into the record as `passkey`."
    )


@attrs.frozen
class RejectBody:
    reason: Text
    approver: Name | None = optional(SIGNED_NAME)
    scar: Severity | None = None
    passkey: Any = optional(
        "The approver's passkey assertion (the `PublicKeyCredential` JSON of "
        "`navigator.credentials.get`, as `toJSON()` gives it), made with the action's "
        "`approval-options`. Required when the tool's rule has `approval_passkey`; "
        "written into the record as `passkey`."
    )


@attrs.frozen
class PasskeyCredential:
    """A WebAuthn credential as the browser's `credential.toJSON()` gives it
    (other keys, such as `clientExtensionResults`, are ignored)."""

    more_keys: ClassVar[bool] = True

    id: str = doc("The credential ID, base64url.")
    rawId: str = doc("The same ID, base64url.")
    type: str = doc("`public-key`.")
    response: Any = doc(
        "The authenticator's response: `clientDataJSON` and `attestationObject` "
        "(registration), each base64url."
    )


@attrs.frozen
class OperatorTokenBody:
    """A token for a program acting as an operator."""

    name: Name  # its display name: what records carry as `by`
    role: Role
    ttl_secs: Seconds | None = optional(
        f"Seconds from now until it expires (at most {MAX_TOKEN_SECS}: a year); "
        "left out, it lives until revoked."
    )


@attrs.frozen
class CancelBody:
    reason: Text | None = None


@attrs.frozen
class ScarBody:
    severity: Severity
    reason: Text
    action_id: str | None = optional("Must name an existing action.")
    by: Operator | None = optional(
        "The operator, logged as the scar record's `by` (with the admin token, "
        "`operator` when absent; another operator's display name is recorded, and "
        'given, it must be that name); "system" is reserved for the service.'
    )


@attrs.frozen
class TerminateBody:
    reason: Text
    by: Operator | None = optional(
        'Who terminates; "system" is reserved for the service. ' + SIGNED_NAME
    )


@attrs.frozen
class GrantBody:
    """At least one bound (`max_calls`, `max_cost`) and exactly one expiry
    (`ttl_secs`, `expires_at`); otherwise 400."""

    tool: Tool
    by: Operator | None = optional("The operator who grants. " + SIGNED_NAME)
    note: Text | None = None
    max_calls: Count | None = optional("Calls the grant allows at most.")
    max_cost: Money | None = optional("Budget the grant's calls may spend at most.")
    ttl_secs: Seconds | None = optional("Seconds from now until the grant expires.")
    expires_at: Timestamp | None = optional("When it expires (future).")
    input_match: InputMatch | None = optional(
        "Exact values the call's input must hold at these keys."
    )


@attrs.frozen
class RevokeGrantBody:
    by: Operator | None = optional(SIGNED_NAME)
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


def _policy_name(value: Any, _: Any) -> str:
    if not isinstance(value, str) or not valid_name(value):
        raise ValueError("policy_ref must be 1 to 64 characters from A-Z a-z 0-9 _ -")
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


def _call_id(value: Any, _: Any) -> str:
    # The same rule as the Idempotency-Key header it stands for.
    if not (
        isinstance(value, str)
        and 1 <= len(value) <= MAX_IDEMPOTENCY_KEY
        and value.isascii()
        and value.isprintable()
    ):
        raise ValueError(f"must be 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters")
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
_converter.register_structure_hook(PolicyName, _policy_name)
_converter.register_structure_hook(Count, _count)
_converter.register_structure_hook(CallId, _call_id)
_converter.register_structure_hook(Seconds, _seconds)
_converter.register_structure_hook(Timestamp, _timestamp)
_converter.register_structure_hook(InputMatch, _input_match)
_converter.register_structure_hook(str, _plain_str)
_converter.register_structure_hook(Money, lambda v, _: to_money(v))
_converter.register_structure_hook(Decimal, lambda v, _: to_money(v))
for _choices in (Outcome, Severity, Role):
    _converter.register_structure_hook(_choices, _choice)
_converter.register_structure_hook(Any, lambda v, _: v)
# A policy inside a body stays JSON here: parse_create_agent hands it to the
# core's strict parser, whose messages name their own key paths.
_converter.register_structure_hook(PolicyBody, lambda v, _: v)

# The request bodies, under the names the OpenAPI document gives them.
BODIES: dict[str, type[Any]] = {
    "CreateAgent": CreateAgent,
    "CreateFollower": CreateFollower,
    "ActionRequest": ActionRequest,
    "OutcomeReport": OutcomeReport,
    "Approve": ApproveBody,
    "Cancel": CancelBody,
    "Reject": RejectBody,
    "AddScar": ScarBody,
    "Terminate": TerminateBody,
    "IssueOperatorToken": OperatorTokenBody,
    "PasskeyCredential": PasskeyCredential,
    "IssueGrant": GrantBody,
    "RevokeGrant": RevokeGrantBody,
    "Policy": PolicyBody,
    "PolicyRef": PolicyRef,
    "ClaudeCodeHook": ClaudeCodeHook,
}
# Every model of this module by its document name: the bodies and the
# policy's parts.
NAMES: dict[type[Any], str] = {
    **{model: name for name, model in BODIES.items()},
    ToolRuleBody: "ToolRule",
    RuleBody: "Rule",
    RateLimitBody: "RateLimit",
}


def _strict(model: type[Any]) -> Callable[[Any, Any], Any]:
    """The structure hook of a body model: an object of its fields, nothing
    else, unless the model says ``more_keys`` (then other keys are ignored)."""
    fields: Callable[[Any, Any], Any]
    if getattr(model, "more_keys", False):
        fields = make_dict_structure_fn(model, _converter, _cattrs_forbid_extra_keys=False)
    else:
        fields = _converter.gen_structure_attrs_fromdict(model)
    return lambda value, type_: fields(_object(value), type_)


for _model in BODIES.values():
    if _model is not PolicyBody:
        _converter.register_structure_hook(_model, _strict(_model))

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


def parse_create_agent(value: Any) -> NewAgent:
    """A new agent's body: its ID, then its policy (errors name ``$.policy...``),
    or (with ``policy_ref``) the named policy it follows."""
    if isinstance(value, dict) and "policy_ref" in value:
        if "policy" in value:
            raise BadRequest("$: give policy or policy_ref, not both")
        body = parse_body(value, CreateFollower)
        return NewAgent(body.agent_id, None, body.policy_ref)
    created = parse_body(value, CreateAgent)
    return NewAgent(created.agent_id, parse_policy_body(created.policy, "$.policy"))


def parse_policy_or_ref(value: Any) -> PolicyOrRef:
    """A policy, or ``{"policy_ref": name}``: the key ``policy_ref`` tells them apart."""
    if isinstance(value, dict) and "policy_ref" in value:
        return PolicyOrRef(None, parse_body(value, PolicyRef).policy_ref)
    return PolicyOrRef(parse_policy_body(value), None)


def policy_name(value: str) -> str:
    """A named policy's name from a path: 400 when no policy could have it."""
    if not valid_name(value):
        raise BadRequest("a policy name is 1 to 64 characters from A-Z a-z 0-9 _ -")
    return value


def parse_claude_code_hook(value: Any) -> ClaudeCodeHook:
    """A hook's input: its event first, so that an event this endpoint does not
    serve is named as such rather than by the keys its input lacks."""
    event = value.get("hook_event_name") if isinstance(value, dict) else None
    if isinstance(event, str) and event not in HOOK_EVENTS:
        served = ", ".join(HOOK_EVENTS)
        raise BadRequest(f"$.hook_event_name: {event!r} is not served here (only {served})")
    return parse_body(value, ClaudeCodeHook)


def parse_operator_token_body(value: Any) -> OperatorTokenBody:
    body = parse_body(value, OperatorTokenBody)
    if body.ttl_secs is not None and body.ttl_secs > MAX_TOKEN_SECS:
        raise BadRequest(f"$.ttl_secs: at most {MAX_TOKEN_SECS} seconds (a year)")
    return body


# What turns each body into what its route is handed; any other body model is
# structured as itself by parse_body.
PARSERS: dict[Any, Callable[[Any], Any]] = {
    CreateAgent | CreateFollower: parse_create_agent,
    PolicyBody | PolicyRef: parse_policy_or_ref,
    GrantBody: parse_grant_body,
    PolicyBody: parse_policy_body,
    ClaudeCodeHook: parse_claude_code_hook,
    OperatorTokenBody: parse_operator_token_body,
}


def parser(model: type[Any]) -> Callable[[Any], Any]:
    """The function that parses a body of ``model``."""
    special = PARSERS.get(model)
    if special is not None:
        return special
    if model not in NAMES:
        raise TypeError(f"{model.__name__} is not a body model of guardd.bodies")
    return lambda value: parse_body(value, model)
