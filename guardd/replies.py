"""What guardd answers: each reply's shape, declared once.

Plain attrs classes, never built on a request's path: they are what the
OpenAPI document says of each answer (``guardd.openapi`` derives a schema
from each, named as the class), what ``sdk/models.py`` generates the
client's classes from, and what ``guardd.views`` renders (a test checks
every rendering against its shape). A class's docstring is its description,
and its fields are read as ``guardd.wire`` says: a default means the key may
be left out, ``| None`` that it may be null. The classes are ``kw_only`` so
that the fields keep the order of the answer, whichever may be left out. A
``OneOf`` is one of several shapes, told apart by a fixed word.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import attrs

from agents_runtime.core.vocabulary import (
    ActionStatus,
    GrantStatus,
    Outcome,
    ReasonCode,
    Severity,
)
from agents_runtime.core.vocabulary import Decision as Word
from agents_runtime.log.kinds import Kind
from guardd.bodies import RateLimitBody, RuleBody
from guardd.wire import (
    ActionId,
    AgentId,
    AgentToken,
    Amount,
    Balance,
    Count,
    ErrorCode,
    GrantId,
    HeadSeq,
    Hex64,
    InputMatch,
    PolicyName,
    Positive,
    Quorum,
    Receipt,
    Signature,
    Timestamp,
    Tool,
    Whole,
    doc,
    optional,
)


class OneOf:
    """A reply that is one of ``variants``; the subclass's name and docstring
    name and describe it."""

    variants: ClassVar[tuple[type, ...]]


# -- errors and the service ------------------------------------------------------


@attrs.frozen(kw_only=True)
class Error:
    """The body of every error answer."""

    error: str = doc("A message for people.")
    code: ErrorCode = doc("For programs.")


@attrs.frozen(kw_only=True)
class Ok:
    """The service is up (or ready)."""

    ok: Literal[True]


@attrs.frozen(kw_only=True)
class Me:
    """The operator calling: their display name (what records carry as `by`),
    their identity (`by_id`), every role they hold, highest first (a role holds
    those below it), and how they authenticated."""

    name: str = doc("The display name: what records carry as `by`.")
    id: str = doc("`oidc:<issuer>#<sub>`, `token:<token_id>` or `admin-token`.")
    roles: list[Literal["admin", "approver", "viewer"]]
    via: Literal["oidc", "operator_token", "admin_token"]


@attrs.frozen(kw_only=True)
class OperatorToken:
    """An operator token, as the operators log has it (never its secret)."""

    token_id: str = doc("`tok-<16 hex>`: records it causes carry `by_id` `token:<token_id>`.")
    name: str = doc("Its display name: what records carry as `by`.")
    role: Literal["admin", "approver", "viewer"]
    expires_at: Timestamp | None = doc("When it expires; null: never (until revoked).")
    status: Literal["active", "expired", "revoked"]
    issued_at: Timestamp
    issued_by: str = doc("The display name of the admin who issued it.")
    revoked_at: Timestamp | None = doc("When it was revoked; null while it is not.")


@attrs.frozen(kw_only=True)
class IssuedOperatorToken(OperatorToken):
    """A token just issued, with its secret: shown this once, never again."""

    token: str = doc("`opr_...`: the bearer token. guardd keeps only its SHA-256.")


@attrs.frozen(kw_only=True)
class OperatorTokenList:
    """Every operator token ever issued, oldest first, without secrets."""

    tokens: list[OperatorToken]


@attrs.frozen(kw_only=True)
class Passkey:
    """A passkey as the operators log has it."""

    credential_id: str = doc("The WebAuthn credential ID, base64url.")
    by_id: str = doc("Whose passkey it is: the operator who registered it.")
    alg: int = doc("Its COSE algorithm: -7 (ES256) or -8 (EdDSA).")
    rp_id: str = doc("The relying party ID it was made for.")
    origin: str = doc("The origin it was registered from.")
    registered_at: Timestamp
    status: Literal["active", "revoked"]
    revoked_at: Timestamp | None = doc("When an admin revoked it; null while not.")


@attrs.frozen(kw_only=True)
class PasskeyList:
    """Passkeys, oldest first."""

    passkeys: list[Passkey]


@attrs.frozen(kw_only=True)
class PasskeyCreationOptions:
    """WebAuthn `PublicKeyCredentialCreationOptions` as JSON (each binary value
    base64url), for `navigator.credentials.create` (`PublicKeyCredential.
    parseCreationOptionsFromJSON`). The challenge is good once, for five minutes."""

    rp: Any = doc("`{name, id}`: the relying party.")
    user: Any = doc("`{id, name, displayName}`: the operator.")
    challenge: str
    pubKeyCredParams: Any = doc("EdDSA (-8) and ES256 (-7).")
    timeout: int
    excludeCredentials: Any = doc("The caller's passkeys already registered.")
    authenticatorSelection: Any = doc("User verification required.")
    attestation: str = doc("`none`.")


@attrs.frozen(kw_only=True)
class ApprovalBinding:
    """What a passkey signs for one decision: the challenge is SHA-256 of the
    RFC 8785 form of this object."""

    log_id: AgentId
    action_id: ActionId
    request_hash: Hex64 = doc("The hash of the action's `action_requested` record.")
    decision: Literal["approve", "reject"]
    by_id: str = doc("The approver's identity.")


@attrs.frozen(kw_only=True)
class ApprovalOptions:
    """WebAuthn `PublicKeyCredentialRequestOptions` as JSON, for
    `navigator.credentials.get`, whose challenge is the decision's binding."""

    challenge: str = doc("base64url of SHA-256(RFC 8785 of `binding`).")
    rpId: str
    allowCredentials: Any = doc("The caller's active passkeys.")
    userVerification: Literal["required"]
    timeout: int
    binding: ApprovalBinding
    passkey_required: bool = doc("Whether the tool's rule requires a passkey for this decision.")


@attrs.frozen(kw_only=True)
class PublicKey:
    """The Ed25519 key that signs every log, as hex."""

    public_key: Hex64
    algorithm: Literal["ed25519"]


@attrs.frozen(kw_only=True)
class AuthConfig:
    """How the console signs people in: the OpenID Connect issuer, the public
    client to use at it (Authorization Code with PKCE) and the scopes to ask for."""

    issuer: str = doc("The issuer's URL; its discovery document is below it.")
    client_id: str = doc("The console's client ID at the issuer: the audience guardd accepts.")
    scopes: list[str] = doc("The scopes to ask for; always includes `openid`.")


# -- agents ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Head:
    """The last record of a log: its seq and hash."""

    seq: HeadSeq
    hash: Hex64


@attrs.frozen(kw_only=True)
class Scar:
    """A scar of the agent, and the action it is about."""

    seq: Whole = doc("Seq of the scar record.")
    severity: Severity
    reason: str
    action_id: ActionId = optional()


@attrs.frozen(kw_only=True)
class AgentStatus:
    """An agent's state, rebuilt from its log."""

    agent_id: AgentId
    alive: bool
    termination_reason: str | None = doc(
        "`scar_limit`, `fatal_scar`, `budget_exhausted` or the operator's reason; null while alive."
    )
    budget: Amount
    spent: Amount
    remaining: Balance = doc(
        "budget minus spent. Negative only when a new policy set a budget below what was "
        "already spent."
    )
    scar_score: Whole
    scar_limit: Positive = doc("From the policy.")
    scars: list[Scar]
    actions_allowed: Whole
    actions_denied: Whole
    actions_pending: Whole
    head: Head
    public_key: Hex64 = doc("Hex Ed25519 public key.")


@attrs.frozen(kw_only=True)
class CreatedAgent:
    """Created: the agent's status and its token."""

    agent: AgentStatus
    token: AgentToken


@attrs.frozen(kw_only=True)
class Token:
    """The agent's token."""

    token: AgentToken


@attrs.frozen(kw_only=True)
class ActiveAgent:
    """An agent whose log verified."""

    agent_id: AgentId
    state: Literal["active"]
    status: AgentStatus


@attrs.frozen(kw_only=True)
class QuarantinedAgent:
    """An agent whose log failed verification at startup."""

    agent_id: AgentId
    state: Literal["quarantined"]
    error: str = doc("The first bad record of the log, for people.")
    failure: VerifyFailure = optional()


@attrs.frozen(kw_only=True)
class UnloadedAgent:
    """An agent in a shared (PostgreSQL) store that this node has not loaded
    yet: its log is verified and folded on its first use (any request naming
    it, e.g. `GET /v1/agents/{agent_id}`), and it is listed as active or
    quarantined from then on."""

    agent_id: AgentId
    state: Literal["unloaded"]


class AgentListEntry(OneOf):
    """`status` when active; `error` when its log failed verification;
    neither when this node has not loaded it yet (`unloaded`)."""

    variants = (ActiveAgent, QuarantinedAgent, UnloadedAgent)


@attrs.frozen(kw_only=True)
class AgentList:
    """Active, quarantined and not yet loaded agents, sorted by ID."""

    agents: list[AgentListEntry]


# -- the policy in force ---------------------------------------------------------


@attrs.frozen(kw_only=True)
class ToolRuleInForce:
    """A tool rule as the policy in force has it: every default filled in."""

    cost: Amount = doc("The tool's minimum charge.")
    requires_approval: bool = doc("When true every call is held for an operator.")
    max_calls: Count | None = doc("Lifetime cap on allowed calls; null: none.")
    approval_timeout_secs: Positive = optional(
        "Seconds a held call of this tool may wait for an operator before it expires; "
        "overrides the policy's `approval_timeout_secs`."
    )
    rules: list[RuleBody] = optional("The tool's rules, in order; absent: none.")
    tags: list[str] = optional("The tool's tags; absent: none.")
    cost_from: str = optional("The input key whose value is the call's amount; absent: none.")
    approvals_required: Quorum = optional(
        "Operators who must each approve a held call; present when above 1."
    )
    approval_passkey: bool | Literal["both"] = optional(
        "Whether approvals (`true`) or approvals and rejections (`both`) must carry "
        "the approver's passkey assertion; present when set."
    )


@attrs.frozen(kw_only=True)
class PolicyInForce:
    """The policy with every default filled in, as its last `policy` record has it.
    `default` is the rule for any tool not in `tools` (null: such tools are denied
    `tool_not_allowed`)."""

    budget: Amount = doc("Total credits the agent may spend.")
    scar_limit: Positive = doc("Scar score at which the agent is terminated.")
    tools: dict[Tool, ToolRuleInForce] = doc("Tool name to its rule.")
    default: ToolRuleInForce | None
    rate_limit: RateLimitBody | None
    approval_timeout_secs: Positive = optional(
        "Seconds a held action may wait for an operator before it expires (denied "
        "`approval_expired`). Absent: it waits for ever."
    )


@attrs.frozen(kw_only=True)
class NamedPolicy:
    """A named (fleet) policy: its newest version and the agents that follow it."""

    name: PolicyName
    version: Count = doc("1 for the first version, then 2, 3, ...")
    policy: PolicyInForce
    agents: list[AgentId] = doc(
        "The live agents whose newest `policy` record names this policy, sorted."
    )


@attrs.frozen(kw_only=True)
class NamedPolicyList:
    """Every named policy, sorted by name."""

    policies: list[NamedPolicy]


@attrs.frozen(kw_only=True)
class Shadow:
    """The candidate policy tried beside the agent's policy in force, and how
    often the two agreed on the requests decided since it was set."""

    policy: PolicyInForce
    policy_ref: PolicyName | None = doc("The named policy it was taken from; null: its own.")
    version: Count | None = doc("That named policy's version; null: its own.")
    since: str = doc("The `ts` of its `shadow_set` record.")
    agree: Whole = doc("Requests both decided the same way.")
    disagree: dict[str, Whole] = doc(
        '`"<live>-><shadow>"` (e.g. `"allowed->pending_approval"`) to how many requests '
        "were decided so."
    )
    recent_disagreements: list[ActionId] = doc(
        "The last 20 actions the two decided differently, oldest first."
    )


# -- decisions and actions -----------------------------------------------------------

_DRAWN_ON = "The grant this allowance drew on in place of an operator's approval."


@attrs.frozen(kw_only=True)
class TerminatedReason:
    code: Literal[ReasonCode.TERMINATED]
    reason: str | None


@attrs.frozen(kw_only=True)
class ToolNotAllowedReason:
    code: Literal[ReasonCode.TOOL_NOT_ALLOWED]
    tool: Tool


@attrs.frozen(kw_only=True)
class PolicyRuleReason:
    code: Literal[ReasonCode.POLICY_RULE]
    rule: str = doc("The name of the `deny` rule whose `when` was true.")
    message: str = doc("The rule's message, else `denied by rule <name>`.")
    scar: Severity = optional("The scar the rule adds, when it sets one.")


@attrs.frozen(kw_only=True)
class PolicyErrorReason:
    code: Literal[ReasonCode.POLICY_ERROR]
    rule: str = optional("The rule whose `when` could not be evaluated for this call.")
    cost_from: str = optional("The tool's `cost_from`, when its value is missing or wrong.")
    message: str = doc("What is wrong, e.g. a key the input does not have.")


@attrs.frozen(kw_only=True)
class ToolCallLimitReason:
    code: Literal[ReasonCode.TOOL_CALL_LIMIT]
    tool: Tool
    max_calls: Count


@attrs.frozen(kw_only=True)
class RateLimitedReason:
    code: Literal[ReasonCode.RATE_LIMITED]
    max_actions: Count
    window_secs: Positive = doc("The policy's window.")


@attrs.frozen(kw_only=True)
class InsufficientBudgetReason:
    code: Literal[ReasonCode.INSUFFICIENT_BUDGET]
    cost: Amount = doc("The charge.")
    remaining: Balance


@attrs.frozen(kw_only=True)
class RejectedReason:
    code: Literal[ReasonCode.REJECTED]
    by: str
    reason: str


@attrs.frozen(kw_only=True)
class ApprovalExpiredReason:
    code: Literal[ReasonCode.APPROVAL_EXPIRED]
    timeout_secs: Positive = doc("The approval timeout that ran out.")


@attrs.frozen(kw_only=True)
class CancelledReason:
    code: Literal[ReasonCode.CANCELLED]
    by: str = doc(
        "`agent` when its agent withdrew it; otherwise the operator's display name "
        "(`admin` for the admin token)."
    )
    reason: str = optional()


_DECIDED_BY = "The policy rule that decided it, when one did (its `when` was true)."


class DenyReason(OneOf):
    """Why an action was denied: `code` and its fields."""

    variants = (
        TerminatedReason,
        ToolNotAllowedReason,
        PolicyRuleReason,
        PolicyErrorReason,
        ToolCallLimitReason,
        RateLimitedReason,
        InsufficientBudgetReason,
        RejectedReason,
        ApprovalExpiredReason,
        CancelledReason,
    )


@attrs.frozen(kw_only=True)
class AllowedDecision:
    decision: Literal[Word.ALLOWED]
    action_id: ActionId
    cost: Amount = doc("The charge: max(request cost, the tool's minimum).")
    remaining: Amount = doc("What is left after this charge.")
    receipt: Receipt = optional()
    grant_id: GrantId = optional(_DRAWN_ON)
    rule: str = optional(_DECIDED_BY)


@attrs.frozen(kw_only=True)
class DeniedDecision:
    decision: Literal[Word.DENIED]
    action_id: ActionId
    reason: DenyReason
    rule: str = optional(_DECIDED_BY)


_APPROVALS = (
    "Each approval given so far, in order (when the tool's rule requires more than one, "
    "or one was given)."
)
_APPROVALS_REQUIRED = "Approvals the tool's rule requires, under the policy in force."


@attrs.frozen(kw_only=True)
class Approval:
    """One operator's approval of a held action."""

    by: str = doc("Their display name.")
    by_id: str | None = doc("Their identity: `token:<id>`, `admin-token`, `oidc:...`.")
    at: Timestamp


@attrs.frozen(kw_only=True)
class PendingDecision:
    decision: Literal[Word.PENDING_APPROVAL]
    action_id: ActionId
    rule: str = optional(_DECIDED_BY)
    approvals: list[Approval] = optional(
        "An approval that was not the last a quorum needs: each approval so far."
    )
    approvals_required: Count = optional("Approvals the tool's rule requires.")


class Decision(OneOf):
    """The answer to an action request, an approval or a rejection."""

    variants = (AllowedDecision, DeniedDecision, PendingDecision)


@attrs.frozen(kw_only=True)
class Action:
    """An action. `reason` is present when denied or cancelled; `approved_by` and
    `note` when an operator approved it; `receipt` once it was allowed."""

    action_id: ActionId
    tool: Tool
    input: Any = doc("Any JSON value, recorded verbatim.")
    cost: Amount = doc("The charge (the charge approval would make while pending).")
    status: ActionStatus
    outcome: Outcome | None
    requested_at: Timestamp
    reason: DenyReason = optional()
    approved_by: str = optional()
    note: str = optional()
    requested_by: str = optional("The operator who asked on the agent's behalf.")
    requested_by_id: str = optional("Their identity: `token:<id>`, `admin-token`, `oidc:...`.")
    decided_by_id: str = optional(
        "The identity of the operator who approved, rejected or cancelled it."
    )
    approvals: list[Approval] = optional(_APPROVALS)
    approvals_required: Count = optional(_APPROVALS_REQUIRED)
    decided_at: Timestamp = optional("When a held action left pending_approval.")
    expires_at: Timestamp = optional("When a pending action expires, if its policy sets a timeout.")
    receipt: Receipt = optional()
    grant_id: GrantId = optional(_DRAWN_ON)


@attrs.frozen(kw_only=True)
class PendingAction:
    """What an operator decides on."""

    action_id: ActionId
    tool: Tool
    input: Any = doc("Any JSON value.")
    cost: Amount = doc("The charge approval would make.")


@attrs.frozen(kw_only=True)
class PendingEntry:
    """An action waiting for an operator."""

    requested_at: Timestamp
    seq: Whole = doc("Seq of the action_requested record.")
    action: PendingAction
    expires_at: Timestamp = optional("When it expires, if its policy sets a timeout.")
    approvals: list[Approval] = optional(_APPROVALS)
    approvals_required: Count = optional(_APPROVALS_REQUIRED)


@attrs.frozen(kw_only=True)
class PendingList:
    """Oldest first."""

    pending: list[PendingEntry]


# -- grants --------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Grant:
    """An operator's approval of a bounded stream of calls, with what is left."""

    grant_id: GrantId
    tool: Tool
    by: str
    note: str = optional()
    issued_at: Timestamp
    expires_at: Timestamp
    max_calls: Count | None
    max_cost: Amount | None = doc("The grant's budget.")
    input_match: InputMatch | None
    calls_used: Whole
    cost_used: Amount = doc("Charged to the grant so far.")
    calls_left: Whole | None
    cost_left: Amount | None = doc("What the grant may still spend.")
    status: GrantStatus
    revoked_by: str = optional()
    revoked_at: Timestamp = optional()
    revoke_reason: str = optional()


@attrs.frozen(kw_only=True)
class GrantList:
    """Every grant, with what is left."""

    grants: list[Grant]


# -- the log -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class LogRecord:
    """A signed log record; each kind has its own further fields. The format is
    specified in docs/log-format.md."""

    more_keys: ClassVar[bool] = True  # each kind adds its own

    seq: Whole
    kind: Kind
    ts: Timestamp = doc("ISO 8601 UTC, microseconds, Z.")
    prev: Hex64
    hash: Hex64
    sig: Signature


@attrs.frozen(kw_only=True)
class LogPage:
    """Records with seq greater than `after`, and the head."""

    records: list[LogRecord]
    head: Head


@attrs.frozen(kw_only=True)
class VerifyFailure:
    """The first bad record of a log."""

    line: Count = doc("1-based line of the first bad record.")
    seq: int | None
    reason: str = doc("e.g. `hash does not match content`.")


@attrs.frozen(kw_only=True)
class VerifiedLog:
    """The log verified: every record, against this key, up to this head."""

    ok: Literal[True]
    records: Whole
    public_key: Hex64
    head: Head


@attrs.frozen(kw_only=True)
class FailedLog:
    """The log failed verification: how many records verified, and the first that did not."""

    ok: Literal[False]
    records: Whole
    failure: VerifyFailure


class VerifyReport(OneOf):
    """The service's verification of an agent's log."""

    variants = (VerifiedLog, FailedLog)


# -- Claude Code's hook output ---------------------------------------------------------
# Its keys are Claude Code's, hence not snake_case.


@attrs.frozen(kw_only=True)
class PreToolUseDecision:
    """`allow` runs the call; `deny` stops it and shows Claude the reason."""

    hookEventName: Literal["PreToolUse"]
    permissionDecision: Literal["allow", "deny"]
    permissionDecisionReason: str = optional(
        "On deny: the reason code and what it means (for a call nobody decided in "
        "time, that it waited for an operator at the console)."
    )


@attrs.frozen(kw_only=True)
class PreToolUseOutput:
    """The answer to a PreToolUse hook."""

    hookSpecificOutput: PreToolUseDecision


@attrs.frozen(kw_only=True)
class HookAck:
    """The answer to a PostToolUse or PostToolUseFailure hook: nothing to add."""
